// Package migrations holds obmd's goose SQL migrations, embedded, one folder
// per dialect.
//
// Each dialect has its own folder because SQLite, MySQL and PostgreSQL
// spell types and options differently.
//
// Migrations are append-only: once a file has shipped it is never edited;
// a change of schema is a new numbered file in every folder, with the same
// number and the same meaning.
package migrations

import (
	"embed"
	"io/fs"
)

//go:embed sqlite/*.sql mysql/*.sql postgres/*.sql
var files embed.FS

// SQLite returns the migrations for SQLite (goose dialect "sqlite3").
func SQLite() fs.FS { return sub("sqlite") }

// MySQL returns the migrations for MySQL and MariaDB (goose dialect "mysql").
func MySQL() fs.FS { return sub("mysql") }

// Postgres returns the migrations for PostgreSQL (goose dialect "postgres").
func Postgres() fs.FS { return sub("postgres") }

func sub(dir string) fs.FS {
	f, err := fs.Sub(files, dir)
	if err != nil {
		// fs.Sub fails only on an invalid path; dir is a constant above.
		panic("migrations: " + err.Error())
	}
	return f
}

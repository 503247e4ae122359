package main

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"os"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" database/sql driver
)

// scratchPostgres creates a database on the server of
// OBMD_TEST_POSTGRES_DSN and returns its DSN and a func that drops it.
func scratchPostgres() (dsn string, drop func(), err error) {
	raw := os.Getenv("OBMD_TEST_POSTGRES_DSN")
	if raw == "" {
		return "", nil, notMeasured("OBMD_TEST_POSTGRES_DSN is not set (postgres://user:pass@host:port/db of a user who may create databases)")
	}
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		return "", nil, fmt.Errorf("OBMD_TEST_POSTGRES_DSN is no postgres:// URL")
	}
	suffix, err := randomHex(6)
	if err != nil {
		return "", nil, err
	}
	name := "obmd_bench_" + suffix
	db, err := sql.Open("pgx", raw)
	if err != nil {
		return "", nil, fmt.Errorf("configure PostgreSQL: %w", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := db.ExecContext(ctx, "CREATE DATABASE "+name+" ENCODING 'UTF8' LC_COLLATE 'C' LC_CTYPE 'C' TEMPLATE template0"); err != nil {
		db.Close()
		return "", nil, notMeasured("PostgreSQL at %s unusable: %v", u.Host, err)
	}
	drop = func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		db.ExecContext(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
		db.Close()
	}
	u.Path = "/" + name
	return u.String(), drop, nil
}

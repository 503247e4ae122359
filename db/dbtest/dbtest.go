// Package dbtest gives tests a fresh, private database to open with db.Open:
// SQLite always, MariaDB/MySQL and PostgreSQL when configured.
//
// SQLite lives in t.TempDir(); MariaDB/MySQL is used when
// OBMD_TEST_MYSQL_DSN is set, PostgreSQL when OBMD_TEST_POSTGRES_DSN is (a
// scratch database created for the test and dropped after it).
//
// It does not import db, so db's own tests can use it too.
package dbtest

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" database/sql driver

	"github.com/obmd/obmd/internal/testenv"
)

// Environment variables read by this package.
const (
	// MySQLEnv holds mysql://user:pass@tcp(host:port)/dbname; the user
	// must be allowed to create and drop databases (dbname is not used).
	MySQLEnv = "OBMD_TEST_MYSQL_DSN"
	// PostgresEnv holds postgres://user:pass@host:port/dbname[?params];
	// the user must be allowed to create databases (CREATEDB), and dbname
	// is where it connects to create and drop them.
	PostgresEnv = "OBMD_TEST_POSTGRES_DSN"
	// RequireEnv set to 1 turns a skip for a missing MySQLEnv or
	// PostgresEnv into a failure.
	RequireEnv = testenv.RequireEnv
)

// Engine is one database engine tests can run against.
type Engine struct {
	Name string // "sqlite", "mysql" or "postgres"
	// DSN returns the DSN of an empty database for t, removed when t ends.
	// It skips t (fails it under OBMD_REQUIRE_INTEGRATION=1) when the engine
	// is not available.
	DSN func(t testing.TB) string
}

// Engines lists SQLite, MySQL and PostgreSQL, for table-driven store tests.
func Engines() []Engine {
	return append([]Engine{{Name: "sqlite", DSN: SQLiteDSN}}, SharedEngines()...)
}

// SharedEngines lists the engines several processes share a database on
// (replicas): MySQL and PostgreSQL.
func SharedEngines() []Engine {
	return []Engine{{Name: "mysql", DSN: MySQLDSN}, {Name: "postgres", DSN: PostgresDSN}}
}

// SQLiteDSN returns the path of a new SQLite database in t.TempDir().
func SQLiteDSN(t testing.TB) string {
	t.Helper()
	return filepath.Join(t.TempDir(), "obmd.db")
}

// Missing skips t for want of what the message names, or fails it when
// OBMD_REQUIRE_INTEGRATION=1 (CI), where nothing may be skipped silently
// (testenv.Missing).
func Missing(t testing.TB, format string, args ...any) {
	t.Helper()
	testenv.Missing(t, format, args...)
}

// External marks t as needing what, a database server or tool outside Go
// (MariaDB, PostgreSQL, fsfreeze): go test -short, the fast tier, skips
// it (testenv.External).
func External(t testing.TB, what string) {
	t.Helper()
	testenv.External(t, what)
}

// MySQLDSN creates a database named obmd_test_<random> on the server of
// OBMD_TEST_MYSQL_DSN, drops it when t ends, and returns its mysql:// DSN.
func MySQLDSN(t testing.TB) string {
	t.Helper()
	External(t, "MariaDB")
	raw := os.Getenv(MySQLEnv)
	if raw == "" {
		Missing(t, "%s is not set", MySQLEnv)
	}
	cfg, err := mysql.ParseDSN(strings.TrimPrefix(raw, "mysql://"))
	if err != nil {
		t.Fatalf("parse %s: %v", MySQLEnv, err)
	}
	name := scratchName(t)

	server := cfg.Clone()
	server.DBName = ""
	if server.Timeout == 0 {
		server.Timeout = 5 * time.Second
	}
	conn, err := mysql.NewConnector(server)
	if err != nil {
		t.Fatalf("configure %s: %v", MySQLEnv, err)
	}
	admin := sql.OpenDB(conn)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := admin.ExecContext(ctx, "CREATE DATABASE "+name+" CHARACTER SET utf8mb4 COLLATE utf8mb4_bin"); err != nil {
		_ = admin.Close()
		t.Fatalf("create scratch database on %s: %v", cfg.Addr, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := admin.ExecContext(ctx, "DROP DATABASE IF EXISTS "+name); err != nil {
			t.Errorf("drop scratch database %s: %v", name, err)
		}
		_ = admin.Close()
	})

	cfg.DBName = name
	return "mysql://" + cfg.FormatDSN()
}

// PostgresOptions are what a PostgreSQL database for obmd is created with
// (after CREATE DATABASE name): UTF8, and byte order (obmd's columns
// collate "C" anyway).
const PostgresOptions = " ENCODING 'UTF8' LC_COLLATE 'C' LC_CTYPE 'C' TEMPLATE template0"

// scratchName returns a new database name, obmd_test_<random>.
func scratchName(t testing.TB) string {
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatalf("random database name: %v", err)
	}
	return "obmd_test_" + hex.EncodeToString(b[:])
}

// PostgresDSN creates a database named obmd_test_<random> on the server of
// OBMD_TEST_POSTGRES_DSN, drops it when t ends (with whatever is still
// connected to it), and returns its postgres:// DSN.
func PostgresDSN(t testing.TB) string {
	t.Helper()
	External(t, "PostgreSQL")
	raw := os.Getenv(PostgresEnv)
	if raw == "" {
		Missing(t, "%s is not set", PostgresEnv)
	}
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		t.Fatalf("%s must be a postgres:// URL", PostgresEnv)
	}
	name := scratchName(t)
	admin, err := sql.Open("pgx", raw)
	if err != nil {
		t.Fatalf("open %s: %v", PostgresEnv, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// UTF8 and byte order whatever the server's defaults, as obmd wants.
	if _, err := admin.ExecContext(ctx, "CREATE DATABASE "+name+PostgresOptions); err != nil {
		_ = admin.Close()
		t.Fatalf("create scratch database on %s: %v", u.Host, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		// Plainly first: that stops an autovacuum worker of the database,
		// which FORCE may not be allowed to; then with whatever is still
		// connected (a process of the test that it did not stop).
		_, err := admin.ExecContext(ctx, "DROP DATABASE IF EXISTS "+name)
		if err != nil {
			_, err = admin.ExecContext(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
		}
		if err != nil {
			t.Errorf("drop scratch database %s: %v", name, err)
		}
		_ = admin.Close()
	})
	u.Path = "/" + name
	return u.String()
}

package db

import (
	"context"
	"database/sql"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/obmd/obmd/db/dbtest"
	"github.com/sirupsen/logrus"
	logtest "github.com/sirupsen/logrus/hooks/test"
)

func TestOpenRejects(t *testing.T) {
	ctx := context.Background()
	log, _ := logtest.NewNullLogger()
	tests := []struct {
		name string
		dsn  string
		log  logrus.FieldLogger
	}{
		{"empty", "", log},
		{"nil logger", "x.db", nil},
		{"mysql without database", "mysql://u:p@tcp(127.0.0.1:1)/", log},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if s, err := Open(ctx, tt.dsn, tt.log); err == nil {
				_ = s.Close()
				t.Errorf("got nil error, want one")
			}
		})
	}
}

// TestOpenHidesPassword checks the password of a MySQL or PostgreSQL DSN
// reaches neither errors nor log lines, for a malformed DSN, an unreachable
// server, a refused login and a successful open.
func TestOpenHidesPassword(t *testing.T) {
	ctx := context.Background()
	const pass = "Pw-d0-not-LEAK"
	tests := []struct {
		name string
		dsn  string
	}{
		{"unreachable", "mysql://obmd:" + pass + "@tcp(127.0.0.1:1)/obmd"},
		{"malformed address", "mysql://obmd:" + pass + "@tcp(127.0.0.1:1/obmd"},
		{"bad parameter", "mysql://obmd:" + pass + "@tcp(127.0.0.1:1)/obmd?parseTime=maybe"},
		{"password in parameter", "mysql://obmd:" + pass + "@tcp(127.0.0.1:1)/obmd?timeout=" + pass},
		{"postgres unreachable", "postgres://obmd:" + pass + "@127.0.0.1:1/obmd?sslmode=disable"},
		{"postgres bad port", "postgres://obmd:" + pass + "@127.0.0.1:port/obmd"},
		{"postgres bad escape", "postgres://obmd:" + pass + "%zz@127.0.0.1:1/obmd"},
		{"postgres bad sslmode", "postgres://obmd:" + pass + "@127.0.0.1:1/obmd?sslmode=maybe"},
		{"postgres password parameter", "postgresql://obmd@127.0.0.1:1/obmd?sslmode=disable&password=" + pass},
		{"postgres no database", "postgres://obmd:" + pass + "@127.0.0.1:1"},
		{"postgres wrong password", ""}, // wrongPassword
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.dsn == "" {
				tt.dsn = wrongPassword(t, pass)
			}
			log, hook := logtest.NewNullLogger()
			s, err := Open(ctx, tt.dsn, log)
			if err == nil {
				_ = s.Close()
				t.Fatalf("open: got nil error, want one")
			}
			if strings.Contains(err.Error(), pass) {
				t.Errorf("error shows the password: %v", err)
			}
			for _, e := range hook.AllEntries() {
				if line, _ := e.String(); strings.Contains(line, pass) {
					t.Errorf("log shows the password: %s", line)
				}
			}
		})
	}

	for _, e := range dbtest.SharedEngines() {
		t.Run("successful open/"+e.Name, func(t *testing.T) {
			dsn := e.DSN(t)
			log, hook := logtest.NewNullLogger()
			log.SetLevel(logrus.DebugLevel)
			s, err := Open(ctx, dsn, log)
			if err != nil {
				t.Fatalf("open: %v", err)
			}
			defer s.Close()
			if err := s.Migrate(ctx); err != nil {
				t.Fatalf("migrate: %v", err)
			}
			secret := passwordOf(strings.TrimPrefix(dsn, "mysql://"))
			if u, err := url.Parse(dsn); err == nil && e.Name == DialectPostgres {
				secret, _ = u.User.Password()
			}
			if secret == "" {
				dbtest.Missing(t, "the %s DSN has no password to look for", e.Name)
			}
			if len(hook.AllEntries()) == 0 {
				t.Errorf("no log line, want db_open")
			}
			for _, e := range hook.AllEntries() {
				if line, _ := e.String(); strings.Contains(line, secret) {
					t.Errorf("log shows the password: %s", line)
				}
			}
		})
	}
}

// wrongPassword is the DSN of a scratch database of
// OBMD_TEST_POSTGRES_DSN's server and user with password pass, which the
// server refuses (Missing without one).
func wrongPassword(t *testing.T, pass string) string {
	u, err := url.Parse(dbtest.PostgresDSN(t))
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.UserPassword(u.User.Username(), pass)
	return u.String()
}

// TestOpenRefusesUnknownDSN: a DSN of no form Open knows is refused, with
// an error that names the forms and shows no password, and nothing is
// created: before, anything but mysql:// was a SQLite path, so a
// misspelled scheme or a DSN without its scheme created a file named after
// the server and logged the password.
func TestOpenRefusesUnknownDSN(t *testing.T) {
	ctx := context.Background()
	const pass = "Pw-d0-not-LEAK"
	tests := []struct {
		name, dsn, want string
	}{
		{"misspelled scheme", "postgress://obmd:" + pass + "@127.0.0.1:5432/obmd", `unknown DSN scheme "postgress"`},
		{"other database", "redis://:" + pass + "@127.0.0.1:6379/0", `unknown DSN scheme "redis"`},
		{"sqlite scheme", "sqlite:///var/lib/obmd/obmd.db", `unknown DSN scheme "sqlite"`},
		{"no scheme", "obmd:" + pass + "@db.example://x", "unknown form"},
		{"mysql without scheme", "obmd:" + pass + "@tcp(127.0.0.1:3306)/obmd", "mysql://"},
		{"postgres without scheme", "obmd:" + pass + "@db.example:5432/obmd?sslmode=require", "needs its scheme"},
		{"user without scheme", "obmd@db.example/obmd", "needs its scheme"},
		{"no database without scheme", "obmd:" + pass + "@db.example:5432", "needs its scheme"},
		{"postgres keywords", "host=127.0.0.1 user=obmd password=" + pass + " dbname=obmd", "postgres://"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			t.Chdir(dir)
			log, hook := logtest.NewNullLogger()
			s, err := Open(ctx, tt.dsn, log)
			if err == nil {
				_ = s.Close()
				t.Fatalf("open %q: got nil error, want a refusal", tt.dsn)
			}
			if !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), "postgres://") {
				t.Errorf("error: got %q, want it to say %q and name the forms", err, tt.want)
			}
			if strings.Contains(err.Error(), pass) {
				t.Errorf("error shows the password: %v", err)
			}
			for _, e := range hook.AllEntries() {
				if line, _ := e.String(); strings.Contains(line, pass) {
					t.Errorf("log shows the password: %s", line)
				}
			}
			if ents, _ := os.ReadDir(dir); len(ents) > 0 {
				t.Errorf("created %s in the working directory, want nothing", ents[0].Name())
			}
		})
	}
	t.Run("sqlite file with @", func(t *testing.T) {
		t.Chdir(t.TempDir())
		log, _ := logtest.NewNullLogger()
		s, err := Open(ctx, "obmd@site.db", log)
		if err != nil {
			t.Fatalf("open a SQLite file named obmd@site.db: %v", err)
		}
		if got := s.Dialect(); got != DialectSQLite {
			t.Errorf("dialect: got %s, want %s", got, DialectSQLite)
		}
		_ = s.Close()
	})
}

// TestOpenPostgresEncoding: a PostgreSQL database whose encoding is not
// UTF8 is refused at open, with what to do instead.
func TestOpenPostgresEncoding(t *testing.T) {
	ctx := context.Background()
	dsn := dbtest.PostgresDSN(t)
	log, _ := logtest.NewNullLogger()
	admin, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	u, _ := url.Parse(dsn)
	name := strings.TrimPrefix(u.Path, "/") + "_ascii"
	if _, err := admin.ExecContext(ctx, "CREATE DATABASE "+name+" ENCODING 'SQL_ASCII' LC_COLLATE 'C' LC_CTYPE 'C' TEMPLATE template0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = admin.ExecContext(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)") })
	u.Path = "/" + name
	s, err := Open(ctx, u.String(), log)
	if err == nil {
		s.Close()
		t.Fatal("open a SQL_ASCII database: got nil error, want a refusal")
	}
	if !strings.Contains(err.Error(), "want UTF8") {
		t.Errorf("error: got %v, want it to ask for UTF8", err)
	}
}

// TestOpenPostgresSchemes: postgres:// and postgresql://, in any case,
// open PostgreSQL; SQLite paths and file: URIs still open SQLite.
func TestOpenPostgresSchemes(t *testing.T) {
	ctx := context.Background()
	log, _ := logtest.NewNullLogger()
	dsn := dbtest.PostgresDSN(t)
	rest := strings.TrimPrefix(dsn, "postgres://")
	dir := t.TempDir()
	for _, tt := range []struct{ dsn, want string }{
		{dsn, DialectPostgres},
		{"postgresql://" + rest, DialectPostgres},
		{"PostgreSQL://" + rest, DialectPostgres},
		{filepath.Join(dir, "a.db"), DialectSQLite},
		{"file:" + filepath.Join(dir, "b.db"), DialectSQLite},
		{"file://" + filepath.Join(dir, "c.db"), DialectSQLite},
	} {
		s, err := Open(ctx, tt.dsn, log)
		if err != nil {
			t.Errorf("open %s: %v", tt.want, err)
			continue
		}
		if got := s.Dialect(); got != tt.want {
			t.Errorf("dialect: got %s, want %s", got, tt.want)
		}
		if err := s.Migrate(ctx); err != nil {
			t.Errorf("migrate %s: %v", tt.want, err)
		}
		s.Close()
	}
}

func TestSQLiteSetup(t *testing.T) {
	ctx := context.Background()
	log, _ := logtest.NewNullLogger()
	path := filepath.Join(t.TempDir(), "obmd.db")
	s, err := Open(ctx, path+"?_pragma=busy_timeout(7000)", log)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	defer s.Close()
	if err := s.Migrate(ctx); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if got := st.Mode().Perm(); got != 0o600 {
		t.Errorf("database file mode: got %v, want 0600", got)
	}
	pragmas := []struct {
		name string
		want string
	}{
		{"journal_mode", "wal"},
		{"foreign_keys", "1"},
		{"busy_timeout", "7000"}, // the DSN's own value wins
		{"synchronous", "2"},     // FULL
	}
	for _, p := range pragmas {
		for _, pool := range []struct {
			name string
			q    func() (string, error)
		}{
			{"writer", func() (v string, err error) { err = s.w.QueryRowContext(ctx, "PRAGMA "+p.name).Scan(&v); return }},
			{"reader", func() (v string, err error) { err = s.r.QueryRowContext(ctx, "PRAGMA "+p.name).Scan(&v); return }},
		} {
			got, err := pool.q()
			if err != nil {
				t.Fatalf("%s: pragma %s: %v", pool.name, p.name, err)
			}
			if !strings.EqualFold(got, p.want) {
				t.Errorf("%s: pragma %s: got %s, want %s", pool.name, p.name, got, p.want)
			}
		}
	}
	if _, err := s.r.ExecContext(ctx, `DELETE FROM nodes`); err == nil {
		t.Errorf("write through the reader pool: got nil error, want query_only refusal")
	}
}

func TestSQLiteMemory(t *testing.T) {
	ctx := context.Background()
	log, _ := logtest.NewNullLogger()
	s, err := Open(ctx, ":memory:", log)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	defer s.Close()
	if err := s.Migrate(ctx); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	if _, err := s.CreateNode(ctx, Node{Label: "n1", Type: "mock"}); err != nil {
		t.Fatalf("create: %v", err)
	}
	if _, err := s.Node(ctx, "n1"); err != nil {
		t.Errorf("get: got %v, want nil", err)
	}
}

// TestSQLiteExclusive: Exclusive (which lets logins keep what they read:
// access.Gate.AccessAt) only where SQLite holds the file's lock. The
// driver drops a plain path's SQLite keys, so "obmd.db?mode=memory" is
// that file, opened like any path; nolock or immutable in a file: URI
// leaves the file open to other writers.
func TestSQLiteExclusive(t *testing.T) {
	ctx := context.Background()
	log, _ := logtest.NewNullLogger()
	dir := t.TempDir()
	for dsn, want := range map[string]bool{
		":memory:":                       true,
		"file::memory:":                  true,
		dir + "/a.db":                    true,
		"file:" + dir + "/b.db":          true,
		dir + "/c.db?mode=memory":        true, // the file c.db, locked
		"file:" + dir + "/d.db?nolock=1": false,
		"file:" + dir + "/e.db?vfs=unix-excl&nolock=yes": false,
		"file:" + dir + "/f.db?nolock=0":                 true,
		dir + "/g.db?vfs=unix":                           false,
	} {
		s, err := Open(ctx, dsn, log)
		if err != nil {
			t.Fatalf("open %s: %v", dsn, err)
		}
		if got := s.Exclusive(); got != want {
			t.Errorf("%s: Exclusive %v, want %v", dsn, got, want)
		}
		s.Close()
	}
	if fi, err := os.Stat(dir + "/c.db"); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("c.db: %v %v, want a private file", fi, err)
	}
}

func TestSQLiteFileURIAndSchemaVersion(t *testing.T) {
	ctx := context.Background()
	log, _ := logtest.NewNullLogger()
	path := filepath.Join(t.TempDir(), "uri.db")
	s, err := Open(ctx, "file:"+path+"?mode=rwc", log)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	defer s.Close()
	cur, latest, err := s.SchemaVersion(ctx)
	if err != nil || cur != 0 || latest < 1 {
		t.Fatalf("schema version before migrating: got %d, %d, %v, want 0, >= 1, nil", cur, latest, err)
	}
	if err := s.Migrate(ctx); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	if cur, latest, err = s.SchemaVersion(ctx); err != nil || cur != latest {
		t.Errorf("schema version after migrating: got %d, %d, %v, want equal", cur, latest, err)
	}
	var mode string
	if err := s.r.QueryRowContext(ctx, "PRAGMA journal_mode").Scan(&mode); err != nil || mode != "wal" {
		t.Errorf("journal mode: got %q, %v, want wal", mode, err)
	}
	if _, err := os.Stat(path); err != nil {
		t.Errorf("database file: %v", err)
	}
}

// TestSQLiteCreatesDirectory: a SQLite path in a missing directory gets it
// created, private (0700), like obmd's state directory; `obmd migrate` used
// to create it itself, after guessing from the DSN that it was SQLite.
func TestSQLiteCreatesDirectory(t *testing.T) {
	ctx := context.Background()
	log, _ := logtest.NewNullLogger()
	dir := filepath.Join(t.TempDir(), "state", "db")
	s, err := Open(ctx, filepath.Join(dir, "obmd.db"), log)
	if err != nil {
		t.Fatalf("open in a missing directory: %v", err)
	}
	defer s.Close()
	if err := s.Migrate(ctx); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	for _, d := range []string{dir, filepath.Dir(dir)} {
		st, err := os.Stat(d)
		if err != nil {
			t.Fatal(err)
		}
		if got := st.Mode().Perm(); got != 0o700 {
			t.Errorf("%s mode: got %v, want 0700", d, got)
		}
	}
}

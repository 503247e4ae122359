package db

import (
	"context"
	"database/sql"
	"fmt"
	"io/fs"
	"time"

	"github.com/obmd/obmd/migrations"
	"github.com/pressly/goose/v3"
	"github.com/sirupsen/logrus"
)

// provider returns a goose provider over the embedded migrations of the
// store's dialect. On MySQL it serialises replicas that migrate at once
// with a named lock.
func (s *Store) provider() (*goose.Provider, error) {
	var (
		dialect goose.Dialect
		fsys    fs.FS
		opts    = []goose.ProviderOption{goose.WithDisableGlobalRegistry(true)}
	)
	switch s.dialect {
	case DialectSQLite:
		dialect, fsys = goose.DialectSQLite3, migrations.SQLite()
	case DialectMySQL:
		dialect, fsys = goose.DialectMySQL, migrations.MySQL()
		opts = append(opts, goose.WithSessionLocker(mysqlLocker{log: s.log}))
	default:
		return nil, fmt.Errorf("unknown dialect %q", s.dialect)
	}
	return goose.NewProvider(dialect, s.w, fsys, opts...)
}

// Migrate applies the embedded goose migrations for the store's dialect.
// It is idempotent, and safe to run from several replicas at once.
func (s *Store) Migrate(ctx context.Context) error {
	p, err := s.provider()
	if err != nil {
		return fmt.Errorf("migrate %s: %w", s.dialect, err)
	}
	results, err := p.Up(ctx)
	for _, r := range results {
		if r.Error == nil {
			s.log.WithFields(logrus.Fields{
				"version":  r.Source.Version,
				"file":     r.Source.Path,
				"duration": r.Duration,
			}).Info("db_migrated")
		}
	}
	if err != nil {
		return fmt.Errorf("migrate %s: %w", s.dialect, err)
	}
	return nil
}

// SchemaVersion returns the version the database is at and the latest
// embedded one; they differ until Migrate runs (for `obmd migrate` status
// and readiness checks).
func (s *Store) SchemaVersion(ctx context.Context) (current, latest int64, err error) {
	p, err := s.provider()
	if err != nil {
		return 0, 0, fmt.Errorf("schema version: %w", err)
	}
	if current, err = p.GetDBVersion(ctx); err != nil {
		return 0, 0, fmt.Errorf("schema version: %w", err)
	}
	srcs := p.ListSources()
	if len(srcs) > 0 {
		latest = srcs[len(srcs)-1].Version
	}
	return current, latest, nil
}

// mysqlLockWait is how long one GET_LOCK call waits; the locker retries
// until its context ends, logging once that it waits.
const mysqlLockWait = 2 * time.Second

// mysqlLocker is a goose session locker over MySQL's named locks, scoped
// to the current database. A named lock dies with its connection, so a
// crashed migrator never leaves it held.
type mysqlLocker struct{ log logrus.FieldLogger }

const mysqlLockName = `CONCAT('obmd_migrate_', MD5(DATABASE()))`

// SessionLock takes the migration lock on conn, waiting for ctx.
func (l mysqlLocker) SessionLock(ctx context.Context, conn *sql.Conn) error {
	for logged := false; ; logged = true {
		var got sql.NullInt64
		err := conn.QueryRowContext(ctx,
			`SELECT GET_LOCK(`+mysqlLockName+`, ?)`, int(mysqlLockWait/time.Second)).Scan(&got)
		if err != nil {
			return fmt.Errorf("take migration lock: %w", err)
		}
		if got.Valid && got.Int64 == 1 {
			return nil
		}
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("take migration lock: %w", err)
		}
		if !logged {
			l.log.Info("db_migration_lock_wait")
		}
	}
}

// SessionUnlock releases the migration lock held by conn.
func (l mysqlLocker) SessionUnlock(ctx context.Context, conn *sql.Conn) error {
	if _, err := conn.ExecContext(ctx, `DO RELEASE_LOCK(`+mysqlLockName+`)`); err != nil {
		return fmt.Errorf("release migration lock: %w", err)
	}
	return nil
}

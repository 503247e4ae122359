package db

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"time"

	"github.com/obmd/obmd/migrations"
	"github.com/pressly/goose/v3"
	"github.com/sirupsen/logrus"
)

// provider returns a goose provider over the embedded migrations of the
// store's dialect. It has no goose locker: callers that touch the version
// table hold withMigrationLock instead (goose's Up checks for pending
// migrations, creating the version table, before it takes its own lock).
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
	default:
		return nil, fmt.Errorf("unknown dialect %q", s.dialect)
	}
	return goose.NewProvider(dialect, s.w, fsys, opts...)
}

// withMigrationLock runs fn holding the migration lock: on MySQL a named
// lock on a connection of its own, so replicas that start at once migrate
// one after the other; on SQLite nothing (one process owns the file).
//
// The lock must cover all of goose's work, not just the migrations:
// Provider.Up first asks HasPending, which creates the version table and
// inserts its zero row without any locker, and on MySQL that DDL commits
// at once, so a replica racing it saw an empty version table ("missing
// zero version migration") or none at all.
func (s *Store) withMigrationLock(ctx context.Context, fn func() error) error {
	if s.dialect != DialectMySQL {
		return fn()
	}
	conn, err := s.w.Conn(ctx)
	if err != nil {
		return fmt.Errorf("take migration lock: %w", err)
	}
	defer conn.Close()
	l := mysqlLocker{log: s.log}
	if err := l.SessionLock(ctx, conn); err != nil {
		return err
	}
	ferr := fn()
	// Closing the connection would free the lock too; unlock so the
	// connection can go back to the pool.
	uerr := l.SessionUnlock(context.WithoutCancel(ctx), conn)
	return errors.Join(ferr, uerr)
}

// Migrate applies the embedded goose migrations for the store's dialect.
// It is idempotent, and safe to run from several replicas at once.
func (s *Store) Migrate(ctx context.Context) error {
	p, err := s.provider()
	if err != nil {
		return fmt.Errorf("migrate %s: %w", s.dialect, err)
	}
	var results []*goose.MigrationResult
	err = s.withMigrationLock(ctx, func() error {
		var err error
		results, err = p.Up(ctx)
		return err
	})
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
	err = s.withMigrationLock(ctx, func() error {
		var err error
		current, err = p.GetDBVersion(ctx)
		return err
	})
	if err != nil {
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

// mysqlLocker is the migration lock over MySQL's named locks, scoped to
// the current database. A named lock dies with its connection, so a
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

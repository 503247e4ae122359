package db

import (
	"context"
	"crypto/rand"
	"database/sql/driver"
	"encoding/hex"
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
	case DialectPostgres:
		dialect, fsys = goose.DialectPostgres, migrations.Postgres()
	default:
		return nil, fmt.Errorf("unknown dialect %q", s.dialect)
	}
	return goose.NewProvider(dialect, s.w, fsys, opts...)
}

// withMigrationLock runs fn holding the migration lock, so replicas that
// start at once migrate one after the other; on SQLite nothing (one process
// owns the file).
//
// The lock must cover all of goose's work, not just the migrations:
// Provider.Up first asks HasPending, which creates the version table and
// inserts its zero row without any locker, and on MySQL that DDL commits
// at once, so a replica racing it saw an empty version table ("missing
// zero version migration") or none at all.
//
// On MySQL the lock is a row (migration_lock), not a named lock: GET_LOCK
// is local to the server that runs it, so replicas on different Galera
// nodes would each hold "the" lock and run the same DDL at once (one of
// them then fails: table exists). A committed row is a lock the whole
// cluster agrees on: one INSERT of its key wins (on one server by the
// primary key, across Galera nodes by certification). Unlike a named lock
// it outlives a migrator that dies holding it, until it expires
// (migrationLockTTL on the database's clock); the holder renews it while fn
// runs.
//
// On PostgreSQL the lock is a session advisory lock (withAdvisoryLock),
// which the server releases when the holder's connection ends.
func (s *Store) withMigrationLock(ctx context.Context, fn func() error) error {
	switch s.dialect {
	case DialectSQLite:
		return fn()
	case DialectPostgres:
		return s.withAdvisoryLock(ctx, fn)
	}
	token, err := s.takeMigrationLock(ctx)
	if err != nil {
		return fmt.Errorf("take migration lock: %w", err)
	}
	stop, done := make(chan struct{}), make(chan struct{})
	go s.renewMigrationLock(token, stop, done) // stopped and waited for below
	ferr := fn()
	close(stop)
	<-done
	var rerr error
	if _, err := s.exec(context.WithoutCancel(ctx),
		`DELETE FROM migration_lock WHERE id = 1 AND token = ?`, token); err != nil {
		rerr = fmt.Errorf("release migration lock: %w", err)
	}
	return errors.Join(ferr, rerr)
}

// migrationLockKey is the PostgreSQL advisory lock of migrations: any
// number, the same in every obmd ("obmd" in ASCII). Advisory locks are per
// database, so databases on one server do not share it.
const migrationLockKey = 0x6f626d64

// withAdvisoryLock runs fn holding the migration lock of PostgreSQL: a
// session advisory lock taken on a connection of its own, tried every
// migrationLockPoll until ctx ends (so a wait can be given up), and
// released when fn returns (or by the server, if the connection or this
// process dies first).
func (s *Store) withAdvisoryLock(ctx context.Context, fn func() error) error {
	conn, err := s.w.Conn(ctx)
	if err != nil {
		return fmt.Errorf("take migration lock: %w", err)
	}
	defer conn.Close() // back to the pool; unlocked below, or closed broken
	for first := true; ; first = false {
		var locked bool
		if err := conn.QueryRowContext(ctx, `SELECT pg_try_advisory_lock(?)`, migrationLockKey).Scan(&locked); err != nil {
			return fmt.Errorf("take migration lock: %w", err)
		}
		if locked {
			break
		}
		if err := s.lockWait(ctx, first); err != nil {
			return fmt.Errorf("take migration lock: %w", err)
		}
	}
	ferr := fn()
	var rerr error
	if _, err := conn.ExecContext(context.WithoutCancel(ctx), `SELECT pg_advisory_unlock(?)`, migrationLockKey); err != nil {
		// The lock must not stay with a connection going back to the
		// pool: this one is closed instead, which releases it.
		_ = conn.Raw(func(any) error { return driver.ErrBadConn })
		rerr = fmt.Errorf("release migration lock: %w", err)
	}
	return errors.Join(ferr, rerr)
}

// Timing of the migration lock: how long it outlives a holder that died,
// how often the holder renews it, how often a waiter tries to take it.
const (
	migrationLockTTL   = time.Minute
	migrationLockRenew = 10 * time.Second
	migrationLockPoll  = 250 * time.Millisecond
)

// The migration lock's table is not a migration: it must exist before the
// first one runs. Row 1 is the lock while it exists.
const createMigrationLock = `CREATE TABLE IF NOT EXISTS migration_lock (
    id         INT      NOT NULL,
    token      CHAR(32) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    expires_at BIGINT   NOT NULL,
    PRIMARY KEY (id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin`

// takeMigrationLock waits for ctx until it holds the migration lock, and
// returns the token it holds it with.
func (s *Store) takeMigrationLock(ctx context.Context) (string, error) {
	if _, err := s.w.ExecContext(ctx, createMigrationLock); err != nil {
		return "", err
	}
	token := newToken()
	for first := true; ; first = false {
		// A lock whose holder died is anyone's once it has expired.
		_, err := s.exec(ctx, `DELETE FROM migration_lock WHERE id = 1 AND expires_at <= `+s.dbNow())
		if err == nil {
			_, err = s.exec(ctx, `INSERT INTO migration_lock (id, token, expires_at) VALUES (1, ?, `+s.dbNow()+` + ?)`,
				token, millis(migrationLockTTL))
			if err == nil {
				return token, nil
			}
		}
		if !isDuplicate(err) && !isConflict(err) {
			return "", err
		}
		if err := s.lockWait(ctx, first); err != nil {
			return "", err
		}
	}
}

// lockWait waits migrationLockPoll before the next try at the migration
// lock, or returns ctx's error if it ends first; the first wait is logged.
func (s *Store) lockWait(ctx context.Context, first bool) error {
	if first {
		s.log.Info("db_migration_lock_wait")
	}
	t := time.NewTimer(migrationLockPoll)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// renewMigrationLock keeps the lock token holds alive until stop is
// closed, then closes done.
func (s *Store) renewMigrationLock(token string, stop <-chan struct{}, done chan<- struct{}) {
	defer close(done)
	t := time.NewTicker(migrationLockRenew)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), migrationLockRenew)
		res, err := s.exec(ctx, `UPDATE migration_lock SET expires_at = `+s.dbNow()+` + ? WHERE id = 1 AND token = ?`,
			millis(migrationLockTTL), token)
		cancel()
		if err == nil {
			err = mustAffect(res)
		}
		if err != nil {
			s.log.WithError(err).Warn("db_migration_lock_renew_failed")
		}
	}
}

// newToken returns 16 random bytes in hex.
func newToken() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
	return hex.EncodeToString(b[:])
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

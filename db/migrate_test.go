package db

import (
	"context"
	"database/sql/driver"
	"errors"
	"testing"
	"time"
)

// TestMigrationLock: on MySQL and Galera, a migrator that died holding the
// migration lock holds up the others until the lock expires on the
// database's clock, and no longer; a live holder's lock is respected. On
// PostgreSQL (an advisory lock) the lock goes with its holder's session.
func TestMigrationLock(t *testing.T) {
	for _, e := range testEngines() {
		switch e.name {
		case DialectSQLite:
			continue // one process owns a SQLite file: no lock
		case DialectPostgres:
			t.Run(e.name, func(t *testing.T) { testAdvisoryMigrationLock(t, e.env(t).dsn) })
			continue
		}
		t.Run(e.name, func(t *testing.T) {
			env := e.env(t)
			ctx := context.Background()
			s := openTestStore(t, env.dsn)
			if _, err := s.w.ExecContext(ctx, `INSERT INTO migration_lock (id, token, expires_at) VALUES (1, ?, `+
				s.dbNow()+` + ?)`, token(1), migrationLockTTL.Milliseconds()); err != nil {
				t.Fatal(err)
			}
			other := openUnmigrated(t, env.at(1))
			short, cancel := context.WithTimeout(ctx, time.Second)
			err := other.Migrate(short)
			cancel()
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("migrate while another holds the lock: got %v, want it to wait (deadline exceeded)", err)
			}
			var holder string
			if err := s.r.QueryRowContext(ctx, `SELECT token FROM migration_lock WHERE id = 1`).Scan(&holder); err != nil || holder != token(1) {
				t.Fatalf("lock holder: got %q, %v, want the live holder's", holder, err)
			}
			age(t, s, "migration_lock", migrationLockTTL)
			if err := other.Migrate(ctx); err != nil {
				t.Fatalf("migrate once the dead holder's lock expired: %v", err)
			}
			var n int
			if err := s.r.QueryRowContext(ctx, `SELECT COUNT(*) FROM migration_lock`).Scan(&n); err != nil || n != 0 {
				t.Errorf("locks after migrating: got %d, %v, want 0 (released)", n, err)
			}
		})
	}
}

// testAdvisoryMigrationLock: a migrator waits while another session holds
// PostgreSQL's migration lock, and goes ahead once that session has ended
// (its process died); it releases the lock when done.
func testAdvisoryMigrationLock(t *testing.T, dsn string) {
	ctx := context.Background()
	s := openTestStore(t, dsn)
	holder, err := s.w.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := holder.ExecContext(ctx, `SELECT pg_advisory_lock(?)`, migrationLockKey); err != nil {
		t.Fatal(err)
	}
	other := openUnmigrated(t, dsn)
	short, cancel := context.WithTimeout(ctx, time.Second)
	err = other.Migrate(short)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("migrate while another session holds the lock: got %v, want it to wait (deadline exceeded)", err)
	}
	// The holder's session ends, as it does when its process dies.
	if err := holder.Raw(func(any) error { return driver.ErrBadConn }); !errors.Is(err, driver.ErrBadConn) {
		t.Fatalf("end the holder's session: %v", err)
	}
	_ = holder.Close()
	if err := other.Migrate(ctx); err != nil {
		t.Fatalf("migrate once the holder's session ended: %v", err)
	}
	var free bool
	if err := s.r.QueryRowContext(ctx, `SELECT pg_try_advisory_lock(?)`, migrationLockKey).Scan(&free); err != nil || !free {
		t.Errorf("lock after migrating: free %v, %v, want free (released)", free, err)
	}
}

// TestChangeReasonMigration: changes recorded before migration 6 read back
// with no reason; later ones with theirs.
func TestChangeReasonMigration(t *testing.T) {
	for _, e := range testEngines() {
		t.Run(e.name, func(t *testing.T) {
			env := e.env(t)
			ctx := context.Background()
			s := openUnmigrated(t, env.dsn)
			p, err := s.provider()
			if err != nil {
				t.Fatal(err)
			}
			if err := s.withMigrationLock(ctx, func() error { _, err := p.UpTo(ctx, 3); return err }); err != nil {
				t.Fatalf("migrate to 3: %v", err)
			}
			if _, err := s.w.ExecContext(ctx, `INSERT INTO access_changes (epoch, node, at) VALUES (1, 'old', 0)`); err != nil {
				t.Fatal(err)
			}
			if _, err := s.w.ExecContext(ctx, `UPDATE access_seq SET epoch = 1`); err != nil {
				t.Fatal(err)
			}
			if err := s.Migrate(ctx); err != nil {
				t.Fatalf("migrate: %v", err)
			}
			mustCreate(t, s, "n1")
			got, err := s.ChangesSince(ctx, 0, 0)
			want := []Change{{Epoch: 1, Node: "old"}, {Epoch: 2, Node: "n1", Reason: ReasonNodeCreated}}
			if err != nil || len(got) != 2 || got[0] != want[0] || got[1] != want[1] {
				t.Errorf("changes: got %+v, %v, want %+v", got, err, want)
			}
		})
	}
}

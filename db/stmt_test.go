package db

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/obmd/obmd/db/dbtest"
)

// TestPrepareDoesNotBlockCached: a prepare that cannot finish (here it
// waits for SQLite's single writer connection, held by a transaction; in
// production also a MySQL dial while the server is down) must not hold up
// lookups through statements already cached. The cache's lock was held
// across PrepareContext, so every authentication queued behind it.
func TestPrepareDoesNotBlockCached(t *testing.T) {
	s := openTestStore(t, dbtest.SQLiteDSN(t))
	ctx := context.Background()
	mustCreate(t, s, "n1")
	if _, err := s.Epoch(ctx, "n1"); err != nil { // caches the statement
		t.Fatal(err)
	}

	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	released := false
	release := func() {
		if !released {
			released = true
			_ = tx.Rollback() // nothing was written
		}
	}
	defer release()
	waits := s.w.Stats().WaitCount
	prepDone := make(chan error, 1)
	go func() {
		_, err := s.prepared(ctx, s.w, `SELECT 2`)
		prepDone <- err
	}()
	for deadline := time.Now().Add(5 * time.Second); s.w.Stats().WaitCount == waits; {
		if time.Now().After(deadline) {
			t.Fatal("the prepare never waited for the writer connection")
		}
		time.Sleep(time.Millisecond)
	}

	got := make(chan error, 1)
	go func() {
		_, err := s.Epoch(ctx, "n1")
		got <- err
	}()
	select {
	case err := <-got:
		if err != nil {
			t.Errorf("cached lookup: got %v, want nil", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a cached lookup waited for another statement's prepare")
	}
	release()
	if err := <-prepDone; err != nil {
		t.Errorf("prepare after the writer was released: got %v, want nil", err)
	}
}

// TestPreparedOnce: callers preparing one query at once all get the same
// statement (the losers of the race close theirs), and nothing is prepared
// once the store is closed.
func TestPreparedOnce(t *testing.T) {
	s := openTestStore(t, dbtest.SQLiteDSN(t))
	ctx := context.Background()
	const n = 16
	var wg sync.WaitGroup
	stmts := make(chan any, n)
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			st, err := s.prepared(ctx, s.r, `SELECT 3`)
			if err != nil {
				t.Errorf("prepare: %v", err)
				return
			}
			stmts <- st
		}()
	}
	wg.Wait()
	close(stmts)
	first := <-stmts
	for st := range stmts {
		if st != first {
			t.Fatalf("concurrent prepares of one query: got two statements, want one")
		}
	}
	if err := s.closeStmts(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.prepared(ctx, s.r, `SELECT 4`); err == nil {
		t.Errorf("prepare after close: got nil, want an error")
	}
}

// TestHotStatementsPrepared: the statements replicas run all the time
// (leases, the access-change poll) go through the statement cache. On MySQL
// each unprepared statement with arguments is a prepare, an execute and a
// close: 200 lease acquire+release pairs were 600 Com_stmt_prepare.
func TestHotStatementsPrepared(t *testing.T) {
	for _, e := range dbtest.Engines() {
		t.Run(e.Name, func(t *testing.T) {
			s := openTestStore(t, e.DSN(t))
			ctx := context.Background()
			// One connection, so that MySQL's per-session counter sees
			// every statement.
			s.w.SetMaxOpenConns(1)
			s.r.SetMaxOpenConns(1)
			mustCreate(t, s, "n1")
			round := func(i int) {
				l := lease("n1", LeasePower, "replica-a", i)
				if _, err := s.AcquireLease(ctx, l, time.Minute); err != nil {
					t.Fatalf("acquire: %v", err)
				}
				// The INSERT lost: reads the holder.
				if _, err := s.AcquireLease(ctx, lease("n1", LeasePower, "replica-b", i+1), time.Minute); !errors.Is(err, ErrLeaseHeld) {
					t.Fatalf("acquire a held lease: got %v, want ErrLeaseHeld", err)
				}
				if _, err := s.RenewLease(ctx, "n1", LeasePower, l.Token, time.Minute); err != nil {
					t.Fatalf("renew: %v", err)
				}
				if err := s.ReleaseLease(ctx, "n1", LeasePower, l.Token); err != nil {
					t.Fatalf("release: %v", err)
				}
				if _, err := s.ChangesSince(ctx, 0, 10); err != nil {
					t.Fatalf("changes: %v", err)
				}
			}
			cached := func() int {
				s.stmts.mu.Lock()
				defer s.stmts.mu.Unlock()
				return len(s.stmts.m)
			}
			before := cached()
			round(0)
			warm := cached()
			if got, want := warm-before, 6; got != want {
				t.Errorf("statements cached by a round: got %d, want %d", got, want)
			}
			prepares := sessionPrepares(t, s)
			for i := 1; i <= 100; i++ {
				round(2 * i)
			}
			if got := cached(); got != warm {
				t.Errorf("statements cached after 100 more rounds: got %d, want %d", got, warm)
			}
			if got := sessionPrepares(t, s) - prepares; got > 0 {
				t.Errorf("MySQL prepares in 100 rounds: got %d, want 0", got)
			}
		})
	}
}

// sessionPrepares is MySQL's Com_stmt_prepare of the store's (only)
// connection; 0 on SQLite, which has no such counter.
func sessionPrepares(t *testing.T, s *Store) int {
	t.Helper()
	if s.Dialect() != DialectMySQL {
		return 0
	}
	var name string
	var n int
	// No arguments: the text protocol, which prepares nothing itself.
	if err := s.w.QueryRowContext(context.Background(), `SHOW SESSION STATUS LIKE 'Com_stmt_prepare'`).Scan(&name, &n); err != nil {
		t.Fatalf("read Com_stmt_prepare: %v", err)
	}
	return n
}

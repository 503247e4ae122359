package db

import (
	"context"
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

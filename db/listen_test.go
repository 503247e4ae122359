package db

import (
	"context"
	"testing"
	"time"

	"github.com/obmd/obmd/db/dbtest"
	"github.com/obmd/obmd/keys"
)

// TestListenChanges: on PostgreSQL a store listening for access changes is
// woken when another store's change commits, not by one rolled back, and
// again once it has reconnected after its connection was ended; on SQLite
// and MySQL ListenChanges returns at once (their replicas poll).
func TestListenChanges(t *testing.T) {
	for _, e := range dbtest.Engines() {
		t.Run(e.Name, func(t *testing.T) {
			dsn := e.DSN(t)
			if e.Name != DialectPostgres {
				s := openTestStore(t, dsn)
				done := make(chan error, 1)
				go func() { done <- s.ListenChanges(context.Background(), func() {}) }()
				select {
				case err := <-done:
					if err != nil {
						t.Errorf("ListenChanges: got %v, want nil", err)
					}
				case <-time.After(10 * time.Second):
					t.Fatal("ListenChanges did not return on an engine without notifications")
				}
				return
			}
			testListenPostgres(t, openTestStore(t, dsn), openTestStore(t, dsn))
		})
	}
}

func testListenPostgres(t *testing.T, writer, listener *Store) {
	ctx, cancel := context.WithCancel(context.Background())
	woken := make(chan struct{}, 100)
	done := make(chan error, 1)
	go func() { done <- listener.ListenChanges(ctx, func() { woken <- struct{}{} }) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("ListenChanges: got %v, want nil", err)
		}
	}()
	wait := func(what string) {
		t.Helper()
		select {
		case <-woken:
		case <-time.After(10 * time.Second):
			t.Fatalf("no wake for %s within 10 s", what)
		}
	}
	quiet := func(what string) {
		t.Helper()
		select {
		case <-woken:
			t.Errorf("woken by %s, want no wake", what)
		case <-time.After(300 * time.Millisecond):
		}
	}
	wait("the first connection")
	mustCreate(t, writer, "n1")
	wait("a node created")
	if _, err := writer.SetToken(ctx, "n1", keys.HashToken("t1")); err != nil {
		t.Fatal(err)
	}
	wait("a token set")
	if _, err := writer.SetToken(ctx, "nope", keys.HashToken("t2")); err == nil {
		t.Fatal("set the token of an unknown node: got nil error")
	}
	quiet("a change rolled back")

	// The listening connection ends (a server restart, a proxy): the
	// store connects again and wakes its caller, for what it missed.
	res, err := writer.w.ExecContext(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
		WHERE datname = current_database() AND query = 'LISTEN `+changesChannel+`'`)
	if n, _ := res.RowsAffected(); err != nil || n != 1 {
		t.Fatalf("end the listening connection: %d rows, %v, want 1", n, err)
	}
	wait("the connection again")
	if _, err := writer.RevokeToken(ctx, "n1"); err != nil {
		t.Fatal(err)
	}
	wait("a token revoked, after the reconnection")
}

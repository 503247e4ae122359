package db

import (
	"context"
	"database/sql"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	logtest "github.com/sirupsen/logrus/hooks/test"

	"github.com/obmd/obmd/db/dbtest"
	"github.com/obmd/obmd/keys"
)

// TestStoreHealth runs the write-health, settlement and replica cases on
// every engine.
func TestStoreHealth(t *testing.T) {
	runCases(t, []storeCase{
		{"check_writes", testCheckWrites},
		{"settle_waits_for_changes", testSettle},
		{"replicas", testReplicas},
	})
}

// holdWriter keeps writes to table from completing until release (which
// may be called more than once), as a frozen disk or a stopped server
// would: on SQLite it holds the writer pool's one connection (every write
// waits), on MySQL a write lock on table, on PostgreSQL a lock on table
// that lets only reads through (EXCLUSIVE), held by a transaction.
func holdWriter(t *testing.T, s *Store, table string) (release func()) {
	t.Helper()
	ctx := context.Background()
	var once sync.Once
	if s.Dialect() != DialectMySQL {
		tx, err := s.w.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if s.Dialect() == DialectPostgres {
			if _, err := tx.ExecContext(ctx, `LOCK TABLE `+table+` IN EXCLUSIVE MODE`); err != nil {
				t.Fatal(err)
			}
		}
		return func() { once.Do(func() { _ = tx.Rollback() }) }
	}
	conn, err := s.w.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.ExecContext(ctx, `LOCK TABLES `+table+` WRITE`); err != nil {
		t.Fatal(err)
	}
	return func() {
		once.Do(func() {
			if _, err := conn.ExecContext(ctx, `UNLOCK TABLES`); err != nil {
				t.Errorf("unlock tables: %v", err)
			}
			_ = conn.Close()
		})
	}
}

func testCheckWrites(t *testing.T, s *Store, _ testEnv) {
	ctx := context.Background()
	const bound = 300 * time.Millisecond
	if err := s.CheckWrites(ctx, bound); err != nil {
		t.Fatalf("healthy: got %v, want nil", err)
	}
	time.Sleep(probeEvery) // the next check probes again
	release := holdWriter(t, s, "write_probes")
	defer release()
	// A caller that does not wait learns the previous probe's outcome...
	quick, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	err := s.CheckWrites(quick, bound)
	cancel()
	if err != nil {
		t.Errorf("a probe just begun: got %v, want the previous outcome (nil)", err)
	}
	// ...and, once the probe has been stuck past the bound, that writes
	// do not complete.
	time.Sleep(bound + 100*time.Millisecond)
	done, cancel := context.WithCancel(ctx)
	cancel()
	if err := s.CheckWrites(done, bound); !errors.Is(err, ErrWriteStuck) {
		t.Errorf("writes held past the bound: got %v, want ErrWriteStuck", err)
	}
	release()
	deadline := time.Now().Add(10 * time.Second)
	for s.CheckWrites(ctx, bound) != nil {
		if time.Now().After(deadline) {
			t.Fatalf("writes never healthy again: %v", s.CheckWrites(ctx, bound))
		}
		time.Sleep(20 * time.Millisecond)
	}
	if age := s.OldestWrite(); age != 0 {
		t.Errorf("writes in progress when idle: oldest %v", age)
	}
}

// testSettle: Settle decides a change in flight (its transaction holds
// the change lock) before it reads.
func testSettle(t *testing.T, s *Store, _ testEnv) {
	ctx := context.Background()
	n := mustCreate(t, s, "n1")
	tx, err := s.w.BeginTx(ctx, nil) // SQLite: the one writer; MySQL: access_seq's row, from recordChange on
	if err != nil {
		t.Fatal(err)
	}
	epoch, err := s.recordChange(ctx, tx, "n1", ReasonTokenRotated) // a rotation, committed later
	if err == nil {
		err = setEpoch(ctx, tx, "n1", epoch)
	}
	if err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	_, err = s.Settle(short, "n1")
	cancel()
	if err == nil {
		t.Fatal("Settle with a change in flight: got an answer, want it to wait")
	}
	got := make(chan int64, 1)
	go func() {
		e, err := s.Settle(ctx, "n1")
		if err != nil {
			t.Errorf("Settle: %v", err)
		}
		got <- e
	}()
	time.Sleep(100 * time.Millisecond)
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	if e := <-got; e != epoch || e <= n.Epoch {
		t.Errorf("Settle: got epoch %d, want the change's %d", e, epoch)
	}
	del, err := s.DeleteNode(ctx, "n1")
	if err != nil {
		t.Fatal(err)
	}
	if e, err := s.Settle(ctx, "n1"); !errors.Is(err, ErrNotFound) || e < del {
		t.Errorf("Settle of a deleted node: got %d, %v, want ErrNotFound and at least the deletion's epoch %d", e, err, del)
	}
}

func testReplicas(t *testing.T, s *Store, _ testEnv) {
	ctx := context.Background()
	if err := s.Announce(ctx, "rep-a", "10.0.0.1:2223", 5, time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := s.Announce(ctx, "rep-b", "10.0.0.2:2223", 3, time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := s.Announce(ctx, "rep-a", "10.0.0.1:2223", 7, time.Minute); err != nil { // again: an update
		t.Fatal(err)
	}
	reps, err := s.Replicas(ctx)
	if err != nil || len(reps) != 2 || reps[0].ID != "rep-a" || reps[0].Applied != 7 || reps[1].Addr != "10.0.0.2:2223" {
		t.Fatalf("replicas: got %+v, %v, want rep-a at 7 and rep-b", reps, err)
	}
	if err := s.Withdraw(ctx, "rep-b"); err != nil {
		t.Fatal(err)
	}
	if reps, err := s.Replicas(ctx); err != nil || len(reps) != 1 || reps[0].ExpiresAt.Before(s.now().Add(50*time.Second)) {
		t.Errorf("replicas after withdrawal: got %+v, %v, want rep-a for about a minute more", reps, err)
	}
	age(t, s, "replicas", time.Minute)
	if reps, err := s.Replicas(ctx); err != nil || len(reps) != 0 {
		t.Errorf("replicas after withdrawal and expiry: got %+v, %v, want none", reps, err)
	}
	// A replica another still counts as running with a margin: expired a
	// minute ago, it is within a two-minute grace and not a half-minute one.
	age(t, s, "replicas", time.Minute)
	if reps, err := s.ReplicasWithin(ctx, 2*time.Minute); err != nil || len(reps) != 1 || reps[0].ID != "rep-a" {
		t.Errorf("replicas within 2m of expiry: got %+v, %v, want rep-a", reps, err)
	}
	if reps, err := s.ReplicasWithin(ctx, 30*time.Second); err != nil || len(reps) != 0 {
		t.Errorf("replicas within 30s of expiry: got %+v, %v, want none", reps, err)
	}
	if err := s.Announce(ctx, "", "x", 1, time.Minute); err == nil {
		t.Error("announce without an ID: got nil, want an error")
	}
}

// TestSQLiteNoSharedMemoryFile: the WAL index lives in the process's
// memory, not in a memory-mapped -shm file (see openSQLite), and a second
// store of the same file in this process still reads and writes it.
func TestSQLiteNoSharedMemoryFile(t *testing.T) {
	dsn := t.TempDir() + "/obmd.db"
	s := openTestStore(t, dsn)
	mustCreate(t, s, "n1")
	if _, err := os.Stat(dsn + "-shm"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("%s-shm: got %v, want no such file", dsn, err)
	}
	// Every reader connection is open from the start and stays open: a
	// new one would have to write to the filesystem.
	if st := s.r.Stats(); st.OpenConnections != st.MaxOpenConnections || st.Idle != st.OpenConnections {
		t.Errorf("reader pool: got %d open (%d idle) of %d, want all open and idle", st.OpenConnections, st.Idle, st.MaxOpenConnections)
	}
	other := openTestStore(t, dsn)
	mustCreate(t, other, "n2")
	if ns, err := s.Nodes(context.Background()); err != nil || len(ns) != 2 {
		t.Errorf("nodes through the first store: got %d, %v, want both", len(ns), err)
	}
}

// TestWriteWaitNotInProgress: a write waiting for a connection, a
// transaction or a single statement, is not a write in progress
// (CheckWrites would call the database stuck while only the pool was
// busy); it is one once it holds its connection (TestStuckStatementInProgress). On MySQL,
// writes have a pool of their own, so a write is not held up while every
// reader connection is taken (a burst of logins).
func TestWriteWaitNotInProgress(t *testing.T) {
	for _, e := range dbtest.Engines() {
		t.Run(e.Name, func(t *testing.T) {
			s := openTestStore(t, e.DSN(t))
			ctx := context.Background()
			mustCreate(t, s, "n1")
			hold := func(pool *sql.DB) (release func()) {
				var conns []*sql.Conn
				for range pool.Stats().MaxOpenConnections {
					c, err := pool.Conn(ctx)
					if err != nil {
						t.Fatal(err)
					}
					conns = append(conns, c)
				}
				return func() {
					for _, c := range conns {
						c.Close()
					}
				}
			}
			// A transaction, and a single statement (exec: a lease) once
			// its statement is prepared (a prepare is no write either).
			if _, err := s.AcquireLease(ctx, lease("n1", LeaseSOL, "replica-a", 1), time.Minute); err != nil {
				t.Fatal(err)
			}
			if _, err := s.RenewLease(ctx, "n1", LeaseSOL, token(1), time.Minute); err != nil {
				t.Fatal(err)
			}
			for _, w := range []struct {
				what  string
				write func() error
			}{
				{"a transaction", func() error { _, err := s.SetToken(ctx, "n1", keys.HashToken("waiting")); return err }},
				{"a single statement", func() error { _, err := s.RenewLease(ctx, "n1", LeaseSOL, token(1), time.Minute); return err }},
			} {
				release := hold(s.w)
				wrote := make(chan error, 1)
				go func() { wrote <- w.write() }() // owned by the test: waited for below
				time.Sleep(300 * time.Millisecond)
				if age := s.OldestWrite(); age != 0 {
					t.Errorf("%s waiting for a connection: in progress for %v, want not in progress", w.what, age)
				}
				release()
				if err := <-wrote; err != nil {
					t.Fatalf("%s, once a connection was free: %v", w.what, err)
				}
			}
			if e.Name == "sqlite" {
				return
			}
			release := hold(s.r)
			defer release()
			quick, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			if _, err := s.SetToken(quick, "n1", keys.HashToken("readers busy")); err != nil {
				t.Errorf("a write while every reader connection is taken: %v", err)
			}
		})
	}
}

// TestStuckStatementInProgress: a single-statement write (a lease renewal)
// that holds its connection and does not complete is a write in progress,
// and CheckWrites reports it: on SQLite stuck in the kernel on a frozen
// filesystem, on MySQL and PostgreSQL behind a table lock. It completes
// once let go.
func TestStuckStatementInProgress(t *testing.T) {
	for _, e := range dbtest.Engines() {
		t.Run(e.Name, func(t *testing.T) {
			var s *Store
			var stick, release func()
			if e.Name == "sqlite" {
				fs := dbtest.MountLoopFS(t)
				s = openTestStore(t, filepath.Join(fs.Dir, "obmd.db"))
				t.Cleanup(fs.Thaw) // before the store's close
				stick, release = fs.Freeze, fs.Thaw
			} else {
				s = openTestStore(t, e.DSN(t))
				stick = func() { release = holdWriter(t, s, "node_leases") }
			}
			ctx := context.Background()
			mustCreate(t, s, "n1")
			if _, err := s.AcquireLease(ctx, lease("n1", LeaseSOL, "replica-a", 1), time.Minute); err != nil {
				t.Fatal(err)
			}
			// Renewed once first, so that its statement is prepared: on
			// PostgreSQL a prepare waits for the table's lock too, before
			// the write has a transaction to count in.
			if _, err := s.RenewLease(ctx, "n1", LeaseSOL, token(1), time.Minute); err != nil {
				t.Fatal(err)
			}
			stick()
			wrote := make(chan error, 1)
			go func() { // owned by the test: waited for below
				_, err := s.RenewLease(ctx, "n1", LeaseSOL, token(1), time.Minute)
				wrote <- err
			}()
			const bound = 200 * time.Millisecond
			time.Sleep(bound + 200*time.Millisecond)
			done, cancel := context.WithCancel(ctx)
			cancel() // no probe waited for: the stuck statement is the answer
			if age, err := s.OldestWrite(), s.CheckWrites(done, bound); age < bound || !errors.Is(err, ErrWriteStuck) {
				t.Errorf("a stuck renewal: oldest write %v, CheckWrites %v; want past %v, ErrWriteStuck", age, err, bound)
			}
			release()
			if err := <-wrote; err != nil {
				t.Fatalf("the renewal, let go: %v", err)
			}
		})
	}
}

// TestCloseGivesUpProbe: Close gives up a write probe held by the
// database (a lock here; a server whose disk froze) and waits for it to
// end: the probe is no reason to wait, and no goroutine of the store
// outlives Close.
func TestCloseGivesUpProbe(t *testing.T) {
	for _, e := range dbtest.Engines() {
		t.Run(e.Name, func(t *testing.T) {
			ctx := context.Background()
			log, _ := logtest.NewNullLogger()
			s, err := Open(ctx, e.DSN(t), log)
			if err != nil {
				t.Fatal(err)
			}
			if err := s.Migrate(ctx); err != nil {
				t.Fatal(err)
			}
			release := holdWriter(t, s, "write_probes")
			defer release()
			started, cancel := context.WithCancel(ctx)
			cancel()
			s.CheckWrites(started, time.Second) // starts the probe, held by the lock, and does not wait for it
			if err := s.Close(); err != nil {
				t.Errorf("close with a probe held: %v, want it given up and ended", err)
			}
		})
	}
}

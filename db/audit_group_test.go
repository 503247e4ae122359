package db

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/obmd/obmd/db/dbtest"
)

// TestAuditGroupCommit: many concurrent Audit calls each return only once
// their event is stored, each exactly once. TestAuditSharesCommits checks
// that they share commits.
func TestAuditGroupCommit(t *testing.T) {
	for _, e := range dbtest.Engines() {
		t.Run(e.Name, func(t *testing.T) {
			s := openTestStore(t, e.DSN(t))
			ctx := context.Background()
			const n = 64
			var wg sync.WaitGroup
			for i := range n {
				wg.Add(1)
				go func() {
					defer wg.Done()
					ev := AuditEvent{Node: "g1", Actor: "test", Action: "group", Result: "ok", Detail: fmt.Sprint(i)}
					if err := s.Audit(ctx, ev); err != nil {
						t.Errorf("audit %d: %v", i, err)
						return
					}
					// Committed when Audit returns: a reader sees it at once.
					got, err := s.AuditEvents(ctx, AuditQuery{Node: "g1"})
					if err != nil {
						t.Errorf("read after audit %d: %v", i, err)
						return
					}
					found := false
					for _, g := range got {
						found = found || g.Detail == fmt.Sprint(i)
					}
					if !found {
						t.Errorf("event %d not visible after Audit returned", i)
					}
				}()
			}
			wg.Wait()
			got, err := s.AuditEvents(ctx, AuditQuery{Node: "g1"})
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != n {
				t.Fatalf("events stored: got %d, want %d", len(got), n)
			}
			seen := map[string]bool{}
			for _, g := range got {
				if seen[g.Detail] {
					t.Errorf("event %s stored twice", g.Detail)
				}
				seen[g.Detail] = true
			}
		})
	}
}

// TestAuditSharesCommits: events queued while a commit is in progress are
// committed together by one more commit, not one transaction each. The
// writer is held (SQLite: the single writer connection, in a transaction;
// MySQL: LOCK TABLES; PostgreSQL: LOCK TABLE) so that the first event's
// commit cannot finish while the others queue.
func TestAuditSharesCommits(t *testing.T) {
	for _, e := range dbtest.Engines() {
		t.Run(e.Name, func(t *testing.T) {
			s := openTestStore(t, e.DSN(t))
			ctx := context.Background()
			release := holdWriter(t, s, "audit_events")
			defer release()
			q := &s.audit
			queue := func() (pending, flushes int, busy bool) {
				q.mu.Lock()
				defer q.mu.Unlock()
				return len(q.pending), q.flushes, q.busy
			}
			waitFor := func(what string, cond func() bool) {
				t.Helper()
				for deadline := time.Now().Add(5 * time.Second); !cond(); time.Sleep(time.Millisecond) {
					if time.Now().After(deadline) {
						t.Fatalf("timed out waiting for %s", what)
					}
				}
			}
			const n = 32
			errs := make(chan error, n)
			audit := func(i int) {
				errs <- s.Audit(ctx, AuditEvent{Node: "g2", Actor: "test", Action: "group", Result: "ok", Detail: fmt.Sprint(i)})
			}
			// The first event becomes a one-event commit that waits for
			// the writer...
			go audit(0)
			waitFor("the first commit to start", func() bool {
				pending, flushes, busy := queue()
				return busy && pending == 0 && flushes == 1
			})
			// ...while the others queue behind it.
			for i := 1; i < n; i++ {
				go audit(i)
			}
			waitFor("the events to queue", func() bool {
				pending, _, _ := queue()
				return pending == n-1
			})
			release()
			for range n {
				if err := <-errs; err != nil {
					t.Errorf("audit: %v", err)
				}
			}
			if _, flushes, _ := queue(); flushes != 2 {
				t.Errorf("commits for %d events: got %d, want 2 (the one in progress, then one for all queued meanwhile)", n, flushes)
			}
			got, err := s.AuditEvents(ctx, AuditQuery{Node: "g2"})
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != n {
				t.Errorf("events stored: got %d, want %d", len(got), n)
			}
		})
	}
}

// BenchmarkAudit compares one writer with many: with group commit, parallel
// writers share commits (ns/op falls well below the serial figure).
func BenchmarkAudit(b *testing.B) {
	s := openTestStore(b, dbtest.SQLiteDSN(b))
	ctx := context.Background()
	ev := AuditEvent{Node: "b1", Actor: "bench", Action: "bench", Result: "ok"}
	b.Run("serial", func(b *testing.B) {
		for range b.N {
			if err := s.Audit(ctx, ev); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("parallel", func(b *testing.B) {
		b.SetParallelism(8)
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if err := s.Audit(ctx, ev); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
}

// TestAuditBatchRows: a batch is written with multi-row INSERTs of
// power-of-two sizes; every event of batches of every size from 1 to 2 x
// auditRows + 3 is stored once, in the order given, with its fields.
func TestAuditBatchRows(t *testing.T) {
	for _, e := range dbtest.Engines() {
		t.Run(e.Name, func(t *testing.T) {
			s := openTestStore(t, e.DSN(t))
			ctx := context.Background()
			at := time.UnixMilli(1_700_000_000_000).UTC()
			for size := 1; size <= 2*auditRows+3; size++ {
				node := fmt.Sprintf("b%d", size)
				var batch []AuditEvent
				for i := range size {
					batch = append(batch, AuditEvent{At: at, Node: node, Actor: "a", Action: "batch", Source: "s",
						Result: "ok", Detail: fmt.Sprint(i)})
				}
				if err := s.insertAudit(ctx, batch); err != nil {
					t.Fatalf("batch of %d: %v", size, err)
				}
				got, err := s.AuditEvents(ctx, AuditQuery{Node: node})
				if err != nil {
					t.Fatal(err)
				}
				if len(got) != size {
					t.Fatalf("batch of %d: %d stored", size, len(got))
				}
				for i, g := range got {
					if g.Detail != fmt.Sprint(i) || !g.At.Equal(at) || g.Actor != "a" || g.Source != "s" || g.Result != "ok" {
						t.Fatalf("batch of %d: row %d is %+v", size, i, g)
					}
				}
			}
		})
	}
}

func TestAuditChunk(t *testing.T) {
	for _, tt := range []struct{ n, want int }{{1, 1}, {2, 2}, {3, 2}, {7, 4}, {64, 64}, {65, 64}, {1000, 64}} {
		if got := auditChunk(tt.n); got != tt.want {
			t.Errorf("auditChunk(%d) = %d, want %d", tt.n, got, tt.want)
		}
	}
}

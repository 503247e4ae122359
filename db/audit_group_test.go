package db

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/obmd/obmd/db/dbtest"
)

// TestAuditGroupCommit: many concurrent Audit calls each return only once
// their event is stored, and share commits.
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

package db

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/obmd/obmd/keys"
	"github.com/obmd/obmd/sol/history"
)

// testHistoryRace races access changes (each followed by the end of the
// tenancies before it, kept every other time), appends by writers that
// learn the epoch late (each chunk names the tenancy it was written for,
// and every batch also carries a late chunk of the previous tenancy), and
// tenants reading with the epoch they were admitted at. No tenant may ever
// read a chunk of another tenancy.
func testHistoryRace(t *testing.T, s *Store, _ testEnv) {
	ctx := context.Background()
	mustCreate(t, s, "n")
	rotate(t, s, "n")
	tag := func(e int64) string { return fmt.Sprintf("tenancy %d;", e) }
	const changes = 25
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		defer close(done)
		for i := range changes {
			e, err := s.SetToken(ctx, "n", keys.HashToken(fmt.Sprint("race", i)))
			if err != nil {
				t.Errorf("change %d: %v", i, err)
				return
			}
			retention := time.Duration(i%2) * time.Hour
			if err := s.EndTenancies(ctx, "n", e, retention); err != nil {
				t.Errorf("end before %d: %v", e, err)
				return
			}
			time.Sleep(5 * time.Millisecond) // let tenants in
		}
	})
	stopped := func() bool {
		select {
		case <-done:
			return true
		default:
			return false
		}
	}
	for w := range 2 {
		wg.Go(func() {
			for i := 0; !stopped(); i++ {
				e, err := s.Epoch(ctx, "n")
				if err != nil {
					t.Errorf("writer %d: epoch: %v", w, err)
					return
				}
				batch := []history.Chunk{outChunk("n", e-1, i, tag(e-1)), outChunk("n", e, i, tag(e))}
				if err := s.AppendHistory(ctx, batch, 2048); err != nil {
					t.Errorf("writer %d: append: %v", w, err)
					return
				}
			}
		})
	}
	var reads, ends atomic.Int64
	queries := []history.Query{{}, {Lines: 3}, {MaxBytes: 100}, {Since: histBase.Add(time.Millisecond)}}
	for r := range 3 {
		wg.Go(func() {
			for i := 0; !stopped(); {
				admitted, err := s.Epoch(ctx, "n")
				if err != nil {
					t.Errorf("tenant %d: epoch: %v", r, err)
					return
				}
				for ; !stopped(); i++ {
					q := queries[i%len(queries)]
					q.Node, q.Epoch = "n", admitted
					got, err := s.ReadHistory(ctx, q)
					if errors.Is(err, history.ErrEnded) {
						ends.Add(1)
						break // a new session, at the new epoch
					}
					if err != nil {
						t.Errorf("tenant %d: read: %v", r, err)
						return
					}
					reads.Add(1)
					for _, c := range got {
						if string(c.Data) != tag(admitted) {
							t.Errorf("tenant admitted at %d read %q", admitted, c.Data)
							return
						}
					}
				}
			}
		})
	}
	wg.Wait()
	if reads.Load() == 0 || ends.Load() == 0 {
		t.Errorf("tenants read %d times and saw %d ends: the race did not happen", reads.Load(), ends.Load())
	}
	// Kept tenancies hold their own chunks only, within the bound.
	ts, err := s.Tenancies(ctx, "n")
	if err != nil {
		t.Fatal(err)
	}
	kept := 0
	for _, tn := range ts {
		for _, c := range mustRead(t, s, history.Query{Node: "n", Epoch: tn.Epoch, Admin: true}) {
			if c.Kind == history.KindOutput && string(c.Data) != tag(tn.Epoch) {
				t.Errorf("tenancy %d holds %q", tn.Epoch, c.Data)
			}
		}
		if row, sum := tenancyBytes(t, s, "n", tn.Epoch); row != sum || row > 2048 {
			t.Errorf("tenancy %d: row says %d bytes, chunks hold %d; want equal, at most 2048", tn.Epoch, row, sum)
		}
		if !tn.Current {
			kept++
		}
	}
	if kept == 0 || kept > changes/2+1 {
		t.Errorf("kept tenancies: got %d, want 1..%d", kept, changes/2+1)
	}
	t.Logf("%d reads, %d ends, %d tenancies stored", reads.Load(), ends.Load(), len(ts))
}

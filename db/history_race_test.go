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

// historyRace is the state of testHistoryRace's goroutines.
type historyRace struct {
	t           *testing.T
	s           *Store
	done        chan struct{} // closed when the changes are over
	reads, ends atomic.Int64
}

func raceTag(e int64) string { return fmt.Sprintf("tenancy %d;", e) }

func (h *historyRace) stopped() bool {
	select {
	case <-h.done:
		return true
	default:
		return false
	}
}

// changes makes access changes, each followed by the end of the
// tenancies before it, kept every other time.
func (h *historyRace) changes(n int) {
	defer close(h.done)
	ctx := context.Background()
	for i := range n {
		e, err := h.s.SetToken(ctx, "n", keys.HashToken(fmt.Sprint("race", i)))
		if err != nil {
			h.t.Errorf("change %d: %v", i, err)
			return
		}
		if err := h.s.EndTenancies(ctx, "n", e, time.Duration(i%2)*time.Hour); err != nil {
			h.t.Errorf("end before %d: %v", e, err)
			return
		}
		time.Sleep(5 * time.Millisecond) // let tenants in
	}
}

// writes appends as a recorder that learns the epoch late: each chunk
// names the tenancy it was written for, and every batch carries a late
// chunk of the previous tenancy too.
func (h *historyRace) writes(w int) {
	ctx := context.Background()
	for i := 0; !h.stopped(); i++ {
		e, err := h.s.Epoch(ctx, "n")
		if err != nil {
			h.t.Errorf("writer %d: epoch: %v", w, err)
			return
		}
		batch := []history.Chunk{outChunk("n", e-1, i, raceTag(e-1)), outChunk("n", e, i, raceTag(e))}
		if err := h.s.AppendHistory(ctx, batch, 2048); err != nil {
			h.t.Errorf("writer %d: append: %v", w, err)
			return
		}
	}
}

// tenant reads with the epoch it was admitted at until its tenancy ends,
// then is admitted again; it must never read another tenancy's chunk.
func (h *historyRace) tenant(r int) {
	ctx := context.Background()
	queries := []history.Query{{}, {Lines: 3}, {MaxBytes: 100}, {Since: histBase.Add(time.Millisecond)}}
	for i := 0; !h.stopped(); {
		admitted, err := h.s.Epoch(ctx, "n")
		if err != nil {
			h.t.Errorf("tenant %d: epoch: %v", r, err)
			return
		}
		for ; !h.stopped(); i++ {
			q := queries[i%len(queries)]
			q.Node, q.Epoch = "n", admitted
			got, err := h.s.ReadHistory(ctx, q)
			if errors.Is(err, history.ErrEnded) {
				h.ends.Add(1)
				break // a new session, at the new epoch
			}
			if err != nil {
				h.t.Errorf("tenant %d: read: %v", r, err)
				return
			}
			h.reads.Add(1)
			for _, c := range got {
				if string(c.Data) != raceTag(admitted) {
					h.t.Errorf("tenant admitted at %d read %q", admitted, c.Data)
					return
				}
			}
		}
	}
}

// testHistoryRace races access changes, late appends and tenants' reads.
func testHistoryRace(t *testing.T, s *Store, _ testEnv) {
	mustCreate(t, s, "n")
	rotate(t, s, "n")
	const changes = 25
	h := &historyRace{t: t, s: s, done: make(chan struct{})}
	var wg sync.WaitGroup
	wg.Go(func() { h.changes(changes) })
	for w := range 2 {
		wg.Go(func() { h.writes(w) })
	}
	for r := range 3 {
		wg.Go(func() { h.tenant(r) })
	}
	wg.Wait()
	if h.reads.Load() == 0 || h.ends.Load() == 0 {
		t.Errorf("tenants read %d times and saw %d ends: the race did not happen", h.reads.Load(), h.ends.Load())
	}
	checkKept(t, s, changes/2+1)
}

// checkKept checks that each stored tenancy of n holds its own chunks
// only, within the bound, and that 1..most of them are kept ended ones.
func checkKept(t *testing.T, s *Store, most int) {
	ts, err := s.Tenancies(context.Background(), "n")
	if err != nil {
		t.Fatal(err)
	}
	kept := 0
	for _, tn := range ts {
		for _, c := range mustRead(t, s, history.Query{Node: "n", Epoch: tn.Epoch, Admin: true}) {
			if c.Kind == history.KindOutput && string(c.Data) != raceTag(tn.Epoch) {
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
	if kept == 0 || kept > most {
		t.Errorf("kept tenancies: got %d, want 1..%d", kept, most)
	}
}

package access

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/obmd/obmd/db"
)

// readCounter is a GateStore and HealthStore that counts Access reads;
// only "n*" nodes exist.
type readCounter struct {
	GateStore // nil: only Access is called
	mu        sync.Mutex
	reads     map[string]int
}

func (c *readCounter) Access(_ context.Context, label string) (db.Access, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.reads == nil {
		c.reads = map[string]int{}
	}
	c.reads[label]++
	if label[0] != 'n' {
		return db.Access{}, db.ErrNotFound
	}
	return db.Access{Epoch: int64(c.reads[label])}, nil
}

func (c *readCounter) count(label string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.reads[label]
}

func (*readCounter) Ping(context.Context) error                       { return nil }
func (*readCounter) CheckWrites(context.Context, time.Duration) error { return nil }
func (*readCounter) OldestWrite() time.Duration                       { return 0 }
func (*readCounter) Committed() uint64                                { return 0 }
func (*readCounter) StallBound() time.Duration                        { return 2 * time.Second }

type fenceFlag struct{ on bool }

func (f *fenceFlag) Fenced() bool { return f.on }

// TestAccessAtKept: on an exclusive database a node's access read at a
// mark answers the logins of the same mark, and nothing else: not another
// mark's, not an unknown node's, not past the bound, not while the
// database is unusable, and never on a shared database.
func TestAccessAtKept(t *testing.T) {
	ctx := context.Background()
	store, fence := &readCounter{}, &fenceFlag{}
	g := NewGate(store, NewHealth(store, fence), 0, true)
	at := func(label string, mark uint64) db.Access {
		t.Helper()
		a, err := g.AccessAt(ctx, label, mark)
		if err != nil {
			t.Fatalf("AccessAt(%s, %d): %v", label, mark, err)
		}
		return a
	}
	at("n1", 5)
	if a := at("n1", 5); a.Epoch != 1 || store.count("n1") != 1 {
		t.Errorf("same mark: epoch %d after %d reads, want the kept read (1, 1)", a.Epoch, store.count("n1"))
	}
	if a := at("n1", 6); a.Epoch != 2 {
		t.Errorf("next mark: epoch %d, want a new read (2)", a.Epoch)
	}
	at("n2", 5) // a read that began before the cut of mark 6 is not kept
	at("n2", 6)
	if n := store.count("n2"); n != 2 {
		t.Errorf("read at an older mark: %d reads, want 2 (not kept)", n)
	}
	at("n1", 6)
	if n := store.count("n1"); n != 2 {
		t.Errorf("mark 6 after a read at mark 5: %d reads of n1, want 2 (mark 6's kept)", n)
	}
	for range 2 {
		if _, err := g.AccessAt(ctx, "x", 6); !errors.Is(err, db.ErrNotFound) {
			t.Fatalf("unknown node: %v", err)
		}
	}
	if n := store.count("x"); n != 2 {
		t.Errorf("unknown node: %d reads, want 2 (never kept)", n)
	}
	if _, err := g.AccessAt(ctx, "n1", 0); err != nil || store.count("n1") != 3 {
		t.Errorf("mark 0: %v after %d reads, want a read (3)", err, store.count("n1"))
	}

	fence.on = true
	if _, err := g.AccessAt(ctx, "n1", 6); !errors.Is(err, ErrDBDown) || store.count("n1") != 3 {
		t.Errorf("unusable database: %v after %d reads, want ErrDBDown and no read", err, store.count("n1"))
	}
	fence.on = false

	for i := range keptMax + 1 {
		at(fmt.Sprintf("n-%d", i), 7)
	}
	at("n-0", 7)
	at(fmt.Sprintf("n-%d", keptMax), 7)
	if a, b := store.count("n-0"), store.count(fmt.Sprintf("n-%d", keptMax)); a != 1 || b != 2 {
		t.Errorf("past the bound: %d and %d reads, want 1 (kept) and 2 (not kept)", a, b)
	}

	shared := &readCounter{}
	g = NewGate(shared, NewHealth(shared, nil), 0, false)
	g.AccessAt(ctx, "n1", 5)
	g.AccessAt(ctx, "n1", 5)
	if n := shared.count("n1"); n != 2 {
		t.Errorf("shared database: %d reads, want 2 (nothing kept)", n)
	}
}

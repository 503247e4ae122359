package access

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/obmd/obmd/db"
)

// TestHealthStallBound: a write held for longer than 2 s but within the
// store's stall bound (a Galera cluster evicting a dead member) leaves the
// database usable and ready; one held past it does not.
func TestHealthStallBound(t *testing.T) {
	store := &fakeDB{stall: 9 * time.Second}
	h := NewHealth(store, nil)
	for _, c := range []struct {
		held   time.Duration
		usable bool
	}{
		{0, true},
		{6500 * time.Millisecond, true},
		{9 * time.Second, true},
		{9001 * time.Millisecond, false},
	} {
		store.set(func(f *fakeDB) { f.oldest = c.held })
		if got := h.Usable(); got != c.usable {
			t.Errorf("write held %v: Usable got %v, want %v", c.held, got, c.usable)
		}
		err := h.Ready(context.Background())
		if (err == nil) != c.usable {
			t.Errorf("write held %v: Ready got %v, want ready %v", c.held, err, c.usable)
		}
		if !c.usable && !errors.Is(err, db.ErrWriteStuck) {
			t.Errorf("write held %v: Ready got %v, want %v", c.held, err, db.ErrWriteStuck)
		}
	}
}

// TestHealthWriteAfterFailedLook: after a look at the database failed,
// a write committed since makes it usable again at once, without waiting
// for the next look; without one it stays unusable.
func TestHealthWriteAfterFailedLook(t *testing.T) {
	store := &fakeDB{committed: 7}
	h := NewHealth(store, nil)
	store.setDown(true)
	if err := h.look(nil); err == nil {
		t.Fatal("look at a database that fails: got nil, want its error")
	}
	store.setDown(false)
	if h.Usable() {
		t.Errorf("after a failed look, no write since: Usable got true, want false")
	}
	if err := h.Ready(context.Background()); err == nil {
		t.Errorf("after a failed look, no write since: Ready got nil, want an error")
	}
	store.set(func(f *fakeDB) { f.committed++ })
	if !h.Usable() {
		t.Errorf("a write committed since the failed look: Usable got false, want true")
	}
	if err := h.Ready(context.Background()); err != nil {
		t.Errorf("a write committed since the failed look: Ready got %v, want nil", err)
	}
	if err := h.look(nil); err != nil || !h.Usable() {
		t.Errorf("a good look: got %v, usable %v, want nil, true", err, h.Usable())
	}
}

// TestHealthReadyHeld: /readyz's check when the database holds its read.
// A caller's bound that ends before the stall bound finds the database
// held within it: ready (a balancer does not take out every replica on the
// surviving Galera nodes during an eviction). Held past the stall bound:
// not ready. A database that answers with an error: not ready at once.
func TestHealthReadyHeld(t *testing.T) {
	t.Run("within_the_stall_bound", func(t *testing.T) {
		store := &fakeDB{stall: time.Hour, hold: true}
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		if err := NewHealth(store, nil).Ready(ctx); err != nil {
			t.Errorf("read held for less than the stall bound: got %v, want nil", err)
		}
	})
	t.Run("past_the_stall_bound", func(t *testing.T) {
		store := &fakeDB{stall: 50 * time.Millisecond, hold: true}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		start := time.Now()
		err := NewHealth(store, nil).Ready(ctx)
		if err == nil {
			t.Errorf("read held past the stall bound: got nil, want an error")
		}
		if took := time.Since(start); took > 10*time.Second {
			t.Errorf("read held past the stall bound: answered after %v, want about the bound (50ms + %v)", took, readySlack)
		}
	})
	t.Run("an_error", func(t *testing.T) {
		store := &fakeDB{stall: time.Hour}
		store.setDown(true)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		start := time.Now()
		if err := NewHealth(store, nil).Ready(ctx); err == nil || time.Since(start) > 10*time.Second {
			t.Errorf("a database that answers with an error: got %v after %v, want an error at once", err, time.Since(start))
		}
	})
}

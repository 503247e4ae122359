package db

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/obmd/obmd/keys"
)

// TestWebTickets runs the web ticket cases on every engine.
func TestWebTickets(t *testing.T) {
	runCases(t, []storeCase{{"web_tickets", testWebTickets}})
}

// testWebTickets: a ticket is redeemed once, with its node and epoch, even
// by two redeemers at once; an expired one and an unknown one are refused
// alike; an unknown node gets none; tickets go with their node.
func testWebTickets(t *testing.T, s *Store, _ testEnv) {
	ctx := context.Background()
	n := mustCreate(t, s, "n1")
	h := keys.HashToken("ticket-one")
	epoch, expires, err := s.CreateWebTicket(ctx, "n1", h, time.Minute)
	if err != nil || epoch != n.Epoch || time.Until(expires) <= 0 {
		t.Fatalf("create: got %d %v %v, want epoch %d", epoch, expires, err, n.Epoch)
	}
	var wg sync.WaitGroup
	got := make([]error, 4)
	for i := range got {
		wg.Go(func() { _, got[i] = s.RedeemWebTicket(ctx, h) })
	}
	wg.Wait()
	ok := 0
	for _, err := range got {
		switch {
		case err == nil:
			ok++
		case !errors.Is(err, ErrNotFound):
			t.Errorf("concurrent redeem: got %v, want nil or ErrNotFound", err)
		}
	}
	if ok != 1 {
		t.Errorf("concurrent redeems: %d succeeded, want 1", ok)
	}
	if _, err := s.RedeemWebTicket(ctx, h); !errors.Is(err, ErrNotFound) {
		t.Errorf("second redeem: got %v, want ErrNotFound", err)
	}
	h2 := keys.HashToken("ticket-two")
	if _, _, err := s.CreateWebTicket(ctx, "n1", h2, time.Minute); err != nil {
		t.Fatal(err)
	}
	if tk, err := s.RedeemWebTicket(ctx, h2); err != nil || tk.Node != "n1" || tk.Epoch != n.Epoch {
		t.Errorf("redeem: got %+v, %v, want n1 at %d", tk, err, n.Epoch)
	}
	short := keys.HashToken("ticket-short")
	if _, _, err := s.CreateWebTicket(ctx, "n1", short, time.Millisecond); err != nil {
		t.Fatal(err)
	}
	time.Sleep(20 * time.Millisecond)
	if _, err := s.RedeemWebTicket(ctx, short); !errors.Is(err, ErrNotFound) {
		t.Errorf("expired: got %v, want ErrNotFound", err)
	}
	if _, err := s.RedeemWebTicket(ctx, keys.HashToken("never")); !errors.Is(err, ErrNotFound) {
		t.Errorf("unknown: got %v, want ErrNotFound", err)
	}
	if _, _, err := s.CreateWebTicket(ctx, "nope", h, time.Minute); !errors.Is(err, ErrNotFound) {
		t.Errorf("unknown node: got %v, want ErrNotFound", err)
	}
	gone := keys.HashToken("ticket-gone")
	if _, _, err := s.CreateWebTicket(ctx, "n1", gone, time.Minute); err != nil {
		t.Fatal(err)
	}
	if _, err := s.DeleteNode(ctx, "n1"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.RedeemWebTicket(ctx, gone); !errors.Is(err, ErrNotFound) {
		t.Errorf("node deleted: got %v, want ErrNotFound", err)
	}
}

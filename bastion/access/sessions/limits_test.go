package sessions

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

// stuck starts a session that never ends by itself (its work ignores its
// cancellation); the returned end ends it.
func stuck(t *testing.T, r *Registry, info Info, src string) (ctx context.Context, end func()) {
	t.Helper()
	ctx, _, end, err := r.Start(context.Background(), info, src)
	if err != nil {
		t.Fatalf("start %+v from %s: %v", info, src, err)
	}
	t.Cleanup(end)
	return ctx, end
}

// TestCutReleasesAtOnce: a cut session gives back its places and leaves
// the list when it is cut, not when its work has stopped: the next
// tenancy gets the node's places while the old sessions still unwind, and
// their ends, later, give back nothing twice.
func TestCutReleasesAtOnce(t *testing.T) {
	r := New(Config{MaxPerNode: 3, MaxPerSource: 3, MaxAutomationPerNode: 2, CutWait: 20 * time.Millisecond})
	var ends []func()
	for i := range 3 {
		w := Work("")
		if i < 2 {
			w = WorkAutomation
		}
		_, end := stuck(t, r, Info{Node: "n1", Epoch: 1, Work: w}, "10.0.0.1")
		ends = append(ends, end)
	}
	if _, _, _, err := r.Start(context.Background(), Info{Node: "n1", Epoch: 2}, "10.0.0.2"); !errors.Is(err, ErrTooMany) {
		t.Fatalf("a fourth session: got %v, want ErrTooMany", err)
	}
	if cut, late := r.Cut("n1", 2, &RevokedError{Node: "n1", Why: "token rotated"}); cut != 3 || late != 3 {
		t.Fatalf("Cut: got cut %d late %d, want 3 and 3 (none can end)", cut, late)
	}
	if got := r.List(""); len(got) != 0 {
		t.Errorf("after the cut: got %+v listed, want none", got)
	}
	if n := r.Unwinding(); n != 3 {
		t.Errorf("after the cut: got %d unwinding, want 3", n)
	}
	// The next tenancy has every place, the same address included.
	for i := range 3 {
		w := Work("")
		if i < 2 {
			w = WorkAutomation
		}
		stuck(t, r, Info{Node: "n1", Epoch: 2, Work: w}, "10.0.0.1")
	}
	// The old sessions end: nothing is given back twice.
	for _, end := range ends {
		end()
	}
	if n := r.Unwinding(); n != 0 {
		t.Errorf("after their ends: got %d unwinding, want 0", n)
	}
	for _, info := range []Info{{Node: "n1", Epoch: 2}, {Node: "n2", Epoch: 2}} {
		if _, _, _, err := r.Start(context.Background(), info, "10.0.0.1"); !errors.Is(err, ErrTooMany) {
			t.Errorf("%s, with the node and the address full: got %v, want ErrTooMany", info.Node, err)
		}
	}
	if _, _, _, err := r.Start(context.Background(), Info{Node: "n1", Epoch: 2, Work: WorkAutomation}, "10.0.0.9"); !errors.Is(err, ErrTooMany) {
		t.Errorf("a third automation session: got %v, want refused", err)
	}
}

// TestKickAndExpiryRelease: a kicked session and one whose certificate
// expired give back their places at once too.
func TestKickAndExpiryRelease(t *testing.T) {
	r := New(Config{MaxPerNode: 1, CutWait: 10 * time.Millisecond})
	ctx, _, _, err := r.Start(context.Background(), Info{Node: "n1", Epoch: 1}, "a")
	if err != nil {
		t.Fatal(err)
	}
	id := r.List("n1")[0].ID
	if !r.Kick(id, &RevokedError{Node: "n1", Why: "kicked by admin"}) || ctx.Err() == nil {
		t.Fatal("Kick: want the session cut")
	}
	ctx, _, end, err := r.Start(context.Background(), Info{Node: "n1", Epoch: 1, Expires: time.Now().Add(20 * time.Millisecond)}, "a")
	if err != nil {
		t.Fatalf("after the kick: got %v, want its place free", err)
	}
	defer end()
	<-ctx.Done()
	var exp *ExpiredError
	if !errors.As(context.Cause(ctx), &exp) {
		t.Fatalf("at the expiry: got cause %v, want an *ExpiredError", context.Cause(ctx))
	}
	if _, _, end, err := r.Start(context.Background(), Info{Node: "n1", Epoch: 1}, "a"); err != nil {
		t.Errorf("after the expiry: got %v, want its place free", err)
	} else {
		end()
	}
	if n := r.Unwinding(); n != 2 {
		t.Errorf("got %d unwinding, want the kicked and the expired session", n)
	}
}

// TestShutdownWaitsForUnwinding: a shutdown waits (within its bound) for
// sessions cut before it that are still unwinding, not only for those it
// cuts.
func TestShutdownWaitsForUnwinding(t *testing.T) {
	r := New(Config{CutWait: 300 * time.Millisecond})
	ctx, end := stuck(t, r, Info{Node: "n1", Epoch: 1}, "a")
	r.Cut("n1", 2, &RevokedError{Node: "n1", Why: "token rotated"})
	go func() { <-time.After(20 * time.Millisecond); end() }() // ends during the shutdown
	if cut, late := r.Shutdown(); cut != 0 || late != 0 {
		t.Errorf("Shutdown: got cut %d late %d, want 0 and 0 (waited for the unwinding one)", cut, late)
	}
	if ctx.Err() == nil {
		t.Error("the session was never cancelled")
	}
	r2 := New(Config{CutWait: 10 * time.Millisecond})
	stuck(t, r2, Info{Node: "n1", Epoch: 1}, "a")
	r2.Cut("n1", 2, &RevokedError{Node: "n1", Why: "token rotated"})
	if _, late := r2.Shutdown(); late != 1 {
		t.Errorf("Shutdown with one still unwinding: got late %d, want 1", late)
	}
}

// TestWorkCaps: automation and BMC sessions have caps of their own, below
// the session caps: per node, per SSH source, and per key or certificate
// whatever the source; the node-token HTTP sessions count per node only.
// A refusal is a *BusyError (ErrBusy), not ErrTooMany.
func TestWorkCaps(t *testing.T) {
	r := New(Config{MaxAutomationPerNode: 2, MaxAutomationPerSource: 2, MaxBMCPerNode: 1, MaxBMCPerSource: 2})
	auto := func(node, cred string) Info { return Info{Node: node, Work: WorkAutomation, Credential: cred} }
	bmc := func(node, cred string) Info { return Info{Node: node, Work: WorkBMC, Credential: cred} }
	tests := []struct {
		name string
		info Info
		src  string
		want string // "" = allowed
	}{
		{"first automation", auto("n1", ""), "10.0.0.1", ""},
		{"second automation", auto("n1", ""), "10.0.0.2", ""},
		{"third on the node", auto("n1", ""), "10.0.0.3", "too many automation sessions on node n1 (limit 2); try again when one ends"},
		{"a plain session on the node", Info{Node: "n1"}, "10.0.0.3", ""},
		{"a BMC session on the node", bmc("n1", ""), "10.0.0.3", ""},
		{"a second BMC session on the node", bmc("n1", ""), "10.0.0.4", "too many sessions calling the BMC on node n1 (limit 1)"},
		{"over HTTP too", Info{Node: "n1", Work: WorkBMC, HTTP: true}, "10.0.0.5", "too many sessions calling the BMC on node n1 (limit 1)"},
		{"the address's second", auto("n2", ""), "10.0.0.1", ""},
		{"the address's third", auto("n3", ""), "10.0.0.1", "too many automation sessions from your address (limit 2)"},
		{"a key's first", auto("n4", "key SHA256:k"), "10.0.1.1", ""},
		{"a key's second", auto("n5", "key SHA256:k"), "10.0.1.2", ""},
		{"a key's third, from a third address", auto("n6", "key SHA256:k"), "10.0.1.3", "too many automation sessions with your key or certificate (limit 2)"},
		{"another key", auto("n6", "key SHA256:j"), "10.0.1.3", ""},
		{"BMC from the full address", bmc("n7", ""), "10.0.0.1", ""},
		{"HTTP power calls from one address", Info{Node: "n8", Work: WorkBMC, HTTP: true}, "10.0.2.1", ""},
		{"HTTP power calls on another node", Info{Node: "n9", Work: WorkBMC, HTTP: true}, "10.0.2.1", ""},
		{"and a third", Info{Node: "n10", Work: WorkBMC, HTTP: true}, "10.0.2.1", ""},
	}
	parent := t // the sessions last the whole test
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, _, end, err := r.Start(context.Background(), tt.info, tt.src)
			var be *BusyError
			switch {
			case tt.want == "" && err != nil:
				t.Errorf("got %v, want allowed", err)
			case tt.want != "" && (!errors.Is(err, ErrBusy) || errors.Is(err, ErrTooMany) || !errors.As(err, &be) ||
				!strings.Contains(err.Error(), tt.want)):
				t.Errorf("got %v, want a *BusyError %q", err, tt.want)
			}
			if err == nil {
				parent.Cleanup(end)
			}
		})
	}
}

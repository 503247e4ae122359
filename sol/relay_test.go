package sol_test

import (
	"errors"
	"testing"

	"github.com/obmd/obmd/sol"
	"github.com/obmd/obmd/sol/sim"
)

// TestRelayViewerWrites: a relay viewer (another replica's viewers) writes
// and sends breaks without being the writer, and never takes the writer's
// place, so local arbitration is untouched.
func TestRelayViewerWrites(t *testing.T) {
	lab := sim.NewLab()
	b := lab.BMC("n1", sim.ModeNormal)
	m := newManager(t, sol.Config{}, lab)
	relay := attach(t, m, "n1", "peer r2", sol.AttachOptions{Relay: true})
	local := attach(t, m, "n1", "alice", sol.AttachOptions{})
	other := attach(t, m, "n1", "bob", sol.AttachOptions{})
	if relay.Writer() || !local.Writer() || other.Writer() {
		t.Fatalf("got writers relay %v, alice %v, bob %v, want alice only", relay.Writer(), local.Writer(), other.Writer())
	}
	waitFor(t, "the link", func() bool { return m.Stats().LinksUp == 1 })
	if _, err := relay.Write([]byte("r")); err != nil {
		t.Fatalf("relay write: %v", err)
	}
	if _, err := local.Write([]byte("a")); err != nil {
		t.Fatalf("writer's write: %v", err)
	}
	if _, err := other.Write([]byte("b")); !errors.Is(err, sol.ErrReadOnly) {
		t.Errorf("reader's write: got %v, want %v", err, sol.ErrReadOnly)
	}
	waitFor(t, "both keys on the serial side", func() bool { return string(b.Typed()) == "ra" })
	if err := relay.Break(testCtx(t)); err != nil {
		t.Errorf("relay break: %v", err)
	}
	if got := b.Breaks(); got != 1 {
		t.Errorf("got %d breaks, want 1", got)
	}
	local.Close()
	if relay.Writer() {
		t.Error("relay viewer became writer when the writer left")
	}
}

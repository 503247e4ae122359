package ipmi

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/obmd/obmd/sol"
	"github.com/obmd/obmd/sol/soltest"
)

// TestInputAcrossReconnects runs the console hub over this driver and a
// real ipmi_sim while the link is lost again and again with keys in
// flight: another session deactivates the SOL payload (`sol deactivate`)
// as a typist keeps typing, the console notices, and the hub reconnects.
// Every key reaches the serial port exactly once, in order.
func TestInputAcrossReconnects(t *testing.T) {
	const rounds = 6
	b, s := newSimBMC(t, fastConfig)
	m, err := sol.NewManager(sol.Config{Backoff: sol.Backoff{Min: 10 * time.Millisecond, Max: 50 * time.Millisecond}},
		oneBMC{b}, nil, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := m.Close(ctx); err != nil {
			t.Errorf("close manager: %v", err)
		}
	}()
	v, err := m.Attach(context.Background(), b.label, sol.AttachOptions{Name: "typist"})
	if err != nil {
		t.Fatal(err)
	}
	go func() { // ends when the manager closes the viewer
		for range v.Output() {
		}
	}()
	waitUntil(t, "the link up", func() bool { return m.Stats().LinksUp == 1 })

	stop := make(chan struct{})
	typed := make(chan []byte, 1)
	var want []byte
	stopTyping := sync.OnceFunc(func() { close(stop); want = <-typed })
	// Deferred after the manager's Close, so it runs first.
	defer stopTyping()
	go func() { // ends at stop (stopTyping waits for it); sends what it typed
		var all []byte
		for i := 0; ; i++ {
			select {
			case <-stop:
				typed <- all
				return
			default:
			}
			key := fmt.Appendf(nil, "key %05d\r", i)
			if _, err := v.Write(key); err != nil {
				t.Errorf("Write: %v", err)
				typed <- all
				return
			}
			all = append(all, key...)
			time.Sleep(time.Millisecond) // a typist: keys keep coming across every reconnect
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for round := range rounds {
		before := len(s.Serial())
		waitUntil(t, "keys arriving", func() bool { return len(s.Serial()) > before+100 })
		if err := b.DeactivateConsole(ctx); err != nil {
			t.Fatalf("round %d: deactivate: %v", round, err)
		}
		waitUntil(t, "the reconnect", func() bool { st := m.Stats(); return st.Reconnects > uint64(round) && st.LinksUp == 1 })
	}
	stopTyping()
	soltest.WaitSerial(t, s, want, 30*time.Second)
	if got := s.Serial(); !bytes.Equal(got, want) {
		t.Errorf("serial port: got %d bytes, want exactly the %d typed", len(got), len(want))
	}
}

// oneBMC resolves every label to b.
type oneBMC struct{ b sol.BMC }

func (r oneBMC) Resolve(context.Context, string) (sol.BMC, error) { return r.b, nil }

// waitUntil polls cond until it holds, for at most 30 s.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

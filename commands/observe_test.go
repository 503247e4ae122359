package commands

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"
)

// TestObserveAndRemoteBusy: every power operation reaches Config.Observe
// with its result, and a BMC call refused as busy by another replica (the
// driver returns a *BusyError) is recorded and observed as busy, exit 4,
// and the message names the replica.
func TestObserveAndRemoteBusy(t *testing.T) {
	var mu sync.Mutex
	var seen []string
	env := newEnv(t, Config{Observe: func(action, result string, took time.Duration) {
		mu.Lock()
		defer mu.Unlock()
		seen = append(seen, action+" "+result)
	}})
	if _, _, code := run(t, env.r, context.Background(), "node-17", "power-on"); code != ExitOK {
		t.Fatalf("power-on: exit %d", code)
	}
	env.bmcs["node-17"].(*fakeBMC).err = &BusyError{Replica: "rep-b"}
	_, stderr, code := run(t, env.r, context.Background(), "node-17", "power-cycle")
	if want := "obmd: power cycle node-17: another power operation on this node is in flight (on replica rep-b)\n"; code != ExitBusy || stderr != want {
		t.Errorf("power-cycle held elsewhere: got exit %d, %q, want %d, %q", code, stderr, ExitBusy, want)
	}
	mu.Lock()
	got := fmt.Sprint(seen)
	mu.Unlock()
	if want := "[power.on ok power.cycle busy]"; got != want {
		t.Errorf("observed: got %s, want %s", got, want)
	}
	ev := env.audit.Events()
	if last := ev[len(ev)-1]; last.Action != "power.cycle" || last.Result != ResultBusy {
		t.Errorf("audit of a remote busy: got %s/%s, want power.cycle/%s", last.Action, last.Result, ResultBusy)
	}
}

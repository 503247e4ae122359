package commands

import (
	"context"
	"errors"
	"fmt"
	"io"
	"testing"

	"github.com/sirupsen/logrus"

	"github.com/obmd/obmd/sol"
)

// epochResolver records how the runner found each BMC: "at N" or "now".
type epochResolver struct {
	fakeResolver
	asked []string
}

func (e *epochResolver) Resolve(ctx context.Context, label string) (BMC, error) {
	e.asked = append(e.asked, "now")
	return e.fakeResolver.Resolve(ctx, label)
}

func (e *epochResolver) ResolveAt(ctx context.Context, label string, epoch int64) (BMC, error) {
	e.asked = append(e.asked, fmt.Sprintf("at %d", epoch))
	return e.fakeResolver.Resolve(ctx, label)
}

// TestRunnerResolvesAtEpoch: a power operation and a doctor run ask an
// EpochResolver for the BMC at the epoch their session was admitted at (a
// session of an ended tenancy is refused there, never served the node's
// new registration); a request with no epoch (the admin's) asks for it
// now.
func TestRunnerResolvesAtEpoch(t *testing.T) {
	log := logrus.New()
	log.SetOutput(io.Discard)
	bmcs := &epochResolver{fakeResolver: fakeResolver{"node-17": &fakeBMC{status: sol.PowerOn}}}
	r, err := NewRunner(Config{}, bmcs, fakeConsoles{}, fakeSessions{}, &fakeAuditor{}, log)
	if err != nil {
		t.Fatal(err)
	}
	for _, epoch := range []int64{42, 0} {
		rq := req("node-17")
		rq.Epoch = epoch
		if _, err := r.Do(context.Background(), rq, Command{Name: CmdPowerStatus}); err != nil {
			t.Fatalf("power-status at epoch %d: %v", epoch, err)
		}
		// The fake cannot diagnose: what matters is how its BMC was found.
		if _, err := r.Do(context.Background(), rq, Command{Name: CmdDoctor}); !errors.Is(err, sol.ErrNotSupported) {
			t.Fatalf("doctor at epoch %d: got %v, want sol.ErrNotSupported", epoch, err)
		}
	}
	want := fmt.Sprint([]string{"at 42", "at 42", "now", "now"})
	if got := fmt.Sprint(bmcs.asked); got != want {
		t.Errorf("resolver asked %s, want %s", got, want)
	}
}

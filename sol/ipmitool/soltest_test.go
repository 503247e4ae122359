package ipmitool

import (
	"context"
	"sync"
	"testing"

	"github.com/obmd/obmd/sol"
	"github.com/obmd/obmd/sol/ipmisim"
	"github.com/obmd/obmd/sol/soltest"
)

// The shared conformance tables: the same checks the native driver passes.

func TestConformancePower(t *testing.T) {
	soltest.RunPower(t, func(t *testing.T) (sol.BMC, soltest.Observer) {
		s, b := startSim(t)
		return b, s
	})
	noChildren(t) // every ipmitool run was reaped
}

func TestConformanceConsole(t *testing.T) {
	soltest.RunConsole(t, func(t *testing.T) (sol.BMC, soltest.SerialObserver) {
		s, b := startSim(t)
		return &freshSOL{BMC: b, sim: s, t: t}, s
	})
}

// freshSOL restarts ipmi_sim before a console opens on a machine whose
// earlier SOL sessions are all closed.
//
// Why: ipmi_sim (OpenIPMI 2.0.33 lanserv/sol.c) keeps the sequence number
// and length of the last input packet across activations and drops a new
// packet with the same number as a duplicate. ipmitool numbers every
// session's packets from 1, so when the previous session's last input
// packet was number 1 (one typed line), the first len(that line) bytes typed
// in the next session are acknowledged and lost. Real BMCs start each
// activation afresh; the native driver probes around it at the protocol
// level, which ipmitool gives no handle for. TestSimDropsFirstPacket shows
// the quirk. With a session still open the sim is left alone, so
// ErrPayloadActive checks see the real thing.
type freshSOL struct {
	*BMC
	sim *ipmisim.Sim
	t   *testing.T

	mu       sync.Mutex
	sessions int // consoles opened so far
	open     int // consoles not yet closed
}

func (f *freshSOL) OpenConsole(ctx context.Context) (sol.Console, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.sessions > 0 && f.open == 0 {
		f.sim.Kill()
		if err := f.sim.Restart(); err != nil {
			f.t.Errorf("restart ipmi_sim: %v", err)
		}
	}
	c, err := f.BMC.OpenConsole(ctx)
	if err != nil {
		return nil, err
	}
	f.sessions++
	f.open++
	return &closeCounter{Console: c, f: f}, nil
}

type closeCounter struct {
	sol.Console
	f    *freshSOL
	once sync.Once
}

func (c *closeCounter) Close() error {
	err := c.Console.Close()
	c.once.Do(func() {
		c.f.mu.Lock()
		c.f.open--
		c.f.mu.Unlock()
	})
	return err
}

package sshconsole_test

import (
	"context"
	"testing"

	"github.com/obmd/obmd/sol"
	"github.com/obmd/obmd/sol/soltest"
	"github.com/obmd/obmd/sol/soltest/sshbmc"
	"github.com/obmd/obmd/sol/sshconsole"
	"github.com/obmd/obmd/sol/transport"
)

// noPower is a driver whose console is not SOL: only the transport's
// console works.
type noPower struct{}

func (noPower) PowerStatus(context.Context) (string, error)       { return "", sol.ErrNotSupported }
func (noPower) PowerOn(context.Context) error                     { return sol.ErrNotSupported }
func (noPower) PowerOff(context.Context, bool) error              { return sol.ErrNotSupported }
func (noPower) PowerCycle(context.Context) error                  { return sol.ErrNotSupported }
func (noPower) PowerReset(context.Context) error                  { return sol.ErrNotSupported }
func (noPower) SetBootDevice(context.Context, string, bool) error { return sol.ErrNotSupported }
func (noPower) OpenConsole(context.Context) (sol.Console, error)  { return nil, sol.ErrNoConsole }
func (noPower) DeactivateConsole(context.Context) error           { return sol.ErrNoConsole }

// sshDriver is node "n1"'s BMC with its console over b's SSH service.
func sshDriver(t testing.TB, b *sshbmc.BMC, keys sshconsole.HostKeys) sol.BMC {
	t.Helper()
	tr, err := transport.New(newClient(t, keys, nil), transport.NewMemory(), nil, quiet())
	if err != nil {
		t.Fatal(err)
	}
	d, err := tr.Wrap("n1", noPower{}, transport.Target{Host: b.Host, User: "u", Pass: "p", Info: b.ConsoleInfo()})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// TestConformance runs the driver conformance table's console cases over
// the SSH transport, per console slot: refused when held and freed by the
// vendor's command (ilo), taken over (idrac), shared (openbmc).
func TestConformance(t *testing.T) {
	for _, tc := range []struct {
		vendor string
		o      soltest.ConsoleOptions
	}{
		{"ilo", soltest.ConsoleOptions{}},
		{"idrac", soltest.ConsoleOptions{Takeover: true}},
		{"openbmc", soltest.ConsoleOptions{Shared: true}},
	} {
		t.Run(tc.vendor, func(t *testing.T) {
			t.Parallel()
			soltest.RunConsoleWith(t, tc.o, func(t *testing.T) (sol.BMC, soltest.SerialObserver) {
				b := sshbmc.Start(t, sshbmc.Options{Vendor: tc.vendor})
				return sshDriver(t, b, sshbmc.NewKeys()), b
			})
		})
	}
}

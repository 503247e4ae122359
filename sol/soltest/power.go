// Package soltest is a conformance table for sol.BMC drivers: the same
// power and console checks run against every driver (sol/ipmi, sol/ipmitool)
// talking to a real BMC, in practice OpenIPMI's ipmi_sim from sol/ipmisim.
//
// The expected chassis actions are the words sol/ipmisim's power hook
// records ("power 0", "power 1", "shutdown 1", "reset 1", "boot pxe",
// "boot default" for disk, ...). ipmi_sim records a persistent boot device
// like a one-time one, so persistence is only checked to be accepted.
package soltest

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/obmd/obmd/sol"
)

// Observer reports what the BMC's machine went through. *ipmisim.Sim
// satisfies it.
type Observer interface {
	// Actions lists the chassis actions recorded so far, oldest first.
	Actions() []string
	// PowerOn reports the machine's power state.
	PowerOn() bool
}

// Generous bounds: they catch hangs, not slowness.
const (
	opTimeout     = 30 * time.Second
	actionTimeout = 10 * time.Second
	cancelBound   = 5 * time.Second
)

// powerCase is one row of the power table: run it on a fresh machine that is
// powered on with no actions recorded, then expect exactly actions.
type powerCase struct {
	name       string
	run        func(ctx context.Context, b sol.BMC) error
	actions    []string
	powerOn    bool
	wantStatus string // checked with PowerStatus after the actions, if set
}

func bootdev(dev string, persistent bool) func(context.Context, sol.BMC) error {
	return func(ctx context.Context, b sol.BMC) error { return b.SetBootDevice(ctx, dev, persistent) }
}

var powerCases = []powerCase{
	{name: "status on", run: func(context.Context, sol.BMC) error { return nil }, powerOn: true, wantStatus: sol.PowerOn},
	{name: "off", run: func(ctx context.Context, b sol.BMC) error { return b.PowerOff(ctx, false) },
		actions: []string{"power 0"}, wantStatus: sol.PowerOff},
	{name: "soft off", run: func(ctx context.Context, b sol.BMC) error { return b.PowerOff(ctx, true) },
		actions: []string{"shutdown 1"}, wantStatus: sol.PowerOff},
	{name: "off then on", run: func(ctx context.Context, b sol.BMC) error {
		if err := b.PowerOff(ctx, false); err != nil {
			return err
		}
		return b.PowerOn(ctx)
	}, actions: []string{"power 0", "power 1"}, powerOn: true, wantStatus: sol.PowerOn},
	{name: "cycle", run: func(ctx context.Context, b sol.BMC) error { return b.PowerCycle(ctx) },
		actions: []string{"power 0", "power 1"}, powerOn: true, wantStatus: sol.PowerOn},
	{name: "reset", run: func(ctx context.Context, b sol.BMC) error { return b.PowerReset(ctx) },
		actions: []string{"reset 1"}, powerOn: true, wantStatus: sol.PowerOn},
	{name: "bootdev pxe", run: bootdev(sol.BootPXE, false), actions: []string{"boot pxe"}, powerOn: true},
	{name: "bootdev disk", run: bootdev(sol.BootDisk, false), actions: []string{"boot default"}, powerOn: true},
	{name: "bootdev bios", run: bootdev(sol.BootBIOS, false), actions: []string{"boot bios"}, powerOn: true},
	{name: "bootdev cdrom", run: bootdev(sol.BootCDROM, false), actions: []string{"boot cdrom"}, powerOn: true},
	{name: "bootdev none", run: bootdev(sol.BootNone, false), actions: []string{"boot none"}, powerOn: true},
	{name: "bootdev pxe persistent", run: bootdev(sol.BootPXE, true), actions: []string{"boot pxe"}, powerOn: true},
	{name: "bootdev disk persistent", run: bootdev(sol.BootDisk, true), actions: []string{"boot default"}, powerOn: true},
	{name: "bootdev none persistent", run: bootdev(sol.BootNone, true), actions: []string{"boot none"}, powerOn: true},
}

// RunPower runs the power table. newBMC is called once per subtest and must
// return a driver for a fresh machine that is powered on and has recorded no
// action (with sol/ipmisim: a new Sim per call).
func RunPower(t *testing.T, newBMC func(t *testing.T) (sol.BMC, Observer)) {
	for _, tc := range powerCases {
		t.Run(tc.name, func(t *testing.T) {
			b, obs := newBMC(t)
			ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
			defer cancel()
			if err := tc.run(ctx, b); err != nil {
				t.Fatalf("run: got %v, want nil", err)
			}
			waitActions(t, obs, tc.actions)
			if got := obs.PowerOn(); got != tc.powerOn {
				t.Errorf("machine power on: got %v, want %v", got, tc.powerOn)
			}
			if tc.wantStatus != "" {
				got, err := b.PowerStatus(ctx)
				if err != nil {
					t.Fatalf("PowerStatus: got %v, want nil", err)
				}
				if got != tc.wantStatus {
					t.Errorf("PowerStatus: got %q, want %q", got, tc.wantStatus)
				}
			}
		})
	}

	t.Run("bad bootdev", func(t *testing.T) {
		b, obs := newBMC(t)
		ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
		defer cancel()
		for _, dev := range []string{"floppy", "", "PXE ", "A"} {
			err := b.SetBootDevice(ctx, dev, false)
			if !errors.Is(err, sol.ErrBadBootDevice) {
				t.Errorf("SetBootDevice(%q): got %v, want ErrBadBootDevice", dev, err)
			}
		}
		if got := obs.Actions(); len(got) != 0 {
			t.Errorf("actions: got %q, want none", got)
		}
	})

	t.Run("cancelled context", func(t *testing.T) {
		b, obs := newBMC(t)
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		ops := map[string]func() error{
			"PowerStatus":   func() error { _, err := b.PowerStatus(ctx); return err },
			"PowerOn":       func() error { return b.PowerOn(ctx) },
			"PowerOff":      func() error { return b.PowerOff(ctx, false) },
			"PowerOff soft": func() error { return b.PowerOff(ctx, true) },
			"PowerCycle":    func() error { return b.PowerCycle(ctx) },
			"PowerReset":    func() error { return b.PowerReset(ctx) },
			"SetBootDevice": func() error { return b.SetBootDevice(ctx, sol.BootPXE, false) },
			"OpenConsole": func() error {
				c, err := b.OpenConsole(ctx)
				if err == nil {
					c.Close()
				}
				return err
			},
			"DeactivateConsole": func() error { return b.DeactivateConsole(ctx) },
		}
		for _, name := range sortedKeys(ops) {
			start := time.Now()
			err := ops[name]()
			if err == nil {
				t.Errorf("%s: got nil error, want one", name)
			}
			if d := time.Since(start); d > cancelBound {
				t.Errorf("%s: returned after %v, want under %v", name, d, cancelBound)
			}
		}
		if got := obs.Actions(); len(got) != 0 {
			t.Errorf("actions: got %q, want none", got)
		}
	})
}

// waitActions waits until the recorded actions are exactly want (a power
// cycle's "power 1" comes about a second after its "power 0").
func waitActions(t *testing.T, obs Observer, want []string) {
	t.Helper()
	deadline := time.Now().Add(actionTimeout)
	for {
		got := obs.Actions()
		if slices.Equal(got, want) {
			return
		}
		if time.Now().After(deadline) || len(got) > len(want) {
			t.Fatalf("actions: got %q, want %q", got, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

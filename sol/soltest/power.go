// Package soltest is the conformance table every sol.BMC driver passes,
// against real BMCs.
//
// The same power and console checks run against every driver (sol/ipmi,
// sol/ipmitool) talking to real BMCs: OpenIPMI's ipmi_sim
// (sol/soltest/ipmisim) and go-ipmi's own goipmi-server
// (sol/soltest/goipmisrv); and against the many-BMC simulator of fleet
// benchmarks (sol/soltest/fleetbmc: go-ipmi's BMC over an in-memory
// machine that records actions in ipmi_sim's words and keeps boot flags),
// to prove it answers as they do.
//
// The two BMCs differ in what their machine does, and the power table says
// which behaviour is whose (outcome per Kind):
//
//   - ipmi_sim runs a power hook that records every chassis action in its
//     own words ("power 0", "power 1", "shutdown 1", "reset 1", "boot pxe",
//     "boot default" for disk, ...) and keeps a power state the actions
//     change: a soft off and a cycle really turn it off (and on). It records
//     a persistent boot device like a one-time one, so persistence is only
//     checked to be accepted.
//   - goipmi-server's mock chassis keeps the power state of power on and
//     off only: it counts cycles, resets and soft shutdowns and leaves the
//     power as it was (so a soft off leaves the machine on). Its actions are
//     the LAN commands that reached it, by name ("Chassis Control"), from
//     its command trace, which does not show their data; boot devices are
//     checked by reading the boot flags back, persistence included.
package soltest

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/obmd/obmd/sol"
)

// Kind names a BMC implementation the table knows.
type Kind string

// The BMCs of the table.
const (
	IPMISim      Kind = "ipmi_sim"
	GoIPMIServer Kind = "goipmi-server"
	// FleetBMC is go-ipmi's BMC in sol/soltest/fleetbmc, many in one
	// process, over an in-memory machine that records actions in
	// ipmi_sim's words and reads boot flags back.
	FleetBMC Kind = "fleetbmc"
)

// Observer reports what the BMC's machine went through. *ipmisim.Sim and
// *goipmisrv.Server satisfy it.
type Observer interface {
	// Kind says which BMC this is.
	Kind() Kind
	// Actions lists the chassis actions recorded so far, oldest first, in
	// the BMC's own words (see the package doc).
	Actions() []string
	// PowerOn reports the machine's power state.
	PowerOn() bool
}

// BootObserver is an Observer that can read the boot flags back.
type BootObserver interface {
	// Boot returns the boot device the flags select (sol.Boot*, "" when the
	// flags are not valid) and whether they persist.
	Boot() (dev string, persistent bool, err error)
}

// Generous bounds: they catch hangs, not slowness.
const (
	opTimeout     = 30 * time.Second
	actionTimeout = 10 * time.Second
	cancelBound   = 5 * time.Second
)

// outcome is what one BMC's machine shows after a power case.
type outcome struct {
	actions    []string
	powerOn    bool
	wantStatus string // checked with PowerStatus after the actions, if set
	boot       *boot  // checked through BootObserver, if set
}

type boot struct {
	dev        string
	persistent bool
}

// powerCase is one row of the power table: run it on a fresh machine that is
// powered on with no actions recorded, then expect the outcome of the BMC.
type powerCase struct {
	name string
	run  func(ctx context.Context, b sol.BMC) error
	want map[Kind]outcome
}

func bootdev(dev string, persistent bool) func(context.Context, sol.BMC) error {
	return func(ctx context.Context, b sol.BMC) error { return b.SetBootDevice(ctx, dev, persistent) }
}

// control is goipmi-server's name for a Chassis Control command.
const control = "Chassis Control"

// bootCase is a boot device row: ipmi_sim's hook word, goipmi-server's
// flags, both for fleetbmc.
func bootCase(name, dev string, persistent bool, simWord string) powerCase {
	return powerCase{name: name, run: bootdev(dev, persistent), want: map[Kind]outcome{
		IPMISim:      {actions: []string{simWord}, powerOn: true},
		GoIPMIServer: {powerOn: true, boot: &boot{dev, persistent}},
		FleetBMC:     {actions: []string{simWord}, powerOn: true, boot: &boot{dev, persistent}},
	}}
}

var powerCases = []powerCase{
	{name: "status on", run: func(context.Context, sol.BMC) error { return nil }, want: map[Kind]outcome{
		IPMISim:      {powerOn: true, wantStatus: sol.PowerOn},
		FleetBMC:     {powerOn: true, wantStatus: sol.PowerOn},
		GoIPMIServer: {powerOn: true, wantStatus: sol.PowerOn},
	}},
	{name: "off", run: func(ctx context.Context, b sol.BMC) error { return b.PowerOff(ctx, false) }, want: map[Kind]outcome{
		IPMISim:      {actions: []string{"power 0"}, wantStatus: sol.PowerOff},
		FleetBMC:     {actions: []string{"power 0"}, wantStatus: sol.PowerOff},
		GoIPMIServer: {actions: []string{control}, wantStatus: sol.PowerOff},
	}},
	{name: "soft off", run: func(ctx context.Context, b sol.BMC) error { return b.PowerOff(ctx, true) }, want: map[Kind]outcome{
		IPMISim:  {actions: []string{"shutdown 1"}, wantStatus: sol.PowerOff},
		FleetBMC: {actions: []string{"shutdown 1"}, wantStatus: sol.PowerOff},
		// goipmi-server counts a soft shutdown and leaves power on.
		GoIPMIServer: {actions: []string{control}, powerOn: true, wantStatus: sol.PowerOn},
	}},
	{name: "off then on", run: func(ctx context.Context, b sol.BMC) error {
		if err := b.PowerOff(ctx, false); err != nil {
			return err
		}
		return b.PowerOn(ctx)
	}, want: map[Kind]outcome{
		IPMISim:      {actions: []string{"power 0", "power 1"}, powerOn: true, wantStatus: sol.PowerOn},
		FleetBMC:     {actions: []string{"power 0", "power 1"}, powerOn: true, wantStatus: sol.PowerOn},
		GoIPMIServer: {actions: []string{control, control}, powerOn: true, wantStatus: sol.PowerOn},
	}},
	{name: "cycle", run: func(ctx context.Context, b sol.BMC) error { return b.PowerCycle(ctx) }, want: map[Kind]outcome{
		IPMISim:  {actions: []string{"power 0", "power 1"}, powerOn: true, wantStatus: sol.PowerOn},
		FleetBMC: {actions: []string{"power 0", "power 1"}, powerOn: true, wantStatus: sol.PowerOn},
		// goipmi-server counts the cycle; power stays on.
		GoIPMIServer: {actions: []string{control}, powerOn: true, wantStatus: sol.PowerOn},
	}},
	{name: "reset", run: func(ctx context.Context, b sol.BMC) error { return b.PowerReset(ctx) }, want: map[Kind]outcome{
		IPMISim:      {actions: []string{"reset 1"}, powerOn: true, wantStatus: sol.PowerOn},
		FleetBMC:     {actions: []string{"reset 1"}, powerOn: true, wantStatus: sol.PowerOn},
		GoIPMIServer: {actions: []string{control}, powerOn: true, wantStatus: sol.PowerOn},
	}},
	bootCase("bootdev pxe", sol.BootPXE, false, "boot pxe"),
	bootCase("bootdev disk", sol.BootDisk, false, "boot default"),
	bootCase("bootdev bios", sol.BootBIOS, false, "boot bios"),
	bootCase("bootdev cdrom", sol.BootCDROM, false, "boot cdrom"),
	bootCase("bootdev none", sol.BootNone, false, "boot none"),
	bootCase("bootdev pxe persistent", sol.BootPXE, true, "boot pxe"),
	bootCase("bootdev disk persistent", sol.BootDisk, true, "boot default"),
	bootCase("bootdev none persistent", sol.BootNone, true, "boot none"),
}

// RunPower runs the power table. newBMC is called once per subtest and must
// return a driver for a fresh machine that is powered on and has recorded no
// action: a new BMC per call, or a shared one reset (the subtests run one
// at a time).
func RunPower(t *testing.T, newBMC func(t *testing.T) (sol.BMC, Observer)) {
	for _, tc := range powerCases {
		t.Run(tc.name, func(t *testing.T) {
			b, obs := newBMC(t)
			want, ok := tc.want[obs.Kind()]
			if !ok {
				t.Fatalf("no expectation for BMC %q", obs.Kind())
			}
			ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
			defer cancel()
			if err := tc.run(ctx, b); err != nil {
				t.Fatalf("run: got %v, want nil", err)
			}
			waitActions(t, obs, want.actions)
			if got := obs.PowerOn(); got != want.powerOn {
				t.Errorf("machine power on (%s): got %v, want %v", obs.Kind(), got, want.powerOn)
			}
			if want.wantStatus != "" {
				got, err := b.PowerStatus(ctx)
				if err != nil {
					t.Fatalf("PowerStatus: got %v, want nil", err)
				}
				if got != want.wantStatus {
					t.Errorf("PowerStatus (%s): got %q, want %q", obs.Kind(), got, want.wantStatus)
				}
			}
			if want.boot != nil {
				checkBoot(t, obs, *want.boot)
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

// checkBoot reads the boot flags back from a BootObserver.
func checkBoot(t *testing.T, obs Observer, want boot) {
	t.Helper()
	bo, ok := obs.(BootObserver)
	if !ok {
		t.Fatalf("%s cannot read boot flags back", obs.Kind())
	}
	dev, persistent, err := bo.Boot()
	if err != nil {
		t.Fatalf("read boot flags: %v", err)
	}
	if dev != want.dev || persistent != want.persistent {
		t.Errorf("boot flags (%s): got %q persistent %v, want %q persistent %v", obs.Kind(), dev, persistent, want.dev, want.persistent)
	}
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

// Machine is a real BMC that tables share between their cases, resetting it
// in between: *ipmisim.Sim and *goipmisrv.Server (see sol/soltest/bmcs).
type Machine interface {
	Observer
	SerialObserver
	// Info is how obmd reaches the BMC.
	Info() sol.Info
	// WrongPassword is Info with a password the BMC refuses.
	WrongPassword() sol.Info
	// Reset powers the machine on and forgets its recorded actions.
	Reset() error
	// ResetSerial forgets what reached the serial port.
	ResetSerial()
}

// Shared adapts a driver constructor to RunPower on one shared machine:
// each case gets m reset and a new driver for m.Info().
func Shared(m Machine, newDriver func(t *testing.T, info sol.Info) sol.BMC) func(t *testing.T) (sol.BMC, Observer) {
	return func(t *testing.T) (sol.BMC, Observer) {
		t.Helper()
		if err := m.Reset(); err != nil {
			t.Fatalf("reset %s: %v", m.Kind(), err)
		}
		return newDriver(t, m.Info()), m
	}
}

// SharedSerial adapts a driver constructor to RunConsole on one shared
// machine: each case gets m's serial record cleared and a new driver.
func SharedSerial(m Machine, newDriver func(t *testing.T, info sol.Info) sol.BMC) func(t *testing.T) (sol.BMC, SerialObserver) {
	return func(t *testing.T) (sol.BMC, SerialObserver) {
		t.Helper()
		m.ResetSerial()
		return newDriver(t, m.Info()), m
	}
}

package redfish_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/obmd/obmd/sol"
	"github.com/obmd/obmd/sol/redfish"
)

const opTimeout = 30 * time.Second

// Setups of the mock's system, sent to the mock directly.
const (
	setOff           = `{"PowerState":"Off"}`
	offerPowerCycle  = `{"Actions":{"#ComputerSystem.Reset":{"ResetType@Redfish.AllowableValues":["On","ForceOff","ForceRestart","GracefulShutdown","PowerCycle"]}}}`
	offerOnlyForceOn = `{"Actions":{"#ComputerSystem.Reset":{"ResetType@Redfish.AllowableValues":["ForceOn","ForceOff"]}}}`
	offerNoReset     = `{"Actions":{"#ComputerSystem.Reset":{"ResetType@Redfish.AllowableValues":["On","ForceOff"]}}}`
)

// TestPower runs each power operation on a fresh mock BMC and checks, on
// the mock's own state, the resets it received and where the system ended.
// waited means the driver must not return before the mock reports the final
// state (the mock changes PowerState 50 ms after a reset).
func TestPower(t *testing.T) {
	cases := []struct {
		name   string
		setup  []string
		later  string // patched into the mock 100 ms into the run
		run    func(context.Context, *redfish.BMC) error
		resets []string
		power  string
		waited bool
	}{
		{name: "on from off", setup: []string{setOff}, run: powerOn,
			resets: []string{"On"}, power: "On", waited: true},
		{name: "on when on sends nothing", run: powerOn, power: "On", waited: true},
		{name: "on while powering on only waits", setup: []string{`{"PowerState":"PoweringOn"}`},
			later: `{"PowerState":"On"}`, run: powerOn, power: "On", waited: true},
		{name: "on with only ForceOn offered", setup: []string{setOff, offerOnlyForceOn}, run: powerOn,
			resets: []string{"ForceOn"}, power: "On", waited: true},
		{name: "off", run: powerOff(false), resets: []string{"ForceOff"}, power: "Off", waited: true},
		{name: "off when off sends nothing", setup: []string{setOff}, run: powerOff(false), power: "Off", waited: true},
		{name: "soft off", run: powerOff(true), resets: []string{"GracefulShutdown"}, power: "Off"},
		{name: "cycle without PowerCycle offered", run: powerCycle,
			resets: []string{"ForceOff", "On"}, power: "On", waited: true},
		{name: "cycle with PowerCycle offered", setup: []string{offerPowerCycle}, run: powerCycle,
			resets: []string{"PowerCycle"}, power: "On"},
		{name: "cycle when off powers on", setup: []string{setOff}, run: powerCycle,
			resets: []string{"On"}, power: "On", waited: true},
		{name: "reset", run: powerReset, resets: []string{"ForceRestart"}, power: "On"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := startBMC(t, nil)
			for _, p := range tc.setup {
				b.Patch(t, p)
			}
			d := b.driver(t, nil)
			ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
			defer cancel()
			var wg sync.WaitGroup
			if tc.later != "" {
				wg.Go(func() {
					time.Sleep(100 * time.Millisecond)
					if err := b.TryPatch(tc.later); err != nil {
						t.Error(err)
					}
				})
			}
			err := tc.run(ctx, d)
			wg.Wait()
			if err != nil {
				t.Fatalf("run: got %v, want nil", err)
			}
			if tc.waited {
				if got := b.System(t)["PowerState"]; got != tc.power {
					t.Errorf("PowerState as the call returned: got %v, want %s", got, tc.power)
				}
			}
			if got := b.Settled(t)["PowerState"]; got != tc.power {
				t.Errorf("PowerState: got %v, want %s", got, tc.power)
			}
			if resets, _ := b.Recorded(); !slices.Equal(resets, tc.resets) {
				t.Errorf("resets: got %q, want %q", resets, tc.resets)
			}
			b.noSessionLeft(t)
		})
	}
}

func powerOn(ctx context.Context, d *redfish.BMC) error    { return d.PowerOn(ctx) }
func powerCycle(ctx context.Context, d *redfish.BMC) error { return d.PowerCycle(ctx) }
func powerReset(ctx context.Context, d *redfish.BMC) error { return d.PowerReset(ctx) }
func powerOff(soft bool) func(context.Context, *redfish.BMC) error {
	return func(ctx context.Context, d *redfish.BMC) error { return d.PowerOff(ctx, soft) }
}

// TestPowerStatus: the mock's PowerState, in obmd's words.
func TestPowerStatus(t *testing.T) {
	cases := []struct {
		state, want string
		err         error
	}{
		{"On", sol.PowerOn, nil},
		{"Off", sol.PowerOff, nil},
		{"PoweringOn", sol.PowerOn, nil},
		{"PoweringOff", sol.PowerOff, nil},
		{"Paused", "paused", nil},
		{"Sideways", "", redfish.ErrProtocol},
	}
	b := startBMC(t, nil)
	d := b.driver(t, nil)
	for _, tc := range cases {
		t.Run(tc.state, func(t *testing.T) {
			b.Patch(t, `{"PowerState":"`+tc.state+`"}`)
			got, err := d.PowerStatus(context.Background())
			if !errors.Is(err, tc.err) || (tc.err == nil && err != nil) {
				t.Fatalf("PowerStatus: got error %v, want %v", err, tc.err)
			}
			if got != tc.want {
				t.Errorf("PowerStatus: got %q, want %q", got, tc.want)
			}
		})
	}
	b.noSessionLeft(t)
}

// TestBootDevice sets each boot device, once and persistent, and reads the
// override back from the mock.
func TestBootDevice(t *testing.T) {
	targets := map[string]string{
		sol.BootPXE: "Pxe", sol.BootDisk: "Hdd", sol.BootBIOS: "BiosSetup", sol.BootCDROM: "Cd", sol.BootNone: "None",
	}
	b := startBMC(t, nil)
	d := b.driver(t, nil)
	n := 0
	for _, dev := range []string{sol.BootPXE, sol.BootDisk, sol.BootBIOS, sol.BootCDROM, sol.BootNone} {
		for _, persistent := range []bool{false, true} {
			enabled := map[bool]string{false: "Once", true: "Continuous"}[persistent]
			t.Run(dev+" "+enabled, func(t *testing.T) {
				// Start from another override, so that each case changes it.
				b.Patch(t, `{"Boot":{"BootSourceOverrideTarget":"Usb","BootSourceOverrideEnabled":"Disabled"}}`)
				if err := d.SetBootDevice(context.Background(), dev, persistent); err != nil {
					t.Fatalf("SetBootDevice: got %v, want nil", err)
				}
				n++
				boot := b.System(t)["Boot"].(map[string]any)
				if boot["BootSourceOverrideTarget"] != targets[dev] || boot["BootSourceOverrideEnabled"] != enabled {
					t.Errorf("override: got %v %v, want %s %s", boot["BootSourceOverrideTarget"],
						boot["BootSourceOverrideEnabled"], targets[dev], enabled)
				}
				if boot["BootSourceOverrideMode"] != "UEFI" {
					t.Errorf("BootSourceOverrideMode: got %v, want UEFI (left as it was)", boot["BootSourceOverrideMode"])
				}
				if _, patches := b.Recorded(); len(patches) != n {
					t.Errorf("PATCHes sent: got %d, want %d", len(patches), n)
				}
			})
		}
	}
	b.noSessionLeft(t)
}

// TestNotAllowed: a reset type or boot target the system does not offer is
// refused before anything is sent; a reset the BMC refuses (the mock's
// system is locked mid-reset: HTTP 409) is ErrNotAllowed too.
func TestNotAllowed(t *testing.T) {
	b := startBMC(t, nil)
	b.Patch(t, offerNoReset)
	b.Patch(t, `{"Boot":{"BootSourceOverrideTarget@Redfish.AllowableValues":["None","Pxe","Hdd"]}}`)
	d := b.driver(t, nil)
	ctx := context.Background()
	if err := d.PowerReset(ctx); !errors.Is(err, redfish.ErrNotAllowed) {
		t.Errorf("PowerReset without ForceRestart offered: got %v, want ErrNotAllowed", err)
	} else {
		safeText(t, err, b, mockPass)
		t.Logf("reset not offered: %v", err)
	}
	if err := d.SetBootDevice(ctx, sol.BootBIOS, false); !errors.Is(err, redfish.ErrNotAllowed) {
		t.Errorf("SetBootDevice bios without BiosSetup offered: got %v, want ErrNotAllowed", err)
	}
	if err := d.SetBootDevice(ctx, "floppy", false); !errors.Is(err, sol.ErrBadBootDevice) {
		t.Errorf("SetBootDevice floppy: got %v, want ErrBadBootDevice", err)
	}
	if resets, patches := b.Recorded(); len(resets) != 0 || len(patches) != 0 {
		t.Errorf("sent: resets %q, patches %q; want none", resets, patches)
	}

	b2 := startBMC(t, nil)
	d2 := b2.driver(t, nil)
	b2.Patch(t, `{"resourceLock":"Locked"}`) // mid-reset, as after a reset the mock has not finished
	err := d2.PowerOff(ctx, false)
	var e *redfish.Error
	if !errors.Is(err, redfish.ErrNotAllowed) || !errors.As(err, &e) || e.Status != 409 {
		t.Fatalf("PowerOff on a locked system: got %v, want ErrNotAllowed with HTTP 409", err)
	}
	t.Logf("refused by the BMC: %v", err)
	b.noSessionLeft(t)
	b2.noSessionLeft(t)
}

// TestConcurrent: operations in parallel each run their own session and
// leave none behind.
func TestConcurrent(t *testing.T) {
	b := startBMC(t, nil)
	d := b.driver(t, nil)
	const n = 8
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			if got, err := d.PowerStatus(context.Background()); err != nil || got != sol.PowerOn {
				t.Errorf("PowerStatus: got %q, %v; want on", got, err)
			}
		})
	}
	wg.Wait()
	if _, created, _ := b.Counts(); created != n {
		t.Errorf("sessions created: got %d, want %d", created, n)
	}
	b.noSessionLeft(t)
}

package fleetbmc

import (
	"context"
	"slices"
	"sync"

	"github.com/bougou/go-ipmi/pkg/hal"
	"github.com/bougou/go-ipmi/pkg/hal/mock"
	"github.com/bougou/go-ipmi/pkg/types"

	"github.com/obmd/obmd/sol"
)

// maxActions bounds the chassis actions a machine remembers.
const maxActions = 64

// machine is one node behind its BMC: the power state and boot flags that
// chassis commands change, the actions they recorded (in ipmi_sim's
// words, see Actions), and the serial line. It is the BMC's hal.HAL;
// go-ipmi's in-memory mock supplies the parts obmd never touches (sensors,
// FRU and SDR storage, LAN configuration).
type machine struct {
	*mock.HAL
	line *line

	mu      sync.Mutex
	on      bool
	flags   *types.BootOptionParam_BootFlags
	ack     *types.BootOptionParam_BootInfoAcknowledge
	actions []string
}

func (m *machine) Chassis() hal.ChassisHAL { return m }
func (m *machine) Console() hal.ConsoleHAL { return m.line }

func (m *machine) record(words ...string) {
	m.actions = append(m.actions, words...)
	if over := len(m.actions) - maxActions; over > 0 {
		m.actions = slices.Delete(m.actions, 0, over)
	}
}

// PowerState reports the power (hal.ChassisHAL).
func (m *machine) PowerState(context.Context) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.on, nil
}

// SetPower records "power 1" or "power 0".
func (m *machine) SetPower(_ context.Context, on bool) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.on = on
	if on {
		m.record("power 1")
	} else {
		m.record("power 0")
	}
	return nil
}

// PowerCycle turns the machine off and on again, as ipmi_sim's hook
// records it.
func (m *machine) PowerCycle(context.Context) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.on = true
	m.record("power 0", "power 1")
	return nil
}

// ColdReset is a hard reset: the power stays on.
func (m *machine) ColdReset(context.Context) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.record("reset 1")
	return nil
}

// WarmReset is what go-ipmi's handler calls for Chassis Control's soft
// shutdown (action 5): the operating system shuts down and the machine is
// off, as on ipmi_sim.
func (m *machine) WarmReset(context.Context) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.on = false
	m.record("shutdown 1")
	return nil
}

// Identify does nothing a test observes.
func (m *machine) Identify(context.Context, uint8) error { return nil }

// IntrusionState: the chassis was never opened.
func (m *machine) IntrusionState(context.Context) (bool, error) { return false, nil }

// bootWords are ipmi_sim's words for a boot device selector.
var bootWords = map[types.BootDeviceSelector]string{
	types.BootDeviceSelectorNoOverride:         "boot none",
	types.BootDeviceSelectorForcePXE:           "boot pxe",
	types.BootDeviceSelectorForceHardDrive:     "boot default",
	types.BootDeviceSelectorForceCDROM:         "boot cdrom",
	types.BootDeviceSelectorForceBIOSSetup:     "boot bios",
	types.BootDeviceSelectorForceHardDriveSafe: "boot default",
}

// bootDevices are obmd's names for a boot device selector.
var bootDevices = map[types.BootDeviceSelector]string{
	types.BootDeviceSelectorNoOverride:     sol.BootNone,
	types.BootDeviceSelectorForcePXE:       sol.BootPXE,
	types.BootDeviceSelectorForceHardDrive: sol.BootDisk,
	types.BootDeviceSelectorForceCDROM:     sol.BootCDROM,
	types.BootDeviceSelectorForceBIOSSetup: sol.BootBIOS,
}

// SetBootFlags keeps the flags and, when they are valid, records the
// device in ipmi_sim's words ("boot pxe").
func (m *machine) SetBootFlags(_ context.Context, f *types.BootOptionParam_BootFlags) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	c := *f
	m.flags = &c
	if f.BootFlagsValid {
		if w, ok := bootWords[f.BootDeviceSelector]; ok {
			m.record(w)
		} else {
			m.record("boot other")
		}
	}
	return nil
}

// GetBootFlags returns the flags last set.
func (m *machine) GetBootFlags(context.Context) (*types.BootOptionParam_BootFlags, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.flags == nil {
		return &types.BootOptionParam_BootFlags{}, nil
	}
	c := *m.flags
	return &c, nil
}

// SetBootInfoAcknowledge keeps the acknowledge data.
func (m *machine) SetBootInfoAcknowledge(_ context.Context, a *types.BootOptionParam_BootInfoAcknowledge) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	c := *a
	m.ack = &c
	return nil
}

// GetBootInfoAcknowledge returns the acknowledge data last set.
func (m *machine) GetBootInfoAcknowledge(context.Context) (*types.BootOptionParam_BootInfoAcknowledge, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.ack == nil {
		return &types.BootOptionParam_BootInfoAcknowledge{}, nil
	}
	c := *m.ack
	return &c, nil
}

// Package sim is an in-process simulated BMC: obmd's "mock" node type, for
// demos, development and fast tests.
//
// A Lab holds simulated BMCs by node label, so a BMC's power state, boot
// device and console survive the Manager resolving it again. In ModeNormal a
// BMC behaves like a small machine behind IPMI: power and boot device
// operations, and a serial console that prints boot text when powered on and
// answers typed lines like a tiny shell. In ModeMock it behaves as obmd's
// mock driver, which HIL's tests expect: power status "Mock Status", boot
// devices "A" and "B", and a console that counts, one number per line, as
// fast as its reader takes the lines.
//
// Test hooks (Inject, Typed, DropLink, Actions, Breaks, SetDelay, SetFail, Hang,
// WaitConsole, ...) let a test drive the serial side and see what reached it.
package sim

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/obmd/obmd/sol"
)

// Mode selects how a simulated BMC behaves.
type Mode int

const (
	// ModeNormal simulates a machine behind an IPMI BMC.
	ModeNormal Mode = iota
	// ModeMock behaves as obmd's "mock" driver type.
	ModeMock
)

func (m Mode) String() string {
	switch m {
	case ModeNormal:
		return "normal"
	case ModeMock:
		return "mock"
	}
	return fmt.Sprintf("Mode(%d)", int(m))
}

// ErrUnknown is returned by Lab.Resolve for a label without a BMC.
var ErrUnknown = errors.New("no simulated BMC for this node")

// Lab is a set of simulated BMCs keyed by node label. Safe for concurrent
// use.
type Lab struct {
	mu   sync.Mutex
	bmcs map[string]*BMC
}

// NewLab returns an empty lab.
func NewLab() *Lab {
	return &Lab{bmcs: map[string]*BMC{}}
}

// BMC returns label's simulated BMC, creating it (powered on, boot device
// none) on first use. A later call with the same mode returns the same
// instance; a different mode replaces it (the node's type changed), killing
// the old one's console.
func (l *Lab) BMC(label string, mode Mode) *BMC {
	l.mu.Lock()
	defer l.mu.Unlock()
	if b := l.bmcs[label]; b != nil {
		if b.mode == mode {
			return b
		}
		b.DropLink()
	}
	b := newBMC(label, mode)
	l.bmcs[label] = b
	return b
}

// Forget deletes label's BMC (the node was deleted); its console, if any,
// is dropped. The next BMC call for label starts afresh.
func (l *Lab) Forget(label string) {
	l.mu.Lock()
	b := l.bmcs[label]
	delete(l.bmcs, label)
	l.mu.Unlock()
	if b != nil {
		b.DropLink()
	}
}

// Resolve implements sol.Resolver over the lab's existing BMCs (ErrUnknown,
// wrapped, for other labels).
func (l *Lab) Resolve(ctx context.Context, label string) (sol.BMC, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("resolve simulated BMC %s: %w", label, err)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.bmcs[label]
	if b == nil {
		return nil, fmt.Errorf("resolve simulated BMC %s: %w", label, ErrUnknown)
	}
	return b, nil
}

package sim

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/obmd/obmd/sol"
)

// MockPowerStatus is what a ModeMock BMC reports as its power status.
const MockPowerStatus = "Mock Status"

// Errors a console's Read returns when the simulated link goes away.
var (
	// ErrLinkDropped: DropLink killed the console.
	ErrLinkDropped = errors.New("simulated SOL link dropped")
	// ErrDeactivated: another session deactivated the SOL payload.
	ErrDeactivated = errors.New("SOL payload deactivated by another session")
	// ErrConsoleClosed: the console was closed.
	ErrConsoleClosed = errors.New("console closed")
)

// BMC is one simulated BMC; it implements sol.BMC. Safe for concurrent use.
type BMC struct {
	label string
	mode  Mode

	mu         sync.Mutex
	power      bool
	bootdev    string
	persistent bool
	actions    []string
	delay      time.Duration
	fail       error
	hang       chan struct{} // Hang: closed by its release; nil when not hung
	hung       int           // operations blocked in a hang now
	breaks     int
	typed      []byte
	con        *console      // the active console, nil if none
	changed    chan struct{} // closed and replaced when con changes
	attempts   int           // OpenConsole calls
	opens      int           // consoles opened
	deacts     int           // DeactivateConsole calls that succeeded
	sh         shell
}

func newBMC(label string, mode Mode) *BMC {
	return &BMC{
		label:   label,
		mode:    mode,
		power:   true,
		bootdev: sol.BootNone,
		changed: make(chan struct{}),
		sh:      shell{prompt: loginPrompt},
	}
}

var (
	_ sol.BMC       = (*BMC)(nil)
	_ sol.Exclusive = (*BMC)(nil)
)

// Mode returns the BMC's mode.
func (b *BMC) Mode() Mode { return b.mode }

// Exclusive implements sol.Exclusive: a ModeMock console counts from 0 for
// every new console, so its link must not outlive its viewers.
func (b *BMC) Exclusive() bool { return b.mode == ModeMock }

// begin runs before every operation: it waits the configured delay (bounded
// by ctx) and returns the injected failure, if any.
func (b *BMC) begin(ctx context.Context) error {
	b.mu.Lock()
	d, fail, hang := b.delay, b.fail, b.hang
	if hang != nil {
		b.hung++
	}
	b.mu.Unlock()
	if hang != nil {
		<-hang // deaf to ctx, as Hang says
		b.mu.Lock()
		b.hung--
		b.mu.Unlock()
	}
	if d > 0 {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			return fmt.Errorf("simulated BMC: %w", ctx.Err()) // the caller names op and node
		}
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("simulated BMC: %w", err)
	}
	if fail != nil {
		return fmt.Errorf("simulated BMC: %w", fail)
	}
	return nil
}

// PowerStatus returns sol.PowerOn or sol.PowerOff ("Mock Status" in
// ModeMock).
func (b *BMC) PowerStatus(ctx context.Context) (string, error) {
	if err := b.begin(ctx); err != nil {
		return "", err
	}
	if b.mode == ModeMock {
		return MockPowerStatus, nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.power {
		return sol.PowerOn, nil
	}
	return sol.PowerOff, nil
}

// PowerOn turns the machine on; it boots if it was off.
func (b *BMC) PowerOn(ctx context.Context) error {
	return b.powerOp(ctx, "power on", func() {
		if !b.power {
			b.boot()
		}
	})
}

// PowerOff cuts power, or shuts the OS down first when soft.
func (b *BMC) PowerOff(ctx context.Context, soft bool) error {
	action := "power off"
	if soft {
		action = "power off soft"
	}
	return b.powerOp(ctx, action, func() {
		if b.power && soft {
			b.emitLocked([]byte("\r\nsim: the system is going down for power off\r\n"))
		}
		b.power = false
	})
}

// PowerCycle turns power off and on again: the machine boots.
func (b *BMC) PowerCycle(ctx context.Context) error {
	return b.powerOp(ctx, "power cycle", b.boot)
}

// PowerReset is a hard reset: the machine boots (and is on afterwards).
func (b *BMC) PowerReset(ctx context.Context) error {
	return b.powerOp(ctx, "power reset", b.boot)
}

func (b *BMC) powerOp(ctx context.Context, action string, do func()) error {
	if err := b.begin(ctx); err != nil {
		return err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.actions = append(b.actions, action)
	if b.mode == ModeNormal {
		do()
	}
	return nil
}

// SetBootDevice selects the next boot device: pxe, disk, bios, cdrom or
// none in ModeNormal; "A" or "B" in ModeMock. Others are
// sol.ErrBadBootDevice. Without persistent, the choice lasts one boot.
func (b *BMC) SetBootDevice(ctx context.Context, dev string, persistent bool) error {
	if err := b.begin(ctx); err != nil {
		return err
	}
	valid := sol.BootDevices()
	if b.mode == ModeMock {
		valid = []string{"A", "B"}
	}
	if !slices.Contains(valid, dev) {
		return sol.BadBootDevice(dev, valid...)
	}
	action := "bootdev " + dev
	if persistent {
		action += " persistent"
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.actions = append(b.actions, action)
	b.bootdev, b.persistent = dev, persistent
	return nil
}

// OpenConsole activates SOL. While a console is active, another
// OpenConsole fails with sol.ErrPayloadActive (wrapped), as a real BMC does.
func (b *BMC) OpenConsole(ctx context.Context) (sol.Console, error) {
	b.mu.Lock()
	b.attempts++
	b.mu.Unlock()
	if err := b.begin(ctx); err != nil {
		return nil, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.con != nil {
		return nil, fmt.Errorf("sim activate SOL on %s: %w", b.label, sol.ErrPayloadActive)
	}
	c := newConsole(b)
	b.setConsoleLocked(c)
	b.opens++
	return c, nil
}

// DeactivateConsole frees the SOL payload: the active console's Read fails
// with ErrDeactivated, as when a real BMC hands the payload to someone else.
func (b *BMC) DeactivateConsole(ctx context.Context) error {
	if err := b.begin(ctx); err != nil {
		return err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.deacts++
	if b.con != nil {
		b.con.kill(ErrDeactivated)
		b.setConsoleLocked(nil)
	}
	return nil
}

func (b *BMC) setConsoleLocked(c *console) {
	b.con = c
	close(b.changed)
	b.changed = make(chan struct{})
}

// boot prints the boot text and consumes a one-time boot device. b.mu held.
func (b *BMC) boot() {
	b.power = true
	dev := b.bootdev
	if dev == sol.BootNone || dev == "" {
		dev = sol.BootDisk
	}
	if !b.persistent {
		b.bootdev = sol.BootNone
	}
	b.sh = shell{prompt: loginPrompt}
	b.emitLocked(fmt.Appendf(nil, "\r\nSimBIOS 1.0 (simulated BMC of %s)\r\nBooting from %s...\r\n"+
		"sim kernel: serial console on ttyS0\r\n\r\nsim (ttyS0)\r\n\r\n%s", b.label, dev, loginPrompt))
}

// emitLocked sends host output to the active console (lost if none, as on
// a real serial line). b.mu held.
func (b *BMC) emitLocked(p []byte) {
	if b.con != nil && len(p) > 0 {
		b.con.push(p)
	}
}

// Test hooks and inspection.

// SetDelay makes every operation (power, boot device, console activation
// and deactivation) take d first (0 to stop).
func (b *BMC) SetDelay(d time.Duration) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.delay = d
}

// Hang makes every operation from now on (power, boot device, console
// activation and deactivation) block, deaf to its context, until release
// is called: a driver stuck in a call nothing interrupts (a read without a
// deadline, a process that ignores its kill). release is idempotent.
func (b *BMC) Hang() (release func()) {
	hang := make(chan struct{})
	b.mu.Lock()
	b.hang = hang
	b.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			b.mu.Lock()
			if b.hang == hang {
				b.hang = nil
			}
			b.mu.Unlock()
			close(hang)
		})
	}
}

// Hung returns how many operations are blocked in a Hang now.
func (b *BMC) Hung() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.hung
}

// SetFail makes every operation fail with err (wrapped); nil stops it.
func (b *BMC) SetFail(err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.fail = err
}

// Actions returns the power and boot device operations performed, in order:
// "power on", "power off", "power off soft", "power cycle", "power reset",
// "bootdev pxe", "bootdev pxe persistent".
func (b *BMC) Actions() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.actions...)
}

// BootDevice returns the boot device for the next boot and whether it is
// persistent.
func (b *BMC) BootDevice() (string, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.bootdev, b.persistent
}

// Breaks returns how many serial breaks were sent.
func (b *BMC) Breaks() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.breaks
}

// Typed returns every byte that reached the serial side through a console.
func (b *BMC) Typed() []byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]byte(nil), b.typed...)
}

// Inject writes data to the serial output as if the host printed it (even
// when powered off). It is lost when no console is active.
func (b *BMC) Inject(data []byte) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.emitLocked(data)
}

// DropLink kills the active console, if any: its Read fails with
// ErrLinkDropped and the payload is free again.
func (b *BMC) DropLink() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.con != nil {
		b.con.kill(ErrLinkDropped)
		b.setConsoleLocked(nil)
	}
}

// ConsoleActive reports whether a console is active.
func (b *BMC) ConsoleActive() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.con != nil
}

// WaitConsole waits until a console is active (active true) or none is
// (false), or ctx is done.
func (b *BMC) WaitConsole(ctx context.Context, active bool) error {
	for {
		b.mu.Lock()
		now, changed := b.con != nil, b.changed
		b.mu.Unlock()
		if now == active {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return fmt.Errorf("wait for console of %s (active %v): %w", b.label, active, ctx.Err())
		}
	}
}

// ConsoleStats returns how many times OpenConsole was called, how many
// consoles it opened and how many deactivations succeeded.
func (b *BMC) ConsoleStats() (attempts, opens, deactivations int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.attempts, b.opens, b.deacts
}

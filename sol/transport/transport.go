// Package transport reaches a node's console by the transport its info
// names, remembering per node which one worked.
//
// The transports are IPMI SOL through the node's driver, the BMC's SSH
// service (sol/sshconsole), or whichever the BMC offers ("auto").
//
// Wrap puts a node's driver behind the transport: a node whose console is
// "sol" keeps its driver as it is; one whose console is "ssh" or "auto"
// gets a BMC whose power and boot-device calls are the driver's and whose
// console is chosen here. "auto" tries the transport remembered for the
// node's BMC (Memory, as the IPMI cipher suite is remembered), else the
// ones the BMC's Redfish service says are enabled (a Discoverer: a
// Redfish node's driver, or an IPMI node's info.redfish), SOL before SSH, else SOL then SSH; when one
// fails at the protocol level (unreachable, refused, no console) the next
// is tried, but never past a busy console or a changed host key. The one
// that opens is remembered and shown (Memory.InUse: the admin view's
// console_in_use, doctor's transport step).
package transport

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/obmd/obmd/sol"
	"github.com/obmd/obmd/sol/printable"
	"github.com/obmd/obmd/sol/sshconsole"
)

// CheckInfo validates the console fields of a registration and returns
// them canonical (sol.ConsoleInfo; "sol" is the default, stored empty).
// Its errors name the field and never show a password.
//
// Rules: console is "sol", "ssh" or "auto"; the ssh_* fields follow
// sshconsole.Check and apply only with "ssh" or "auto"; redfish (whose
// URL the node type checks) only with "auto", redfish_insecure only with
// redfish.
func CheckInfo(ci sol.ConsoleInfo) (sol.ConsoleInfo, error) {
	switch ci.Console {
	case "", sol.ConsoleSOL:
		ci.Console = ""
	case sol.ConsoleSSH, sol.ConsoleAuto:
	default:
		return ci, fmt.Errorf(`info.console %s is not "sol", "ssh" or "auto"`, quote(ci.Console))
	}
	if err := sshconsole.Check(ci); err != nil {
		return ci, err
	}
	switch {
	case ci.RedfishInsecure && ci.Redfish == "":
		return ci, errors.New("info.redfish_insecure applies only with info.redfish")
	case ci.Redfish != "" && ci.Console != sol.ConsoleAuto:
		return ci, errors.New(`info.redfish applies only with info.console "auto" (it says which console services are on)`)
	}
	if ci.Console == "" {
		if f := ci.FirstSet(); f != "" { // an ssh_* field: console is empty
			return ci, fmt.Errorf(`info.%s applies only with info.console "ssh" or "auto"`, f)
		}
	}
	return sshconsole.Canonical(ci), nil
}

func quote(s string) string { return printable.Quote(s, 32) }

// Discoverer can tell which console services a BMC has enabled
// (sol/redfish: the system's SerialConsole): a Redfish node's driver, or
// an IPMI node's Redfish service (Target.Discover).
type Discoverer interface {
	ConsoleServices(ctx context.Context) (sol.ConsoleServices, error)
}

// Transports wraps drivers (Wrap). One serves the daemon.
type Transports struct {
	ssh  *sshconsole.Client
	mem  *Memory
	held func(ctx context.Context, label string) bool
	log  logrus.FieldLogger
}

// New returns the wrapper over the SSH client ssh and the memory mem
// (nil: nothing remembered). held, if set, reports whether obmd holds a
// node's console link (a diagnosis does not attach it again). It does no
// I/O.
func New(ssh *sshconsole.Client, mem *Memory, held func(ctx context.Context, label string) bool, log logrus.FieldLogger) (*Transports, error) {
	if ssh == nil || log == nil {
		return nil, errors.New("transport: SSH client and logger are required")
	}
	if held == nil {
		held = func(context.Context, string) bool { return false }
	}
	return &Transports{ssh: ssh, mem: mem, held: held, log: log}, nil
}

// Target is what the console of a node needs beside its driver: the BMC's
// host, the node's user and password (the SSH defaults), its console info,
// and what auto asks which console services are on (nil: the driver, if it
// is a Discoverer).
type Target struct {
	Host, User, Pass string
	Info             sol.ConsoleInfo
	Discover         Discoverer
}

// Wrap returns node label's BMC: base itself when its console is SOL
// (and what auto remembered of the node is forgotten: it no longer
// applies), else base with its console reached as tg.Info says. It does
// no I/O.
func (t *Transports) Wrap(label string, base sol.BMC, tg Target) (sol.BMC, error) {
	mode := tg.Info.Console
	if mode == "" || mode == sol.ConsoleSOL {
		t.mem.Forget(label)
		return base, nil
	}
	if mode != sol.ConsoleSSH && mode != sol.ConsoleAuto {
		return nil, fmt.Errorf("console transport %s: unknown", quote(mode))
	}
	st, err := sshconsole.TargetOf(label, tg.Host, tg.User, tg.Pass, tg.Info)
	if err != nil {
		return nil, fmt.Errorf("console over SSH: %w", err)
	}
	disc := tg.Discover
	if disc == nil {
		disc, _ = base.(Discoverer)
	}
	return &BMC{BMC: base, t: t, label: label, mode: mode, ssh: st, discover: disc,
		setPort: tg.Info.SSHPort != 0, setCommand: tg.Info.SSHCommand != ""}, nil
}

// BMC is a node's driver (power, boot device, SOL) with its console
// reached over the transport its info names.
type BMC struct {
	sol.BMC
	t     *Transports
	label string
	mode  string            // sol.ConsoleSSH or sol.ConsoleAuto
	ssh   sshconsole.Target // from the node's info and its preset
	// discover tells which console services the BMC has on (nil: no one
	// says).
	discover Discoverer
	// setPort, setCommand: the node's info sets them; what the BMC's
	// Redfish service says does not override them.
	setPort, setCommand bool

	mu     sync.Mutex
	busyOn string            // the transport whose console was held at the last open
	last   sshconsole.Target // the SSH target of the last open (discovery applied)
}

var (
	_ sol.BMC       = (*BMC)(nil)
	_ sol.Diagnoser = (*BMC)(nil)
)

// OpenConsole opens the console over the node's transport (see the package
// comment).
func (b *BMC) OpenConsole(ctx context.Context) (sol.Console, error) {
	if b.mode == sol.ConsoleSSH {
		return b.openSSH(ctx, b.ssh, "")
	}
	p, err := b.plan(ctx)
	if err != nil {
		return nil, err
	}
	var errs []error
	for i, tr := range p.order {
		octx, cancel := share(ctx, len(p.order)-i)
		var con sol.Console
		if tr == sol.ConsoleSSH {
			con, err = b.openSSH(octx, p.ssh, p.why)
		} else {
			con, err = b.openSOL(octx, p.why)
		}
		cancel()
		if err == nil {
			return con, nil
		}
		if ctx.Err() != nil || !fallsBack(err) {
			return nil, err
		}
		if p.remembered {
			b.t.mem.Forget(b.label)
		}
		b.t.log.WithFields(logrus.Fields{"node": b.label, "transport": tr}).WithError(err).Info("console_transport_failed")
		if errors.Is(err, sol.ErrNotSupported) { // no console that way: say so, but it is no final failure
			err = fmt.Errorf("over %s: %v", tr, err)
		} else {
			err = fmt.Errorf("over %s: %w", tr, err)
		}
		errs = append(errs, err)
	}
	return nil, errors.Join(errs...)
}

// share bounds one of left attempts to its share of ctx's time.
func share(ctx context.Context, left int) (context.Context, context.CancelFunc) {
	dl, ok := ctx.Deadline()
	if !ok || left <= 1 {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, time.Until(dl)/time.Duration(left))
}

// fallsBack reports whether a failure of one transport lets auto try the
// other: not a busy console (the hub frees it and tries again) nor a
// changed host key (refused, never worked around).
func fallsBack(err error) bool {
	var e *sol.Error
	return !errors.Is(err, sol.ErrPayloadActive) && !(errors.As(err, &e) && e.Fault == sol.FaultHostKey)
}

func (b *BMC) openSSH(ctx context.Context, tg sshconsole.Target, why string) (sol.Console, error) {
	b.mu.Lock()
	b.last = tg
	b.mu.Unlock()
	con, err := b.t.ssh.Open(ctx, tg)
	b.opened(sol.ConsoleSSH, tg, why, err)
	if err != nil {
		return nil, err
	}
	return con, nil
}

func (b *BMC) openSOL(ctx context.Context, why string) (sol.Console, error) {
	con, err := b.BMC.OpenConsole(ctx)
	b.opened(sol.ConsoleSOL, sshconsole.Target{}, why, err)
	return con, err
}

// opened notes an open's outcome: a busy console (for DeactivateConsole),
// a transport that worked (remembered, and logged when it changed).
func (b *BMC) opened(tr string, tg sshconsole.Target, why string, err error) {
	b.mu.Lock()
	if errors.Is(err, sol.ErrPayloadActive) {
		b.busyOn = tr
	}
	b.mu.Unlock()
	if err != nil {
		return
	}
	e := entry{bmc: b.ssh.Host, transport: tr, port: tg.Port, command: tg.Command}
	if b.t.mem.remember(b.label, e) {
		log := b.t.log.WithFields(logrus.Fields{"node": b.label, "transport": tr, "console": b.mode})
		if why != "" {
			log = log.WithField("why", why)
		}
		log.Info("console_transport_selected")
	}
}

// DeactivateConsole frees the console on the transport that found it
// held: the vendor's free command over SSH, else the driver's SOL
// deactivation.
func (b *BMC) DeactivateConsole(ctx context.Context) error {
	b.mu.Lock()
	on, tg := b.busyOn, b.last
	b.busyOn = ""
	b.mu.Unlock()
	if b.mode == sol.ConsoleSSH || on == sol.ConsoleSSH {
		if tg.Host == "" {
			tg = b.ssh
		}
		return b.t.ssh.Free(ctx, tg)
	}
	return b.BMC.DeactivateConsole(ctx)
}

// Diagnose is the driver's steps (its SOL steps only when SOL is the
// console), then, for "auto", the transport step (what auto picks first,
// and why), then the SSH console's steps when it picks SSH.
func (b *BMC) Diagnose(ctx context.Context) []sol.Check {
	var checks, solSteps []sol.Check
	if d, ok := b.BMC.(sol.Diagnoser); ok {
		for _, c := range d.Diagnose(ctx) {
			if sol.SOLStep(c.Name) {
				solSteps = append(solSteps, c)
			} else {
				checks = append(checks, c)
			}
		}
		if len(checks) > 0 && !checks[len(checks)-1].OK {
			return checks
		}
	}
	tg := b.ssh
	if b.mode == sol.ConsoleAuto {
		p, err := b.plan(ctx)
		if err != nil {
			return append(checks, sol.FailErr(sol.CheckTransport, err, hintNone))
		}
		checks = append(checks, sol.Pass(sol.CheckTransport, p.text()))
		if p.order[0] == sol.ConsoleSOL {
			return append(checks, solSteps...)
		}
		tg = p.ssh
	}
	return append(checks, b.t.ssh.Diagnose(ctx, tg, b.t.held(ctx, b.label))...)
}

const hintNone = "enable IPMI serial-over-LAN or the SSH serial console at the BMC, or register the node with info.console \"sol\" or \"ssh\""

// plan is the order auto tries the transports in, and why.
type plan struct {
	order      []string
	ssh        sshconsole.Target // discovery applied
	why        string
	remembered bool
}

func (p plan) text() string {
	return "auto: " + strings.Join(p.order, ", then ") + " (" + p.why + ")"
}

// plan decides auto's order: the transport remembered for this BMC, else
// what its Redfish service says, else SOL then SSH.
func (b *BMC) plan(ctx context.Context) (plan, error) {
	p := plan{ssh: b.ssh, order: []string{sol.ConsoleSOL, sol.ConsoleSSH}, why: "SOL first, SSH if it fails"}
	if e, ok := b.t.mem.lookup(b.label, b.ssh.Host); ok {
		p.remembered, p.why = true, "remembered"
		if e.transport == sol.ConsoleSSH {
			p.order = []string{sol.ConsoleSSH, sol.ConsoleSOL}
			b.applyService(&p.ssh, e.port, e.command)
		}
		return p, nil
	}
	if b.discover == nil {
		return p, nil
	}
	s, err := b.discover.ConsoleServices(ctx)
	if err != nil {
		b.t.log.WithField("node", b.label).WithError(err).Info("console_services_unknown")
		p.why = "the Redfish service did not say; SOL first"
		return p, nil
	}
	if s.SSH.Known && s.SSH.Enabled {
		b.applyService(&p.ssh, s.SSH.Port, s.SSH.Command)
	}
	var order, said []string
	if !s.IPMI.Known || s.IPMI.Enabled {
		order = append(order, sol.ConsoleSOL)
	}
	if !s.SSH.Known || s.SSH.Enabled {
		order = append(order, sol.ConsoleSSH)
	}
	for _, sv := range []struct {
		name string
		s    sol.ConsoleService
	}{{"IPMI SOL", s.IPMI}, {"SSH", s.SSH}} {
		switch {
		case !sv.s.Known:
		case sv.s.Enabled:
			said = append(said, sv.name+" on")
		default:
			said = append(said, sv.name+" off")
		}
	}
	if len(order) == 0 {
		return p, sol.NewError(sol.FaultRejected, errors.New("the BMC's Redfish service says no serial console service (IPMI SOL, SSH) is enabled"))
	}
	p.order = order
	if len(said) > 0 {
		p.why = "Redfish: " + strings.Join(said, ", ")
	}
	return p, nil
}

// applyService fills what the node's info leaves to the BMC: the SSH port
// and console command the BMC reports (0, "": none).
func (b *BMC) applyService(tg *sshconsole.Target, port int, command string) {
	if !b.setPort && port > 0 && port < 65536 {
		tg.Port = port
	}
	if !b.setCommand && command != "" {
		tg.Command = command
	}
}

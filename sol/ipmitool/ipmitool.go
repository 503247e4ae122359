// Package ipmitool is obmd's fallback BMC driver: every power, boot-device
// and console operation runs the ipmitool binary.
//
// It is for BMCs that the native driver (sol/ipmi) cannot reach.
//
// Each operation is one short-lived `ipmitool -I lanplus -C N -H ... -E ...`
// child (N: the node's pinned cipher suite, else the one that worked last,
// else each of Config.Options.CipherOrder in turn) with the BMC password only in its environment (IPMI_PASSWORD, -E),
// never in argv, and no other variable of obmd's environment. A console is a
// long-lived `ipmitool sol activate` under a pseudo-terminal (ipmitool reads
// keystrokes from a tty only); its escape sequences are neutralised so that
// no viewer can end or control the shared link (see encoder).
//
// A console's lifetime: OpenConsole waits for ipmitool's "SOL Session
// operational" banner (ipmitool's "payload already active" message becomes
// sol.ErrPayloadActive; "SOL payload disabled" makes it switch SOL on, as
// Config.Options.SOLEnable allows, and try again). Read strips ipmitool's
// own lines and, after Config.Keepalive of silence, probes the BMC with an RMCP ping so that a
// dead BMC ends the console in seconds rather than ipmitool's ~100 s.
// ipmitool runs with `usesolkeepalive`, which makes it notice within ~25 s
// that another session took the payload (with its default keepalive it
// never does). Close sends ipmitool's terminate command when that is safe,
// else kills it and runs `sol deactivate`.
//
// Against ipmi_sim, the first bytes typed in a new session can be lost:
// ipmi_sim keeps the last input packet's sequence number across sessions
// and ipmitool always starts at 1 (see TestSimDropsFirstPacket). Real BMCs
// reset it; the native driver works around it, this one cannot.
package ipmitool

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unicode"

	"github.com/sirupsen/logrus"

	"github.com/obmd/obmd/sol"
)

// Defaults for the zero fields of Config.
const (
	DefaultPath             = "ipmitool"
	DefaultCallTimeout      = 15 * time.Second
	DefaultEscape           = '~'
	DefaultKeepalive        = 10 * time.Second
	DefaultKeepaliveTimeout = 3 * time.Second
	DefaultCloseTimeout     = 3 * time.Second
	DefaultProbeAfter       = time.Second
	defaultInterface        = "lanplus"
	defaultPort             = 623
)

// Config tunes the driver (the YAML section ipmitool; Escape is not a
// setting: whatever it is, viewers cannot trigger it). The zero value is
// usable.
type Config struct {
	// Path is the ipmitool binary (default "ipmitool", looked up in PATH).
	Path string `yaml:"path"`
	// CallTimeout bounds one ipmitool invocation, and the activation of a
	// console (default 15 s). A caller's shorter ctx deadline wins.
	CallTimeout time.Duration `yaml:"call_timeout"`
	// Escape is ipmitool's SOL escape character (-e; default '~'). Whatever
	// it is, viewers' input can never trigger an ipmitool escape. It must not
	// be CR, LF, NUL or one of ipmitool's escape commands (. B ? ^Z ^X).
	Escape byte `yaml:"-"`
	// Keepalive is how long a console may stay silent before Read probes
	// the BMC (RMCP presence ping, then `power status` if the BMC never
	// answers pings). Default 10 s; negative disables the probe.
	Keepalive time.Duration `yaml:"keepalive"`
	// KeepaliveTimeout bounds each probe step (default 3 s). A dead BMC
	// makes Read fail within Keepalive + 2*KeepaliveTimeout.
	KeepaliveTimeout time.Duration `yaml:"keepalive_timeout"`
	// CloseTimeout bounds how long Close waits for ipmitool to leave after
	// the terminate escape, and the `sol deactivate` that follows when
	// needed (default 3 s each).
	CloseTimeout time.Duration `yaml:"close_timeout"`
	// GetDeviceIDKeepalive makes ipmitool keep the session alive with Get
	// Device ID requests (its default) instead of empty SOL packets
	// (`sol activate usesolkeepalive`, our default). SOL packets let
	// ipmitool notice within ~25 s that someone else deactivated the
	// payload, which Get Device ID never does; set this only for a BMC
	// that rejects empty SOL packets.
	GetDeviceIDKeepalive bool `yaml:"get_device_id_keepalive"`
	// ProbeAfter is how long an invocation (or a console's activation) may
	// run before the driver pings the BMC beside it (RMCP presence ping):
	// a closed port then fails the call at once, and a failure says whether
	// the BMC was there (default 1 s; negative: no probe).
	ProbeAfter time.Duration `yaml:"probe_after"`
	// Options are what both IPMI drivers share: the cipher suites tried for
	// a node that pins none (-C) and the memory of the one that worked, what
	// to do when SOL is off on the BMC (sol_enable), and its report. Not a
	// section of its own: the wiring sets it from ipmi_options.
	Options sol.IPMIOptions `yaml:"-"`
}

// BMC is one node's BMC reached through ipmitool. It implements sol.BMC and
// is safe for concurrent use; it holds no process between calls.
type BMC struct {
	label  string
	info   sol.Info
	cfg    Config
	iface  string
	cipher int // the suite the node's info pins; -1: negotiate (Config.Options)
	port   int
	opts   sol.IPMIOptions
	log    logrus.FieldLogger
}

var _ sol.BMC = (*BMC)(nil)

// New validates info and cfg and returns the driver for the node label. It
// runs nothing.
func New(label string, info sol.Info, cfg Config, log logrus.FieldLogger) (*BMC, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, fmt.Errorf("new ipmitool driver for %s: %w", label, err)
	}
	b := &BMC{label: label, info: info, cfg: cfg, iface: info.Interface, port: info.Port}
	if err := b.validate(); err != nil {
		return nil, fmt.Errorf("new ipmitool driver for %s: %w", label, err)
	}
	opts, err := cfg.Options.WithDefaults(validSuite)
	if err != nil {
		return nil, fmt.Errorf("new ipmitool driver for %s: %w", label, err)
	}
	b.opts = opts
	if log == nil {
		l := logrus.New()
		l.Out = io.Discard
		log = l
	}
	b.log = log.WithFields(logrus.Fields{"node": label, "driver": "ipmitool"})
	return b, nil
}

// WithDefaults returns c with its unset fields at their defaults, or an
// error for an escape character that cannot be neutralised.
func (c Config) WithDefaults() (Config, error) {
	err := c.setDefaults()
	return c, err
}

func (c *Config) setDefaults() error {
	if c.Path == "" {
		c.Path = DefaultPath
	}
	if c.CallTimeout <= 0 {
		c.CallTimeout = DefaultCallTimeout
	}
	if c.Escape == 0 {
		c.Escape = DefaultEscape
	}
	switch c.Escape {
	case '\r', '\n', '.', 'B', '?', 'Z' - 64, 'X' - 64:
		// ipmitool checks these commands before "escape typed twice", so a
		// doubled escape would run the command instead of sending itself.
		return fmt.Errorf("escape character %q cannot be neutralised", c.Escape)
	}
	if c.Keepalive == 0 {
		c.Keepalive = DefaultKeepalive
	}
	if c.KeepaliveTimeout <= 0 {
		c.KeepaliveTimeout = DefaultKeepaliveTimeout
	}
	if c.CloseTimeout <= 0 {
		c.CloseTimeout = DefaultCloseTimeout
	}
	if c.ProbeAfter == 0 {
		c.ProbeAfter = DefaultProbeAfter
	}
	return nil
}

func (b *BMC) validate() error {
	if b.info.Addr == "" {
		return errors.New("missing BMC address")
	}
	if strings.HasPrefix(b.info.Addr, "-") || strings.IndexFunc(b.info.Addr, badArgRune) >= 0 {
		return fmt.Errorf("bad BMC address %q", b.info.Addr)
	}
	if strings.IndexFunc(b.info.User, func(r rune) bool { return r == 0 }) >= 0 {
		return errors.New("bad BMC user name")
	}
	if strings.IndexByte(b.info.Pass, 0) >= 0 {
		return errors.New("bad BMC password") // never print it
	}
	if b.port == 0 {
		b.port = defaultPort
	}
	if b.port < 1 || b.port > 65535 {
		return fmt.Errorf("bad BMC port %d", b.info.Port)
	}
	switch b.iface {
	case "":
		b.iface = defaultInterface
	case "lan", "lanplus":
	default:
		return fmt.Errorf("unsupported ipmitool interface %q (want lan or lanplus)", b.iface)
	}
	b.cipher = -1
	if b.info.Cipher != nil && *b.info.Cipher != -1 {
		if !validSuite(*b.info.Cipher) {
			return fmt.Errorf("bad cipher suite %d", *b.info.Cipher)
		}
		b.cipher = *b.info.Cipher
	}
	return nil
}

// validSuite: ipmitool takes any suite number and asks the BMC for it.
func validSuite(c int) bool { return c >= 0 && c <= 255 }

func badArgRune(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }

// args is the full argv (after the program name) for one invocation with
// cipher suite suite (lanplus only). The password is never part of it: -E
// reads IPMI_PASSWORD from the environment.
func (b *BMC) args(suite int, cmd ...string) []string {
	a := []string{"-I", b.iface}
	if b.iface == "lanplus" {
		a = append(a, "-C", strconv.Itoa(suite))
	}
	a = append(a, "-H", b.info.Addr, "-p", strconv.Itoa(b.port))
	if b.info.User != "" {
		a = append(a, "-U", b.info.User)
	}
	a = append(a, "-E", "-e", string([]byte{b.cfg.Escape}))
	return append(a, cmd...)
}

// env is the child's whole environment: nothing of obmd's own (which may
// hold secrets such as a database DSN) is inherited.
func (b *BMC) env() []string {
	return []string{
		"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
		"LC_ALL=C",
		"IPMI_PASSWORD=" + b.info.Pass,
	}
}

// toolError is a failed ipmitool run: the first line of its stderr (safe to
// show: ipmitool never prints the password) and how it ended.
type toolError struct {
	line string
	err  error
}

func (e *toolError) Error() string {
	if e.line == "" {
		return "ipmitool: " + e.err.Error()
	}
	return fmt.Sprintf("ipmitool: %s (%v)", e.line, e.err)
}

func (e *toolError) Unwrap() error { return e.err }

// maxOutput caps what run keeps of a child's stdout and stderr.
const maxOutput = 64 << 10

// run executes one ipmitool command with the node's cipher suite (see
// withSuite) and returns its stdout.
func (b *BMC) run(ctx context.Context, cmd ...string) ([]byte, error) {
	var out []byte
	_, err := b.withSuite(ctx, func(ctx context.Context, suite int) error {
		var err error
		out, err = b.runSuite(ctx, suite, cmd...)
		return err
	})
	return out, err
}

// withSuite runs attempt with the node's cipher suite: the pinned one, else
// the one remembered for this BMC, else each of Options.CipherOrder in turn
// (sol.IPMIOptions.Negotiate); the first choice for the node is logged. It
// returns the suite of the last attempt. The lan interface has no suites.
func (b *BMC) withSuite(ctx context.Context, attempt func(ctx context.Context, suite int) error) (int, error) {
	if b.iface != "lanplus" {
		return -1, attempt(ctx, -1)
	}
	suite, chosen, err := b.opts.Negotiate(ctx, sol.Negotiation{Label: b.label, BMC: b.endpoint(), Pinned: b.cipher}, attempt)
	if chosen {
		b.log.WithField("cipher", suite).Info("ipmitool_cipher_selected")
	}
	return suite, err
}

// endpoint names the BMC for the cipher memory and in errors.
func (b *BMC) endpoint() string { return net.JoinHostPort(b.info.Addr, strconv.Itoa(b.port)) }

// runSuite executes one ipmitool command with cipher suite suite and
// returns its stdout. The child runs in its own process group, killed as a
// whole when ctx ends, CallTimeout passes or the probe finds the BMC's port
// closed, and is always reaped before runSuite returns. A failure is a
// *sol.Error (failure).
func (b *BMC) runSuite(ctx context.Context, suite int, cmd ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, b.cfg.CallTimeout)
	defer cancel()
	cctx, abort := context.WithCancelCause(ctx)
	defer abort(nil)
	c := exec.CommandContext(cctx, b.cfg.Path, b.args(suite, cmd...)...)
	c.Env = b.env()
	c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	c.Cancel = func() error { return killGroup(c) }
	c.WaitDelay = time.Second // bound the wait for output pipes after a kill
	var stdout, stderr capped
	c.Stdout, c.Stderr = &stdout, &stderr
	stop := b.watch(cctx, abort)
	err := c.Run()
	probe := stop()
	if err != nil {
		if cctx.Err() != nil {
			err = context.Cause(cctx)
		}
		b.log.WithError(err).WithField("stderr", stderr.String()).Debug("ipmitool_failed")
		return stdout.Bytes(), b.failure(suite, ctx.Err() != nil, probe, &toolError{line: firstLine(stderr.Bytes()), err: err}, stderr.Bytes())
	}
	return stdout.Bytes(), nil
}

// failure classifies a failed ipmitool run (or console activation) with
// cipher suite suite and wraps it with the BMC's address, for the log.
// stderr is all ipmitool printed; timedOut says a deadline ended it; probe
// is what watch found. ipmitool prints the same "Unable to establish"
// session error when the BMC refuses the password and when it never
// answered: only the BMC's silence tells the two apart, and ipmitool ends
// this way before its deadline only when the BMC answered. A refused cipher
// suite is told by the Open Session answer ipmitool prints.
func (b *BMC) failure(suite int, timedOut bool, probe probeResult, err error, stderr []byte) *sol.Error {
	e := &sol.Error{Fault: sol.FaultUnknown}
	line := firstLine(stderr)
	noSession := bytes.Contains(stderr, []byte("Unable to establish"))
	switch {
	case probe == probeRefused, strings.HasPrefix(line, "Address lookup for"):
		e.Fault = sol.FaultUnreachable
	case timedOut, noSession && probe == probeSilent:
		e.Fault = sol.FaultNoAnswer
	case noSession && cipherRefusal(stderr):
		e.Fault, e.Suites = sol.FaultCipher, []int{suite}
	case noSession:
		e.Fault = sol.FaultCredentials
	case line != "":
		e.Fault = sol.FaultRejected
	}
	what := "BMC " + b.endpoint()
	if suite >= 0 {
		what += fmt.Sprintf(" (cipher suite %d)", suite)
	}
	e.Err = fmt.Errorf("%s: %w", what, err)
	return e
}

// cipherRefusal reports whether ipmitool printed an Open Session answer that
// refuses the proposed algorithms ("invalid authentication algorithm", "no
// matching cipher suite", ...: IPMI v2.0 table 13-15).
func cipherRefusal(stderr []byte) bool {
	for _, l := range strings.Split(string(stderr), "\n") {
		if strings.Contains(l, "open session response") &&
			(strings.Contains(l, "algorithm") || strings.Contains(l, "cipher suite") || strings.Contains(l, "no matching")) {
			return true
		}
	}
	return false
}

// killGroup kills c's whole process group (c was started with Setpgid, so
// the group id is its pid). It first checks through the process handle
// (a pidfd on Linux) that the child is not reaped yet, so that a recycled
// pid is never hit.
func killGroup(c *exec.Cmd) error {
	if c.Process == nil {
		return nil
	}
	if err := c.Process.Signal(syscall.Signal(0)); err != nil {
		return err // os.ErrProcessDone: already waited for
	}
	return syscall.Kill(-c.Process.Pid, syscall.SIGKILL)
}

// capped is a bytes.Buffer that silently drops what exceeds maxOutput.
type capped struct{ bytes.Buffer }

func (c *capped) Write(p []byte) (int, error) {
	if room := maxOutput - c.Len(); room < len(p) {
		if room > 0 {
			c.Buffer.Write(p[:room])
		}
		return len(p), nil
	}
	return c.Buffer.Write(p)
}

// firstLine returns the first non-empty line of b, printable and short.
func firstLine(b []byte) string {
	for _, l := range strings.Split(string(b), "\n") {
		l = strings.TrimSpace(strings.Map(func(r rune) rune {
			if unicode.IsPrint(r) {
				return r
			}
			return -1
		}, l))
		if l != "" {
			if len(l) > 200 {
				l = l[:200]
			}
			return l
		}
	}
	return ""
}

// PowerStatus returns sol.PowerOn or sol.PowerOff.
func (b *BMC) PowerStatus(ctx context.Context) (string, error) {
	out, err := b.run(ctx, "power", "status")
	if err != nil {
		return "", err
	}
	switch s := strings.TrimSpace(string(out)); s {
	case "Chassis Power is on":
		return sol.PowerOn, nil
	case "Chassis Power is off":
		return sol.PowerOff, nil
	default:
		return "", fmt.Errorf("unexpected ipmitool output %q", firstLine(out))
	}
}

// PowerOn turns the node on.
func (b *BMC) PowerOn(ctx context.Context) error {
	return b.power(ctx, "on")
}

// PowerOff cuts power, or asks the OS to shut down (ACPI soft off) when
// soft is true.
func (b *BMC) PowerOff(ctx context.Context, soft bool) error {
	if soft {
		return b.power(ctx, "soft")
	}
	return b.power(ctx, "off")
}

// PowerCycle turns power off then on again.
func (b *BMC) PowerCycle(ctx context.Context) error {
	return b.power(ctx, "cycle")
}

// PowerReset is a hard reset.
func (b *BMC) PowerReset(ctx context.Context) error {
	return b.power(ctx, "reset")
}

func (b *BMC) power(ctx context.Context, op string) error {
	if _, err := b.run(ctx, "power", op); err != nil {
		return err // the caller names the operation and the node
	}
	return nil
}

// bootDevices maps obmd's boot device names to ipmitool's `chassis bootdev`.
var bootDevices = map[string]string{
	sol.BootPXE:   "pxe",
	sol.BootDisk:  "disk",
	sol.BootBIOS:  "bios",
	sol.BootCDROM: "cdrom",
	sol.BootNone:  "none",
}

// SetBootDevice selects the next boot device, or every boot's when
// persistent. An unknown device is sol.ErrBadBootDevice and runs nothing.
func (b *BMC) SetBootDevice(ctx context.Context, dev string, persistent bool) error {
	d, ok := bootDevices[dev]
	if !ok {
		return sol.BadBootDevice(dev, sol.BootDevices()...)
	}
	cmd := []string{"chassis", "bootdev", d}
	if persistent {
		cmd = append(cmd, "options=persistent")
	}
	// ipmitool also prints "Set Chassis Boot Parameter 4 failed" on BMCs
	// without boot-info acknowledge (ipmi_sim) yet exits 0: the exit code
	// is what counts.
	if _, err := b.run(ctx, cmd...); err != nil {
		return err // the caller names the operation and the node
	}
	return nil
}

// DeactivateConsole frees a SOL payload left active by another session
// (`sol deactivate`). A payload that is not active is not an error.
//
// It deactivates whoever holds the payload, including a live viewer on
// another obmd: callers do it only after OpenConsole reported
// sol.ErrPayloadActive.
func (b *BMC) DeactivateConsole(ctx context.Context) error {
	if err := b.deactivate(ctx); err != nil {
		return fmt.Errorf("deactivate SOL on %s: %w", b.label, err)
	}
	return nil
}

func (b *BMC) deactivate(ctx context.Context) error {
	_, err := b.run(ctx, "sol", "deactivate")
	var te *toolError
	if errors.As(err, &te) && strings.Contains(te.line, "already de-activated") {
		return nil
	}
	return err
}

// Package ipmi is the native IPMI v2.0 (RMCP+, "lanplus") BMC driver, built
// on github.com/bougou/go-ipmi.
//
// It runs power and boot-device operations over short RMCP+ sessions, the
// last one kept warm for the node's next status or boot-device call
// (Sessions), and a serial-over-LAN console with its own session whose input
// is batched into full SOL packets.
//
// go-ipmi does the session work (RAKP, keys, encryption, IPMI commands); this
// package owns the UDP socket (demuxConn) and runs the SOL packet protocol
// itself (IPMI v2.0 section 15): sequence numbers, acknowledgements and
// accepted-character counts, retransmission, keepalive probes.
package ipmi

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strconv"
	"time"

	"github.com/bougou/go-ipmi/pkg/client"
	"github.com/bougou/go-ipmi/pkg/command/chassis"
	"github.com/bougou/go-ipmi/pkg/types"
	"github.com/sirupsen/logrus"

	"github.com/obmd/obmd/sol"
)

// Config tunes the driver (the YAML section ipmi). Zero values take the
// defaults.
type Config struct {
	// CallTimeout bounds one operation: a power or boot-device operation
	// (connect, command, close), OpenConsole, DeactivateConsole, and each
	// IPMI exchange inside a console session. Default 10 s.
	CallTimeout time.Duration `yaml:"call_timeout"`
	// Keepalive is how long an open console may receive nothing before it
	// probes the BMC (and checks that the SOL payload is still its own).
	// Default 5 s.
	Keepalive time.Duration `yaml:"keepalive"`
	// AttemptTimeout is how long to wait for one IPMI response before
	// resending the request (within CallTimeout). Default 1 s, as ipmitool.
	AttemptTimeout time.Duration `yaml:"attempt_timeout"`
	// Retransmit is how long to wait for the BMC to acknowledge a SOL packet
	// before resending it; after 6 resends the console fails. Default 500 ms.
	Retransmit time.Duration `yaml:"retransmit"`
	// SessionLinger is how long the session of a finished power or
	// boot-device call stays open for the node's next power-status or
	// boot-device call (Sessions), at most 15 s after it opened. Default
	// 10 s; negative: none (every call opens and closes its own session).
	SessionLinger time.Duration `yaml:"session_linger"`
	// Sessions is the pool those sessions wait in, shared by the drivers of
	// every node; nil keeps none. Not a setting: the wiring creates it.
	Sessions *Sessions `yaml:"-"`
	// Options are what both IPMI drivers share: the cipher suites tried for
	// a node that pins none and the memory of the one that worked, what to
	// do when SOL is off on the BMC (sol_enable), and its report. Not a
	// section of its own: the wiring sets it from ipmi_options.
	Options sol.IPMIOptions `yaml:"-"`
}

// WithDefaults returns c with its unset fields at their defaults.
func (c Config) WithDefaults() Config {
	if c.CallTimeout <= 0 {
		c.CallTimeout = DefaultCallTimeout
	}
	if c.Keepalive <= 0 {
		c.Keepalive = DefaultKeepalive
	}
	if c.AttemptTimeout <= 0 {
		c.AttemptTimeout = DefaultAttemptTimeout
	}
	if c.Retransmit <= 0 {
		c.Retransmit = DefaultRetransmit
	}
	if c.SessionLinger == 0 {
		c.SessionLinger = DefaultSessionLinger
	}
	return c
}

// Defaults for Config.
const (
	DefaultCallTimeout    = 10 * time.Second
	DefaultKeepalive      = 5 * time.Second
	DefaultAttemptTimeout = time.Second
	DefaultRetransmit     = 500 * time.Millisecond
	DefaultSessionLinger  = 10 * time.Second
	// DefaultPort is the RMCP+ UDP port.
	DefaultPort = 623
)

// lanRetries is how many times go-ipmi resends a request that got no answer
// (ipmitool's lanplus default). The operation's context bounds the total.
const lanRetries = 4

// BMC is one node's BMC reached over RMCP+. It is safe for concurrent use:
// every operation runs on a session of its own (a new one, or one kept in
// Config.Sessions that no other operation holds).
type BMC struct {
	label  string
	addr   string // host name or IP address
	port   int
	user   string
	pass   string // never logged, never in an error
	cipher int    // the suite the node's info pins; -1: negotiate (Config.Options)
	cfg    Config
	opts   sol.IPMIOptions
	log    logrus.FieldLogger

	// noOwnerInfo makes consoles behave as with a BMC whose Get Payload
	// Instance Info is useless (tests of the fallback probe).
	noOwnerInfo bool
}

var _ sol.BMC = (*BMC)(nil)

// New validates info (Check) and returns the driver for the node label. It
// does no I/O. Port 0 means 623; a nil or -1 Cipher means the first of
// Config.Options.CipherOrder that the BMC accepts.
func New(label string, info sol.Info, cfg Config, log logrus.FieldLogger) (*BMC, error) {
	if err := Check(info); err != nil {
		return nil, fmt.Errorf("new IPMI driver: %w", err)
	}
	port := info.Port
	if port == 0 {
		port = DefaultPort
	}
	cipher := -1
	if info.Cipher != nil && *info.Cipher != -1 {
		cipher = *info.Cipher // supported: Check
	}
	opts, err := cfg.Options.WithDefaults(supportedCipher)
	if err != nil {
		return nil, fmt.Errorf("new IPMI driver: %w", err)
	}
	cfg = cfg.WithDefaults()
	if log == nil {
		return nil, errors.New("new IPMI driver: logger is required")
	}
	return &BMC{
		label:  label,
		addr:   info.Addr,
		port:   port,
		user:   info.User,
		pass:   info.Pass,
		cipher: cipher,
		cfg:    cfg,
		opts:   opts,
		log:    log.WithFields(logrus.Fields{"node": label, "driver": "ipmi"}),
	}, nil
}

// supportedCipher: the suites go-ipmi implements (0-3 and 6-8, 11-12, 15-17
// use algorithms it knows; the RC4 ones are left out).
func supportedCipher(c int) bool {
	switch c {
	case 0, 1, 2, 3, 6, 7, 8, 11, 12, 15, 16, 17:
		return true
	}
	return false
}

// aesCipher reports whether the suite encrypts with AES-CBC-128.
func aesCipher(c int) bool { return c == 3 || c == 8 || c == 12 || c == 17 }

// PowerStatus returns sol.PowerOn or sol.PowerOff.
func (b *BMC) PowerStatus(ctx context.Context) (string, error) {
	state := sol.PowerOff
	err := b.do(ctx, "power status", keptSession, func(ctx context.Context, c *client.Client) error {
		st, err := c.GetChassisStatus(ctx)
		if err != nil {
			return err
		}
		if st.PowerIsOn {
			state = sol.PowerOn
		}
		return nil
	})
	return state, err
}

// PowerOn powers the node up.
func (b *BMC) PowerOn(ctx context.Context) error {
	return b.chassis(ctx, "power on", chassis.ChassisControlPowerUp)
}

// PowerOff powers the node down, or asks its OS for an ACPI soft shutdown
// when soft is true.
func (b *BMC) PowerOff(ctx context.Context, soft bool) error {
	if soft {
		return b.chassis(ctx, "soft power off", chassis.ChassisControlSoftShutdown)
	}
	return b.chassis(ctx, "power off", chassis.ChassisControlPowerDown)
}

// PowerCycle turns the node off and on again. A BMC that refuses to cycle a
// machine that is off (completion code 0xD5) gets a plain power on instead.
func (b *BMC) PowerCycle(ctx context.Context) error {
	return b.do(ctx, "power cycle", freshSession, func(ctx context.Context, c *client.Client) error {
		_, err := c.ChassisControl(ctx, chassis.ChassisControlPowerCycle)
		if cc, ok := completionCode(err); !ok || cc != 0xd5 {
			return err
		}
		st, serr := c.GetChassisStatus(ctx)
		if serr != nil || st.PowerIsOn {
			return err
		}
		_, err = c.ChassisControl(ctx, chassis.ChassisControlPowerUp)
		return err
	})
}

// PowerReset hard-resets the node.
func (b *BMC) PowerReset(ctx context.Context) error {
	return b.chassis(ctx, "power reset", chassis.ChassisControlHardReset)
}

func (b *BMC) chassis(ctx context.Context, op string, ctl chassis.ChassisControl) error {
	return b.do(ctx, op, freshSession, func(ctx context.Context, c *client.Client) error {
		_, err := c.ChassisControl(ctx, ctl)
		return err
	})
}

// bootDevices maps obmd's names to IPMI boot device selectors.
var bootDevices = map[string]types.BootDeviceSelector{
	sol.BootPXE:   types.BootDeviceSelectorForcePXE,
	sol.BootDisk:  types.BootDeviceSelectorForceHardDrive,
	sol.BootBIOS:  types.BootDeviceSelectorForceBIOSSetup,
	sol.BootCDROM: types.BootDeviceSelectorForceCDROM,
	sol.BootNone:  types.BootDeviceSelectorNoOverride,
}

// SetBootDevice sets the boot flags for the next boot (every boot if
// persistent). Unknown devices are sol.ErrBadBootDevice, before any I/O.
func (b *BMC) SetBootDevice(ctx context.Context, dev string, persistent bool) error {
	sel, ok := bootDevices[dev]
	if !ok {
		return sol.BadBootDevice(dev, sol.BootDevices()...)
	}
	return b.do(ctx, "set boot device", keptSession, func(ctx context.Context, c *client.Client) error {
		return c.SetBootDevice(ctx, sel, types.BIOSBootTypeLegacy, persistent)
	})
}

// do runs fn in a session bounded by ctx and CallTimeout: with use
// keptSession on the node's kept one if there is one (Sessions), else on a
// new one. Afterwards the session is kept for the next call, or closed. A
// failure is a *sol.Error (classify) whose detail names the BMC's address
// and what failed at the IPMI level; the caller, which asked for op on
// this node, names both (commands: "power on node-17: ...").
func (b *BMC) do(ctx context.Context, op string, use sessionUse, fn func(context.Context, *client.Client) error) error {
	ctx, cancel := context.WithTimeout(ctx, b.cfg.CallTimeout)
	defer cancel()
	start := time.Now()
	if use == keptSession {
		done, err := b.onKept(ctx, fn)
		if done {
			if err == nil {
				b.log.WithFields(logrus.Fields{"op": op, "took_ms": time.Since(start).Milliseconds(), "kept_session": true}).Debug("ipmi_op_done")
			}
			return err
		}
	}
	s, err := b.dial(ctx)
	if err != nil {
		return err
	}
	if err = fn(ctx, s.c); err != nil {
		b.closeSession(s)
		return b.bmcError(ctx, s.d, true, "IPMI request to", err)
	}
	b.keep(s)
	b.log.WithFields(logrus.Fields{"op": op, "took_ms": time.Since(start).Milliseconds()}).Debug("ipmi_op_done")
	return nil
}

// session is one established RMCP+ session and the socket it runs on.
type session struct {
	c      *client.Client
	d      *dialer
	suite  int       // the cipher suite it runs
	opened time.Time // when it was established
}

// dial opens a session with the node's cipher suite (sol.IPMIOptions.Negotiate:
// the pinned one, else the one remembered for this BMC, else each of
// CipherOrder in turn), all under ctx. The first choice of a suite for the
// node is logged.
func (b *BMC) dial(ctx context.Context) (*session, error) {
	return b.dialNoting(ctx, nil)
}

// dialNoting is dial, telling note about every suite it tried and how that
// went (for doctor).
func (b *BMC) dialNoting(ctx context.Context, note func(suite int, err error)) (*session, error) {
	var s *session
	suite, chosen, err := b.opts.Negotiate(ctx, sol.Negotiation{Label: b.label, BMC: b.endpoint(), Pinned: b.cipher},
		func(ctx context.Context, suite int) error {
			var err error
			s, err = b.dialSuite(ctx, suite)
			if note != nil {
				note(suite, err)
			}
			return err
		})
	if err != nil {
		return nil, err
	}
	if chosen {
		b.log.WithField("cipher", suite).Info("ipmi_cipher_selected")
	}
	return s, nil
}

// endpoint names the BMC for the cipher memory.
func (b *BMC) endpoint() string { return net.JoinHostPort(b.addr, strconv.Itoa(b.port)) }

// dialSuite resolves the BMC's address and opens a session with suite.
func (b *BMC) dialSuite(ctx context.Context, suite int) (*session, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("connect to BMC: %w", err)
	}
	ip, err := resolve(ctx, b.addr)
	if err != nil {
		return nil, sol.NewError(sol.FaultUnreachable, fmt.Errorf("connect to BMC: %w", err))
	}
	d := &dialer{raddr: net.UDPAddrFromAddrPort(netip.AddrPortFrom(ip, uint16(b.port))), aes: aesCipher(suite)}
	c, err := client.NewClient(ip.String(), b.port, b.user, b.pass)
	if err != nil {
		return nil, fmt.Errorf("connect to BMC: %w", err)
	}
	c.WithCipherSuiteID(types.CipherSuiteID(suite)).
		WithMaxPrivilegeLevel(types.PrivilegeLevelAdministrator).
		WithTimeout(b.cfg.AttemptTimeout).
		WithRetry(lanRetries).
		WithUDPProxy(d)
	if err := c.Connect(ctx); err != nil {
		// The session may be half open at the BMC; it times out there.
		d.close()
		e := b.bmcError(ctx, d, false, fmt.Sprintf("connect with cipher suite %d to", suite), err)
		if e.Fault == sol.FaultCipher {
			e.Suites = []int{suite}
		}
		return nil, e
	}
	return &session{c: c, d: d, suite: suite, opened: time.Now()}, nil
}

// close ends the session politely if ctx allows (Close Session), then
// closes the socket. If ctx is already done it closes the socket first, so
// that no go-ipmi goroutine stays blocked on a read until its deadline.
func (s *session) close(ctx context.Context) {
	if ctx.Err() != nil {
		s.d.close()
	}
	s.c.Close(ctx) // stops go-ipmi's keepalive goroutine; errors do not matter here
	s.d.close()
}

// resolve returns the BMC's IP address; host names are looked up under ctx.
func resolve(ctx context.Context, host string) (netip.Addr, error) {
	if ip, err := netip.ParseAddr(host); err == nil {
		return ip.Unmap(), nil
	}
	ips, err := net.DefaultResolver.LookupNetIP(ctx, "ip", host)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("resolve %s: %w", host, err)
	}
	if len(ips) == 0 {
		return netip.Addr{}, fmt.Errorf("resolve %s: no address", host)
	}
	return ips[0].Unmap(), nil
}

// bmcError classifies err, which ended an exchange with the BMC over d's
// socket (connected: after the session was established), and wraps it with
// what was being done and the BMC's address, for the log.
func (b *BMC) bmcError(ctx context.Context, d *dialer, connected bool, what string, err error) *sol.Error {
	f, cc := classify(ctx, d, connected, err)
	return &sol.Error{Fault: f, Code: cc, Err: fmt.Errorf("%s BMC %s: %w", what, net.JoinHostPort(b.addr, strconv.Itoa(b.port)), err)}
}

// classify tells from what the session's socket saw why an exchange
// failed: a completion code is the BMC rejecting the request; no datagram
// at all is silence or, with ICMP port unreachable, a closed port (or no
// socket: no route); an Open Session answer refusing the algorithms is the
// BMC refusing the cipher suite; other answers and then a failure to
// connect is the BMC refusing obmd's credentials (go-ipmi's errors do not
// keep the RMCP+ status in their chain); after connecting, a port that
// turned unreachable or silence. go-ipmi's message is not parsed.
func classify(ctx context.Context, d *dialer, connected bool, err error) (sol.Fault, uint8) {
	if cc, ok := completionCode(err); ok {
		return sol.FaultRejected, cc
	}
	var c *demuxConn
	if d != nil {
		c = d.get()
	}
	var ne net.Error
	timedOut := ctx.Err() != nil || errors.Is(err, os.ErrDeadlineExceeded) || errors.As(err, &ne) && ne.Timeout()
	switch {
	case c == nil:
		return sol.FaultUnreachable, 0
	case !c.answered.Load() && c.refused.Load():
		return sol.FaultUnreachable, 0
	case !c.answered.Load():
		return sol.FaultNoAnswer, 0
	case !connected && c.cipherRefused.Load():
		return sol.FaultCipher, 0
	case !connected && !timedOut:
		return sol.FaultCredentials, 0
	case c.refused.Load():
		return sol.FaultUnreachable, 0
	case timedOut:
		return sol.FaultNoAnswer, 0
	}
	return sol.FaultUnknown, 0
}

// completionCode extracts the IPMI completion code from a go-ipmi error.
func completionCode(err error) (uint8, bool) {
	if re, ok := types.IsResponseError(err); ok {
		return uint8(re.CompletionCode()), true
	}
	return 0, false
}

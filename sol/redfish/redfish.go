// Package redfish is the Redfish BMC driver, built on
// github.com/stmcginnis/gofish.
//
// It runs power and boot-device operations on one ComputerSystem of a BMC's
// Redfish service over HTTPS, each operation in its own Redfish session that
// it logs out of, waiting (as Ironic does) until the system reports the
// state it asked for. A node's serial console, when its info has "sol"
// details (or console "sol" or "auto"), is IPMI serial-over-LAN on the same
// BMC, through the native IPMI driver (sol/ipmi); a console over the BMC's
// SSH service is sol/transport's, which asks ConsoleServices what the
// system says is enabled.
//
// Failures are *Error values whose Kind is a class callers can branch on
// (ErrUnreachable, ErrAuth, ErrCertificate, ErrSystemMissing, ErrNotAllowed,
// ErrStateTimeout, ErrProtocol, ErrBMC, or the context's error), inside a
// *sol.Error that gives their class as a sol.Fault (what sol.TenantText
// shows a tenant: "the BMC refused obmd's credentials"). Their text names
// no address; the underlying detail (with the BMC's URL) goes to the
// driver's log.
//
// # Semantics
//
//	PowerStatus    the system's PowerState: On and PoweringOn are "on",
//	               Off and PoweringOff "off", Paused "paused"
//	PowerOn        Reset On (ForceOn if only that is offered), then wait for On
//	PowerOff       Reset ForceOff, then wait for Off
//	PowerOff soft  Reset GracefulShutdown; no wait (the OS decides when)
//	PowerCycle     Reset PowerCycle when the system offers it, else ForceOff,
//	               wait for Off, On, wait for On; a system that is off is
//	               powered on
//	PowerReset     Reset ForceRestart, then wait for On
//	SetBootDevice  PATCH Boot: BootSourceOverrideTarget Pxe, Hdd, BiosSetup,
//	               Cd or None, BootSourceOverrideEnabled Once (Continuous when
//	               persistent), then wait until the system reports both
//
// PowerOn and PowerOff on a system already in that state send nothing (some
// BMCs refuse to power on a system that is on), and on a system on its way
// there (PoweringOn, PoweringOff) only wait. A reset type or boot target
// that the system's allowable values leave out is ErrNotAllowed before
// anything is sent.
//
// Diagnose (doctor) checks the address, the service root, the login, the
// system and its reset actions, then the console's IPMI steps; it changes
// nothing.
package redfish

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"slices"
	"time"

	"github.com/sirupsen/logrus"
	"github.com/stmcginnis/gofish/schemas"

	"github.com/obmd/obmd/sol"
	"github.com/obmd/obmd/sol/ipmi"
)

// Config tunes the driver (the YAML section redfish). Zero values take the
// defaults.
type Config struct {
	// RequestTimeout bounds each HTTP request (connect, TLS handshake,
	// request, whole response). Default 10 s.
	RequestTimeout time.Duration `yaml:"request_timeout"`
	// PollInterval is the wait between reads of the system while waiting for
	// a power state or boot override. Default 1 s.
	PollInterval time.Duration `yaml:"poll_interval"`
	// StateTimeout bounds each wait for a state, within the operation's
	// context (which usually ends first: commands bounds a whole call).
	// Default 60 s, Ironic's power_state_change_timeout.
	StateTimeout time.Duration `yaml:"state_timeout"`
	// LogoutTimeout bounds the session logout at the end of every operation.
	// The logout runs even when the operation's context has ended, so that
	// no session is left on the BMC: an operation whose context ends while
	// it holds a session returns up to LogoutTimeout later. Default 5 s.
	LogoutTimeout time.Duration `yaml:"logout_timeout"`
	// RootCAs verifies BMC certificates; nil means the system's roots.
	RootCAs *x509.CertPool `yaml:"-"`
	// CAFile, if set, is a PEM file of the certificates that sign the BMCs'
	// certificates, verified instead of the system's roots (LoadCAs reads it
	// into RootCAs, at start).
	CAFile string `yaml:"ca_file"`
	// IPMI configures the serial console's IPMI driver.
	IPMI ipmi.Config `yaml:"-"`
}

// LoadCAs reads CAFile, if set, into RootCAs. It is the driver's only I/O
// outside an operation: the wiring calls it once, at start.
func (c *Config) LoadCAs() error {
	if c.CAFile == "" {
		return nil
	}
	pem, err := os.ReadFile(c.CAFile)
	if err != nil {
		return fmt.Errorf("redfish CA file: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return fmt.Errorf("redfish CA file %s: no PEM certificate in it", c.CAFile)
	}
	c.RootCAs = pool
	return nil
}

// WithDefaults returns c with its unset fields at their defaults.
func (c Config) WithDefaults() Config {
	if c.RequestTimeout <= 0 {
		c.RequestTimeout = DefaultRequestTimeout
	}
	if c.PollInterval <= 0 {
		c.PollInterval = DefaultPollInterval
	}
	if c.StateTimeout <= 0 {
		c.StateTimeout = DefaultStateTimeout
	}
	if c.LogoutTimeout <= 0 {
		c.LogoutTimeout = DefaultLogoutTimeout
	}
	return c
}

// Defaults for Config.
const (
	DefaultRequestTimeout = 10 * time.Second
	DefaultPollInterval   = time.Second
	DefaultStateTimeout   = 60 * time.Second
	DefaultLogoutTimeout  = 5 * time.Second
)

// BMC is one node's Redfish BMC. It is safe for concurrent use: every
// operation runs its own session on its own HTTP transport.
type BMC struct {
	label    string
	endpoint string // "https://host:port"; never in an error
	user     string
	pass     string // never logged, never in an error
	system   string // system Id; "" = the only one
	insecure bool
	cfg      Config
	log      logrus.FieldLogger
	host     string    // the BMC's host (name or address)
	console  *ipmi.BMC // nil without a SOL console
}

var _ sol.BMC = (*BMC)(nil)

// New validates info (Check) and returns the driver for the node label. It
// does no I/O.
func New(label string, info Info, cfg Config, log logrus.FieldLogger) (*BMC, error) {
	if err := Check(info); err != nil {
		return nil, fmt.Errorf("new Redfish driver: %w", err)
	}
	if log == nil {
		return nil, errors.New("new Redfish driver: logger is required")
	}
	endpoint, host, _ := parseAddr("addr", info.Addr) // checked above
	system, _ := systemID(info.System)
	cfg = cfg.WithDefaults()
	b := &BMC{
		label:    label,
		endpoint: endpoint,
		user:     info.User,
		pass:     info.Pass,
		system:   system,
		insecure: info.Insecure,
		host:     host,
		cfg:      cfg,
		log:      log.WithFields(logrus.Fields{"node": label, "driver": "redfish"}),
	}
	if info.ipmiConsole() {
		si, err := ipmiInfo(info, host)
		if err != nil {
			return nil, fmt.Errorf("new Redfish driver: %w", err)
		}
		if b.console, err = ipmi.New(label, si, cfg.IPMI, log); err != nil {
			return nil, fmt.Errorf("new Redfish driver: serial console: %w", err)
		}
	}
	return b, nil
}

// PowerStatus returns sol.PowerOn, sol.PowerOff or "paused".
func (b *BMC) PowerStatus(ctx context.Context) (string, error) {
	var state string
	err := b.do(ctx, "power status", func(ctx context.Context, s *session) error {
		var err error
		state, err = powerString(s.sys.PowerState)
		return err
	})
	return state, err
}

// powerString maps a Redfish PowerState to obmd's words, as Ironic does
// (a transition counts as its destination).
func powerString(p schemas.PowerState) (string, error) {
	switch p {
	case schemas.OnPowerState, schemas.PoweringOnPowerState:
		return sol.PowerOn, nil
	case schemas.OffPowerState, schemas.PoweringOffPowerState:
		return sol.PowerOff, nil
	case schemas.PausedPowerState:
		return "paused", nil
	}
	return "", &Error{Step: "read power state", Kind: ErrProtocol, Err: fmt.Errorf("unknown PowerState %q", p)}
}

// PowerOn powers the system on and waits until it reports On.
func (b *BMC) PowerOn(ctx context.Context) error {
	return b.do(ctx, "power on", func(ctx context.Context, s *session) error {
		return s.powerTo(ctx, schemas.OnPowerState)
	})
}

// PowerOff forces the system off and waits until it reports Off; when soft
// is true it asks the OS to shut down (GracefulShutdown) and returns once
// the BMC has accepted that.
func (b *BMC) PowerOff(ctx context.Context, soft bool) error {
	if !soft {
		return b.do(ctx, "power off", func(ctx context.Context, s *session) error {
			return s.powerTo(ctx, schemas.OffPowerState)
		})
	}
	return b.do(ctx, "soft power off", func(ctx context.Context, s *session) error {
		if s.sys.PowerState == schemas.OffPowerState {
			return nil
		}
		return s.reset(ctx, schemas.GracefulShutdownResetType)
	})
}

// PowerCycle turns the system off and on again: the BMC's PowerCycle where
// the system offers it, else ForceOff and On, each awaited. A system that is
// off is powered on.
func (b *BMC) PowerCycle(ctx context.Context) error {
	return b.do(ctx, "power cycle", func(ctx context.Context, s *session) error {
		if s.sys.PowerState == schemas.OffPowerState {
			return s.powerTo(ctx, schemas.OnPowerState)
		}
		if slices.Contains(s.allowed(), schemas.PowerCycleResetType) {
			if err := s.reset(ctx, schemas.PowerCycleResetType); err != nil {
				return err
			}
			return s.waitPower(ctx, schemas.OnPowerState)
		}
		if err := s.powerTo(ctx, schemas.OffPowerState); err != nil {
			return err
		}
		return s.powerTo(ctx, schemas.OnPowerState)
	})
}

// PowerReset hard-resets the system (ForceRestart) and waits until it
// reports On.
func (b *BMC) PowerReset(ctx context.Context) error {
	return b.do(ctx, "power reset", func(ctx context.Context, s *session) error {
		if err := s.reset(ctx, schemas.ForceRestartResetType); err != nil {
			return err
		}
		return s.waitPower(ctx, schemas.OnPowerState)
	})
}

// bootTargets maps obmd's boot devices to Redfish boot sources.
var bootTargets = map[string]schemas.BootSource{
	sol.BootPXE:   schemas.PxeBootSource,
	sol.BootDisk:  schemas.HddBootSource,
	sol.BootBIOS:  schemas.BiosSetupBootSource,
	sol.BootCDROM: schemas.CdBootSource,
	sol.BootNone:  schemas.NoneBootSource,
}

// SetBootDevice sets the boot override for the next boot (every boot if
// persistent) and waits until the system reports it. Unknown devices are
// sol.ErrBadBootDevice, before any I/O.
func (b *BMC) SetBootDevice(ctx context.Context, dev string, persistent bool) error {
	target, ok := bootTargets[dev]
	if !ok {
		return sol.BadBootDevice(dev, sol.BootDevices()...)
	}
	enabled := schemas.OnceBootSourceOverrideEnabled
	if persistent {
		enabled = schemas.ContinuousBootSourceOverrideEnabled
	}
	return b.do(ctx, "set boot device", func(ctx context.Context, s *session) error {
		return s.setBoot(ctx, target, enabled)
	})
}

// do runs fn in a fresh session on the node's system, bounded by ctx, then
// logs out whatever happened. A failure's detail (with the BMC's URL) is
// logged here, because the returned error leaves it out of its text.
func (b *BMC) do(ctx context.Context, op string, fn func(context.Context, *session) error) error {
	start := time.Now()
	s, err := b.open(ctx)
	if err == nil {
		err = fn(ctx, s)
		s.close(ctx)
	}
	if err != nil {
		e := classify(ctx, op, false, err)
		b.log.WithFields(logrus.Fields{"op": op, "step": e.Step, "status": e.Status}).
			WithError(errors.New(e.Detail())).Warn("redfish_op_failed")
		return sol.NewError(e.fault(), e)
	}
	b.log.WithFields(logrus.Fields{"op": op, "took_ms": time.Since(start).Milliseconds()}).Debug("redfish_op_done")
	return nil
}

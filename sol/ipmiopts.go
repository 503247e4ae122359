package sol

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
)

// IPMIOptions is what both IPMI drivers (sol/ipmi, sol/ipmitool) take
// beyond their own tuning: how to choose a cipher suite for a node whose
// info names none, and what to do when serial-over-LAN is switched off on a
// BMC. The composition root fills one and gives the same to both drivers
// (and to sol/redfish's console); the zero value works: suites 17 then 3,
// nothing remembered, SOL switched on when it is off, nobody told.
type IPMIOptions struct {
	// CipherOrder is the cipher suites tried in turn, for a node whose info
	// names none, until one opens a session (default DefaultCipherOrder).
	CipherOrder []int `yaml:"cipher_order"`
	// Ciphers remembers the suite that worked, per node, so that later
	// sessions start with it, and the drivers log a node's choice once
	// (ipmi_cipher_selected). Nil remembers nothing: every session tries
	// CipherOrder from the top, and no choice is logged.
	Ciphers *Ciphers `yaml:"-"`
	// SOLEnable is what a driver does when activating SOL fails because
	// SOL is switched off on the BMC (default SOLEnableAuto).
	SOLEnable SOLEnablePolicy `yaml:"sol_enable"`
	// OnSOLEnable, when set, is told each time a driver switched SOL on at
	// a node's BMC (SOLEnabled says what it changed), so that the caller
	// audits "sol.enable" on the node. It is called by the goroutine that
	// opens the console, after the BMC accepted the change and before the
	// activation is retried, once per console opening that changed
	// something, whether or not the retry then succeeds. ctx is the
	// opening's (OpenConsole's deadline): the hook should finish within
	// it, and must not call back into the driver. The driver logs the
	// change (sol_enabled) whether or not a hook is set.
	OnSOLEnable func(ctx context.Context, e SOLEnabled) `yaml:"-"`
	// ConsoleHeld, when set, reports whether obmd (this replica or another)
	// holds the SOL link of the node label, so that a diagnosis can tell
	// obmd's own active payload from someone else's. It may ask the
	// database (the cluster's SOL lease), within ctx; it must not call
	// back into the driver. Nil: obmd holds none.
	ConsoleHeld func(ctx context.Context, label string) bool `yaml:"-"`
}

// DefaultCipherOrder is the order of cipher suites tried when a node names
// none: 17 (RAKP-HMAC-SHA256, HMAC-SHA256-128, AES-CBC-128), which recent
// BMCs (Lenovo XCC, iDRAC 9) want, then 3 (the SHA-1 suite every IPMI 2.0
// BMC has), as bmclib does.
var DefaultCipherOrder = []int{17, 3}

// SOLEnablePolicy is the config value sol_enable.
type SOLEnablePolicy string

// SOL enable policies.
const (
	// SOLEnableAuto: when SOL is disabled on the BMC, switch it on (and the
	// SOL payload access of obmd's BMC user where the BMC keeps one), report
	// it (OnSOLEnable), log it and activate again.
	SOLEnableAuto SOLEnablePolicy = "auto"
	// SOLEnableNever: leave the BMC as it is; opening the console fails
	// with ErrSOLDisabled.
	SOLEnableNever SOLEnablePolicy = "never"
)

// What SOLEnabled.Changes lists.
const (
	// SOLChangeEnable: the BMC's SOL Enable configuration parameter.
	SOLChangeEnable = "sol_enable"
	// SOLChangeUserAccess: the SOL payload access of obmd's user on the
	// BMC's LAN channel.
	SOLChangeUserAccess = "user_payload_access"
)

// SOLEnabled is what a driver reports after it switched SOL on at a node's
// BMC: the node and what it changed (SOLChangeEnable, SOLChangeUserAccess),
// in the order it changed them. It never holds the BMC's address.
type SOLEnabled struct {
	Node    string
	Changes []string
}

// WithDefaults validates o and fills its defaults. supported reports which
// cipher suites the driver can speak; CipherOrder must hold only those, each
// once.
func (o IPMIOptions) WithDefaults(supported func(int) bool) (IPMIOptions, error) {
	if len(o.CipherOrder) == 0 {
		o.CipherOrder = DefaultCipherOrder
	}
	for i, c := range o.CipherOrder {
		if !supported(c) {
			return o, fmt.Errorf("cipher order: unsupported cipher suite %d", c)
		}
		if slices.Contains(o.CipherOrder[:i], c) {
			return o, fmt.Errorf("cipher order: suite %d listed twice", c)
		}
	}
	o.CipherOrder = slices.Clone(o.CipherOrder)
	switch o.SOLEnable {
	case "":
		o.SOLEnable = SOLEnableAuto
	case SOLEnableAuto, SOLEnableNever:
	default:
		return o, fmt.Errorf("sol_enable %q: want auto or never", o.SOLEnable)
	}
	return o, nil
}

// Held reports whether obmd holds label's SOL link (ConsoleHeld).
func (o IPMIOptions) Held(ctx context.Context, label string) bool {
	return o.ConsoleHeld != nil && o.ConsoleHeld(ctx, label)
}

// Ciphers remembers, per node, the IPMI cipher suite that last opened a
// session with the node's BMC, so that a driver that tries several suites
// (IPMIOptions.CipherOrder) tries them once per BMC rather than once per
// session. Each entry is tied to the BMC it was learnt from (the driver's
// key for it, such as "host:port"): a node re-registered with another BMC
// starts from the top. Safe for concurrent use; the methods of a nil
// *Ciphers remember nothing. The composition root owns one for the daemon
// and calls Forget when a node is deleted.
type Ciphers struct {
	mu sync.Mutex
	m  map[string]cipherEntry // node label -> suite
}

type cipherEntry struct {
	bmc   string
	suite int
}

// NewCiphers returns an empty memory.
func NewCiphers() *Ciphers { return &Ciphers{m: map[string]cipherEntry{}} }

// Suite returns the suite remembered for the node label, whatever BMC it
// was learnt from: what the admin API shows for the node.
func (c *Ciphers) Suite(label string) (int, bool) {
	if c == nil {
		return 0, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.m[label]
	return e.suite, ok
}

// Lookup returns the suite remembered for label if it was learnt from bmc.
func (c *Ciphers) Lookup(label, bmc string) (int, bool) {
	if c == nil {
		return 0, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.m[label]
	return e.suite, ok && e.bmc == bmc
}

// Remember records suite for label and bmc. It reports whether that
// changed what was remembered (so that the caller logs a choice once); a
// nil memory changes nothing.
func (c *Ciphers) Remember(label, bmc string, suite int) bool {
	if c == nil {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	e := cipherEntry{bmc: bmc, suite: suite}
	if c.m[label] == e {
		return false
	}
	c.m[label] = e
	return true
}

// Forget drops what is remembered for label.
func (c *Ciphers) Forget(label string) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.m, label)
}

// Negotiation is one cipher choice of a driver: the node, the driver's key
// for its BMC (Ciphers), and the suite the node's info pins (-1: none).
type Negotiation struct {
	Label  string
	BMC    string
	Pinned int
}

// Negotiate runs attempt with the node's cipher suite: the pinned one; else
// the one remembered for this BMC and, if the BMC refuses it, CipherOrder
// from the top (without it); else CipherOrder. attempt opens a session (or
// runs a command) with one suite and returns a *Error classified by the
// driver; FaultCipher and FaultCredentials mean "refused, try the next
// suite", anything else (no answer, unreachable) ends the negotiation at
// once, since another suite would fare no better. The first suite that
// works is remembered (chosen reports whether that changed the memory, to
// log the choice once); a refused remembered suite is forgotten.
//
// When every suite is refused, the error is the first credentials failure
// (the BMC took the suite and refused obmd's user or password), or else a
// FaultCipher naming every suite tried.
func (o IPMIOptions) Negotiate(ctx context.Context, n Negotiation, attempt func(ctx context.Context, suite int) error) (suite int, chosen bool, err error) {
	if n.Pinned >= 0 {
		return n.Pinned, false, attempt(ctx, n.Pinned)
	}
	order := o.CipherOrder
	if len(order) == 0 {
		order = DefaultCipherOrder
	}
	var failed []attemptErr
	if s, ok := o.Ciphers.Lookup(n.Label, n.BMC); ok {
		err := attempt(ctx, s)
		if err == nil || !Refused(err) {
			return s, false, err
		}
		o.Ciphers.Forget(n.Label)
		failed = append(failed, attemptErr{s, err})
	}
	for _, s := range order {
		if len(failed) > 0 && failed[0].suite == s {
			continue
		}
		if err := ctx.Err(); err != nil && len(failed) > 0 {
			break
		}
		err := attempt(ctx, s)
		if err == nil {
			return s, o.Ciphers.Remember(n.Label, n.BMC, s), nil
		}
		if !Refused(err) {
			return s, false, err
		}
		failed = append(failed, attemptErr{s, err})
	}
	return -1, false, refusedAll(failed)
}

type attemptErr struct {
	suite int
	err   error
}

// Refused reports whether err is a BMC refusing a session: its cipher suite
// (FaultCipher) or obmd's credentials (FaultCredentials).
func Refused(err error) bool {
	var e *Error
	return errors.As(err, &e) && (e.Fault == FaultCipher || e.Fault == FaultCredentials)
}

// refusedAll is the error of a negotiation in which every suite was refused.
func refusedAll(failed []attemptErr) error {
	if len(failed) == 0 {
		return NewError(FaultCipher, errors.New("no cipher suite to try"))
	}
	errs := make([]error, len(failed))
	suites := make([]int, len(failed))
	for i, f := range failed {
		errs[i], suites[i] = f.err, f.suite
	}
	for _, f := range failed {
		var e *Error
		if errors.As(f.err, &e) && e.Fault == FaultCredentials {
			return &Error{Fault: FaultCredentials, Err: errors.Join(errs...)}
		}
	}
	return &Error{Fault: FaultCipher, Suites: suites, Err: errors.Join(errs...)}
}

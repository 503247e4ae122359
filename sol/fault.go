package sol

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Fault says what went wrong with a BMC in terms a tenant may be told: it
// never depends on the BMC's address, user or password. Drivers classify
// their failures with it (Error); TenantText renders it.
type Fault int

// Faults, as drivers classify them.
const (
	// FaultUnknown is any failure a driver could not classify.
	FaultUnknown Fault = iota
	// FaultCredentials: the BMC answered but would not open a session with
	// obmd's user name and password.
	FaultCredentials
	// FaultNoAnswer: nothing came back from the BMC in time.
	FaultNoAnswer
	// FaultUnreachable: the BMC cannot be reached at all: its IPMI port is
	// closed (ICMP port unreachable), there is no route to it, or its name
	// does not resolve.
	FaultUnreachable
	// FaultRejected: the BMC answered a request with an error (an IPMI
	// completion code, a Redfish action the system does not allow, ...).
	FaultRejected
	// FaultCertificate: the BMC's TLS certificate did not verify (Redfish);
	// nothing was sent to it.
	FaultCertificate
	// FaultNotReached: the BMC took the request, but the node did not reach
	// the state asked for in time (Redfish waits for it).
	FaultNotReached
	// FaultCipher: the BMC answered but refused every IPMI cipher suite
	// obmd proposed (Error.Suites names them), before any credential was
	// checked.
	FaultCipher
	// FaultHostKey: the BMC's SSH service showed a host key other than the
	// one pinned for the node; nothing was sent to it.
	FaultHostKey
)

// String is the fault as a tenant reads it.
func (f Fault) String() string {
	switch f {
	case FaultCredentials:
		return "the BMC refused obmd's credentials"
	case FaultNoAnswer:
		return "the BMC did not answer"
	case FaultUnreachable:
		return "the BMC is unreachable"
	case FaultRejected:
		return "the BMC rejected the request"
	case FaultCertificate:
		return "the BMC's TLS certificate is not trusted"
	case FaultNotReached:
		return "the node did not reach the requested state in time"
	case FaultCipher:
		return "the BMC refused the IPMI cipher suite"
	case FaultHostKey:
		return "the BMC's SSH host key does not match the pinned one"
	}
	return "the BMC operation failed"
}

// Error is a BMC failure as a driver classifies it. Err is the whole
// detail (the BMC's address, the library's or ipmitool's message): it is
// what Error returns, for obmd's log and its administrators; a tenant is
// shown TenantText, which is built from Fault and Code alone.
type Error struct {
	Fault Fault
	// Code is the IPMI completion code of a FaultRejected (0: unknown).
	Code uint8
	// Suites are the cipher suites a FaultCipher names, in the order they
	// were proposed.
	Suites []int
	Err    error
}

// NewError classifies err as f.
func NewError(f Fault, err error) *Error { return &Error{Fault: f, Err: err} }

// Error is the detail, prefixed with the classification.
func (e *Error) Error() string { return e.tenantText() + ": " + e.Err.Error() }

// Unwrap returns the detail.
func (e *Error) Unwrap() error { return e.Err }

func (e *Error) tenantText() string {
	switch {
	case e.Fault == FaultRejected && e.Code != 0:
		return fmt.Sprintf("%v (completion code 0x%02x)", e.Fault, e.Code)
	case e.Fault == FaultCipher && len(e.Suites) == 1:
		return fmt.Sprintf("the BMC refused IPMI cipher suite %d", e.Suites[0])
	case e.Fault == FaultCipher && len(e.Suites) > 1:
		return "the BMC refused IPMI cipher suites " + suiteList(e.Suites)
	}
	return e.Fault.String()
}

// suiteList is "17 and 3", "17, 3 and 2".
func suiteList(suites []int) string {
	words := make([]string, len(suites))
	for i, s := range suites {
		words[i] = strconv.Itoa(s)
	}
	last := len(words) - 1
	return strings.Join(words[:last], ", ") + " and " + words[last]
}

// ErrBreakMidLine: a driver can send a serial break only at the start of a
// line (ipmitool's escape rule); nothing was sent.
var ErrBreakMidLine = errors.New("break is only possible right after CR or LF (press Enter first)")

// ErrNoConsole: the node has no serial console (a BMC type that offers
// none, or a node registered without one). It is ErrNotSupported too
// (errors.Is), so the console hub gives up at once instead of retrying.
var ErrNoConsole error = noConsole{}

type noConsole struct{}

func (noConsole) Error() string { return "this node has no serial console" }
func (noConsole) Unwrap() error { return ErrNotSupported }

// ErrConsoleHeld: the BMC says another session holds its console (a
// console over the BMC's SSH service). It is ErrPayloadActive too
// (errors.Is), so that the console hub frees the console and tries again.
var ErrConsoleHeld error = consoleHeld{}

type consoleHeld struct{}

func (consoleHeld) Error() string { return "the BMC's console is held by another session" }
func (consoleHeld) Unwrap() error { return ErrPayloadActive }

// ErrUnverified: obmd cannot tell now whether a session may go on, or
// cannot coordinate a node's console with the other replicas, because its
// own database does not answer (or does not complete writes). Not the
// BMC's fault: the tenant is told so, the log keeps the detail.
var ErrUnverified = errors.New("obmd cannot reach its database right now")

// public are the errors whose own text is written for tenants: the hub's
// and the drivers' sentinels. A driver wraps them with detail that may not
// be (a label, an address); TenantText shows the sentinel's text alone.
var public = []error{
	ErrNoConsole,   // before ErrNotSupported, which it wraps
	ErrConsoleHeld, // before ErrPayloadActive, which it wraps
	ErrBadBootDevice, ErrNotSupported, ErrPayloadActive, ErrSOLDisabled, ErrBreakMidLine,
	ErrReadOnly, ErrShutdown, ErrDetached, ErrSlowViewer, ErrCut, ErrDisplaced, ErrLinkDown, ErrWriterBusy,
	ErrInputLost, ErrUnverified,
}

// TenantText is the one place where a BMC or console error becomes text a
// tenant reads (commands, the HTTP node-token routes and the console hub's
// notices all go through it): the sentinel's text for the sentinels of this
// package, the classification of an *Error, "did not answer" for a
// deadline, and a fixed text for anything else. It never shows an error's
// own text otherwise, so no address, user name or library message reaches
// a tenant whatever a driver puts in its errors; the log keeps those.
func TenantText(err error) string {
	if err == nil {
		return ""
	}
	var bd *BootDeviceError
	if errors.As(err, &bd) {
		return bd.tenantText()
	}
	for _, p := range public {
		if errors.Is(err, p) {
			return p.Error()
		}
	}
	var e *Error
	switch {
	case errors.As(err, &e):
		return e.tenantText()
	case errors.Is(err, context.DeadlineExceeded):
		return FaultNoAnswer.String()
	}
	return FaultUnknown.String()
}

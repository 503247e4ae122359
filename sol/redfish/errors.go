package redfish

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"regexp"
	"syscall"

	"github.com/stmcginnis/gofish/schemas"

	"github.com/obmd/obmd/sol"
)

// Error classes. Every error an operation returns is an *Error whose Kind is
// one of these (or context.Canceled / context.DeadlineExceeded when the
// caller's context ended it); errors.Is matches the class.
var (
	// ErrUnreachable: no connection to the BMC (refused, no route, name not
	// resolved, connection dropped, a request that got no answer in time).
	ErrUnreachable = errors.New("BMC unreachable")
	// ErrAuth: the BMC refused the user name and password (HTTP 401), or
	// the account's privileges (HTTP 403).
	ErrAuth = errors.New("BMC refused the credentials")
	// ErrCertificate: the BMC's TLS certificate did not verify (unknown
	// authority, wrong host name, expired). Nothing was sent to the BMC.
	ErrCertificate = errors.New("BMC TLS certificate not trusted")
	// ErrSystemMissing: the BMC has no such system, no system at all, or
	// several when the node names none.
	ErrSystemMissing = errors.New("system not found on the BMC")
	// ErrNotAllowed: the system does not offer this action (not among its
	// allowable reset types or boot targets, no reset action), or the BMC
	// refused it (HTTP 400, 405, 409, 501 to an action).
	ErrNotAllowed = errors.New("action not allowed by the BMC")
	// ErrStateTimeout: the BMC accepted the action, but the system did not
	// report the requested state before the wait ended.
	ErrStateTimeout = errors.New("system did not reach the requested state in time")
	// ErrProtocol: something answered, but not as a Redfish service over
	// HTTPS does (not TLS, not JSON, a redirect, no session token).
	ErrProtocol = errors.New("BMC did not answer as a Redfish service")
	// ErrBMC: any other failure the BMC reported (HTTP 500, 503, ...).
	ErrBMC = errors.New("BMC request failed")
)

// Error is one failed step of an operation. Its text is safe to show a
// tenant: the step, the class, the HTTP status and the Redfish message id,
// never the BMC's address, a URL, the password or what the BMC said in
// prose. Err holds the underlying error, for logs: it may name the BMC's
// URL.
type Error struct {
	Step      string // what was being done: "log in", "reset ForceOff", ...
	Kind      error  // a class above, or the context's error
	Status    int    // HTTP status; 0 if none
	MessageID string // Redfish MessageId or code, if the BMC sent a well-formed one
	Note      string // safe words that help ("the system does not offer it"); may be ""
	Err       error  // underlying error; nil if none
}

// Error returns the safe text, for example
// "reset On: action not allowed by the BMC (HTTP 409 Base.1.8.ActionNotSupported)".
func (e *Error) Error() string {
	msg := e.Step + ": " + kindText(e.Kind)
	switch {
	case e.Status != 0 && e.MessageID != "":
		msg += fmt.Sprintf(" (HTTP %d %s)", e.Status, e.MessageID)
	case e.Status != 0:
		msg += fmt.Sprintf(" (HTTP %d)", e.Status)
	case e.MessageID != "":
		msg += " (" + e.MessageID + ")"
	}
	if e.Note != "" {
		msg += ": " + e.Note
	}
	return msg
}

// Unwrap returns the class and the underlying error.
func (e *Error) Unwrap() []error {
	if e.Err == nil {
		return []error{e.Kind}
	}
	return []error{e.Kind, e.Err}
}

// Detail is the full text for logs: the safe text and the underlying error.
func (e *Error) Detail() string {
	if e.Err == nil {
		return e.Error()
	}
	return e.Error() + ": " + e.Err.Error()
}

// fault is e's class as sol classifies BMC failures for tenants
// (sol.TenantText).
func (e *Error) fault() sol.Fault {
	switch {
	case errors.Is(e.Kind, ErrAuth):
		return sol.FaultCredentials
	case errors.Is(e.Kind, ErrUnreachable):
		return sol.FaultUnreachable
	case errors.Is(e.Kind, context.DeadlineExceeded):
		return sol.FaultNoAnswer
	case errors.Is(e.Kind, ErrNotAllowed), errors.Is(e.Kind, ErrBMC):
		return sol.FaultRejected
	case errors.Is(e.Kind, ErrCertificate):
		return sol.FaultCertificate
	case errors.Is(e.Kind, ErrStateTimeout):
		return sol.FaultNotReached
	}
	return sol.FaultUnknown // ErrSystemMissing, ErrProtocol, cancelled
}

func kindText(kind error) string {
	switch {
	case errors.Is(kind, context.DeadlineExceeded):
		return "BMC did not answer in time"
	case errors.Is(kind, context.Canceled):
		return "cancelled"
	case kind == nil:
		return ErrBMC.Error()
	}
	return kind.Error()
}

var (
	// errRedirect ends a redirected request: a redirect would carry the
	// session token (and, on login, the password) to wherever it points.
	errRedirect = errors.New("redirect refused")
	// errBodyTooLarge: a response longer than maxBody.
	errBodyTooLarge = errors.New("response body too large")
	// errNoToken: the login answer carried no session token or location.
	errNoToken = errors.New("login returned no session token")
)

// Steps whose HTTP errors have a meaning of their own.
const (
	stepConnect = "connect"
	stepLogin   = "log in"
	stepSystem  = "find system"
	stepAction  = "action" // prefix of "reset ..." and "set boot override"
)

// messageID is what a Redfish MessageId looks like ("Base.1.8.GeneralError").
var messageID = regexp.MustCompile(`^[A-Za-z0-9_.]{1,80}$`)

// classify turns err, from step, into an *Error. action tells whether the
// step is an action (reset, boot override), where the BMC's refusal means
// "not allowed". ctx is the operation's: when it has ended, that is the
// class whatever the transport made of it.
func classify(ctx context.Context, step string, action bool, err error) *Error {
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	e = &Error{Step: step, Err: err}
	var rf *schemas.Error
	switch {
	case ctx.Err() != nil:
		e.Kind = ctx.Err()
	case errors.As(err, &rf) && rf.HTTPReturnedStatusCode != 0:
		e.Status = rf.HTTPReturnedStatusCode
		e.MessageID = redfishMessageID(rf)
		e.Kind = statusKind(step, action, e.Status)
	default:
		e.Kind, e.Note = transportKind(err)
	}
	return e
}

// statusKind maps an HTTP error status to a class.
func statusKind(step string, action bool, status int) error {
	switch {
	case status == http.StatusUnauthorized, status == http.StatusForbidden:
		return ErrAuth
	case status == http.StatusNotFound && step == stepSystem:
		return ErrSystemMissing
	case status == http.StatusNotFound && (step == stepConnect || step == stepLogin):
		return ErrProtocol
	case status >= 300 && status < 400:
		return ErrProtocol
	case action && (status == http.StatusBadRequest || status == http.StatusNotFound ||
		status == http.StatusMethodNotAllowed || status == http.StatusConflict ||
		status == http.StatusNotImplemented):
		return ErrNotAllowed
	}
	return ErrBMC
}

// transportKind classes an error that carries no HTTP status, with a note
// that says why when it helps. (*url.Error is itself a net.Error, so only
// what it wraps tells "unreachable".)
func transportKind(err error) (kind error, note string) {
	var (
		cve    *tls.CertificateVerificationError
		rhe    tls.RecordHeaderError
		opErr  *net.OpError
		dnsErr *net.DNSError
		netErr net.Error
		syn    *json.SyntaxError
		typ    *json.UnmarshalTypeError
	)
	switch {
	case errors.As(err, &cve):
		return ErrCertificate, certificateNote(cve.Err)
	case errors.Is(err, http.ErrSchemeMismatch), errors.As(err, &rhe):
		return ErrProtocol, "it does not speak HTTPS"
	case errors.Is(err, errRedirect):
		return ErrProtocol, "it answered with a redirect, which is not followed"
	case errors.Is(err, errBodyTooLarge):
		return ErrProtocol, fmt.Sprintf("an answer is longer than %d bytes", maxBody)
	case errors.Is(err, errNoToken):
		return ErrProtocol, "the login returned no session token"
	case errors.As(err, &syn), errors.As(err, &typ):
		return ErrProtocol, "an answer is not the JSON expected"
	case errors.As(err, &opErr), errors.As(err, &dnsErr), errors.As(err, &netErr) && netErr.Timeout(),
		errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF),
		errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET):
		return ErrUnreachable, ""
	}
	return ErrBMC, ""
}

// certificateNote says why a certificate did not verify, without naming
// the host.
func certificateNote(err error) string {
	var (
		ua  x509.UnknownAuthorityError
		he  x509.HostnameError
		inv x509.CertificateInvalidError
	)
	switch {
	case errors.As(err, &ua):
		return "signed by an unknown authority"
	case errors.As(err, &he):
		return "not issued for the host in info.addr"
	case errors.As(err, &inv) && inv.Reason == x509.Expired:
		return "expired or not yet valid"
	case errors.As(err, &inv):
		return "invalid"
	}
	return ""
}

// redfishMessageID returns the first well-formed MessageId of a Redfish
// error (extended info first, then the code), or "".
func redfishMessageID(rf *schemas.Error) string {
	for _, info := range rf.ExtendedInfos {
		if messageID.MatchString(info.MessageID) {
			return info.MessageID
		}
	}
	if messageID.MatchString(rf.Code) {
		return rf.Code
	}
	return ""
}

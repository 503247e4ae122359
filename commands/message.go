package commands

import (
	"context"
	"errors"
	"net"

	"github.com/obmd/obmd/sol"
)

// opError is a failed power or boot-device operation: what was done on
// which node, and why it failed. Its text is the whole chain, driver detail
// included (the BMC's address): for obmd's log, never for the client
// (Message).
type opError struct {
	verb string // "power on"
	node string // the label, control characters escaped
	err  error
}

func (e *opError) Error() string { return e.verb + " " + e.node + ": " + e.err.Error() }

func (e *opError) Unwrap() error { return e.err }

// Message is err, from Split, Parse or Do, as the client is told it: the
// text of a *UsageError; for a failed operation its verb and node, then
// "busy", the runner's own timeout, or what sol.TenantText makes of the
// driver's error (the BMC's address, user and library messages never
// appear). WriteError and the HTTP node-token routes print it; the full
// chain stays in the log and the audit record.
func Message(err error) string {
	var ue *UsageError
	var oe *opError
	var se *StepError
	var na *NotAllowedError
	switch {
	case err == nil:
		return ""
	case errors.As(err, &ue):
		return ue.Msg
	case errors.As(err, &na):
		return na.Error()
	case errors.As(err, &se):
		return se.Error()
	case errors.As(err, &oe):
		return oe.verb + " " + oe.node + ": " + reason(oe.err)
	}
	return reason(err)
}

// reason is why an operation failed, as the client is told.
func reason(err error) string {
	var te *timeoutError
	var nm *noMatchError
	var be *BusyError
	var ce *CheckError
	switch {
	case errors.As(err, &ce):
		return ce.Check.Name + ": " + ce.Check.Tenant
	case errors.As(err, &be):
		return be.Error()
	case errors.Is(err, ErrDoctorBusy):
		return ErrDoctorBusy.Error()
	case errors.Is(err, ErrBusy):
		return ErrBusy.Error()
	case errors.As(err, &te):
		return te.Error()
	case errors.As(err, &nm):
		return nm.Error()
	case errors.Is(err, ErrTimedOut):
		return ErrTimedOut.Error()
	case errors.Is(err, context.Canceled):
		return "cancelled"
	}
	return sol.TenantText(err)
}

// tenantView is list as req's requester may see it: its own sessions (the
// same credential from the same host: nothing there it does not already
// have) in full, marked Own; anyone else's (another tenant's key, HIL's
// console streams) without user or address.
func tenantView(list []SessionInfo, req Request) []SessionInfo {
	out := make([]SessionInfo, 0, len(list))
	for _, s := range list {
		if req.User != "" && s.User == req.User && host(s.Remote) == host(req.Source) {
			s.Own = true
		} else {
			s = SessionInfo{ID: s.ID, Kind: s.Kind, Started: s.Started, Writer: s.Writer}
		}
		out = append(out, s)
	}
	return out
}

// host is addr without its port.
func host(addr string) string {
	if h, _, err := net.SplitHostPort(addr); err == nil {
		return h
	}
	return addr
}

package commands

import (
	"context"
	"errors"

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
	switch {
	case err == nil:
		return ""
	case errors.As(err, &ue):
		return ue.Msg
	case errors.As(err, &oe):
		return oe.verb + " " + oe.node + ": " + reason(oe.err)
	}
	return reason(err)
}

// reason is why an operation failed, as the client is told.
func reason(err error) string {
	var te *timeoutError
	switch {
	case errors.Is(err, ErrBusy):
		return ErrBusy.Error()
	case errors.As(err, &te):
		return te.Error()
	case errors.Is(err, context.Canceled):
		return "cancelled"
	}
	return sol.TenantText(err)
}

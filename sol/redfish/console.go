package redfish

import (
	"context"

	"github.com/obmd/obmd/sol"
)

// errNoConsole is what a Redfish node without "sol" details answers to
// every console call.
type errNoConsole struct{}

func (errNoConsole) Error() string { return "this node has no serial console configured" }
func (errNoConsole) Unwrap() error { return sol.ErrNoConsole }

// HasConsole reports whether the node has a serial console (its info has
// "sol" details), so that a caller can say so before trying.
func (b *BMC) HasConsole() bool { return b.console != nil }

// OpenConsole opens the node's serial console: IPMI SOL through the native
// IPMI driver, on the BMC's host with the node's user and password. Without
// "sol" details it is an error wrapping sol.ErrNoConsole (and so
// sol.ErrNotSupported) that says this node has no serial console
// configured.
func (b *BMC) OpenConsole(ctx context.Context) (sol.Console, error) {
	if b.console == nil {
		return nil, errNoConsole{}
	}
	return b.console.OpenConsole(ctx)
}

// DeactivateConsole frees a SOL payload left active by someone else, through
// the IPMI driver; without "sol" details it fails as OpenConsole does.
func (b *BMC) DeactivateConsole(ctx context.Context) error {
	if b.console == nil {
		return errNoConsole{}
	}
	return b.console.DeactivateConsole(ctx)
}

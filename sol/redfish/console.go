package redfish

import (
	"context"
	"encoding/json"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/obmd/obmd/sol"
)

// errNoConsole is what a Redfish node without "sol" details answers to
// every console call.
type errNoConsole struct{}

func (errNoConsole) Error() string { return "this node has no serial console configured" }
func (errNoConsole) Unwrap() error { return sol.ErrNoConsole }

// Host is the BMC's host name or address, as the node's addr names it:
// where its other services (IPMI, SSH) are.
func (b *BMC) Host() string { return b.host }

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

// ConsoleServices reads what the node's system says of its serial console
// services (Redfish ComputerSystem.SerialConsole, since v1.13): IPMI SOL
// and SSH, each enabled or not, and SSH's port and console entry command
// (a command that is not plain text is left out). A service the system
// does not report is not Known. It is what "auto" chooses by
// (sol/transport.Discoverer).
func (b *BMC) ConsoleServices(ctx context.Context) (sol.ConsoleServices, error) {
	var cs sol.ConsoleServices
	err := b.do(ctx, "read console services", func(_ context.Context, s *session) error {
		cs = serialConsole(s.sys.RawData)
		return nil
	})
	return cs, err
}

// serialConsole reads SerialConsole from a system's JSON.
func serialConsole(raw []byte) sol.ConsoleServices {
	type protocol struct {
		ServiceEnabled      *bool
		Port                *int
		ConsoleEntryCommand string
	}
	var doc struct {
		SerialConsole struct {
			IPMI, SSH *protocol
		}
	}
	var cs sol.ConsoleServices
	if json.Unmarshal(raw, &doc) != nil {
		return cs
	}
	read := func(p *protocol) sol.ConsoleService {
		if p == nil || p.ServiceEnabled == nil {
			return sol.ConsoleService{}
		}
		s := sol.ConsoleService{Known: true, Enabled: *p.ServiceEnabled}
		if p.Port != nil && *p.Port > 0 && *p.Port < 65536 {
			s.Port = *p.Port
		}
		if c := strings.TrimSpace(p.ConsoleEntryCommand); len(c) <= 255 && utf8.ValidString(c) &&
			strings.IndexFunc(c, unicode.IsControl) < 0 {
			s.Command = c
		}
		return s
	}
	cs.IPMI, cs.SSH = read(doc.SerialConsole.IPMI), read(doc.SerialConsole.SSH)
	return cs
}

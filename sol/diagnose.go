package sol

import (
	"context"
	"strings"
)

// Diagnoser is implemented by a BMC that can explain itself: the driver's
// half of `doctor`. Diagnose checks each step from the BMC's address to its
// console in order and stops after the first that fails, so the last Check
// is the failure (if any). It is read-only: it never changes the node or
// the BMC (no power action, no SOL enable, no payload deactivation); the
// only state it may touch is obmd's own memory of the node's cipher suite.
// ctx bounds the whole diagnosis.
type Diagnoser interface {
	Diagnose(ctx context.Context) []Check
}

// Check is one step of a diagnosis.
//
// Its text comes in two versions, because doctor's output goes to the
// admin API and log and also to the tenant (over SSH): Detail is for
// administrators and the log and may name the BMC's address, its user name
// or what the BMC said; Tenant is the same result as a tenant may read it,
// with no address, user name or password (the rule of TenantText). So do
// its hints: Hint is the administrator's (it may name registration fields
// and settings, never an address), TenantHint what a tenant, who can change
// neither, can do (often: ask the operator).
type Check struct {
	// Name is what was checked: one of the Check* names.
	Name string
	// OK reports whether the step passed.
	OK bool
	// Detail is the result for administrators, on one line (may name the
	// BMC's address).
	Detail string
	// Tenant is the result for tenants (never names an address).
	Tenant string
	// Hint says what to do about a failed step; empty when OK.
	Hint string
	// TenantHint is Hint for tenants; empty: Hint serves them too.
	TenantHint string
	// Err is the failure with its whole chain, for the log (nil if none).
	Err error
}

// HintFor is the hint for a tenant (tenant) or an administrator.
func (c Check) HintFor(tenant bool) string {
	if tenant && c.TenantHint != "" {
		return c.TenantHint
	}
	return c.Hint
}

// ForTenant returns c with the tenant's hint.
func (c Check) ForTenant(hint string) Check {
	c.TenantHint = hint
	return c
}

// Names of the steps, in the order drivers check them. An IPMI node checks
// address, authentication, power and SOL; a Redfish node checks address,
// service root, authentication, system (with its power state) and reset
// actions, then its console's IPMI steps prefixed "console ". A console
// over the BMC's SSH service (sol/sshconsole) checks the ssh steps, after
// the transport step when the node's console is "auto".
const (
	CheckAddress      = "address"
	CheckAuth         = "authentication"
	CheckPower        = "power"
	CheckSOL          = "sol"
	CheckServiceRoot  = "service root"
	CheckSystem       = "system"
	CheckResetActions = "reset actions"

	// CheckZone comes first in a cluster with zones, for a node that names
	// one: whether a live replica reaches its BMC's network.
	CheckZone = "zone"

	CheckTransport  = "transport"
	CheckSSHAddress = "ssh address"
	CheckSSHHostKey = "ssh host key"
	CheckSSHAuth    = "ssh authentication"
	CheckSSHCommand = "ssh command"
	CheckSSHConsole = "ssh console"
)

// SOLStep reports whether a step named name is part of an IPMI SOL
// console's diagnosis (an IPMI driver's "sol", a Redfish node's
// "console ..." steps) rather than of its power: a node whose console is
// not SOL leaves those out.
func SOLStep(name string) bool {
	return name == CheckSOL || strings.HasPrefix(name, "console ")
}

// Passed reports whether every check passed (doctor exits 0 only then).
func Passed(checks []Check) bool {
	for _, c := range checks {
		if !c.OK {
			return false
		}
	}
	return len(checks) > 0
}

// Pass is a passed step whose result is the same for both audiences.
func Pass(name, text string) Check {
	return Check{Name: name, OK: true, Detail: text, Tenant: text}
}

// PassDetail is a passed step with an admin detail and a tenant text.
func PassDetail(name, detail, tenant string) Check {
	return Check{Name: name, OK: true, Detail: detail, Tenant: tenant}
}

// Fail is a failed step: the admin detail, the tenant text and a hint.
func Fail(name, detail, tenant, hint string) Check {
	return Check{Name: name, Detail: detail, Tenant: tenant, Hint: hint}
}

// FailErr is a failed step from err: its whole text on one line for
// administrators (OneLine), TenantText for tenants.
func FailErr(name string, err error, hint string) Check {
	return Check{Name: name, Detail: OneLine(err.Error()), Tenant: TenantText(err), Hint: hint, Err: err}
}

// OneLine is s with its line breaks (a library's multi-line error, joined
// errors) turned into "; " (a space after a line that ends in ":") and
// runs of white space into one space.
func OneLine(s string) string {
	var b strings.Builder
	for _, l := range strings.FieldsFunc(s, func(r rune) bool { return r == '\n' || r == '\r' }) {
		l = strings.Join(strings.Fields(l), " ")
		switch {
		case l == "":
			continue
		case b.Len() == 0:
		case strings.HasSuffix(b.String(), ":"):
			b.WriteString(" ")
		default:
			b.WriteString("; ")
		}
		b.WriteString(l)
	}
	return b.String()
}

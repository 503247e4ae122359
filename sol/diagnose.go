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
// with no address, user name or password (the rule of TenantText). Hint is
// written for both and holds no address either.
type Check struct {
	// Name is what was checked: one of the Check* names.
	Name string
	// OK reports whether the step passed.
	OK bool
	// Detail is the result for administrators (may name the BMC's address).
	Detail string
	// Tenant is the result for tenants (never names an address).
	Tenant string
	// Hint says what to do about a failed step; empty when OK.
	Hint string
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

// FailErr is a failed step from err: its whole text for administrators,
// TenantText for tenants.
func FailErr(name string, err error, hint string) Check {
	return Check{Name: name, Detail: err.Error(), Tenant: TenantText(err), Hint: hint}
}

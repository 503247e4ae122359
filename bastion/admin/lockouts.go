package admin

import (
	"net/http"
	"net/netip"

	"github.com/obmd/obmd/bastion/admin/api"
	"github.com/obmd/obmd/db"
)

// The guessing limits as the operator sees them: who is locked out, and
// lifting one address's lockout (GET and DELETE /v1/lockouts). A client
// is never told it is locked out (SSH and the node-token routes refuse
// it as they refuse a wrong secret); these routes are how an operator
// finds out. They show this replica's limits: each replica counts the
// failures it sees.

// maxLockouts bounds the entries GET /v1/lockouts lists.
const maxLockouts = 1000

// listLockouts is GET /v1/lockouts.
func (a *API) listLockouts(w http.ResponseWriter, r *http.Request) {
	lim := a.cfg.Limiter.Limits()
	lo := a.cfg.Limiter.Lockouts(maxLockouts)
	out := api.Lockouts{
		Limits: api.LockoutLimits{PerSource: lim.PerSource, PerNode: lim.PerNode,
			Window: lim.Window.String(), Lockout: lim.Lockout.String()},
		Sources: make([]api.SourceLockout, 0, len(lo.Sources)),
		Nodes:   make([]api.NodeLockout, 0, len(lo.Nodes)),
		More:    lo.More,
	}
	for _, s := range lo.Sources {
		out.Sources = append(out.Sources, api.SourceLockout{Source: s.Source, Until: s.Until.UTC(), Failures: s.Failures, Refused: s.Refused})
	}
	for _, n := range lo.Nodes {
		v := api.NodeLockout{Node: n.Node, Unknown: n.Unknown, Until: n.Until.UTC(), Failures: n.Failures, Refused: n.Refused,
			Sources: n.Sources}
		if v.Sources == nil {
			v.Sources = []string{}
		}
		out.Nodes = append(out.Nodes, v)
	}
	writeJSON(w, http.StatusOK, out)
}

// unlock is DELETE /v1/lockouts/{addr}: addr's failures are forgotten and
// nothing refuses it any more (idempotent: 200 whether or not it was
// locked out, which the answer says). addr is an IP address, or an IPv6
// /64 as GET /v1/lockouts lists it ("/" escaped as %2F or not). Audited.
func (a *API) unlock(w http.ResponseWriter, r *http.Request) {
	raw := r.PathValue("addr")
	addr, ok := lockoutAddr(raw)
	if !ok {
		writeError(w, http.StatusBadRequest, "address "+quote(raw)+" is not an IP address or an IPv6 /64 (as GET /v1/lockouts lists them)")
		return
	}
	source, was := a.cfg.Limiter.Unlock(addr.String())
	detail := "source " + source + " (was not locked out)"
	if was {
		detail = "source " + source + " (was locked out)"
	}
	a.auditEvent(r, db.AuditEvent{Actor: "admin", Action: "lockout.clear", Result: "ok", Detail: detail})
	writeJSON(w, http.StatusOK, api.Unlocked{Source: source, WasLocked: was})
}

// lockoutAddr parses an address as an operator gives it: an IP address
// (an IPv4-mapped one as IPv4), or an IPv6 /64.
func lockoutAddr(s string) (netip.Addr, bool) {
	if addr, err := netip.ParseAddr(s); err == nil && addr.Zone() == "" {
		return addr.Unmap(), true
	}
	if p, err := netip.ParsePrefix(s); err == nil && p.Addr().Is6() && !p.Addr().Is4In6() && p.Bits() == 64 {
		return p.Masked().Addr(), true
	}
	return netip.Addr{}, false
}

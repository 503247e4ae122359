package admin

import (
	"errors"
	"net/http"

	"github.com/obmd/obmd/commands"
	"github.com/obmd/obmd/db"
	"github.com/obmd/obmd/sol"
)

// doctorView is the body of GET /v1/nodes/{label}/doctor.
type doctorView struct {
	Node string `json:"node"`
	// OK: every step passed.
	OK bool `json:"ok"`
	// Failed names the step that failed (the last one), if any.
	Failed string      `json:"failed,omitempty"`
	Checks []checkView `json:"checks"`
}

// checkView is one step, with the administrator's detail (Result, which
// may name the BMC's address) beside what a tenant is told (Tenant).
type checkView struct {
	Name   string `json:"name"`
	OK     bool   `json:"ok"`
	Result string `json:"result"`
	Tenant string `json:"tenant"`
	Hint   string `json:"hint,omitempty"`
	// TenantHint is what `ssh ... doctor` says to do, when not Hint.
	TenantHint string `json:"tenant_hint,omitempty"`
}

// doctor is GET /v1/nodes/{label}/doctor: the node's diagnosis, run as
// `ssh node doctor` runs it (read-only, audited as "doctor" by the admin)
// but with every step's full detail. It answers 200 whether or not the
// steps passed ("ok", "failed"); 404 for an unknown node; a failure to run
// the diagnosis at all as a power command's (commandError).
func (a *API) doctor(w http.ResponseWriter, r *http.Request) {
	label, valid := pathLabel(w, r)
	if !valid {
		return
	}
	ctx := r.Context()
	res, err := a.runner.Do(ctx, commands.Request{Node: label, Actor: "admin", Source: r.RemoteAddr},
		commands.Command{Name: commands.CmdDoctor})
	var failed *commands.CheckError
	switch {
	case err == nil || errors.As(err, &failed):
		v := doctorView{Node: label, OK: err == nil, Checks: make([]checkView, len(res.Checks))}
		if failed != nil {
			v.Failed = failed.Check.Name
		}
		for i, c := range res.Checks {
			v.Checks[i] = adminCheck(c)
		}
		writeJSON(w, http.StatusOK, v)
	case errors.Is(err, db.ErrNotFound):
		nodeNotFound(w, label)
	default:
		a.commandError(w, r, ctx, label, commands.CmdDoctor, err)
	}
}

func adminCheck(c sol.Check) checkView {
	return checkView{Name: safeText(c.Name), OK: c.OK, Result: safeText(c.Detail), Tenant: safeText(c.Tenant), Hint: safeText(c.Hint),
		TenantHint: safeText(c.TenantHint)}
}

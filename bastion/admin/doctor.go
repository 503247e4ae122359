package admin

import (
	"errors"
	"net/http"

	"github.com/obmd/obmd/bastion/admin/api"
	"github.com/obmd/obmd/commands"
	"github.com/obmd/obmd/db"
	"github.com/obmd/obmd/sol"
)

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
		v := api.Doctor{Node: label, OK: err == nil, Checks: make([]api.Check, len(res.Checks))}
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

func adminCheck(c sol.Check) api.Check {
	return api.Check{Name: safeText(c.Name), OK: c.OK, Result: safeText(c.Detail), Tenant: safeText(c.Tenant), Hint: safeText(c.Hint),
		TenantHint: safeText(c.TenantHint)}
}

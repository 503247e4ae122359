package admin

import (
	"context"
	"net/http"
	"time"

	"github.com/obmd/obmd/bastion/admin/api"
	"github.com/obmd/obmd/db"
)

// WebTickets mints one-time tickets of the web console (webdoor.Tickets):
// the ticket, the page's address carrying it in its fragment, and its
// expiry.
type WebTickets interface {
	Mint(ctx context.Context, label string) (ticket, url string, expires time.Time, err error)
}

// webTicket is POST /v1/nodes/{label}/web-tickets: a ticket that opens
// the node's web console once, within a minute, for a dashboard to hand
// to its user. 409 when the web console is off. Audited (the ticket never
// is: only that one was made).
func (a *API) webTicket(w http.ResponseWriter, r *http.Request) {
	label, valid := pathLabel(w, r)
	if !valid {
		return
	}
	if a.cfg.WebTickets == nil {
		writeError(w, http.StatusConflict, "the web console is off (set web.addr)")
		return
	}
	ticket, url, expires, err := a.cfg.WebTickets.Mint(r.Context(), label)
	if err != nil {
		a.nodeReadFailed(w, r, label, "create web ticket", err)
		return
	}
	a.auditEvent(r, db.AuditEvent{Node: label, Actor: "admin", Action: "web.ticket", Result: "ok",
		Detail: "expires " + expires.UTC().Format(time.RFC3339)})
	writeJSON(w, http.StatusOK, api.WebTicket{Ticket: ticket, URL: url, ExpiresAt: expires.UTC()})
}

package admin

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/obmd/obmd/bastion/access"
	"github.com/obmd/obmd/bastion/access/sessions"
	"github.com/obmd/obmd/bastion/admin/api"
	"github.com/obmd/obmd/commands"
	"github.com/obmd/obmd/db"
	"github.com/obmd/obmd/keys"
	"github.com/obmd/obmd/sol"
	"github.com/sirupsen/logrus"
)

// actorToken is the audit and command actor of node-token requests.
const actorToken = "http:token"

// grant is a node-token request that passed authentication.
type grant struct {
	label   string
	epoch   int64  // the node's access epoch the token was checked at
	session string // session ID, once registered
}

// tokenAuth checks the request's ?token= against the node's current token
// hash in constant time. It answers 400 (bad label), 401 (refuseToken: an
// unknown node, a node without a token, no token or a wrong one, all alike)
// or 429 (the source is locked out by the guessing limits, Config.Limiter)
// itself; a node under attack refuses the sources that failed on it with
// the same 401. An unknown node, a wrong token and that refusal are
// failures of the source and of the node (every name that is no node
// counts as one node, judged after the lookup that tells).
func (a *API) tokenAuth(w http.ResponseWriter, r *http.Request) (grant, bool) {
	start := a.cfg.Now()
	label, valid := pathLabel(w, r)
	if !valid {
		return grant{}, false
	}
	host := remoteHost(r)
	if ok, first := a.cfg.Limiter.Begin(r.Context(), host); !ok {
		a.limited(w, r, "http-token", db.AuditEvent{Node: label, Actor: actorToken, Action: "auth"}, "source", first)
		return grant{}, false
	}
	tok := r.URL.Query().Get("token")
	acc, err := a.store.Access(r.Context(), label)
	if err != nil && !errors.Is(err, db.ErrNotFound) {
		a.cfg.Limiter.End(host, label, false, false) // not the client's failure
		a.unverified(w, "read node access", err)
		return grant{}, false
	}
	exists := err == nil
	if ok, first := a.cfg.Limiter.Judge(host, label, exists); !ok {
		// A node under attack refuses the sources that failed on it. Every
		// name that is no node shares one such state, so a 429 here would
		// tell an unknown name from a known one: the refusal looks like a
		// wrong token instead (as over SSH), and is recorded as a refusal.
		// It counts against the source as a wrong token does: otherwise a
		// source would be locked out by probes of a node and never by
		// probes of a name that is none, which would tell them apart.
		a.cfg.Limiter.End(host, label, exists, true)
		a.refused(r, "http-token", db.AuditEvent{Node: label, Actor: actorToken, Action: "auth"}, "node", first)
		a.refuseToken(w, r, start)
		return grant{}, false
	}
	// Hash and compare even when there is nothing to match, so that the
	// time taken does not tell whether the node exists or has a token.
	match := keys.HashToken(tok).Equal(acc.Token)
	if !exists || !acc.HasToken || tok == "" || !match {
		detail := "bad token"
		switch {
		case !exists:
			detail = "unknown node"
		case tok == "":
			detail = "no token given"
		case !acc.HasToken:
			detail = "node has no token"
		}
		a.cfg.Limiter.End(host, label, exists, true)
		a.observe("http-token", "denied")
		a.auditEvent(r, db.AuditEvent{Node: label, Actor: actorToken, Action: "auth", Result: "denied", Detail: detail})
		a.refuseToken(w, r, start)
		return grant{}, false
	}
	a.cfg.Limiter.End(host, label, true, false)
	a.observe("http-token", "ok")
	// Not trusted by the caps yet (Config.TenantSession): a tenant's token
	// must not make a request whose body never comes hold the port.
	return grant{label: label, epoch: acc.Epoch}, true
}

// errBadToken is the one answer to a failed node-token check.
const errBadToken = "unknown node or invalid token"

// errUnverified is the answer to a node-token request whose access could
// not be checked: the database did not answer (or, at admit, a change of
// the node made here is still undecided). The client may try again.
const errUnverified = "cannot verify access right now; try again"

// unverified answers a request whose access the database could not verify
// (op and err are for the log): 503, not the client's fault, nor obmd's. It
// says the same whether the node exists: a token check's read fails before
// that is known, and admit runs after the token matched.
func (a *API) unverified(w http.ResponseWriter, op string, err error) {
	a.log.WithError(err).WithField("op", op).Error("store_failed")
	writeError(w, http.StatusServiceUnavailable, errUnverified)
}

// refuseToken answers a failed node-token check, started at start: the
// same status and body whether the node exists, has a token, or the
// request brought one, and no sooner than Config.FailDelay after start,
// as the SSH door does, so that neither tells which nodes exist.
func (a *API) refuseToken(w http.ResponseWriter, r *http.Request, start time.Time) {
	if d := a.cfg.FailDelay - a.cfg.Now().Sub(start); d > 0 {
		t := time.NewTimer(d)
		select {
		case <-t.C:
		case <-r.Context().Done(): // nobody waits for the answer
		}
		t.Stop()
	}
	writeError(w, http.StatusUnauthorized, errBadToken)
}

// session opens the request as a live session of the node
// (Revoker.Open): registered, so that an access change cuts it; admitted,
// so that a change between the token check and now refuses it (a change in
// that window would not have seen this session); and watched: unblock, if
// set, is called when a cut session keeps writing to a client that does
// not read. The request is read whole first (a route that takes no body
// reads it too, up to Config.MaxBody, within the server's read timeout),
// and once admitted its connection is trusted as a tenant's
// (Config.TenantSession). work is what it counts against among the caps on
// concurrent work (sessions.Info.Work; over a cap: 409). The session's
// context is cancelled by a cut; End it once the request is done. On
// failure it has answered.
func (a *API) session(w http.ResponseWriter, r *http.Request, g *grant, kind sessions.Kind, work sessions.Work, unblock func()) (*access.Session, bool) {
	if _, err := a.readBody(w, r); err != nil {
		writeBodyError(w, err)
		return nil, false
	}
	s, err := a.revoker.Open(r.Context(), sessions.Info{Node: g.label, Kind: kind, User: "token",
		Remote: r.RemoteAddr, Epoch: g.epoch, HTTP: true, Work: work}, remoteHost(r), unblock)
	if err == nil {
		g.session = s.Info().ID
		if a.cfg.TenantSession != nil {
			a.cfg.TenantSession(r.Context())
		}
		return s, true
	}
	var stale *access.StaleError
	var revoked *sessions.RevokedError
	switch {
	case errors.Is(err, sessions.ErrTooMany):
		writeError(w, http.StatusTooManyRequests, err.Error())
	case errors.Is(err, sessions.ErrBusy): // calls on the node's BMC at their cap: busy, as a power operation in flight
		writeError(w, http.StatusConflict, err.Error())
	case errors.Is(err, sol.ErrShutdown):
		writeError(w, http.StatusServiceUnavailable, err.Error())
	case errors.As(err, &stale): // changed (or deleted) since the token was checked
		writeError(w, http.StatusUnauthorized, "access to node "+quote(g.label)+" changed during authentication; try again")
	case errors.As(err, &revoked): // cut while being admitted
		writeError(w, http.StatusUnauthorized, safeText(revoked.Error()))
	case errors.Is(err, access.ErrUnverified):
		a.unverified(w, "verify node access", err)
	case r.Context().Err() != nil:
		writeError(w, http.StatusServiceUnavailable, "request cancelled") // nobody reads it
	default:
		a.log.WithError(err).Error("session_start_failed")
		writeError(w, http.StatusInternalServerError, "internal error (session)")
	}
	return nil, false
}

// run authenticates, registers a session and runs cmd, then hands the
// result to done (which answers). Errors are answered here.
func (a *API) run(w http.ResponseWriter, r *http.Request, g grant, cmd commands.Command, done func(commands.Result)) {
	s, valid := a.session(w, r, &g, sessions.KindExec, sessions.WorkBMC, nil)
	if !valid {
		return
	}
	defer s.End()
	ctx := s.Context()
	res, err := a.runner.Do(ctx, commands.Request{Node: g.label, Actor: actorToken, User: "token", Source: r.RemoteAddr, Session: g.session,
		Epoch: g.epoch}, cmd)
	if err != nil {
		a.commandError(w, r, ctx, g.label, cmd.Name, err)
		return
	}
	done(res)
}

// commandError maps a command failure to a status and a safe message.
func (a *API) commandError(w http.ResponseWriter, r *http.Request, ctx context.Context, label string, name commands.Name, err error) {
	log := a.log.WithError(err).WithFields(logrus.Fields{"node": label, "command": name})
	var usage *commands.UsageError
	var revoked *sessions.RevokedError
	cause := context.Cause(ctx)
	switch {
	case ctx.Err() != nil && errors.As(cause, &revoked):
		writeError(w, http.StatusUnauthorized, safeText(revoked.Error()))
	case ctx.Err() != nil && errors.Is(cause, sol.ErrShutdown):
		writeError(w, http.StatusServiceUnavailable, cause.Error())
	case r.Context().Err() != nil:
		// The client went away; nobody reads this answer.
		log.Debug("command_abandoned")
		writeError(w, http.StatusServiceUnavailable, "request cancelled")
	case errors.Is(err, commands.ErrDoctorBusy):
		writeError(w, http.StatusConflict, commands.ErrDoctorBusy.Error())
	case errors.Is(err, commands.ErrBusy):
		writeError(w, http.StatusConflict, commands.ErrBusy.Error())
	case errors.As(err, &usage), errors.Is(err, sol.ErrBadBootDevice), errors.Is(err, sol.ErrNotSupported):
		writeError(w, http.StatusBadRequest, safeText(commands.Message(err)))
	case errors.Is(err, commands.ErrTimeout):
		log.Warn("command_timeout")
		writeError(w, http.StatusGatewayTimeout, safeText(commands.Message(err)))
	default:
		// The log has the driver's detail (the BMC's address); the client
		// gets its classification only (commands.Message).
		log.Warn("command_failed")
		writeError(w, http.StatusInternalServerError, safeText(commands.Message(err)))
	}
}

// powerOn is obmd's POST /node/{label}/power_on: 200, empty body.
func (a *API) powerOn(w http.ResponseWriter, r *http.Request) {
	if g, valid := a.tokenAuth(w, r); valid {
		a.run(w, r, g, commands.Command{Name: commands.CmdPowerOn}, func(commands.Result) { writeOK(w) })
	}
}

// powerOff is obmd's POST /node/{label}/power_off: a hard power off.
func (a *API) powerOff(w http.ResponseWriter, r *http.Request) {
	if g, valid := a.tokenAuth(w, r); valid {
		a.run(w, r, g, commands.Command{Name: commands.CmdPowerOff}, func(commands.Result) { writeOK(w) })
	}
}

// powerCycle is obmd's POST /node/{label}/power_cycle {"force": bool}: force
// is a hard reset, otherwise a power cycle. No body means force false.
func (a *API) powerCycle(w http.ResponseWriter, r *http.Request) {
	g, valid := a.tokenAuth(w, r)
	if !valid {
		return
	}
	var body api.PowerCycle
	if !a.readJSON(w, r, &body, false, true) {
		return
	}
	a.run(w, r, g, commands.Command{Name: commands.CmdPowerCycle, Force: body.Force}, func(commands.Result) { writeOK(w) })
}

// bootDevice is obmd's PUT /node/{label}/boot_device {"bootdev": "..."}.
// The device is passed to the driver as is; like obmd, the choice is
// persistent.
func (a *API) bootDevice(w http.ResponseWriter, r *http.Request) {
	g, valid := a.tokenAuth(w, r)
	if !valid {
		return
	}
	var body api.BootDevice
	if !a.readJSON(w, r, &body, false, false) {
		return
	}
	if body.Bootdev == "" {
		writeError(w, http.StatusBadRequest, "field \"bootdev\" is required")
		return
	}
	a.run(w, r, g, commands.Command{Name: commands.CmdBootdev, Device: body.Bootdev, Persistent: true},
		func(commands.Result) { writeOK(w) })
}

// powerStatus is obmd's GET /node/{label}/power_status:
// {"power_status": "<driver's string>"}.
func (a *API) powerStatus(w http.ResponseWriter, r *http.Request) {
	if g, valid := a.tokenAuth(w, r); valid {
		a.run(w, r, g, commands.Command{Name: commands.CmdPowerStatus}, func(res commands.Result) {
			writeJSON(w, http.StatusOK, api.PowerStatus{PowerStatus: res.Power})
		})
	}
}

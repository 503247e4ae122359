package admin

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/obmd/obmd/bastion/access"
	"github.com/obmd/obmd/bastion/access/sessions"
	"github.com/obmd/obmd/bastion/admin/api"
	"github.com/obmd/obmd/db"
	"github.com/obmd/obmd/keys"
)

// addKey is POST /v1/nodes/{label}/keys {"key": "<authorized_keys line>"}.
func (a *API) addKey(w http.ResponseWriter, r *http.Request) {
	label, valid := pathLabel(w, r)
	if !valid {
		return
	}
	var body api.AddKey
	if !a.readJSON(w, r, &body, true, false) {
		return
	}
	ak, err := keys.ParseAuthorizedKey(body.Key)
	if err != nil {
		// keys' errors are fixed texts that never echo the line.
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	// A grant through the Revoker too: bounded, and undone if the database
	// stores it after the bound passed (the caller was told it failed).
	err = a.change(r, access.Change{Node: label, Why: WhyKeyRemoved,
		Do: func(ctx context.Context) (int64, error) {
			return 0, a.store.AddKey(ctx, db.Key{Node: label, Fingerprint: ak.Fingerprint, Line: ak.Line, Comment: ak.Comment})
		},
		Undo: func(ctx context.Context) (bool, int64, error) {
			epoch, err := a.store.DeleteKey(ctx, label, ak.Fingerprint)
			if errors.Is(err, db.ErrNotFound) {
				return false, 0, nil
			}
			return err == nil, epoch, err
		}}, "key.add", ak.Fingerprint)
	switch {
	case errors.Is(err, db.ErrNotFound):
		nodeNotFound(w, label)
		return
	case errors.Is(err, db.ErrExists):
		writeError(w, http.StatusConflict, "key "+ak.Fingerprint+" is already registered on node "+quote(label))
		return
	case err != nil:
		a.changeFailed(w, r, "add key", err)
		return
	}
	writeJSON(w, http.StatusCreated, api.KeyAdded{Fingerprint: ak.Fingerprint})
}

// listKeys is GET /v1/nodes/{label}/keys.
func (a *API) listKeys(w http.ResponseWriter, r *http.Request) {
	label, valid := pathLabel(w, r)
	if !valid {
		return
	}
	ks, err := a.store.Keys(r.Context(), label)
	if err != nil {
		a.nodeReadFailed(w, r, label, "list keys", err)
		return
	}
	out := api.Keys{Keys: make([]api.Key, 0, len(ks))}
	for _, k := range ks {
		out.Keys = append(out.Keys, api.Key{Fingerprint: k.Fingerprint, Key: k.Line, Comment: k.Comment, CreatedAt: k.CreatedAt.UTC()})
	}
	writeJSON(w, http.StatusOK, out)
}

// deleteKey is DELETE /v1/nodes/{label}/keys/{fingerprint...}; the
// fingerprint's "/" may be escaped (%2F) or not. Idempotent, as revoking
// a token is: a key the node does not have is 200 {"removed": false}; an
// unknown node is 404.
func (a *API) deleteKey(w http.ResponseWriter, r *http.Request) {
	label, valid := pathLabel(w, r)
	if !valid {
		return
	}
	fp := r.PathValue("fingerprint")
	if fp == "" || len(fp) > 128 || strings.IndexFunc(fp, func(r rune) bool { return !unicode.IsGraphic(r) || unicode.IsSpace(r) }) >= 0 {
		writeError(w, http.StatusBadRequest, "fingerprint "+quote(fp)+" is not valid (want SHA256:..., with \"/\" escaped as %2F)")
		return
	}
	err := a.changeAccess(r, label, "key.remove", fp, WhyKeyRemoved, func(ctx context.Context) (int64, error) {
		return a.store.DeleteKey(ctx, label, fp)
	})
	if errors.Is(err, db.ErrNotFound) { // no such key, or no such node: nothing was changed
		if _, err := a.store.Node(r.Context(), label); err != nil {
			a.nodeReadFailed(w, r, label, "read node", err)
			return
		}
		writeJSON(w, http.StatusOK, api.Removed{Removed: false})
		return
	}
	if err != nil {
		a.changeFailed(w, r, "delete key", err)
		return
	}
	writeJSON(w, http.StatusOK, api.Removed{Removed: true})
}

// audit is GET /v1/audit?node=&since=&limit=; since is RFC 3339 or unix
// seconds, limit 1..1000 (default 1000).
func (a *API) audit(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	var aq db.AuditQuery
	if node := q.Get("node"); node != "" {
		if err := ValidLabel(node); err != nil {
			writeError(w, http.StatusBadRequest, "node: "+err.Error())
			return
		}
		aq.Node = node
	}
	if s := q.Get("since"); s != "" {
		since, err := parseSince(s)
		if err != nil {
			writeError(w, http.StatusBadRequest, "since "+quote(s)+" is not RFC 3339 or unix seconds")
			return
		}
		aq.Since = since
	}
	if s := q.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > db.MaxLimit {
			writeError(w, http.StatusBadRequest, "limit "+quote(s)+" is not a number from 1 to "+strconv.Itoa(db.MaxLimit))
			return
		}
		aq.Limit = n
	}
	events, err := a.store.AuditEvents(r.Context(), aq)
	if err != nil {
		a.storeError(w, r, "read audit", err)
		return
	}
	out := api.AuditEvents{Events: make([]api.AuditEvent, 0, len(events))}
	for _, e := range events {
		out.Events = append(out.Events, api.AuditEvent{ID: e.ID, At: e.At.UTC(), Node: e.Node, Actor: e.Actor,
			Action: e.Action, Source: e.Source, Result: e.Result, Detail: e.Detail, Count: max(e.Count, 1)})
	}
	writeJSON(w, http.StatusOK, out)
}

func parseSince(s string) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, nil
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return time.Time{}, err
	}
	return time.Unix(n, 0).UTC(), nil
}

// listSessions is GET /v1/sessions?node=.
func (a *API) listSessions(w http.ResponseWriter, r *http.Request) {
	node := r.URL.Query().Get("node")
	if node != "" {
		if err := ValidLabel(node); err != nil {
			writeError(w, http.StatusBadRequest, "node: "+err.Error())
			return
		}
	}
	list := a.sessions.List(node)
	if a.cfg.Cluster != nil {
		list = a.cfg.Cluster.List(r.Context(), node)
	}
	out := api.Sessions{Sessions: make([]api.Session, 0, len(list))}
	for _, s := range list {
		out.Sessions = append(out.Sessions, sessionView(s))
	}
	writeJSON(w, http.StatusOK, out)
}

// sessionView is s as GET /v1/sessions shows it.
func sessionView(s sessions.Info) api.Session {
	v := api.Session{ID: s.ID, Node: s.Node, Kind: string(s.Kind), User: s.User, Remote: s.Remote, Started: s.Started,
		Replica: s.Replica, Expires: s.Expires}
	if c := s.Cert; c != nil {
		v.Cert = &api.Cert{CA: c.CA, CAName: c.CAName, Serial: c.Serial, KeyID: c.KeyID}
	}
	return v
}

// kick ends session id: on whichever replica holds it in cluster mode.
func (a *API) kick(ctx context.Context, id string) (node string, found bool, err error) {
	if a.cfg.Cluster != nil {
		return a.cfg.Cluster.Kick(ctx, id, WhyKicked)
	}
	for _, s := range a.sessions.List("") {
		if s.ID == id {
			return s.Node, a.sessions.Kick(id, &sessions.RevokedError{Node: s.Node, Why: WhyKicked}), nil
		}
	}
	return "", false, nil
}

// kickSession is DELETE /v1/sessions/{id}: the session ends with "kicked
// by admin"; the answer comes once it has ended (or the cut bound passed).
func (a *API) kickSession(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	node, found, err := a.kick(r.Context(), id)
	if err != nil {
		a.log.WithError(err).WithField("session", id).Warn("session_kick_failed")
		writeError(w, http.StatusServiceUnavailable, "cannot reach the replica holding session "+quote(id)+"; retry")
		return
	}
	if !found {
		writeError(w, http.StatusNotFound, "no session "+quote(id))
		return
	}
	a.auditEvent(r, db.AuditEvent{Node: node, Actor: "admin", Action: "session.kick", Result: "ok", Detail: "session " + id})
	writeOK(w)
}

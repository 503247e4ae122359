package admin

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/obmd/obmd/bastion/access"
	"github.com/obmd/obmd/bastion/admin/api"
	"github.com/obmd/obmd/bastion/nodes"
	"github.com/obmd/obmd/db"
	"github.com/obmd/obmd/keys"
	"github.com/sirupsen/logrus"
)

// pathLabel returns the request's validated {label} (ValidLabel), or
// answers 400.
func pathLabel(w http.ResponseWriter, r *http.Request) (string, bool) {
	l := r.PathValue("label")
	if err := ValidLabel(l); err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return "", false
	}
	return l, true
}

// storeError answers an unexpected store failure: the chain goes to the
// log, the client gets a generic message.
func (a *API) storeError(w http.ResponseWriter, r *http.Request, op string, err error) {
	a.log.WithError(err).WithField("op", op).Error("store_failed")
	writeError(w, http.StatusInternalServerError, "internal error ("+op+")")
}

func nodeNotFound(w http.ResponseWriter, label string) {
	writeError(w, http.StatusNotFound, "node "+quote(label)+" not found")
}

// nodeReadFailed answers a failed read of label: 404 for an unknown node,
// else a store error (op).
func (a *API) nodeReadFailed(w http.ResponseWriter, r *http.Request, label, op string, err error) {
	if errors.Is(err, db.ErrNotFound) {
		nodeNotFound(w, label)
		return
	}
	a.storeError(w, r, op, err)
}

// nodeChangeFailed answers a failed change of label: 404 for an unknown
// node, else as changeFailed (op).
func (a *API) nodeChangeFailed(w http.ResponseWriter, r *http.Request, label, op string, err error) {
	if errors.Is(err, db.ErrNotFound) {
		nodeNotFound(w, label)
		return
	}
	a.changeFailed(w, r, op, err)
}

// putNodeObmd is obmd's PUT /node/{label}: create, or accept an identical
// re-registration; a different one is 409 (obmd answered 500).
func (a *API) putNodeObmd(w http.ResponseWriter, r *http.Request) {
	a.putNode(w, r, false)
}

// putNodeV1 is PUT /v1/nodes/{label}: create (201) or replace (200); a
// replacement that changes anything cuts the node's sessions.
func (a *API) putNodeV1(w http.ResponseWriter, r *http.Request) {
	a.putNode(w, r, true)
}

// labelBody is a PUT's node label and body; on failure it has answered
// (a bad label with the rule of a new node's, LabelRule).
func (a *API) labelBody(w http.ResponseWriter, r *http.Request) (string, []byte, bool) {
	label := r.PathValue("label")
	if err := ValidLabel(label); err != nil {
		writeError(w, http.StatusBadRequest, err.Error()+"; "+LabelRule)
		return "", nil, false
	}
	data, err := a.readBody(w, r)
	if err != nil {
		writeBodyError(w, err)
		return "", nil, false
	}
	return label, data, true
}

func (a *API) putNode(w http.ResponseWriter, r *http.Request, v1 bool) {
	label, data, valid := a.labelBody(w, r)
	if !valid {
		return
	}
	var principals *[]string // the /v1 body's, if it has them
	if v1 {
		var only bool
		var err error
		if principals, only, err = decodePrincipals(data); err != nil {
			writeBodyError(w, err)
			return
		}
		if only {
			a.putPrincipals(w, r, label, *principals)
			return
		}
	}
	info, err := a.decodeNodeBody(data, v1)
	if err != nil {
		writeBodyError(w, err)
		return
	}
	settings, err := decodeSettings(data)
	if err != nil {
		writeBodyError(w, err)
		return
	}
	allowShared, valid := allowSharedBMC(w, r)
	if !valid {
		return
	}
	typ := string(info.Type())
	// Bounded as the change it leads to (a stopped database must not hold
	// the call), and detached from the client.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), a.cfg.ChangeTimeout)
	defer cancel()
	// Two rounds at most: a create that loses a race with another create
	// goes round again as an update.
	for round := 0; round < 2; round++ {
		n, err := a.store.Node(ctx, label)
		if errors.Is(err, db.ErrNotFound) {
			if err := ValidNewLabel(label); err != nil {
				writeError(w, http.StatusBadRequest, err.Error())
				return
			}
			if !allowShared && !a.ownBMC(ctx, w, r, label, info) {
				return
			}
			sealed, err := a.types.Seal(label, info)
			if err != nil {
				a.log.WithError(err).Error("seal_failed")
				writeError(w, http.StatusInternalServerError, "internal error (seal)")
				return
			}
			// A change too (it moves an epoch), bounded like the others.
			err = a.change(r, access.Change{Node: label, Do: func(ctx context.Context) (int64, error) {
				var err error
				node := db.Node{Label: label, Type: typ, InfoSealed: sealed}
				if settings.capture != nil {
					node.Capture = *settings.capture
				}
				if settings.screenSize != nil {
					node.ScreenSize = *settings.screenSize
				}
				n, err = a.store.CreateNode(ctx, node)
				return n.Epoch, err
			}}, "node.create", "type "+typ)
			if errors.Is(err, db.ErrExists) {
				continue
			}
			if err != nil {
				a.changeFailed(w, r, "create node", err)
				return
			}
			if v1 {
				a.putDone(w, r, http.StatusCreated, n, principals)
			} else {
				writeOK(w)
			}
			return
		}
		if err != nil {
			if ctx.Err() != nil {
				err = fmt.Errorf("%w: the database did not answer within %v; nothing was changed", access.ErrNotStored, a.cfg.ChangeTimeout)
			}
			a.changeFailed(w, r, "read node", err)
			return
		}
		same, openErr := a.sameNode(n, info)
		if same {
			if n, err = a.setSettings(ctx, r, n, settings); err != nil {
				a.changeFailed(w, r, "set node settings", err)
				return
			}
			if v1 {
				a.putDone(w, r, http.StatusOK, n, principals)
			} else {
				writeOK(w)
			}
			return
		}
		if !v1 {
			msg := "node " + quote(label) + " already exists with a different type or info; DELETE it first, or use PUT /v1/nodes/{label} to change it"
			if openErr != nil {
				a.log.WithError(openErr).WithField("node", label).Warn("node_info_unreadable")
				msg = "node " + quote(label) + " already exists and its stored info cannot be unsealed (was the sealing key changed?); DELETE it first, or use PUT /v1/nodes/{label} to replace it"
			}
			writeError(w, http.StatusConflict, msg)
			return
		}
		if !allowShared && !a.ownBMC(ctx, w, r, label, info) {
			return
		}
		a.updateNode(w, r, label, info, principals, settings)
		return
	}
	writeError(w, http.StatusConflict, "node "+quote(label)+" is being changed concurrently; try again")
}

// allowSharedBMC reads a registration's ?allow_shared_bmc=1 (true, 1):
// the node may use a BMC another node uses. On a bad value it has
// answered 400.
func allowSharedBMC(w http.ResponseWriter, r *http.Request) (allow, valid bool) {
	v := r.URL.Query().Get("allow_shared_bmc")
	if v == "" {
		return false, true
	}
	allow, err := strconv.ParseBool(v)
	if err != nil {
		writeError(w, http.StatusBadRequest, "allow_shared_bmc "+quote(v)+" is not 1 or 0 (true or false)")
		return false, false
	}
	return allow, true
}

// ownBMC checks that no other node uses a BMC service of info, label's new
// registration (nodes.Info.BMCs, normalised: the default port, IPv6 forms,
// the case of host names), and answers 409 naming the node that does:
// two nodes on one BMC take its console from each other, forever. A
// service that label's stored registration uses already is not checked
// again. Two registrations racing each other can both pass.
func (a *API) ownBMC(ctx context.Context, w http.ResponseWriter, r *http.Request, label string, info nodes.Info) bool {
	mine := info.BMCs()
	if len(mine) == 0 {
		return true
	}
	all, err := a.store.Nodes(ctx)
	if err != nil {
		a.storeError(w, r, "list nodes", err)
		return false
	}
	opened := make([]nodes.Info, len(all))
	for i, n := range all {
		opened[i], _ = a.types.Open(n) // an unreadable node uses no BMC we know of
		if n.Label == label {
			cur := opened[i].BMCs()
			mine = slices.DeleteFunc(mine, func(b string) bool { return slices.Contains(cur, b) })
		}
	}
	for i, n := range all {
		if n.Label == label {
			continue
		}
		if bmc := nodes.SharedBMC(mine, opened[i].BMCs()); bmc != "" {
			writeError(w, http.StatusConflict, "node "+quote(n.Label)+" already uses this BMC ("+bmc+"): two nodes on one BMC "+
				"take its console from each other; register this node's own BMC, or, if the nodes really share it, "+
				"send the request again with ?allow_shared_bmc=1")
			return false
		}
	}
	return true
}

// updateNode replaces a node's type and info (/v1) and cuts its sessions:
// they were opened against the old BMC; then it sets the settings (capture,
// screen size) and the principals the body gave (nil: none).
func (a *API) updateNode(w http.ResponseWriter, r *http.Request, label string, info nodes.Info, principals *[]string, settings nodeSettings) {
	typ := string(info.Type())
	sealed, err := a.types.Seal(label, info)
	if err != nil {
		a.log.WithError(err).Error("seal_failed")
		writeError(w, http.StatusInternalServerError, "internal error (seal)")
		return
	}
	var n db.Node
	err = a.changeAccess(r, label, "node.update", "type "+typ, WhyNodeChanged, func(ctx context.Context) (int64, error) {
		var err error
		n, err = a.store.UpdateNodeInfo(ctx, label, typ, sealed)
		return n.Epoch, err
	})
	if errors.Is(err, db.ErrNotFound) {
		writeError(w, http.StatusConflict, "node "+quote(label)+" was deleted concurrently; try again")
		return
	}
	if err != nil {
		a.changeFailed(w, r, "update node", err)
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), a.cfg.ChangeTimeout)
	defer cancel()
	if n, err = a.setSettings(ctx, r, n, settings); err != nil {
		a.changeFailed(w, r, "set node settings", err)
		return
	}
	a.putDone(w, r, http.StatusOK, n, principals)
}

// setSettings sets n's settings that s sets and that differ.
func (a *API) setSettings(ctx context.Context, r *http.Request, n db.Node, s nodeSettings) (db.Node, error) {
	n, err := a.setCapture(ctx, r, n, s.capture)
	if err != nil {
		return n, err
	}
	return a.setScreenSize(ctx, r, n, s.screenSize)
}

// setCapture sets n's capture if the body set one that differs (not an
// access change: no session is cut), audited as node.capture.
func (a *API) setCapture(ctx context.Context, r *http.Request, n db.Node, capture *string) (db.Node, error) {
	if capture == nil || *capture == n.Capture {
		return n, nil
	}
	n, err := a.store.SetCapture(ctx, n.Label, *capture)
	if err != nil {
		return n, err
	}
	detail := *capture
	if detail == "" {
		detail = "default"
	}
	a.auditEvent(r, db.AuditEvent{Node: n.Label, Actor: "admin", Action: "node.capture", Result: "ok", Detail: "capture " + detail})
	return n, nil
}

// changeAccess is the one path of every access change made through the
// API (token rotation or revocation, node change or deletion, key removal):
// change moves the node's epoch in the database, then every session of the
// node older than the new epoch is cut on every replica (with why as the
// reason users see), all within the change bound, before changeAccess
// returns (Revoker). The change is audited once stored; one whose outcome
// was unknown when the bound passed is audited once the database has
// decided it. An error from change (db.ErrNotFound included) is returned
// as is, with nothing cut; the database work is detached from the client:
// a client that hangs up mid-change does not leave it half done.
func (a *API) changeAccess(r *http.Request, label, action, detail, why string, change func(context.Context) (int64, error)) error {
	return a.change(r, access.Change{Node: label, Why: why, Do: change}, action, detail)
}

// change runs c through the Revoker and audits it as action: at once if it
// was stored (also when not every replica confirmed it in time), or once
// settled if its outcome was unknown.
func (a *API) change(r *http.Request, c access.Change, action, detail string) error {
	e := db.AuditEvent{Node: c.Node, Actor: "admin", Action: action, Source: r.RemoteAddr, Detail: detail}
	c.Settled = func(stored bool) {
		e := e
		e.Result, e.Detail = "error", strings.TrimSpace(detail+" (timed out; the database did not store it)")
		switch {
		case stored && c.Undo != nil:
			e.Detail = strings.TrimSpace(detail + " (timed out; stored late, so removed again)")
		case stored:
			e.Result, e.Detail = "ok", strings.TrimSpace(detail+" (timed out; the database stored it late, and it was applied then)")
		}
		a.auditEvent(r, e)
	}
	err := a.revoker.Change(r.Context(), c)
	if err == nil || errors.Is(err, access.ErrNotConfirmed) {
		e.Result = "ok"
		if err != nil {
			e.Detail = strings.TrimSpace(detail + " (not confirmed by every replica in time)")
		}
		a.auditEvent(r, e)
		a.log.WithFields(logrus.Fields{"node": c.Node, "why": c.Why}).Debug("access_change")
	}
	return err
}

// changeFailed answers a failed access change: one that did not complete
// within the change bound gets 503 and the Revoker's account of how far it
// got; anything else is a store failure.
func (a *API) changeFailed(w http.ResponseWriter, r *http.Request, op string, err error) {
	if errors.Is(err, access.ErrIncomplete) {
		a.log.WithError(err).WithField("op", op).Error("access_change_timed_out")
		writeError(w, http.StatusServiceUnavailable, err.Error())
		return
	}
	a.storeError(w, r, op, err)
}

// deleteNode deletes a node (idempotent: an unknown node is 200 too).
func (a *API) deleteNode(w http.ResponseWriter, r *http.Request) {
	label, valid := pathLabel(w, r)
	if !valid {
		return
	}
	err := a.changeAccess(r, label, "node.delete", "", WhyNodeDeleted, func(ctx context.Context) (int64, error) {
		return a.store.DeleteNode(ctx, label)
	})
	if err == nil || errors.Is(err, access.ErrNotConfirmed) {
		a.types.Forget(label) // stored: the node is gone
	}
	if err != nil && !errors.Is(err, db.ErrNotFound) { // deleting an unknown node is done already
		a.changeFailed(w, r, "delete node", err)
		return
	}
	writeOK(w)
}

// rotateToken issues a new token (shown once; only its hash is stored) and
// cuts every session opened with the previous one before answering.
func (a *API) rotateToken(w http.ResponseWriter, r *http.Request) {
	label, valid := pathLabel(w, r)
	if !valid {
		return
	}
	tok, err := keys.NewToken()
	if err != nil {
		a.log.WithError(err).Error("token_generation_failed")
		writeError(w, http.StatusInternalServerError, "internal error (token)")
		return
	}
	err = a.changeAccess(r, label, "token.rotate", "", WhyTokenRotate, func(ctx context.Context) (int64, error) {
		return a.store.SetToken(ctx, label, keys.HashToken(tok))
	})
	if err != nil {
		a.nodeChangeFailed(w, r, label, "set token", err)
		return
	}
	writeJSON(w, http.StatusOK, api.Token{Token: tok})
}

// revokeToken removes the node's token (idempotent) and cuts its sessions.
func (a *API) revokeToken(w http.ResponseWriter, r *http.Request) {
	label, valid := pathLabel(w, r)
	if !valid {
		return
	}
	err := a.changeAccess(r, label, "token.revoke", "", WhyTokenRevoke, func(ctx context.Context) (int64, error) {
		return a.store.RevokeToken(ctx, label)
	})
	if err != nil {
		a.nodeChangeFailed(w, r, label, "revoke token", err)
		return
	}
	writeOK(w)
}

// listNodes is GET /v1/nodes.
func (a *API) listNodes(w http.ResponseWriter, r *http.Request) {
	nodes, err := a.store.Nodes(r.Context())
	if err != nil {
		a.storeError(w, r, "list nodes", err)
		return
	}
	out := api.Nodes{Nodes: make([]api.Node, 0, len(nodes))}
	for _, n := range nodes {
		out.Nodes = append(out.Nodes, a.view(n))
	}
	writeJSON(w, http.StatusOK, out)
}

// getNode is GET /v1/nodes/{label}.
func (a *API) getNode(w http.ResponseWriter, r *http.Request) {
	label, valid := pathLabel(w, r)
	if !valid {
		return
	}
	ctx := r.Context()
	n, err := a.store.Node(ctx, label)
	if err != nil {
		a.nodeReadFailed(w, r, label, "read node", err)
		return
	}
	acc, err := a.store.Access(ctx, label)
	var ks []db.Key
	var ps []string
	if err == nil {
		ks, err = a.store.Keys(ctx, label)
	}
	if err == nil {
		ps, err = a.store.NodePrincipals(ctx, label)
	}
	var hk *api.HostKey
	if err == nil {
		hk, err = a.pinnedHostKey(ctx, label)
	}
	if err == nil {
		v := a.view(n)
		nk, ns := len(ks), len(a.sessions.List(label))
		v.HasToken, v.Keys, v.Sessions, v.Principals = &acc.HasToken, &nk, &ns, &ps
		v.SSHHostKeyPinned = hk
		writeJSON(w, http.StatusOK, v)
		return
	}
	a.nodeReadFailed(w, r, label, "read node access", err)
}

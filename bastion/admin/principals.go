package admin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/obmd/obmd/bastion/access"
	"github.com/obmd/obmd/db"
)

// Node principals: the extra principals a node carries ("project-x"), so
// that one certificate for a project opens every node of the project.
// PUT /v1/nodes/{label} sets them with "principals": a body with only that
// field changes only them; with a type and info, they are set once the
// node is stored. Removing one is an access change of the node (its
// sessions are cut, as for a token rotation); adding one is a grant.

// decodePrincipals reads the "principals" of a /v1 node body: nil if it
// has none; only reports that the body has nothing else ("type", "info",
// "capture", "screen_size").
func decodePrincipals(data []byte) (ps *[]string, only bool, err error) {
	var b struct {
		Principals *[]string       `json:"principals"`
		Type       json.RawMessage `json:"type"`
		Info       json.RawMessage `json:"info"`
		Capture    json.RawMessage `json:"capture"`
		ScreenSize json.RawMessage `json:"screen_size"`
	}
	if err := decode(data, &b, false, "body"); err != nil { // decodeNodeBody judges the rest
		return nil, false, err
	}
	if b.Principals == nil {
		return nil, false, nil
	}
	if err := db.CheckPrincipals(*b.Principals); err != nil {
		return nil, false, badBody("principals: %s", err.Error())
	}
	return b.Principals, b.Type == nil && b.Info == nil && b.Capture == nil && b.ScreenSize == nil, nil
}

// putPrincipals is PUT /v1/nodes/{label} {"principals": [...]}: 200 and
// the node.
func (a *API) putPrincipals(w http.ResponseWriter, r *http.Request, label string, ps []string) {
	if err := a.setPrincipals(r, label, ps); err != nil {
		a.principalsFailed(w, r, label, err)
		return
	}
	n, err := a.store.Node(r.Context(), label)
	if err != nil {
		a.nodeReadFailed(w, r, label, "read node", err)
		return
	}
	v := a.view(n)
	v.Principals = &ps
	writeJSON(w, http.StatusOK, v)
}

// putDone answers a PUT /v1/nodes/{label} that stored node n with status,
// once it has set the principals the body gave (ps; nil: none given).
func (a *API) putDone(w http.ResponseWriter, r *http.Request, status int, n db.Node, ps *[]string) {
	v := a.view(n)
	if ps != nil {
		if err := a.setPrincipals(r, n.Label, *ps); err != nil {
			a.principalsFailed(w, r, n.Label, err)
			return
		}
		v.Principals = ps
	}
	writeJSON(w, status, v)
}

// principalsFailed answers a failed setPrincipals of label.
func (a *API) principalsFailed(w http.ResponseWriter, r *http.Request, label string, err error) {
	a.nodeChangeFailed(w, r, label, "set principals", err)
}

// setPrincipals replaces label's principals with ps through the Revoker
// (bounded; the sessions of a node that lost one are cut everywhere). A
// grant stored only after the bound passed is taken back: the principals
// added are removed again, those removed stay removed.
func (a *API) setPrincipals(r *http.Request, label string, ps []string) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), a.cfg.ChangeTimeout)
	old, err := a.store.NodePrincipals(ctx, label)
	timedOut := ctx.Err() != nil
	cancel()
	if err != nil && timedOut {
		return fmt.Errorf("%w: the database did not answer within %v; nothing was changed", access.ErrNotStored, a.cfg.ChangeTimeout)
	}
	if err != nil {
		return err
	}
	if sameSet(old, ps) {
		return nil
	}
	kept := slices.DeleteFunc(slices.Clone(ps), func(p string) bool { return !slices.Contains(old, p) })
	detail := "none"
	if len(ps) > 0 {
		detail = strings.Join(ps, ",")
	}
	return a.change(r, access.Change{Node: label, Why: WhyPrincipals,
		Do: func(ctx context.Context) (int64, error) { return a.store.SetNodePrincipals(ctx, label, ps) },
		Undo: func(ctx context.Context) (bool, int64, error) {
			cur, err := a.store.NodePrincipals(ctx, label)
			if errors.Is(err, db.ErrNotFound) {
				return false, 0, nil
			}
			if err != nil || !sameSet(cur, ps) || len(kept) == len(ps) {
				return false, 0, err // not stored, changed since, or nothing added
			}
			epoch, err := a.store.SetNodePrincipals(ctx, label, kept)
			return err == nil, epoch, err
		}}, "node.principals", detail)
}

// sameSet reports whether a and b hold the same strings.
func sameSet(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(slices.Compact(a), slices.Compact(b))
}

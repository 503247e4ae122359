package admin

import (
	"context"
	"errors"
	"net/http"

	"github.com/obmd/obmd/bastion/admin/api"
	"github.com/obmd/obmd/db"
	"github.com/obmd/obmd/keys"
)

// pinnedHostKey is the SSH host key pinned for label's BMC, as the node
// view shows it (nil: none).
func (a *API) pinnedHostKey(ctx context.Context, label string) (*api.HostKey, error) {
	k, err := a.store.SSHHostKey(ctx, label)
	if errors.Is(err, db.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	v := &api.HostKey{Key: k.Key, Addr: k.Addr, PinnedAt: k.CreatedAt.UTC()}
	if ak, err := keys.ParseAuthorizedKey(k.Key); err == nil {
		v.Fingerprint = ak.Fingerprint
	}
	return v, nil
}

// resetHostKey is DELETE /v1/nodes/{label}/ssh-host-key: obmd forgets the
// SSH host key pinned for the node's BMC, and the next console link pins
// the key it meets (the BMC was replaced, or its key regenerated). It is
// no access change (no epoch moves, nothing is cut); audited as
// node.ssh_host_key_reset. {"removed": bool}; 404 for an unknown node.
func (a *API) resetHostKey(w http.ResponseWriter, r *http.Request) {
	label, valid := pathLabel(w, r)
	if !valid {
		return
	}
	old, _ := a.pinnedHostKey(r.Context(), label) // for the audit record only
	removed, err := a.store.DeleteSSHHostKey(r.Context(), label)
	if err != nil {
		a.nodeReadFailed(w, r, label, "reset SSH host key", err)
		return
	}
	detail := "none pinned"
	if removed && old != nil {
		detail = "forgot " + old.Fingerprint + " at " + old.Addr
	}
	a.auditEvent(r, db.AuditEvent{Node: label, Actor: "admin", Action: "node.ssh_host_key_reset", Result: "ok", Detail: detail})
	writeJSON(w, http.StatusOK, api.HostKeyReset{Removed: removed})
}

package bastion

import (
	"context"
	"io"
	"net/http"
	"strings"
	"sync"

	"github.com/sirupsen/logrus"

	"github.com/obmd/obmd/bastion/sessions"
	"github.com/obmd/obmd/commands"
	"github.com/obmd/obmd/sol"
)

// Cutter ends every console viewer of a node and wipes its scrollback.
type Cutter interface {
	Cut(label string, cause error)
}

// Revoker is the one mechanism behind every access change (token rotation
// or revocation, key removal, node change or deletion, an admin kick, and
// changes seen on other replicas): after the database has moved the node's
// epoch, Revoke ends this replica's sessions that authenticated before it.
type Revoker struct {
	consoles Cutter
	reg      *sessions.Registry
	log      logrus.FieldLogger

	mu      sync.Mutex
	applied map[string]int64 // newest epoch applied per node
}

// NewRevoker returns a Revoker over the console hub and the registry.
func NewRevoker(consoles Cutter, reg *sessions.Registry, log logrus.FieldLogger) *Revoker {
	return &Revoker{consoles: consoles, reg: reg, log: log, applied: map[string]int64{}}
}

// Revoke cuts label's sessions older than epoch with a reason the user sees
// ("access to node-17 was revoked (token rotated)"). The scrollback is wiped
// first, so nothing of the old tenancy can be replayed, then the sessions
// are cut; Revoke returns once they have ended (or the registry's bound
// passed, which is logged). An epoch already applied (the admin call applied
// it, then the change watcher saw it) is skipped, so sessions that began
// under the new epoch are left alone.
func (r *Revoker) Revoke(label string, epoch int64, why string) {
	r.mu.Lock()
	if epoch <= r.applied[label] {
		r.mu.Unlock()
		return
	}
	r.applied[label] = epoch
	r.mu.Unlock()
	cause := &sessions.RevokedError{Node: label, Why: why}
	r.consoles.Cut(label, cause)
	cut, late := r.reg.Cut(label, epoch, cause)
	log := r.log.WithFields(logrus.Fields{"node": safe(label), "epoch": epoch, "why": why, "cut": cut})
	if late > 0 {
		log.WithField("late", late).Warn("sessions_slow_to_end")
		return
	}
	log.Info("access_revoked")
}

// SessionList answers the `sessions` command: the registry's sessions of a
// node, with the console writer marked.
type SessionList struct {
	reg      *sessions.Registry
	consoles Consoles
}

// NewSessionList returns a SessionList.
func NewSessionList(reg *sessions.Registry, consoles Consoles) *SessionList {
	return &SessionList{reg: reg, consoles: consoles}
}

// Sessions lists node's live sessions.
func (l *SessionList) Sessions(node string) []commands.SessionInfo {
	writer := ""
	for _, v := range l.consoles.Viewers(node) {
		if v.Writer {
			writer, _, _ = strings.Cut(strings.TrimPrefix(v.Name, "#"), " ")
		}
	}
	var out []commands.SessionInfo
	for _, s := range l.reg.List(node) {
		out = append(out, commands.SessionInfo{ID: s.ID, Kind: s.Kind, User: s.User, Remote: s.Remote,
			Started: s.Started, Writer: s.ID == writer && writer != ""})
	}
	return out
}

// HTTPConsoles serves obmd's `GET /node/{label}/console`: a read-only viewer
// of the shared console, live output only (no banner, no scrollback, no
// notices), as obmd streamed it.
type HTTPConsoles struct {
	consoles Consoles
}

// NewHTTPConsoles returns an HTTPConsoles.
func NewHTTPConsoles(consoles Consoles) *HTTPConsoles { return &HTTPConsoles{consoles: consoles} }

// Stream copies label's live console output to w, flushing each write, until
// ctx ends, the viewer is cut, or w fails.
func (h *HTTPConsoles) Stream(ctx context.Context, label string, w io.Writer) error {
	v, err := h.consoles.Attach(ctx, label, sol.AttachOptions{Name: "http", ReadOnly: true})
	if err != nil {
		return err
	}
	defer v.Close()
	flush := func() {}
	if f, ok := w.(http.Flusher); ok {
		flush = f.Flush
	}
	for {
		select {
		case ch, ok := <-v.Output():
			if !ok {
				return v.Err()
			}
			if len(ch.Data) == 0 {
				continue
			}
			if _, err := w.Write(ch.Data); err != nil {
				return err
			}
			flush()
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
}

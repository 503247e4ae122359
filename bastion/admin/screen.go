package admin

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/obmd/obmd/sol"
	"github.com/obmd/obmd/sol/screen"
)

// screenWait bounds how long GET .../screen waits for a node's console
// link to come up (the screen is rebuilt from the history then).
const screenWait = 15 * time.Second

// screen is GET /v1/nodes/{label}/screen: what the node's console shows
// now, as the node's terminal emulator holds it, in format=json (default:
// api.Screen), text (the rows, trailing spaces trimmed, one a line) or
// ansi (a redraw for a terminal: clear, the cells with their attributes,
// the cursor). Where this replica has no link of the node it attaches a
// read-only viewer for the time of the request (listed as "admin"), which
// opens one (or relays the holder's): 504 if it does not come up within
// screenWait.
func (a *API) screen(w http.ResponseWriter, r *http.Request) {
	label, valid := pathLabel(w, r)
	if !valid {
		return
	}
	format := r.URL.Query().Get("format")
	switch format {
	case "", "json", "text", "ansi":
	default:
		writeError(w, http.StatusBadRequest, "format must be json, text or ansi")
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), screenWait)
	defer cancel()
	if _, err := a.store.Node(ctx, label); err != nil {
		a.nodeReadFailed(w, r, label, "read node", err)
		return
	}
	s, err := a.nodeScreen(ctx, label)
	switch {
	case err == nil:
	case errors.Is(err, context.DeadlineExceeded) && r.Context().Err() == nil:
		writeError(w, http.StatusGatewayTimeout, "the console of "+quote(label)+" did not come up within "+screenWait.String())
		return
	default:
		a.log.WithError(err).WithField("node", label).Info("admin_screen_failed")
		writeError(w, http.StatusServiceUnavailable, "no screen of "+quote(label)+": "+sol.TenantText(err))
		return
	}
	h := w.Header()
	h.Set("Cache-Control", "no-store")
	switch format {
	case "text":
		h.Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write([]byte(s.Text() + "\n"))
	case "ansi":
		h.Set("Content-Type", "application/octet-stream")
		h.Set("X-Content-Type-Options", "nosniff")
		_, _ = w.Write(s.ANSI())
	default:
		writeJSON(w, http.StatusOK, s) // api.Screen's form (Snapshot.MarshalJSON)
	}
}

// nodeScreen is label's screen: this replica's where it has the node's
// link, else through a viewer attached for it. A viewer cut by an access
// change (a node's first epoch, noticed as it attaches) gives way to a
// new one, once.
func (a *API) nodeScreen(ctx context.Context, label string) (screen.Snapshot, error) {
	s, err := a.consoles.Screen(ctx, label)
	if !errors.Is(err, sol.ErrNoScreen) {
		return s, err
	}
	for try := 0; ; try++ {
		v, err := a.consoles.Attach(ctx, label, sol.AttachOptions{Name: "admin", ReadOnly: true})
		if err != nil {
			return screen.Snapshot{}, err
		}
		s, err = v.Screen(ctx)
		cut := v.Err() != nil
		v.Close()
		if err == nil || !cut || try == 1 || ctx.Err() != nil {
			return s, err
		}
	}
}

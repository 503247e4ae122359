package admin

import (
	"context"
	"errors"
	"io"
	"net/http"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/obmd/obmd/bastion/access/sessions"
	"github.com/obmd/obmd/db"
	"github.com/obmd/obmd/sol"
)

// console is obmd's GET /node/{label}/console: the live console output as a
// chunked byte stream, flushed as it comes, until the client leaves or the
// node's access changes.
func (a *API) console(w http.ResponseWriter, r *http.Request) {
	g, valid := a.tokenAuth(w, r)
	if !valid {
		return
	}
	rc := http.NewResponseController(w)
	// A console stream lasts as long as the client wants: lift the server's
	// write timeout for this response (unsupported writers just keep it).
	// Before the session opens: its watchdog may move the deadline to now.
	_ = rc.SetWriteDeadline(time.Time{})
	// A cut stream whose client stopped reading is blocked in a write (TCP
	// flow control): moving the write deadline to now fails it.
	s, valid := a.session(w, r, &g, sessions.KindHTTPConsole, "", func() { _ = rc.SetWriteDeadline(time.Now()) })
	if !valid {
		return
	}
	defer s.End()
	ctx := s.Context()
	a.auditEvent(r, db.AuditEvent{Node: g.label, Actor: actorToken, Action: "session.start", Result: "ok", Detail: string(sessions.KindHTTPConsole)})
	h := w.Header()
	h.Set("Content-Type", "application/octet-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(http.StatusOK)
	if r.Method == http.MethodHead {
		return
	}
	_ = rc.Flush()
	err := a.stream(ctx, g.label, g.session, flushWriter{w: w, rc: rc})
	a.log.WithFields(logrus.Fields{"node": g.label, "remote": r.RemoteAddr, "cause": causeText(ctx)}).
		WithError(err).Debug("http_console_ended")
}

// stream copies label's live console output to w as a read-only viewer
// (no banner, no scrollback, no notices: the byte stream obmd served),
// until ctx ends, the viewer is cut, or w fails. Other viewers see it as
// "http".
func (a *API) stream(ctx context.Context, label, session string, w io.Writer) error {
	v, err := a.consoles.Attach(ctx, label, sol.AttachOptions{Session: session, Name: "http", ReadOnly: true})
	if err != nil {
		return err
	}
	defer v.Close()
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
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
}

// causeText says why ctx ended, for logs ("" while it has not).
func causeText(ctx context.Context) string {
	if ctx.Err() == nil {
		return ""
	}
	return context.Cause(ctx).Error()
}

// flushWriter flushes every write to the client at once.
type flushWriter struct {
	w  http.ResponseWriter
	rc *http.ResponseController
}

func (f flushWriter) Write(p []byte) (int, error) {
	n, err := f.w.Write(p)
	if err != nil {
		return n, err
	}
	if err := f.rc.Flush(); err != nil && !errors.Is(err, http.ErrNotSupported) {
		return n, err
	}
	return n, nil
}

package webdoor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/coder/websocket"
	"github.com/sirupsen/logrus"

	"github.com/obmd/obmd/bastion/access"
	"github.com/obmd/obmd/bastion/access/sessions"
	"github.com/obmd/obmd/db"
	"github.com/obmd/obmd/sol"
)

// writeTimeout bounds one message to the browser: a browser that stops
// reading loses its socket rather than hold the session (its viewer's
// queue skips ahead meanwhile, so the node and other viewers never wait).
const writeTimeout = 10 * time.Second

// roleCheck is how often the session's role is compared with the one last
// told, besides after a notice (a local takeover tells the displaced
// writer so) and a control message: in cluster mode the writer may change
// on another replica without a notice here. Not after every delivery: that
// would take the node's lock once per chunk per web viewer, on the path
// that fans output out.
const roleCheck = 500 * time.Millisecond

// The SSH door's texts for the same events.
const (
	watchRole = "this session is read-only"
	watchKeys = "this session is read-only: your keys are not sent"
	readOnly  = "read-only: your keys are not sent; Take over to write"
)

// conn is one authenticated socket: the handler's goroutine runs the
// output loop (run); the input reader (input) is a goroutine it starts and
// waits for. Both write to c (coder/websocket allows concurrent writers).
type conn struct {
	s     *Server
	c     *websocket.Conn
	label string
	v     *sol.Viewer
	watch bool // a read-only session: never writes
	log   logrus.FieldLogger
	info  sessions.Info

	// wg holds the input reader: serve waits for it once the socket is
	// closed (which ends its Read).
	wg sync.WaitGroup

	mu   sync.Mutex
	role string // the role last told to the browser
}

// serve opens the login's session, attaches it to the console and runs it
// until the browser leaves or the session is cut; on a cut the browser is
// told why before the socket closes.
func (s *Server) serve(r *http.Request, c *websocket.Conn, label string, lg login) {
	info := sessions.Info{Node: label, Kind: sessions.KindWeb, User: lg.user, Remote: r.RemoteAddr,
		Epoch: lg.epoch, Mark: lg.mark}
	// A cut session whose browser stops reading is unblocked by closing
	// its connection (the watchdog, after access.CutGrace).
	sess, err := s.sessions.Open(r.Context(), info, remoteHost(r.RemoteAddr), func() { c.CloseNow() })
	if err != nil {
		s.refuse(c, s.openError(err))
		return
	}
	if s.cfg.Authenticated != nil {
		s.cfg.Authenticated(r.Context())
	}
	sctx := sess.Context()
	info = sess.Info()
	k := &conn{s: s, c: c, label: label, watch: lg.readOnly, info: info,
		log: s.log.WithFields(logrus.Fields{"node": safe(label), "remote": r.RemoteAddr, "session": info.ID})}
	began := s.cfg.Now()
	k.log.WithField("kind", sessions.KindWeb).Info("session_start")
	k.audit(sctx, "session.start", "ok", string(sessions.KindWeb))
	cause := k.run(sctx)
	result, why := "ok", ""
	if access.IsCut(cause) {
		result, why = "cut", "; cut: "+cutReason(cause)
		k.send(closedMsg{Type: typeClosed, Reason: cutReason(cause), Text: cause.Error()})
	}
	sess.Finish() // its last words are sent: the cut watchdog stands down
	took := s.cfg.Now().Sub(began).Round(time.Millisecond)
	k.log.WithFields(logrus.Fields{"kind": sessions.KindWeb, "took": took}).Info("session_end")
	k.audit(sctx, "session.end", result, fmt.Sprintf("%s after %v%s", sessions.KindWeb, took, why))
	sess.End()
	c.Close(websocket.StatusNormalClosure, "")
	k.wg.Wait()
}

// openError is what the browser is told when its session cannot start.
func (s *Server) openError(err error) string {
	switch {
	case errors.Is(err, sessions.ErrTooMany), errors.Is(err, sessions.ErrBusy), access.IsCut(err):
		return err.Error() // safe texts
	case errors.Is(err, access.ErrUnverified):
		s.log.WithError(err).Error("epoch_check_failed")
		return "cannot verify access right now; try again"
	}
	return "cannot start the session"
}

// run attaches the session to the console and copies its output to the
// browser until the browser leaves (nil), the viewer ends, or the session
// is cut (the cause).
func (k *conn) run(sctx context.Context) error {
	// The page is a terminal: as for an SSH PTY viewer, the attach replay
	// is the node's screen redrawn (if it shows something), then live output.
	v, err := k.s.consoles.Attach(sctx, k.label, sol.AttachOptions{Session: k.info.ID, ReadOnly: k.watch,
		Replay: true, Epoch: k.info.Epoch, Screen: true})
	if err != nil {
		if sctx.Err() != nil {
			return context.Cause(sctx)
		}
		k.log.WithError(err).Error("console_attach_failed")
		k.notice("cannot attach to the console of " + safe(k.label))
		return err
	}
	defer v.Close()
	k.v = v
	if d := k.s.cfg.RoleWait; d > 0 {
		wctx, cancel := context.WithTimeout(sctx, d)
		v.AwaitRole(wctx)
		cancel()
	}
	k.mu.Lock()
	k.role = k.currentRole()
	k.mu.Unlock()
	if !k.send(helloMsg{Type: typeHello, Node: k.label, Role: k.role, Session: k.info.ID, ReadOnly: k.watch,
		Viewers: k.others()}) {
		return nil
	}
	k.c.SetReadLimit(k.s.cfg.MaxMessage)
	gone := make(chan struct{}) // closed by the reader when the browser leaves
	k.wg.Go(func() {            // waited for by serve, after it closed the socket
		defer close(gone)
		k.input(sctx)
	})
	tick := time.NewTicker(roleCheck)
	defer tick.Stop()
	for {
		select {
		case ch, ok := <-v.Output():
			if !ok {
				err := v.Err()
				if !access.IsCut(err) {
					k.notice(sol.TenantText(err))
				}
				return err
			}
			if ch.Skipped > 0 {
				k.notice(fmt.Sprintf("%d bytes skipped: this connection is too slow", ch.Skipped))
			}
			if ch.Notice != "" {
				k.notice(ch.Notice)
				k.syncRole() // a displaced writer is told by a notice
			}
			data := ch.Data
			if len(ch.Screen) > 0 {
				data = ch.Screen // the attach replay, redrawn
			}
			if len(data) > 0 && !k.write(websocket.MessageBinary, data) {
				return nil
			}
		case <-tick.C:
			k.syncRole()
		case <-gone:
			return context.Cause(sctx) // nil unless cut meanwhile
		case <-sctx.Done():
			return context.Cause(sctx)
		}
	}
}

// input reads the browser's messages until the socket closes (not at the
// cut: a cancelled Read would close the socket before the browser is told
// why): binary ones
// are keystrokes (never sent by a read-only session, nor by a reader),
// text ones control messages.
func (k *conn) input(sctx context.Context) {
	var lastHint time.Time
	hint := func(msg string) {
		if time.Since(lastHint) > 5*time.Second {
			lastHint = time.Now()
			k.notice(msg)
		}
	}
	for {
		typ, data, err := k.c.Read(context.Background())
		if err != nil {
			return
		}
		if typ == websocket.MessageBinary {
			switch {
			case len(data) == 0:
			case k.watch:
				hint(watchKeys)
			default:
				if _, err := k.v.Write(data); errors.Is(err, sol.ErrReadOnly) {
					hint(readOnly)
				}
			}
			continue
		}
		var m controlMsg
		if err := json.Unmarshal(data, &m); err != nil {
			k.notice("ignored a message that is not JSON")
			continue
		}
		k.control(sctx, m)
	}
}

// control acts on a control message.
func (k *conn) control(sctx context.Context, m controlMsg) {
	switch {
	case m.Type == "resize":
		// A serial console has no window size (the SSH door accepts
		// window changes and ignores them too).
	case k.watch && (m.Type == "take" || m.Type == "release" || m.Type == "break"):
		k.notice(watchRole)
	case m.Type == "take":
		k.v.TakeWrite()
		k.syncRole()
	case m.Type == "release":
		k.v.ReadOnly()
		k.syncRole()
	case m.Type == "break":
		ctx, cancel := context.WithTimeout(sctx, 5*time.Second)
		defer cancel()
		if err := k.v.Break(ctx); err != nil {
			k.log.WithError(err).Info("break_failed")
			k.notice("break not sent: " + sol.TenantText(err))
			return
		}
		k.notice("break sent")
		k.audit(ctx, "console.break", "ok", "")
	default:
		k.notice("ignored an unknown message")
	}
}

// currentRole is the session's role now.
func (k *conn) currentRole() string {
	if k.v.Writer() {
		return roleWriter
	}
	return roleReader
}

// syncRole tells the browser its role when it changed since last told.
func (k *conn) syncRole() {
	k.mu.Lock()
	defer k.mu.Unlock()
	if r := k.currentRole(); r != k.role {
		k.role = r
		k.send(roleMsg{Type: typeRole, Role: r})
	}
}

// others are the node's other viewers as the hello names them (by
// session, as `sessions` lists them; the writer marked, wherever it is).
func (k *conn) others() []string {
	out := sol.Others(k.s.consoles.Viewers(k.label), k.s.consoles.Writer(k.label), k.v.Who())
	if out == nil {
		return []string{} // a JSON list, never null
	}
	return out
}

func (k *conn) notice(text string) { k.send(noticeMsg{Type: typeNotice, Text: text}) }

// send writes a JSON control message; false if the socket failed.
func (k *conn) send(m any) bool {
	b, err := json.Marshal(m)
	if err != nil {
		return false
	}
	return k.write(websocket.MessageText, b)
}

func (k *conn) write(typ websocket.MessageType, b []byte) bool {
	ctx, cancel := context.WithTimeout(context.Background(), writeTimeout)
	defer cancel()
	return k.c.Write(ctx, typ, b) == nil
}

func (k *conn) audit(ctx context.Context, action, result, detail string) {
	k.s.audit(ctx, db.AuditEvent{Node: safe(k.label), Actor: actor, Action: action, Source: k.info.Remote,
		Result: result, Detail: detail})
}

// cutReason is why a session was cut, as the SSH door's audit says it:
// the access change ("token rotated"), "kicked by admin", or the cause's
// text.
func cutReason(cause error) string {
	var r *sessions.RevokedError
	if errors.As(cause, &r) {
		return r.Why
	}
	return cause.Error()
}

package webdoor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/coder/websocket"
	"github.com/sirupsen/logrus"

	"github.com/obmd/obmd/db"
	"github.com/obmd/obmd/keys"
)

// actor is the web door's audit actor, and its sessions' kind.
const actor = "web"

// errBadCredential is the one answer to a failed login: an unknown node, a
// node without a token, a wrong token, and a ticket that is unknown, used,
// expired, for another node or from before an access change, alike.
const errBadCredential = "unknown node or invalid credential"

// login is what a successful login established.
type login struct {
	user     string // "token" or "ticket"
	epoch    int64  // the node's access epoch the credential was checked at
	mark     uint64 // Sessions.Mark taken before that read
	readOnly bool   // the page asked for a read-only session
}

// socket is GET /nodes/{label}/ws: a browser's console. The handler's
// goroutine owns the socket: it logs in, serves the session (console.go)
// and closes it.
func (s *Server) socket(w http.ResponseWriter, r *http.Request) {
	label := r.PathValue("label")
	if origin := r.Header.Get("Origin"); !s.originOK(r, origin) {
		s.deny(label, r.RemoteAddr, "web", "origin not allowed: "+safe(origin))
		http.Error(w, "origin not allowed", http.StatusForbidden)
		return
	}
	if !s.enter() {
		http.Error(w, "obmd is shutting down", http.StatusServiceUnavailable)
		return
	}
	defer s.wg.Done()
	// The origin was checked above, against the public URL too.
	c, err := websocket.Accept(w, r, &websocket.AcceptOptions{InsecureSkipVerify: true})
	if err != nil {
		return // Accept answered
	}
	defer c.CloseNow()
	c.SetReadLimit(maxFirstMessage)
	lg, ok := s.login(r, c, label)
	if !ok {
		return
	}
	s.serve(r, c, label, lg)
}

// enter counts a socket in wg unless the server is shutting down.
func (s *Server) enter() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	s.wg.Add(1)
	return true
}

// originOK reports whether a WebSocket's Origin is the page's own: the
// request's host (or the public URL's), on http or https. A browser always
// sends one; a socket without one is refused too.
func (s *Server) originOK(r *http.Request, origin string) bool {
	u, err := url.Parse(origin)
	if err != nil || origin == "" || (u.Scheme != "http" && u.Scheme != "https") || u.Path != "" {
		return false
	}
	if s.public != nil && u.Scheme == s.public.Scheme && strings.EqualFold(u.Host, s.public.Host) {
		return true
	}
	return strings.EqualFold(u.Host, r.Host)
}

// login reads the socket's credential, within Config.PreAuthTimeout, and
// checks it as the SSH door checks a token: the limiter's try held, one
// lookup, one hash and compare (or one ticket redeemed) whatever the node,
// and a failure answered no sooner than FailDelay after the credential
// came, with the same text. On failure it has answered and closed.
func (s *Server) login(r *http.Request, c *websocket.Conn, label string) (login, bool) {
	// The deadline refuses the socket from a timer, as a cancelled Read
	// would close it without a word.
	fired := make(chan struct{})
	t := time.AfterFunc(s.cfg.PreAuthTimeout, func() { // waited for below when it ran
		defer close(fired)
		s.log.WithFields(logrus.Fields{"node": safe(label), "remote": r.RemoteAddr}).Info("web_preauth_timeout")
		s.refuse(c, fmt.Sprintf("no credential within %v", s.cfg.PreAuthTimeout))
	})
	typ, data, err := c.Read(s.base) // Shutdown closes it
	if !t.Stop() {
		<-fired
		return login{}, false
	}
	if err != nil {
		return login{}, false // the client left, sent too much (closed with 1009), or obmd is stopping
	}
	cred, err := parseCredential(data)
	if typ != websocket.MessageText || err != nil {
		s.refuse(c, errBadFirst.Error())
		return login{}, false
	}
	start := s.cfg.Now()
	method, user := "web-token", "token"
	if cred.Ticket != "" {
		method, user = "web-ticket", "ticket"
	}
	host := remoteHost(r.RemoteAddr)
	if ok, first := s.cfg.Limiter.Begin(r.Context(), host); !ok {
		s.limited(label, r.RemoteAddr, method, "source", first)
		return s.failed(c, start, errBadCredential)
	}
	mark := s.sessions.Mark()
	acc, err := s.store.AccessAt(r.Context(), label, mark)
	if err != nil && !errors.Is(err, db.ErrNotFound) {
		s.cfg.Limiter.End(host, label, false, false) // not the client's failure
		s.log.WithError(err).WithField("node", safe(label)).Error("auth_lookup_failed")
		s.deny(label, r.RemoteAddr, method, "database unavailable")
		return s.failed(c, start, "cannot verify access right now; try again")
	}
	exists := err == nil
	if ok, first := s.cfg.Limiter.Judge(host, label, exists); !ok {
		// As the SSH door: a failure of the source, answered as a wrong
		// credential, so that it tells nothing of which names are nodes.
		s.cfg.Limiter.End(host, label, exists, true)
		s.limited(label, r.RemoteAddr, method, "node", first)
		return s.failed(c, start, errBadCredential)
	}
	match, why, err := s.check(r.Context(), label, cred, acc, exists)
	if err != nil {
		s.cfg.Limiter.End(host, label, exists, false)
		s.log.WithError(err).WithField("node", safe(label)).Error("auth_lookup_failed")
		s.deny(label, r.RemoteAddr, method, "database unavailable")
		return s.failed(c, start, "cannot verify access right now; try again")
	}
	if !match {
		s.cfg.Limiter.End(host, label, exists, true)
		s.deny(label, r.RemoteAddr, method, why)
		return s.failed(c, start, errBadCredential)
	}
	s.cfg.Limiter.End(host, label, true, false)
	s.observe(method, "ok")
	s.audit(r.Context(), db.AuditEvent{Node: safe(label), Actor: actor, Action: "auth", Source: r.RemoteAddr,
		Result: "ok", Detail: user})
	return login{user: user, epoch: acc.Epoch, mark: mark, readOnly: cred.ReadOnly}, true
}

// check compares the credential with the node's access: a token with its
// hash in constant time (hashed and compared even when there is nothing
// to match), a ticket by redeeming it (used up whatever follows), good only
// for this node at its current epoch. why says what failed, for the audit.
func (s *Server) check(ctx context.Context, label string, cred credential, acc db.Access, exists bool) (bool, string, error) {
	if cred.Token != "" {
		match := acc.Token.Equal(keys.HashToken(cred.Token)) && acc.HasToken && exists
		switch {
		case match:
			return true, "", nil
		case !exists:
			return false, "unknown node", nil
		case !acc.HasToken:
			return false, "no token issued", nil
		}
		return false, "wrong token", nil
	}
	t, err := s.store.RedeemWebTicket(ctx, keys.HashToken(cred.Ticket))
	switch {
	case errors.Is(err, db.ErrNotFound):
		return false, "unknown, used or expired ticket", nil
	case err != nil:
		return false, "", err
	case !exists:
		return false, "unknown node", nil
	case t.Node != label:
		return false, "ticket for another node", nil
	case t.Epoch != acc.Epoch:
		return false, "ticket from before an access change", nil
	}
	return true, "", nil
}

// failed answers a failed login started at start, no sooner than
// FailDelay after it, and closes the socket.
func (s *Server) failed(c *websocket.Conn, start time.Time, msg string) (login, bool) {
	if d := s.cfg.FailDelay - s.cfg.Now().Sub(start); d > 0 {
		t := time.NewTimer(d)
		select {
		case <-t.C:
		case <-s.base.Done():
		}
		t.Stop()
	}
	s.refuse(c, msg)
	return login{}, false
}

// refuse sends an error message and closes the socket (policy violation).
func (s *Server) refuse(c *websocket.Conn, msg string) {
	ctx, cancel := context.WithTimeout(context.Background(), writeTimeout)
	defer cancel()
	if b, err := json.Marshal(errorMsg{Type: typeError, Error: msg}); err == nil {
		c.Write(ctx, websocket.MessageText, b)
	}
	c.Close(websocket.StatusPolicyViolation, "refused")
}

// deny records a failed login: the metric, an Info line and an audit row.
func (s *Server) deny(label, remote, method, why string) {
	s.observe(method, "denied")
	s.log.WithFields(logrus.Fields{"node": safe(label), "remote": remote, "method": method, "reason": why}).Info("auth_denied")
	s.audit(context.Background(), db.AuditEvent{Node: safe(label), Actor: actor, Action: "auth",
		Source: remote, Result: "denied", Detail: why})
}

// limited records a login the limiter refused: the first refusal of a
// lockout is audited as a denial; the rest are counted and logged at
// Debug, so that a locked-out flood writes nothing to the database.
func (s *Server) limited(label, remote, method, which string, first bool) {
	why := "rate limited (" + which + ")"
	if first {
		s.deny(label, remote, method, why)
		return
	}
	s.observe(method, "denied")
	s.log.WithFields(logrus.Fields{"node": safe(label), "remote": remote, "method": method, "reason": why}).Debug("auth_refused")
}

// remoteHost is the address part of a remote address.
func remoteHost(addr string) string {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return addr
	}
	return host
}

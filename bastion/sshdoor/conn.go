package sshdoor

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gliderlabs/ssh"
	"github.com/sirupsen/logrus"
	gossh "golang.org/x/crypto/ssh"

	"github.com/obmd/obmd/bastion/access"
	"github.com/obmd/obmd/bastion/access/sessions"
	"github.com/obmd/obmd/db"
)

// conn is one SSH connection, from its admission to its close. Its life,
// in the order this file follows it:
//
//   - admitted (connected, gliderlabs's ConnCallback): it holds a place in
//     the admission (preauth.go), which closes it at the login grace time
//     or to make room for a newer one; its first bytes (countedConn.Read)
//     and its first auth request (authenticating) move it up the
//     admission's order.
//   - authenticated (authenticated): the auth method that grants the
//     login (auth.go; cert.go for a certificate) ends here: the admission
//     lets it go, and the login is audited.
//   - watched (watch): the registry tells it of what ends its credential.
//   - cut (revoked): no channel opens on it any more, one that started no
//     session ends, and it is closed once its last session channel has
//     ended (channelEnded), or at closeCutBound.
//   - closed (ended, when gliderlabs closes it: countedConn.Close): its
//     place in the admission is given back, the watch forgotten, its cut
//     audited, and a login it left unfinished recorded (auth.go).
//
// Goroutines: a conn has none of its own. Its auth callbacks run one at a
// time on gliderlabs's handshake goroutine; channelOpened and
// channelEnded on the channels' goroutines (session.go); revoked in the
// registry's cut, on its timer's goroutine at a certificate's expiry, or
// on the handshake goroutine (watch); closeCut also on a timer's goroutine
// (the backstop). The admission and closeCut close
// only the socket under the connection, which ends gliderlabs's reads;
// ended runs once, on whichever goroutine closes the connection as the
// server reads it (gliderlabs's, once done with it, or a session's that
// unblocks itself: channel.closeConn), possibly before the channels'
// goroutines have returned.
//
// Locks: mu is a leaf. Nothing else is locked, called or written while it
// is held (the registry calls revoked outside its own lock).
type conn struct {
	s      *Server
	sock   *countedConn // the connection as the server reads it
	ticket *ticket      // its place in Server.admit
	remote string       // the client's address
	src    string       // its sessions.SourceKey

	// Set once by authenticated, before the registry watches the
	// connection or any channel opens: who logged in, and the log of
	// everything that happens to the connection from then on (with the
	// node, the client, the certificate if any).
	a    *authInfo
	node string
	log  logrus.FieldLogger

	mu    sync.Mutex
	tries attempts // what it did to authenticate (auth.go)
	// settled: nothing is left to record when the connection ends (it
	// authenticated, or a try was recorded when it was made).
	settled  bool
	forget   func()      // forgets the registry's watch (watch); nil if none
	done     bool        // the connection has closed (unwatch ran)
	backstop *time.Timer // closes it once cut, if its channels have not (revoked)

	// chans counts the connection's open session channels.
	chans atomic.Int32
	// cut is why the connection must close (revoked); nil until then.
	// It is closed once it holds no session channel (closeCut, once).
	cut       atomic.Pointer[error]
	cutC      chan struct{} // closed once cut: a channel with no session yet ends
	cutOnce   sync.Once
	closeOnce sync.Once
	// closed is the audit row of the cut that closed it (closeCut),
	// written once it has ended; nil if none did.
	closed atomic.Pointer[db.AuditEvent]
}

type connKey struct{} // *conn, set by connected

// connFrom is ctx's connection (set by connected, before any callback).
func connFrom(ctx ssh.Context) *conn { return ctx.Value(connKey{}).(*conn) }

// ---- admitted ----

// connected admits a new connection: its client is the PROXY header's when
// it comes from a listed balancer (realClient), and the admission bounds the
// time it may take to authenticate and how many such connections there
// are. It also turns delayed ACKs off (quickAck): they stall OpenSSH's
// handshake.
func (s *Server) connected(ctx ssh.Context, nc net.Conn) net.Conn {
	raw := nc
	nc, ok := s.realClient(quickAck(nc))
	if !ok {
		return nil // gliderlabs closes it
	}
	src := sessions.SourceKey(remoteHost(nc.RemoteAddr()))
	t := s.admit.admit(src, raw.Close)
	if t == nil {
		s.tooMany(nc.RemoteAddr())
		return nil
	}
	c := &conn{s: s, ticket: t, remote: nc.RemoteAddr().String(), src: src, cutC: make(chan struct{})}
	c.sock = &countedConn{Conn: nc, spoke: func() { s.admit.advance(t, speaking) }, ended: c.ended}
	ctx.SetValue(connKey{}, c)
	return c.sock
}

// countedConn runs spoke once the client has sent its first bytes (the
// admission then displaces it after silent connections), and ended once it
// is closed (gliderlabs closes every connection it handles, once done).
// The socket is closed first, so the client is not held while ended
// writes.
type countedConn struct {
	net.Conn
	heard atomic.Bool
	spoke func()
	once  sync.Once
	ended func()
}

func (c *countedConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 && !c.heard.Load() {
		c.heard.Store(true)
		c.spoke()
	}
	return n, err
}

func (c *countedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.ended)
	return err
}

// authenticating notes that the client has sent its first auth request
// (x/crypto asks for the banner then): its key exchange is done.
func (c *conn) authenticating() { c.s.admit.advance(c.ticket, authenticating) }

// settle records that nothing is left to record when the connection ends.
func (c *conn) settle() {
	c.mu.Lock()
	c.settled = true
	c.mu.Unlock()
}

// ---- authenticated ----

// authenticated grants the login a established for ctx.User(): the
// connection leaves the admission (no login grace time any more), the
// login is counted and audited, and the registry watches the connection.
func (c *conn) authenticated(ctx ssh.Context, a *authInfo) {
	if a.Actor == "" {
		a.Actor = "ssh:" + a.Method
	}
	if a.Detail == "" {
		a.Detail = a.User
	}
	s := c.s
	c.a, c.node = a, ctx.User()
	c.log = s.log.WithFields(logrus.Fields{"node": safe(c.node), "remote": c.remote})
	if a.Cert != nil {
		c.log = c.log.WithField("cert", a.Cert.grant.Who())
	}
	c.settle()
	s.admit.authenticated(c.ticket)
	if s.cfg.OnAuth != nil {
		s.cfg.OnAuth(a.Method, "ok")
	}
	s.audit(ctx, db.AuditEvent{Node: safe(c.node), Actor: a.Actor, Action: "auth",
		Source: remoteString(ctx), Result: "ok", Detail: a.Detail})
	c.watch(ctx) // after the login's row: it may close the connection at once
}

// login is who logged in on the connection; nil before it authenticated.
func (c *conn) login() *authInfo { return c.a }

// ---- watched ----

// Authenticated connections end with their credential. The registry
// watches each (Sessions.WatchConn) and tells it of the first thing that
// ends its sessions: an access change of its node (every login method), a
// credential change that names its certificate (a serial or key id
// revoked, its CA removed), its certificate's expiry, or a cut of every
// session. The connection is then closed: at once if it holds no session
// (`ssh -N`, an idle ControlMaster), else once its last session has ended
// (the sessions are cut and say why first: closing the connection under
// them would lose their exit status). No channel is opened on it in
// between, one that started no session ends at once, and the connection
// is closed at closeCutBound whatever its channels do. So no revoked
// credential keeps a connection, or its place under the connection caps,
// open.

// watch has the registry tell the connection of what ends it (revoked). A
// change this replica applied between the login's read and the watch's
// registration told no one: if it has cut anything since the login's
// Mark, the read is made again, and the connection is cut now if its
// credential no longer holds (or cannot be verified: it fails closed).
func (c *conn) watch(ctx context.Context) {
	s, a := c.s, c.a
	w := sessions.Conn{Node: c.node, Epoch: a.Epoch}
	if cl := a.Cert; cl != nil {
		w.Cert, w.Expires = cl.certInfo(), cl.grant.Expires
	}
	forget := s.sessions.WatchConn(w, c.revoked)
	c.mu.Lock()
	done := c.done
	if !done {
		c.forget = forget
	}
	c.mu.Unlock()
	if done {
		forget()
		return
	}
	if a.Mark != 0 && s.sessions.Mark() == a.Mark {
		return // nothing cut since the read: a later cut finds the watch
	}
	err := c.stillHolds(ctx)
	var revoked *sessions.RevokedError
	if err != nil && !errors.As(err, &revoked) {
		s.log.WithError(err).WithField("node", safe(c.node)).Error("connection_check_failed")
		err = access.ErrUnverified // the chain is for the log only
	}
	if err != nil {
		forget()
		c.revoked(err)
	}
}

// stillHolds makes the login's read again: nil if its credential still
// holds, a *sessions.RevokedError if not, another error if the database
// did not answer.
func (c *conn) stillHolds(ctx context.Context) error {
	s, a := c.s, c.a
	if a.Cert != nil {
		return s.certHolds(ctx, c.node, a, s.log.WithFields(logrus.Fields{"node": safe(c.node), "method": a.Method}))
	}
	// A token rotated or revoked, a key removed: each moves the epoch.
	acc, err := s.store.AccessAt(ctx, c.node, s.sessions.Mark()) // a read at the mark of now
	if err == nil && acc.Epoch == a.Epoch {
		return nil
	}
	return staleAccess(c.node, err)
}

// staleAccess is why a login to label no longer holds, as a read made
// again found (err, or nil: the node's epoch moved): a
// *sessions.RevokedError, or err wrapped if the database did not answer.
func staleAccess(label string, err error) error {
	switch {
	case err == nil:
		return &sessions.RevokedError{Node: label, Why: "access changed"}
	case errors.Is(err, db.ErrNotFound):
		return &sessions.RevokedError{Node: label, Why: "node deleted"}
	}
	return fmt.Errorf("verify access to %s: %w", safe(label), err)
}

// ---- cut ----

// closeCutBound bounds how long a cut connection stays open for its
// channels: its sessions are cut, and each has CutGrace before its
// connection is closed under it (access.Revoker.Open); a channel that
// never started one ends at the cut (channel.serve). A client that does not
// close its channels (never answers their close) is closed at the bound.
const closeCutBound = 8 * access.CutGrace

// revoked marks the connection cut with cause, and closes it if it holds
// no session channel; otherwise the last one to end closes it
// (channelEnded), or the bound (closeCutBound). Each side sets its own
// mark (cut, the channel count) before it reads the other's, so at least
// one of them closes it. It may run in the registry's cut, which tells
// every connection before it cuts any session: it never waits.
func (c *conn) revoked(cause error) {
	c.cut.CompareAndSwap(nil, &cause)
	c.cutOnce.Do(func() {
		close(c.cutC)
		t := time.AfterFunc(closeCutBound, c.closeCut)
		c.mu.Lock()
		c.backstop = t
		done := c.done
		c.mu.Unlock()
		if done { // unwatch ran before it was set: nothing stops it
			t.Stop()
		}
	})
	if n := c.chans.Load(); n > 0 {
		c.log.WithFields(logrus.Fields{"sessions": n, "why": cause.Error()}).Info("connection_revoked_closing_after_sessions")
		return
	}
	c.closeCut()
}

// channelOpened counts a new session channel, and says whether it may
// open: not past MaxChannels, nor once the connection is cut (it then
// closes once no channel is open). Either way the caller calls
// channelEnded once done with it.
func (c *conn) channelOpened() (why gossh.RejectionReason, msg string, ok bool) {
	if c.chans.Add(1) > int32(c.s.cfg.MaxChannels) {
		return gossh.ResourceShortage, fmt.Sprintf("at most %d sessions per connection", c.s.cfg.MaxChannels), false
	}
	if cut := c.cutCause(); cut != nil {
		return gossh.Prohibited, cut.Error(), false
	}
	return 0, "", true
}

// channelEnded counts a session channel as ended (or refused); the last
// one of a connection that was cut closes it.
func (c *conn) channelEnded() {
	if c.chans.Add(-1) == 0 && c.cutCause() != nil {
		c.closeCut()
	}
}

// cutCause is why the connection was cut; nil if it was not.
func (c *conn) cutCause() error {
	if p := c.cut.Load(); p != nil {
		return *p
	}
	return nil
}

// closeCut closes the connection, which was cut, once: logged, and
// audited (conn.close, result cut) with the reason its sessions are given.
// It may run in the registry's cut: so it only closes the socket, and the
// row is written when the connection has ended (ended), so that a
// database that does not answer holds no cut.
func (c *conn) closeCut() {
	c.closeOnce.Do(func() {
		why := c.cutCause().Error()
		c.log.WithField("why", why).Info("connection_closed_revoked")
		c.closed.Store(&db.AuditEvent{Node: safe(c.node), Actor: c.a.Actor, Action: "conn.close",
			Source: c.remote, Result: "cut", Detail: why})
		c.sock.Conn.Close() // gliderlabs then closes c.sock: ended
	})
}

// ---- closed ----

// ended runs once the connection has closed, whoever closed it: it gives
// back its place in the admission, forgets the registry's watch, writes
// the row of the cut that closed it, and records a login it left
// unfinished (auth.go).
func (c *conn) ended() {
	c.s.admit.end(c.ticket)
	c.unwatch()
	if e := c.closed.Load(); e != nil {
		c.s.audit(context.Background(), *e)
	}
	c.unfinished()
}

// unwatch forgets the registry's watch of the connection, which has
// closed; a watch set later is forgotten at once (watch).
func (c *conn) unwatch() {
	c.mu.Lock()
	f, b := c.forget, c.backstop
	c.forget, c.done = nil, true
	c.mu.Unlock()
	if f != nil {
		f()
	}
	if b != nil {
		b.Stop()
	}
}

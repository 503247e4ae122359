package sshdoor

import (
	"context"
	"errors"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/obmd/obmd/bastion/access"
	"github.com/obmd/obmd/bastion/access/sessions"
	"github.com/obmd/obmd/db"
)

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

// watch has the registry tell the connection st, which a logged in to
// node, of what ends it (connRevoked). A change this replica applied
// between the login's read and the watch's registration told no one: if
// it has cut anything since the login's Mark, the read is made again, and
// the connection is cut now if its credential no longer holds (or cannot
// be verified: it fails closed).
func (s *Server) watch(ctx context.Context, st *connState, node string, a *authInfo) {
	c := sessions.Conn{Node: node, Epoch: a.Epoch}
	if cl := a.Cert; cl != nil {
		c.Cert, c.Expires = cl.certInfo(), cl.grant.Expires
	}
	forget := s.sessions.WatchConn(c, func(cause error) { s.connRevoked(st, node, a, cause) })
	st.mu.Lock()
	ended := st.ended
	if !ended {
		st.forget = forget
	}
	st.mu.Unlock()
	if ended {
		forget()
		return
	}
	if a.Mark != 0 && s.sessions.Mark() == a.Mark {
		return // nothing cut since the read: a later cut finds the watch
	}
	err := s.stillHolds(ctx, node, a)
	var revoked *sessions.RevokedError
	if err != nil && !errors.As(err, &revoked) {
		s.log.WithError(err).WithField("node", safe(node)).Error("connection_check_failed")
		err = access.ErrUnverified // the chain is for the log only
	}
	if err != nil {
		forget()
		s.connRevoked(st, node, a, err)
	}
}

// stillHolds makes a login's read again: nil if its credential still
// holds, a *sessions.RevokedError if not, another error if the database
// did not answer.
func (s *Server) stillHolds(ctx context.Context, node string, a *authInfo) error {
	log := s.log.WithFields(logrus.Fields{"node": safe(node), "method": a.Method})
	if a.Cert != nil {
		return s.certHolds(ctx, node, a, log)
	}
	// A token rotated or revoked, a key removed: each moves the epoch.
	acc, err := s.store.AccessAt(ctx, node, s.sessions.Mark()) // a read at the mark of now
	if err == nil && acc.Epoch == a.Epoch {
		return nil
	}
	return staleAccess(node, err)
}

// closeCutBound bounds how long a cut connection stays open for its
// channels: its sessions are cut, and each has CutGrace before its
// connection is closed under it (access.Revoker.Open); a channel that
// never started one ends at the cut (channel.serve). A client that does not
// close its channels (never answers their close) is closed at the bound.
const closeCutBound = 8 * access.CutGrace

// connRevoked marks the connection st cut with cause, and closes it if it
// holds no session channel; otherwise the last one to end closes it
// (channelEnded), or the bound (closeCutBound). Each side sets its own
// mark (cut, the channel count) before it reads the other's, so at least
// one of them closes it.
func (s *Server) connRevoked(st *connState, node string, a *authInfo, cause error) {
	st.cut.CompareAndSwap(nil, &cause)
	st.cutOnce.Do(func() {
		close(st.cutC)
		t := time.AfterFunc(closeCutBound, func() { s.closeCut(st, node, a) })
		st.mu.Lock()
		st.backstop = t
		ended := st.ended
		st.mu.Unlock()
		if ended { // unwatch ran before it was set: nothing stops it
			t.Stop()
		}
	})
	if n := st.chans.Load(); n > 0 {
		s.log.WithFields(logrus.Fields{"node": safe(node), "remote": st.remote, "sessions": n, "why": cause.Error()}).
			WithFields(certFields(a.Cert)).Info("connection_revoked_closing_after_sessions")
		return
	}
	s.closeCut(st, node, a)
}

// channelEnded counts a session channel of st (logged in to node) as ended (or refused); the
// last one of a connection that was cut closes it.
func (s *Server) channelEnded(st *connState, node string, a *authInfo) {
	if st.chans.Add(-1) == 0 && st.cut.Load() != nil {
		s.closeCut(st, node, a)
	}
}

// closeCut closes the connection st, which was cut, once: logged, and
// audited (conn.close, result cut) with the reason its sessions are given.
// It may run in the registry's cut, which tells every connection before it
// cuts any session: so it only closes the socket, and the row is written
// when the connection ends, in its own goroutine (connected), so that a
// database that does not answer holds no cut.
func (s *Server) closeCut(st *connState, node string, a *authInfo) {
	st.closeOnce.Do(func() {
		why := (*st.cut.Load()).Error()
		s.log.WithFields(logrus.Fields{"node": safe(node), "remote": st.remote, "why": why}).
			WithFields(certFields(a.Cert)).Info("connection_closed_revoked")
		st.closed.Store(&db.AuditEvent{Node: safe(node), Actor: a.Actor, Action: "conn.close",
			Source: st.remote, Result: "cut", Detail: why})
		st.conn.Conn.Close()
	})
}

// auditClosed writes the row of a connection closeCut closed, once it has
// ended.
func (s *Server) auditClosed(st *connState) {
	if e := st.closed.Load(); e != nil {
		s.audit(context.Background(), *e)
	}
}

package bastion

import (
	"context"

	"github.com/sirupsen/logrus"

	"github.com/obmd/obmd/bastion/sessions"
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
// between. So no revoked credential keeps a connection, or its place
// under the connection caps, open.

// watch has the registry tell the connection st, which a logged in to
// node, of what ends it (connRevoked).
func (s *Server) watch(st *connState, node string, a *authInfo) {
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
	}
}

// connRevoked marks the connection st cut with cause, and closes it if it
// holds no session channel; otherwise the last one to end closes it
// (channelEnded). Each side sets its own mark (cut, the channel count)
// before it reads the other's, so at least one of them closes it.
func (s *Server) connRevoked(st *connState, node string, a *authInfo, cause error) {
	st.cut.Store(&cause)
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

// closeCut closes the connection st, which was cut, once: logged and
// audited (conn.close, result cut) with the reason its sessions are given.
func (s *Server) closeCut(st *connState, node string, a *authInfo) {
	st.closeOnce.Do(func() {
		why := (*st.cut.Load()).Error()
		s.log.WithFields(logrus.Fields{"node": safe(node), "remote": st.remote, "why": why}).
			WithFields(certFields(a.Cert)).Info("connection_closed_revoked")
		s.audit(context.Background(), db.AuditEvent{Node: safe(node), Actor: a.Actor, Action: "conn.close",
			Source: st.remote, Result: "cut", Detail: why})
		st.conn.Close()
	})
}

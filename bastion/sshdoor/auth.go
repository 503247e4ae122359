package sshdoor

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gliderlabs/ssh"
	"github.com/sirupsen/logrus"
	gossh "golang.org/x/crypto/ssh"

	"github.com/obmd/obmd/db"
	"github.com/obmd/obmd/keys"
	"github.com/obmd/obmd/sol/printable"
)

type (
	stateKey struct{} // *connState, set by connected
	authKey  struct{} // *authInfo, set on successful authentication
)

// connState is what one connection did to authenticate, so that one that
// ends without authenticating after offering keys is recorded as one failed
// login (connEnded), however many keys it offered: a key offer alone is no
// failure (OpenSSH offers every key it holds). Set by connected; the auth
// callbacks run one at a time during the handshake, but the connection may
// be closed from another goroutine, hence mu.
type connState struct {
	conn   *countedConn // the connection as the server reads it
	ticket *ticket      // its place in Server.admit
	remote string       // the client's address
	src    string       // its SourceKey

	mu      sync.Mutex
	user    string           // the user name of the last key offer
	keys    int              // public keys offered
	offered map[string]offer // registered keys offered, by "label fingerprint"; nil until one is
	exists  bool             // the last key offer's node exists
	dbDown  bool             // a key lookup failed on the database
	refused bool             // the limiter refused a key offer for the source (recorded then)
	// nodeRefused: the limiter refused a key offer on a node under attack;
	// the connection's end counts it as a failure, as it counts keys that
	// are not registered, so that a refusal tells nothing about the name.
	nodeRefused bool
	// certs are the certificates accepted when offered: "label
	// fingerprint" (of the whole certificate) -> what was found (cert.go);
	// nil until one is.
	certs map[string]*certLogin
	// settled: nothing is left to record when the connection ends (it
	// authenticated, or a token try was recorded).
	settled  bool
	forget   func()      // forgets the registry's watch (watch); nil if none
	ended    bool        // the connection has closed (unwatch ran)
	backstop *time.Timer // closes it once cut, if its channels have not (connRevoked)

	// chans counts the connection's open session channels.
	chans atomic.Int32
	// cut is why the connection must close (the registry's watch told
	// it: connRevoked); nil until then. It is closed once it holds no
	// session channel (closeCut, once).
	cut       atomic.Pointer[error]
	cutC      chan struct{} // closed once cut: a channel with no session yet ends
	cutOnce   sync.Once
	closeOnce sync.Once
	// closed is the audit row of the cut that closed it (closeCut),
	// written once it has ended; nil if none did.
	closed atomic.Pointer[db.AuditEvent]
}

// offer is what the lookup of a registered key offered found.
type offer struct {
	epoch int64  // the node's access epoch
	mark  uint64 // Sessions.Mark, taken before the lookup
}

func stateFrom(ctx ssh.Context) *connState {
	return ctx.Value(stateKey{}).(*connState) // set by connected, before any callback
}

func (st *connState) settle() {
	st.mu.Lock()
	st.settled = true
	st.mu.Unlock()
}

// unwatch forgets the registry's watch of the connection, which has
// closed; a watch set later is forgotten at once.
func (st *connState) unwatch() {
	st.mu.Lock()
	f, b := st.forget, st.backstop
	st.forget, st.ended = nil, true
	st.mu.Unlock()
	if f != nil {
		f()
	}
	if b != nil {
		b.Stop()
	}
}

// authInfo is what a successful authentication established.
type authInfo struct {
	Method string // "password", "keyboard-interactive", "publickey", "cert"
	// Actor names who acts in audit records: "ssh:" + Method, or, for a
	// certificate, "ssh:cert hil:alice serial 42" (set by accepted).
	Actor string
	User  string // "token", "key SHA256:..." or "cert hil:alice serial 42"
	// Detail is the login's audit detail (default User).
	Detail string
	Epoch  int64      // node access epoch read with the credential
	Mark   uint64     // Sessions.Mark taken before that read; 0: none
	Cert   *certLogin // the certificate of a certificate login
}

func authFrom(ctx ssh.Context) *authInfo {
	a, _ := ctx.Value(authKey{}).(*authInfo)
	return a
}

func (s *Server) password(ctx ssh.Context, pass string) bool {
	return s.checkToken(ctx, "password", pass)
}

func (s *Server) keyboardInteractive(ctx ssh.Context, ask gossh.KeyboardInteractiveChallenge) bool {
	answers, err := ask("", "", []string{"Password (node token): "}, []bool{false})
	if err != nil || len(answers) != 1 {
		return false
	}
	return s.checkToken(ctx, "keyboard-interactive", answers[0])
}

// checkToken authenticates ctx.User() with a token. An unknown node, a node
// without a token and a wrong token do the same work (one lookup, one
// hash, one constant-time compare) and take at least FailDelay, so the
// client cannot tell them apart (on SQLite a known node's lookup may be
// answered from memory, an unknown one's never is: FailDelay covers the
// difference).
func (s *Server) checkToken(ctx ssh.Context, method, token string) bool {
	start := s.cfg.Now()
	st := stateFrom(ctx)
	st.settle() // every outcome below is recorded (audited or counted)
	label, src := ctx.User(), st.src
	if ok, first := s.lim.Begin(ctx, src); !ok {
		s.limited(ctx, method, "source", first)
		s.waitFrom(start)
		return false
	}
	mark := s.sessions.Mark()
	acc, err := s.store.AccessAt(ctx, label, mark)
	if err != nil && !errors.Is(err, db.ErrNotFound) {
		s.lim.End(src, label, false, false) // not the client's failure
		s.log.WithError(err).WithField("node", safe(label)).Error("auth_lookup_failed")
		s.denied(ctx, method, "database unavailable")
		s.waitFrom(start)
		return false
	}
	exists := err == nil
	if ok, first := s.lim.Judge(src, label, exists); !ok {
		// A failure of the source, as a wrong token is: a refusal that did
		// not count would let a source tell a name that is no node (whose
		// shared entry is under attack) from a node by its lockout.
		s.lim.End(src, label, exists, true)
		s.limited(ctx, method, "node", first)
		s.waitFrom(start)
		return false
	}
	got := keys.HashToken(token)
	match := acc.Token.Equal(got) && acc.HasToken && exists
	if !match {
		why := "wrong token"
		switch {
		case !exists:
			why = "unknown node"
		case !acc.HasToken:
			why = "no token issued"
		}
		s.lim.End(src, label, exists, true)
		s.denied(ctx, method, why)
		s.waitFrom(start)
		return false
	}
	s.lim.End(src, label, exists, false)
	s.accepted(ctx, &authInfo{Method: method, User: "token", Epoch: acc.Epoch, Mark: mark})
	return true
}

// publicKey answers whether key is registered for the node. The client has
// not proven it holds the key yet (OpenSSH asks about each key before it
// signs with one), so nothing is granted here: verifiedKey does that once
// the signature checks out. An offer is no failure either: a key that is
// not registered is logged at Debug, and a connection that offered keys
// and ends without authenticating is recorded once (connEnded). A source
// the limiter has locked out is refused without a database read; one
// refused on a node under attack, after the lookup that says whether the
// node exists (Limiter.Judge), and that refusal counts as the failure of a
// connection whose keys are not registered does, when it ends.
func (s *Server) publicKey(ctx ssh.Context, key ssh.PublicKey) bool {
	if cert, ok := key.(*gossh.Certificate); ok {
		return s.certOffer(ctx, cert)
	}
	st := stateFrom(ctx)
	label, fp := ctx.User(), keys.Fingerprint(key)
	st.mu.Lock()
	st.user = label
	st.keys++
	refused := st.refused || st.nodeRefused
	st.mu.Unlock()
	if refused { // once per connection: the limiter is not asked again
		return false
	}
	if ok, first := s.lim.Begin(ctx, st.src); !ok {
		s.refuseKeys(st, label, first)
		return false
	}
	mark := s.sessions.Mark()
	epoch, ok, err := s.store.HasKey(ctx, label, fp)
	if err != nil && !errors.Is(err, db.ErrNotFound) {
		s.lim.End(st.src, label, false, false)
		s.log.WithError(err).WithField("node", safe(label)).Error("auth_lookup_failed")
		st.mu.Lock()
		st.dbDown = true
		st.mu.Unlock()
		return false
	}
	exists := err == nil
	st.mu.Lock()
	st.exists = exists
	st.mu.Unlock()
	if judged, _ := s.lim.Judge(st.src, label, exists); !judged {
		s.lim.End(st.src, label, exists, false) // counted at the connection's end (connEnded)
		st.mu.Lock()
		st.nodeRefused = true
		st.mu.Unlock()
		s.log.WithFields(logrus.Fields{"node": safe(label), "remote": st.remote}).Debug("key_offer_refused")
		return false
	}
	s.lim.End(st.src, label, exists, false) // the connection's end may count a failure
	if !ok {
		s.log.WithFields(logrus.Fields{"node": safe(label), "remote": st.remote, "key": fp}).Debug("key_not_registered")
		return false
	}
	st.mu.Lock()
	if st.offered == nil {
		st.offered = map[string]offer{}
	}
	st.offered[label+" "+fp] = offer{epoch, mark}
	st.mu.Unlock()
	return true
}

// refuseKeys records a key offer the limiter refused for its source; the
// connection's later offers are refused without asking it again.
func (s *Server) refuseKeys(st *connState, label string, first bool) {
	st.mu.Lock()
	st.refused = true
	st.mu.Unlock()
	s.refuse(label, st.remote, "publickey", "source", first)
}

// verifiedKey runs once the client has signed with key, which publicKey
// accepted for the current user: the login succeeds. key is the one whose
// signature x/crypto verified, so it alone decides (see cert.go).
func (s *Server) verifiedKey(ctx ssh.Context, key ssh.PublicKey) error {
	fp := keys.Fingerprint(key)
	st := stateFrom(ctx)
	st.mu.Lock()
	o, ok := st.offered[ctx.User()+" "+fp]
	cl := st.certs[ctx.User()+" "+fp]
	st.mu.Unlock()
	if cl != nil {
		return s.certVerified(ctx, cl)
	}
	if !ok { // cannot happen: x/crypto only verifies keys publicKey accepted
		return errors.New("key was not accepted")
	}
	s.accepted(ctx, &authInfo{Method: "publickey", User: "key " + fp, Epoch: o.epoch, Mark: o.mark})
	return nil
}

// connEnded records a connection that ends without authenticating after
// offering keys, and trying no token (a token try is recorded already):
// one failed login of its source in the limiter, one audit row, one
// metric, whatever the number of keys. A connection whose key offer the
// limiter refused for its source was recorded then (as a refusal: audited
// if it was its lockout's first), and one that met a database failure is
// not the client's failure: it is audited, not counted. One whose offer
// was refused on a node under attack counts as one with unregistered keys
// does, so that the refusal does not tell which names are nodes.
func (s *Server) connEnded(st *connState) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.settled || st.refused || st.keys == 0 {
		return
	}
	const method = "publickey"
	why := fmt.Sprintf("%d key(s) offered, none registered", st.keys)
	switch {
	case st.dbDown:
		why = fmt.Sprintf("database unavailable (%d key(s) offered)", st.keys)
	case st.nodeRefused:
		why = fmt.Sprintf("rate limited (node; %d key(s) offered)", st.keys)
	case len(st.certs) > 0:
		why = fmt.Sprintf("%d key(s) offered, %d registered and %d certificate(s) accepted but not signed with",
			st.keys, len(st.offered), len(st.certs))
	case len(st.offered) > 0:
		why = fmt.Sprintf("%d key(s) offered, %d registered but not signed with", st.keys, len(st.offered))
	}
	if !st.dbDown {
		s.lim.Fail(st.src, st.user, st.exists)
	}
	s.deny(st.user, st.remote, method, why)
}

func (s *Server) accepted(ctx ssh.Context, a *authInfo) {
	if a.Actor == "" {
		a.Actor = "ssh:" + a.Method
	}
	if a.Detail == "" {
		a.Detail = a.User
	}
	ctx.SetValue(authKey{}, a)
	st := stateFrom(ctx)
	st.settle()
	s.admit.authenticated(st.ticket) // no login grace time any more
	if s.cfg.OnAuth != nil {
		s.cfg.OnAuth(a.Method, "ok")
	}
	s.audit(ctx, db.AuditEvent{Node: safe(ctx.User()), Actor: a.Actor, Action: "auth",
		Source: remoteString(ctx), Result: "ok", Detail: a.Detail})
	s.watch(ctx, st, ctx.User(), a) // after the login's row: it may close the connection at once
}

func (s *Server) denied(ctx ssh.Context, method, why string) {
	s.deny(ctx.User(), remoteString(ctx), method, why)
}

// deny records a failed login of user from remote: the metric, an Info
// line and an audit row.
func (s *Server) deny(user, remote, method, why string) {
	if s.cfg.OnAuth != nil {
		s.cfg.OnAuth(method, "denied")
	}
	s.log.WithFields(logrus.Fields{"node": safe(user), "remote": remote, "method": method, "reason": why}).Info("auth_denied")
	s.audit(context.Background(), db.AuditEvent{Node: safe(user), Actor: "ssh:" + method, Action: "auth",
		Source: remote, Result: "denied", Detail: why})
}

func (s *Server) limited(ctx ssh.Context, method, which string, first bool) {
	s.refuse(ctx.User(), remoteString(ctx), method, which, first)
}

// refuse records a try the limiter refused: the first refusal of a
// lockout is audited as a denial; the rest are counted (the metric) and
// logged at Debug, so a locked-out flood writes nothing to the database.
func (s *Server) refuse(user, remote, method, which string, first bool) {
	why := "rate limited (" + which + ")"
	if first {
		s.deny(user, remote, method, why)
		return
	}
	if s.cfg.OnAuth != nil {
		s.cfg.OnAuth(method, "denied")
	}
	s.log.WithFields(logrus.Fields{"node": safe(user), "remote": remote, "method": method, "reason": why}).Debug("auth_refused")
}

func (s *Server) waitFrom(start time.Time) {
	if d := s.cfg.FailDelay - s.cfg.Now().Sub(start); d > 0 {
		time.Sleep(d)
	}
}

func remoteString(ctx ssh.Context) string {
	if a := ctx.RemoteAddr(); a != nil {
		return a.String()
	}
	return ""
}

// safe makes untrusted text (a user name is any string a client sends)
// printable and bounded, for logs and audit records.
func safe(s string) string { return printable.Clean(s, 100) }

package sshdoor

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/gliderlabs/ssh"
	"github.com/sirupsen/logrus"
	gossh "golang.org/x/crypto/ssh"

	"github.com/obmd/obmd/db"
	"github.com/obmd/obmd/keys"
	"github.com/obmd/obmd/sol/printable"
)

// The auth methods. Each is a callback of gliderlabs (wired by New) on the
// connection (conn.go), run one at a time on its handshake goroutine; a
// method that grants the login ends in conn.authenticated. A token
// (password, keyboard-interactive) and a certificate (cert.go) are tries:
// each is recorded as it is made. A plain key offered is no try (OpenSSH
// offers every key it holds): a connection that offered keys and ends
// without authenticating is recorded once, as one failed login
// (unfinished).

// attempts is what a connection did to authenticate, so that one that
// ends without authenticating after offering keys is recorded as one
// failed login, however many keys it offered. Guarded by conn.mu: the
// connection may be closed from another goroutine.
type attempts struct {
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
}

// offer is what the lookup of a registered key offered found.
type offer struct {
	epoch int64  // the node's access epoch
	mark  uint64 // Sessions.Mark, taken before the lookup
}

// authInfo is what a successful authentication established.
type authInfo struct {
	Method string // "password", "keyboard-interactive", "publickey", "cert"
	// Actor names who acts in audit records: "ssh:" + Method, or, for a
	// certificate, "ssh:cert hil:alice serial 42" (set by authenticated).
	Actor string
	User  string // "token", "key SHA256:..." or "cert hil:alice serial 42"
	// Detail is the login's audit detail (default User).
	Detail string
	Epoch  int64      // node access epoch read with the credential
	Mark   uint64     // Sessions.Mark taken before that read; 0: none
	Cert   *certLogin // the certificate of a certificate login; nil for any other
}

// console reports whether the login lets its sessions use the node's
// console: a PTY, the console, and every command that reads or types on
// it. Only a certificate without permit-pty does not (cert.go).
func (a *authInfo) console() bool { return a.Cert == nil || a.Cert.grant.Console }

// credential names the key or certificate a logged in with, whatever the
// node, for the registry's caps on work per credential; "" for a node's
// token, which opens that node only.
func (a *authInfo) credential() string {
	switch {
	case a.Cert != nil:
		g := a.Cert.grant
		return fmt.Sprintf("cert %s %d %q", g.CAFingerprint, g.Serial, g.KeyID)
	case a.Method == "publickey":
		return a.User // "key SHA256:..."
	}
	return ""
}

func (c *conn) password(ctx ssh.Context, pass string) bool {
	return c.checkToken(ctx, "password", pass)
}

func (c *conn) keyboardInteractive(ctx ssh.Context, ask gossh.KeyboardInteractiveChallenge) bool {
	answers, err := ask("", "", []string{"Password (node token): "}, []bool{false})
	if err != nil || len(answers) != 1 {
		return false
	}
	return c.checkToken(ctx, "keyboard-interactive", answers[0])
}

// checkToken authenticates ctx.User() with a token. An unknown node, a node
// without a token and a wrong token do the same work (one lookup, one
// hash, one constant-time compare) and take at least FailDelay, so the
// client cannot tell them apart (on SQLite a known node's lookup may be
// answered from memory, an unknown one's never is: FailDelay covers the
// difference).
func (c *conn) checkToken(ctx ssh.Context, method, token string) bool {
	s := c.s
	start := s.cfg.Now()
	c.settle() // every outcome below is recorded (audited or counted)
	label, src := ctx.User(), c.src
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
	c.authenticated(ctx, &authInfo{Method: method, User: "token", Epoch: acc.Epoch, Mark: mark})
	return true
}

// publicKey answers whether key is registered for the node. The client has
// not proven it holds the key yet (OpenSSH asks about each key before it
// signs with one), so nothing is granted here: verifiedKey does that once
// the signature checks out. An offer is no failure either: a key that is
// not registered is logged at Debug, and a connection that offered keys
// and ends without authenticating is recorded once (unfinished). A source
// the limiter has locked out is refused without a database read; one
// refused on a node under attack, after the lookup that says whether the
// node exists (Limiter.Judge), and that refusal counts as the failure of a
// connection whose keys are not registered does, when it ends. A
// certificate is judged apart (cert.go).
func (c *conn) publicKey(ctx ssh.Context, key ssh.PublicKey) bool {
	if cert, ok := key.(*gossh.Certificate); ok {
		return c.certOffer(ctx, cert)
	}
	s := c.s
	label, fp := ctx.User(), keys.Fingerprint(key)
	c.mu.Lock()
	c.tries.user = label
	c.tries.keys++
	refused := c.tries.refused || c.tries.nodeRefused
	c.mu.Unlock()
	if refused { // once per connection: the limiter is not asked again
		return false
	}
	if ok, first := s.lim.Begin(ctx, c.src); !ok {
		c.refuseKeys(label, first)
		return false
	}
	mark := s.sessions.Mark()
	epoch, ok, err := s.store.HasKey(ctx, label, fp)
	if err != nil && !errors.Is(err, db.ErrNotFound) {
		s.lim.End(c.src, label, false, false)
		s.log.WithError(err).WithField("node", safe(label)).Error("auth_lookup_failed")
		c.mu.Lock()
		c.tries.dbDown = true
		c.mu.Unlock()
		return false
	}
	exists := err == nil
	c.mu.Lock()
	c.tries.exists = exists
	c.mu.Unlock()
	if judged, _ := s.lim.Judge(c.src, label, exists); !judged {
		s.lim.End(c.src, label, exists, false) // counted at the connection's end (unfinished)
		c.mu.Lock()
		c.tries.nodeRefused = true
		c.mu.Unlock()
		s.log.WithFields(logrus.Fields{"node": safe(label), "remote": c.remote}).Debug("key_offer_refused")
		return false
	}
	s.lim.End(c.src, label, exists, false) // the connection's end may count a failure
	if !ok {
		s.log.WithFields(logrus.Fields{"node": safe(label), "remote": c.remote, "key": fp}).Debug("key_not_registered")
		return false
	}
	c.mu.Lock()
	if c.tries.offered == nil {
		c.tries.offered = map[string]offer{}
	}
	c.tries.offered[label+" "+fp] = offer{epoch, mark}
	c.mu.Unlock()
	return true
}

// refuseKeys records a key offer the limiter refused for its source; the
// connection's later offers are refused without asking it again.
func (c *conn) refuseKeys(label string, first bool) {
	c.mu.Lock()
	c.tries.refused = true
	c.mu.Unlock()
	c.s.refuse(label, c.remote, "publickey", "source", first)
}

// verifiedKey runs once the client has signed with key, which publicKey
// accepted for the current user: the login succeeds. key is the one whose
// signature x/crypto verified, so it alone decides (see cert.go).
func (c *conn) verifiedKey(ctx ssh.Context, key ssh.PublicKey) error {
	fp := keys.Fingerprint(key)
	c.mu.Lock()
	o, ok := c.tries.offered[ctx.User()+" "+fp]
	cl := c.tries.certs[ctx.User()+" "+fp]
	c.mu.Unlock()
	if cl != nil {
		return c.certVerified(ctx, cl)
	}
	if !ok { // cannot happen: x/crypto only verifies keys publicKey accepted
		return errors.New("key was not accepted")
	}
	c.authenticated(ctx, &authInfo{Method: "publickey", User: "key " + fp, Epoch: o.epoch, Mark: o.mark})
	return nil
}

// unfinished records a connection that ends without authenticating after
// offering keys, and trying no token (a token try is recorded already):
// one failed login of its source in the limiter, one audit row, one
// metric, whatever the number of keys. A connection whose key offer the
// limiter refused for its source was recorded then (as a refusal: audited
// if it was its lockout's first), and one that met a database failure is
// not the client's failure: it is audited, not counted. One whose offer
// was refused on a node under attack counts as one with unregistered keys
// does, so that the refusal does not tell which names are nodes.
func (c *conn) unfinished() {
	c.mu.Lock()
	t := &c.tries
	if c.settled || t.refused || t.keys == 0 {
		c.mu.Unlock()
		return
	}
	why := fmt.Sprintf("%d key(s) offered, none registered", t.keys)
	switch {
	case t.dbDown:
		why = fmt.Sprintf("database unavailable (%d key(s) offered)", t.keys)
	case t.nodeRefused:
		why = fmt.Sprintf("rate limited (node; %d key(s) offered)", t.keys)
	case len(t.certs) > 0:
		why = fmt.Sprintf("%d key(s) offered, %d registered and %d certificate(s) accepted but not signed with",
			t.keys, len(t.offered), len(t.certs))
	case len(t.offered) > 0:
		why = fmt.Sprintf("%d key(s) offered, %d registered but not signed with", t.keys, len(t.offered))
	}
	user, exists, counted := t.user, t.exists, !t.dbDown
	c.mu.Unlock()
	if counted {
		c.s.lim.Fail(c.src, user, exists)
	}
	c.s.deny(user, c.remote, "publickey", why)
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

package bastion

import (
	"errors"
	"net"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/gliderlabs/ssh"
	"github.com/sirupsen/logrus"
	gossh "golang.org/x/crypto/ssh"

	"github.com/obmd/obmd/bastion/sessions"
	"github.com/obmd/obmd/db"
	"github.com/obmd/obmd/keys"
)

type (
	connKey    struct{} // net.Conn of the connection, set by connected
	authKey    struct{} // *authInfo, set on successful authentication
	chansKey   struct{} // *atomic.Int32: open session channels, set by connected
	offeredKey struct{} // map[string]int64: registered keys offered (fingerprint -> epoch), set by publicKey
)

// authInfo is what a successful authentication established.
type authInfo struct {
	Method string // "password", "keyboard-interactive", "publickey"
	User   string // "token" or "key SHA256:..."
	Epoch  int64  // node access epoch read with the credential
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
// without a token and a wrong token do the same work (one query, one hash,
// one constant-time compare) and take at least FailDelay, so the client
// cannot tell them apart.
func (s *Server) checkToken(ctx ssh.Context, method, token string) bool {
	start := s.cfg.Now()
	label, src := ctx.User(), sessions.SourceKey(remoteHost(ctx.RemoteAddr()))
	if ok, which, first := s.lim.begin(ctx, src, label); !ok {
		s.limited(ctx, method, which, first)
		s.waitFrom(start)
		return false
	}
	acc, err := s.store.Access(ctx, label)
	if err != nil && !errors.Is(err, db.ErrNotFound) {
		s.lim.end(src, label, false) // not the client's failure
		s.log.WithError(err).WithField("node", safe(label)).Error("auth_lookup_failed")
		s.denied(ctx, method, "database unavailable")
		s.waitFrom(start)
		return false
	}
	got := keys.HashToken(token)
	match := acc.Token.Equal(got) && acc.HasToken && err == nil
	if !match {
		why := "wrong token"
		switch {
		case err != nil:
			why = "unknown node"
		case !acc.HasToken:
			why = "no token issued"
		}
		s.lim.end(src, label, true)
		s.denied(ctx, method, why)
		s.waitFrom(start)
		return false
	}
	s.lim.end(src, label, false)
	s.accepted(ctx, &authInfo{Method: method, User: "token", Epoch: acc.Epoch})
	return true
}

// publicKey answers whether key is registered for the node. The client has
// not proven it holds the key yet (OpenSSH asks about each key before it
// signs with one), so nothing is granted here: verifiedKey does that once
// the signature checks out.
func (s *Server) publicKey(ctx ssh.Context, key ssh.PublicKey) bool {
	label, fp := ctx.User(), keys.Fingerprint(key)
	epoch, ok, err := s.store.HasKey(ctx, label, fp)
	switch {
	case err != nil && !errors.Is(err, db.ErrNotFound):
		s.log.WithError(err).WithField("node", safe(label)).Error("auth_lookup_failed")
		s.denied(ctx, "publickey", "database unavailable")
		return false
	case err != nil || !ok:
		s.denied(ctx, "publickey", "key "+fp+" not registered")
		return false
	}
	offered, _ := ctx.Value(offeredKey{}).(map[string]int64)
	if offered == nil {
		offered = map[string]int64{}
		ctx.SetValue(offeredKey{}, offered)
	}
	offered[label+" "+fp] = epoch
	return true
}

// verifiedKey runs once the client has signed with a key that publicKey
// accepted for the current user: the login succeeds.
func (s *Server) verifiedKey(ctx ssh.Context, key ssh.PublicKey) error {
	fp := keys.Fingerprint(key)
	offered, _ := ctx.Value(offeredKey{}).(map[string]int64)
	epoch, ok := offered[ctx.User()+" "+fp]
	if !ok { // cannot happen: x/crypto only verifies keys publicKey accepted
		return errors.New("key was not accepted")
	}
	s.accepted(ctx, &authInfo{Method: "publickey", User: "key " + fp, Epoch: epoch})
	return nil
}

func (s *Server) accepted(ctx ssh.Context, a *authInfo) {
	ctx.SetValue(authKey{}, a)
	if c, ok := ctx.Value(connKey{}).(net.Conn); ok {
		c.SetDeadline(time.Time{}) // authenticated: no handshake bound any more
	}
	if s.cfg.OnAuth != nil {
		s.cfg.OnAuth(a.Method, "ok")
	}
	s.audit(ctx, db.AuditEvent{Node: safe(ctx.User()), Actor: "ssh:" + a.Method, Action: "auth",
		Source: remoteString(ctx), Result: "ok", Detail: a.User})
}

func (s *Server) denied(ctx ssh.Context, method, why string) {
	if s.cfg.OnAuth != nil {
		s.cfg.OnAuth(method, "denied")
	}
	s.log.WithFields(map[string]any{"node": safe(ctx.User()), "remote": remoteString(ctx), "method": method, "reason": why}).Info("auth_denied")
	s.audit(ctx, db.AuditEvent{Node: safe(ctx.User()), Actor: "ssh:" + method, Action: "auth",
		Source: remoteString(ctx), Result: "denied", Detail: why})
}

// limited records a try the limiter refused: the first refusal of a
// lockout is audited as a denial; the rest are counted (the metric) and
// logged at Debug, so a locked-out flood writes nothing to the database.
func (s *Server) limited(ctx ssh.Context, method, which string, first bool) {
	why := "rate limited (" + which + ")"
	if first {
		s.denied(ctx, method, why)
		return
	}
	if s.cfg.OnAuth != nil {
		s.cfg.OnAuth(method, "denied")
	}
	s.log.WithFields(logrus.Fields{"node": safe(ctx.User()), "remote": remoteString(ctx), "method": method, "reason": why}).Debug("auth_refused")
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
// printable: control and non-UTF-8 bytes are escaped, length is bounded.
func safe(s string) string {
	const max = 100
	if len(s) > max {
		s = s[:max]
	}
	if utf8.ValidString(s) && strings.IndexFunc(s, func(r rune) bool { return !unicode.IsGraphic(r) }) < 0 {
		return s
	}
	q := strconv.QuoteToGraphic(s)
	return q[1 : len(q)-1]
}

package sshdoor

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"

	"github.com/gliderlabs/ssh"
	"github.com/sirupsen/logrus"
	gossh "golang.org/x/crypto/ssh"

	"github.com/obmd/obmd/bastion/access/sessions"
	"github.com/obmd/obmd/commands"
	"github.com/obmd/obmd/db"
	"github.com/obmd/obmd/keys"
	"github.com/obmd/obmd/keys/sshcert"
)

// Certificate logins (OpenSSH user certificates, keys/sshcert).
//
// CVE-2024-45337: x/crypto calls the public-key callback (gliderlabs's
// PublicKeyHandler, conn.publicKey here) for every key a client asks about,
// signed or not, and gliderlabs remembers the last key it accepted, not
// the one the client signed with. So nothing is decided from that handler
// alone nor from the session's PublicKey(): certOffer only judges the
// certificate and keeps what it found, keyed by the node and the
// fingerprint of the whole certificate; verifiedKey, which x/crypto calls
// with the key whose signature it has verified, grants the login from
// that entry alone. The certificate's own permissions are never copied to
// the connection's (shared by every offer); the policy judges its
// critical options itself.

// methodCert is a certificate login's method (metrics) and actor prefix.
const methodCert = "cert"

// certLogin is a certificate the policy accepted for a node on one
// connection: what certOffer found, for verifiedKey, the connection's
// watch and its sessions.
type certLogin struct {
	cert   *gossh.Certificate
	client netip.Addr // the client's address (PROXY-resolved), for source-address
	grant  sshcert.Grant
	epoch  int64  // the node's access epoch, as read
	seen   int64  // the latest epoch, as read (db.CertAccess.Seen)
	mark   uint64 // Sessions.Mark, taken before that read
}

// certOffer answers a certificate offered for ctx.User(). Unlike a plain
// key, a certificate offered is a try: the database is read, the policy
// checks it, and a refusal is recorded as a failed login (audited, counted
// by the guessing limits) that looks to the client exactly as a wrong
// token does, the same answer after at least FailDelay, whatever the
// reason (an unknown node, a wrong principal, an untrusted CA, an expired
// or revoked certificate...: the reason is in the audit only).
func (c *conn) certOffer(ctx ssh.Context, cert *gossh.Certificate) bool {
	s := c.s
	start := s.cfg.Now()
	label := ctx.User()
	c.mu.Lock()
	c.tries.user = label
	c.mu.Unlock()
	refuse := func(record func()) bool {
		c.settle() // recorded here: nothing left for the connection's end
		record()
		s.waitFrom(start)
		return false
	}
	if ok, first := s.lim.Begin(ctx, c.src); !ok {
		return refuse(func() { s.limited(ctx, methodCert, "source", first) })
	}
	mark := s.sessions.Mark()
	acc, err := s.readCert(ctx, label, cert)
	if err != nil && !errors.Is(err, db.ErrNotFound) {
		s.lim.End(c.src, label, false, false) // not the client's failure
		s.log.WithError(err).WithField("node", safe(label)).Error("auth_lookup_failed")
		return refuse(func() { s.denied(ctx, methodCert, "database unavailable") })
	}
	exists := err == nil
	c.mu.Lock()
	c.tries.exists = exists // for unfinished, as publicKey does
	c.mu.Unlock()
	if ok, first := s.lim.Judge(c.src, label, exists); !ok {
		s.lim.End(c.src, label, exists, true) // a failure of the source, as checkToken counts it
		return refuse(func() { s.limited(ctx, methodCert, "node", first) })
	}
	cl := &certLogin{cert: cert, client: clientAddr(c.remote), epoch: acc.Epoch, seen: acc.Seen, mark: mark}
	if exists {
		cl.grant, err = s.certs.Check(cert, s.login(label, cl.client, acc))
	} else {
		err = errors.New("unknown node")
	}
	if err != nil {
		s.lim.End(c.src, label, exists, true)
		return refuse(func() { s.denied(ctx, methodCert, err.Error()) })
	}
	s.lim.End(c.src, label, exists, false)
	c.mu.Lock()
	c.tries.keys++
	if c.tries.certs == nil {
		c.tries.certs = map[string]*certLogin{}
	}
	c.tries.certs[label+" "+keys.Fingerprint(cert)] = cl
	c.mu.Unlock()
	return true
}

// readCert reads what the policy needs about cert for label, by what cert
// claims (verified by the policy, not here).
func (s *Server) readCert(ctx context.Context, label string, cert *gossh.Certificate) (db.CertAccess, error) {
	ca, serial, keyID := sshcert.Claims(cert)
	return s.store.CertAccess(ctx, label, ca, serial, keyID)
}

// login is the policy's view of a login to label from client, as acc
// read it.
func (s *Server) login(label string, client netip.Addr, acc db.CertAccess) sshcert.Login {
	return sshcert.Login{Node: label, Principals: acc.Principals, TenancyStart: acc.TenancyStart,
		Client: client, Authorities: acc, Revocations: acc}
}

// certVerified grants the login of a certificate certOffer accepted, once
// the client has signed with it; it refuses one that has expired since, as
// certOffer refuses.
func (c *conn) certVerified(ctx ssh.Context, cl *certLogin) error {
	s, g := c.s, cl.grant
	if !g.Expires.IsZero() && !s.cfg.Now().Before(g.Expires) {
		start := s.cfg.Now()
		c.settle()
		s.lim.Fail(c.src, ctx.User(), true)
		s.denied(ctx, methodCert, "certificate "+g.Who()+": expired before the client signed with it")
		s.waitFrom(start)
		return errors.New("certificate expired")
	}
	detail := fmt.Sprintf("%s, principal %s, key %s", g.Who(), safe(g.Principal), keys.Fingerprint(cl.cert.Key))
	if !g.Expires.IsZero() {
		detail += ", until " + g.Expires.UTC().Format("2006-01-02T15:04:05Z")
	}
	c.authenticated(ctx, &authInfo{Method: methodCert, Actor: g.Identity(), User: methodCert + " " + g.Who(),
		Detail: detail, Epoch: cl.epoch, Mark: cl.mark, Cert: cl})
	return nil
}

// clientAddr is the address of remote ("host:port"); the zero Addr if it
// is none (a source-address option then allows nothing).
func clientAddr(remote string) netip.Addr {
	ap, err := netip.ParseAddrPort(remote)
	if err != nil {
		return netip.Addr{}
	}
	return ap.Addr()
}

// certInfo is a certificate session's registration: what credential
// changes are matched against, and when it expires.
func (cl *certLogin) certInfo() *sessions.Cert {
	g := cl.grant
	return &sessions.Cert{CA: g.CAFingerprint, CAName: g.CA, Serial: g.Serial, KeyID: g.KeyID, Seen: cl.seen}
}

// recheckCert checks a certificate session again once it is registered:
// its login's read is made again and the certificate checked again, so a
// credential change (a CA removed, a serial revoked) committed between the
// login and the registration, which the registry did not see, refuses it;
// one committed after finds it registered. That read has the node's epoch
// too, so Open needs no read of its own (the login's Mark lets it skip
// one). It returns -1, or the exit code
// of a refused session (told on stderr why).
func (c *channel) recheckCert(stderr io.Writer) int {
	err := c.s.certHolds(c.ctx, c.label, c.a, c.log)
	var revoked *sessions.RevokedError
	switch {
	case err == nil:
		return -1
	case !errors.As(err, &revoked):
		c.log.WithError(err).Error("certificate_check_failed")
		fmt.Fprintln(stderr, "obmd: cannot verify access right now; try again")
		return commands.ExitFailed
	}
	fmt.Fprintf(stderr, "obmd: %v\n", err)
	c.audit(c.ctx, "session.start", "denied", err.Error())
	return commands.ExitNotAllowed
}

// certHolds makes the read of a's certificate login to label again and
// checks the certificate again: nil if it still holds at the login's
// epoch; a *sessions.RevokedError if not (the policy's refusal is logged
// on log: certificate_refused); another error if the database did not
// answer.
func (s *Server) certHolds(ctx context.Context, label string, a *authInfo, log logrus.FieldLogger) error {
	cl := a.Cert
	acc, err := s.readCert(ctx, label, cl.cert)
	if err == nil && acc.Epoch == a.Epoch {
		if _, err = s.certs.Check(cl.cert, s.login(label, cl.client, acc)); err == nil {
			return nil
		}
		log.WithError(err).Info("certificate_refused")
		return &sessions.RevokedError{Node: label, Why: refusedWhy(err)}
	}
	return staleAccess(label, err)
}

// refusedWhy is the reason a session is told when its certificate is
// refused at the start: the words a live cut for the same change gives
// (db's reasons), so that a session cut while it started reads as one cut
// a moment later does.
func refusedWhy(err error) string {
	switch {
	case errors.Is(err, sshcert.ErrRevoked):
		return db.ReasonCertRevoked
	case errors.Is(err, sshcert.ErrUntrustedCA):
		return db.ReasonCARemoved
	}
	return "certificate no longer accepted"
}

// noConsole refuses cmd, which reads or types on the node's console
// (commands.Command.UsesConsole), to a certificate without permit-pty,
// before any session opens: such a certificate is for power only. It
// returns the exit code (ExitNotAllowed).
func (c *channel) noConsole(stdout, stderr io.Writer, cmd commands.Command) int {
	why := "this certificate does not permit the console (no permit-pty)"
	c.log.WithField("command", cmd.Name).Info("console_not_permitted")
	c.audit(c.ctx, "session.start", "denied", string(cmd.Name)+": "+why)
	if cmd.Name == commands.CmdConsole {
		why += "; run a command instead (help)"
	}
	return commands.WriteError(stdout, stderr, c.label, cmd, &commands.NotAllowedError{Command: cmd.Name, Why: why})
}

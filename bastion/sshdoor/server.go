// Package sshdoor is obmd's SSH front door, and only that: it bounds,
// authenticates and serves tenants' SSH connections.
//
// It bounds connections before they authenticate (login grace time, caps
// that displace the oldest stranger, the PROXY protocol from listed
// balancers: preauth.go), authenticates a tenant as a node (user name =
// node label; password or keyboard-interactive = the node's token; a public
// key registered for the node; or an OpenSSH user certificate from a
// trusted CA; guesses counted by authlimit), then starts each session
// through access (registered, admitted, cut on every access change) and
// serves the node's console, with its escapes, or runs one command.
//
// Where to read: conn.go follows one connection through its life
// (admitted, authenticated, watched, cut, closed); auth.go holds the auth
// methods, cert.go what only certificate logins do; session.go serves a
// session channel, console.go a console session, exec.go one command.
package sshdoor

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/gliderlabs/ssh"
	"github.com/sirupsen/logrus"
	gossh "golang.org/x/crypto/ssh"

	"github.com/obmd/obmd/bastion/access"
	"github.com/obmd/obmd/bastion/access/sessions"
	"github.com/obmd/obmd/bastion/internal/realip"
	"github.com/obmd/obmd/bastion/internal/sshalgo"
	"github.com/obmd/obmd/commands"
	"github.com/obmd/obmd/db"
	"github.com/obmd/obmd/keys/sshcert"
	"github.com/obmd/obmd/sol"
)

// Store is what the front door reads and writes in the database.
type Store interface {
	// AccessAt reads a node's token and epoch (access.Gate.AccessAt) for a
	// login that took mark (Sessions.Mark) just before.
	AccessAt(ctx context.Context, label string, mark uint64) (db.Access, error)
	HasKey(ctx context.Context, label, fingerprint string) (epoch int64, ok bool, err error)
	CertAccess(ctx context.Context, label, ca string, serial uint64, keyID string) (db.CertAccess, error)
	Audit(ctx context.Context, e db.AuditEvent) error
}

// Runner runs exec commands (everything but the console).
type Runner interface {
	Run(ctx context.Context, req commands.Request, cmd commands.Command, stdout, stderr io.Writer) int
}

// Limiter bounds guessing (authlimit.Limiter, which documents the
// protocol): Begin holds one of the source's tries, Judge then says whether
// the node's state lets it go on, End settles it; Fail counts a failure
// that held no try (a connection that only offered keys). The wiring
// shares one with the admin API.
type Limiter interface {
	Begin(ctx context.Context, source string) (ok, first bool)
	Judge(source, node string, exists bool) (ok, first bool)
	End(source, node string, exists, failed bool)
	Fail(source, node string, exists bool)
}

// Sessions starts every session (access.Revoker.Open, which documents the
// errors): registered, so that access changes cut it; admitted at the
// epoch its login read; and watched, so that a cut session whose client
// stops reading is unblocked (here: its connection closed). WatchConn
// (access.Revoker.WatchConn) tells an authenticated connection of what
// ends it (an access change, a credential change, its certificate's
// expiry), so that it is closed (conn.go).
// Mark (access.Revoker.Mark), taken just before a login reads the node's
// epoch and passed with it to Open (sessions.Info.Mark), lets Open skip
// reading the epoch again when nothing was cut since.
type Sessions interface {
	Open(ctx context.Context, info sessions.Info, host string, unblock func()) (*access.Session, error)
	WatchConn(c sessions.Conn, revoked func(cause error)) (forget func())
	Mark() uint64
}

// Consoles is the console hub.
type Consoles interface {
	Attach(ctx context.Context, label string, o sol.AttachOptions) (*sol.Viewer, error)
	Viewers(label string) []sol.ViewerInfo
	// Writer is label's writer wherever in the cluster it is.
	Writer(label string) sol.Who
}

// Defaults of Config.
const (
	DefaultEscape            = "\x05c"
	DefaultFailDelay         = 300 * time.Millisecond
	DefaultLoginGraceTime    = 30 * time.Second
	DefaultMaxConnsPerSource = 64
)

// Config configures the front door. Zero values take the defaults noted.
type Config struct {
	// HostKeys sign the handshake; at least one.
	HostKeys []gossh.Signer
	// Escape is the console escape prefix (default "\x05c": Ctrl-E c):
	// two bytes, the first not an escape command. Escapes are read only
	// on sessions with a PTY.
	Escape string
	// Limiter bounds guessing; the wiring shares it with the admin API.
	// Required.
	Limiter Limiter
	// FailDelay is the least time a failed password or keyboard-interactive
	// attempt takes, so an unknown node and a wrong token answer alike and
	// guessing is slow (default 300 ms).
	FailDelay time.Duration
	// LoginGraceTime bounds the time a connection may take to
	// authenticate, whichever phase it stalls in (version exchange, key
	// exchange, authentication): OpenSSH's LoginGraceTime (default 30 s).
	LoginGraceTime time.Duration
	// MaxUnauthenticated bounds the connections that have not
	// authenticated yet (default 1024); MaxUnauthenticatedPerSource bounds
	// those of one source address (an IPv6 /64 counts as one; default 32,
	// or MaxUnauthenticated if lower; set, at most MaxUnauthenticated). A new connection that finds either full
	// displaces the oldest unauthenticated connection it competes with
	// rather than being refused, so connections that never authenticate
	// cannot keep anyone out. Negative: no limit.
	MaxUnauthenticated          int
	MaxUnauthenticatedPerSource int
	// MaxConns bounds every open connection, authenticated or not (the
	// wiring sizes it from the open-file limit; default and negative: no
	// limit). At the cap a new connection displaces an unauthenticated one,
	// as above, and is refused only if every connection is authenticated.
	MaxConns int
	// MaxChannels bounds session channels on one connection (default 4).
	MaxChannels int
	// MaxConnsPerSource bounds the open connections, authenticated or not,
	// from one source address (default 64; negative: no limit). At the
	// limit a new connection displaces the source's oldest unauthenticated
	// one, and is refused only if every one is authenticated.
	MaxConnsPerSource int
	// ProxyProtocolFrom lists the load balancers in front of the SSH port
	// that send a PROXY protocol header (v1 or v2, HAProxy's send-proxy or
	// send-proxy-v2): a connection from one of them must start with one, or
	// is closed; the header's source is then the client everywhere (limits,
	// caps, audit, logs, sessions). From any other address a header is not
	// honoured.
	ProxyProtocolFrom realip.Trusted
	// ProxyHeaderTimeout bounds the read of that header (default 5 s; a
	// balancer sends it at once). Its size is bounded by proxyproto.MaxV2.
	ProxyHeaderTimeout time.Duration
	// Banner, if set, returns text shown to clients before they log in
	// ("" shows none): the daemon says so when it cannot reach its
	// database, rather than let logins fail without a reason.
	Banner func() string
	// Now is the clock (default time.Now).
	Now func() time.Time
	// OnAuth, if set, is told of every authentication attempt's method and
	// result ("ok" or "denied"), for metrics.
	OnAuth func(method, result string)
	// LegacyAlgorithms also offers and accepts the SHA-1 algorithms old
	// clients may need (sshalgo.Legacy); by default only sshalgo.Modern.
	LegacyAlgorithms bool
	// Certs judges OpenSSH user certificates offered as a node credential
	// (cert.go; default: sshcert's defaults).
	Certs *sshcert.Policy
	// RoleWait, in cluster mode, bounds how long a console's banner waits
	// for the replica holding the node's SOL link to say who writes
	// (sol.Viewer.AwaitRole), so that it names the writer wherever it is;
	// 0 (single-replica mode) does not wait: the hub decides at once.
	RoleWait time.Duration
}

// Server is the SSH front door. Serve runs it; Shutdown stops it.
type Server struct {
	cfg      Config
	store    Store
	runner   Runner
	consoles Consoles
	sessions Sessions
	log      logrus.FieldLogger
	lim      Limiter
	srv      *ssh.Server
	esc      escapeTexts // console messages naming cfg.Escape
	admit    *admission  // connections before authentication, and per source
	certs    *sshcert.Policy
}

// New validates cfg and returns a Server; it starts nothing.
func New(cfg Config, store Store, runner Runner, consoles Consoles, sess Sessions, log logrus.FieldLogger) (*Server, error) {
	if len(cfg.HostKeys) == 0 {
		return nil, errors.New("bastion: no host key")
	}
	if store == nil || runner == nil || consoles == nil || sess == nil || log == nil || cfg.Limiter == nil {
		return nil, errors.New("bastion: missing dependency")
	}
	if cfg.Escape == "" {
		cfg.Escape = DefaultEscape
	}
	if err := checkEscape(cfg.Escape); err != nil {
		return nil, err
	}
	if cfg.FailDelay <= 0 {
		cfg.FailDelay = DefaultFailDelay
	}
	if cfg.LoginGraceTime <= 0 {
		cfg.LoginGraceTime = DefaultLoginGraceTime
	}
	if cfg.ProxyHeaderTimeout <= 0 {
		cfg.ProxyHeaderTimeout = 5 * time.Second
	}
	if cfg.MaxChannels <= 0 {
		cfg.MaxChannels = 4
	}
	maxPre := limitOr(cfg.MaxUnauthenticated, 1024)
	defPreSrc := 32
	if maxPre > 0 && maxPre < defPreSrc {
		defPreSrc = maxPre
	}
	maxPreSrc := limitOr(cfg.MaxUnauthenticatedPerSource, defPreSrc)
	if maxPre > 0 && maxPreSrc > maxPre {
		return nil, fmt.Errorf("bastion: unauthenticated connections per source (%d) must be at most the global limit (%d)", maxPreSrc, maxPre)
	}
	maxConnSrc := limitOr(cfg.MaxConnsPerSource, DefaultMaxConnsPerSource)
	maxConns := max(cfg.MaxConns, 0)
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Certs == nil {
		var err error
		if cfg.Certs, err = sshcert.New(sshcert.Config{Now: cfg.Now}); err != nil {
			return nil, fmt.Errorf("bastion: %w", err)
		}
	}
	algos := sshalgo.For(cfg.LegacyAlgorithms)
	s := &Server{cfg: cfg, store: store, runner: runner, consoles: consoles, sessions: sess, log: log,
		lim: cfg.Limiter, esc: newEscapeTexts(cfg.Escape), admit: newAdmission(cfg.LoginGraceTime, maxPre, maxPreSrc, maxConnSrc, maxConns),
		certs: cfg.Certs}
	// Every callback but ConnCallback is the connection's (conn.go), which
	// ConnCallback sets on ctx.
	s.srv = &ssh.Server{
		Version:      "obmd",
		ConnCallback: s.connected,
		PasswordHandler: func(ctx ssh.Context, pass string) bool {
			return connFrom(ctx).password(ctx, pass)
		},
		KeyboardInteractiveHandler: func(ctx ssh.Context, ask gossh.KeyboardInteractiveChallenge) bool {
			return connFrom(ctx).keyboardInteractive(ctx, ask)
		},
		PublicKeyHandler: func(ctx ssh.Context, key ssh.PublicKey) bool {
			return connFrom(ctx).publicKey(ctx, key)
		},
		// x/crypto asks for the banner at the first auth request, when the
		// key exchange is done: the connection is authenticating.
		BannerHandler: func(ctx ssh.Context) string {
			connFrom(ctx).authenticating()
			if cfg.Banner == nil {
				return ""
			}
			return cfg.Banner()
		},
		ServerConfigCallback: func(ctx ssh.Context) *gossh.ServerConfig {
			c := &gossh.ServerConfig{
				MaxAuthTries: 6,
				// gliderlabs wires PublicKeyCallback, which x/crypto also
				// calls for keys the client only asks about.
				VerifiedPublicKeyCallback: func(_ gossh.ConnMetadata, key gossh.PublicKey, perms *gossh.Permissions, _ string) (*gossh.Permissions, error) {
					return perms, connFrom(ctx).verifiedKey(ctx, key)
				},
			}
			algos.Server(c)
			return c
		},
		// Only session channels; no port forwarding, no global requests,
		// no subsystems (each request type is refused in the session).
		ChannelHandlers: map[string]ssh.ChannelHandler{"session": s.session},
		RequestHandlers: map[string]ssh.RequestHandler{},
	}
	for _, k := range cfg.HostKeys {
		k, err := algos.HostKey(k)
		if err != nil {
			return nil, fmt.Errorf("bastion: %w", err)
		}
		s.srv.AddHostKey(k)
	}
	return s, nil
}

// Serve accepts connections on l until Shutdown; it then returns
// ssh.ErrServerClosed.
func (s *Server) Serve(l net.Listener) error {
	return s.srv.Serve(l)
}

// Shutdown stops accepting, closes the connections that have not
// authenticated, tells every live session why it ends (the registry cuts
// them: the caller does that first, so consoles and exec get "obmd is
// shutting down"), and waits for connections to close, bounded by ctx;
// stragglers are then closed.
func (s *Server) Shutdown(ctx context.Context) error {
	s.admit.closeAll()
	err := s.srv.Shutdown(ctx)
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return s.srv.Close()
	}
	return err
}

// limitOr is a configured limit: def if unset, none (0) if negative.
func limitOr(n, def int) int {
	switch {
	case n == 0:
		return def
	case n < 0:
		return 0
	}
	return n
}

// audit records e; a failure to audit is logged, never shown to the client.
func (s *Server) audit(ctx context.Context, e db.AuditEvent) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := s.store.Audit(ctx, e); err != nil {
		s.log.WithError(err).WithField("action", e.Action).Error("audit_failed")
	}
}

// remoteHost is the address part of a remote address (what SourceKey and
// the registry take).
func remoteHost(a net.Addr) string {
	if a == nil {
		return ""
	}
	host, _, err := net.SplitHostPort(a.String())
	if err != nil {
		return a.String()
	}
	return host
}

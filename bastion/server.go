// Package bastion is obmd's SSH front door: it authenticates a tenant as a
// node (user name = node label; password or keyboard-interactive = the
// node's token; or a public key registered for the node), then serves the
// node's console (no command) or runs one command (exec), and keeps every
// live session in the registry through which access changes cut them.
package bastion

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gliderlabs/ssh"
	"github.com/sirupsen/logrus"
	gossh "golang.org/x/crypto/ssh"

	"github.com/obmd/obmd/bastion/sessions"
	"github.com/obmd/obmd/bastion/sshalgo"
	"github.com/obmd/obmd/commands"
	"github.com/obmd/obmd/db"
	"github.com/obmd/obmd/sol"
)

// Store is what the front door reads and writes in the database.
type Store interface {
	Access(ctx context.Context, label string) (db.Access, error)
	HasKey(ctx context.Context, label, fingerprint string) (epoch int64, ok bool, err error)
	Audit(ctx context.Context, e db.AuditEvent) error
}

// Runner runs exec commands (everything but the console).
type Runner interface {
	Run(ctx context.Context, req commands.Request, cmd commands.Command, stdout, stderr io.Writer) int
}

// Consoles is the console hub.
type Consoles interface {
	Attach(ctx context.Context, label string, o sol.AttachOptions) (*sol.Viewer, error)
	Viewers(label string) []sol.ViewerInfo
}

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
	Limiter *Limiter
	// FailDelay is the least time a failed password or keyboard-interactive
	// attempt takes, so an unknown node and a wrong token answer alike and
	// guessing is slow (default 300 ms).
	FailDelay time.Duration
	// HandshakeTimeout bounds a connection that has not authenticated
	// (default 30 s).
	HandshakeTimeout time.Duration
	// MaxChannels bounds session channels on one connection (default 4).
	MaxChannels int
	// MaxConnsPerSource bounds the open connections, authenticated or not,
	// from one source address (an IPv6 /64 counts as one); more are closed
	// at once (default 64; negative: no limit). The handshake timeout alone
	// would let one address hold any number of unauthenticated connections.
	MaxConnsPerSource int
	// Admit is called by every session once it is in the registry, before
	// it starts, with the access epoch its login read; the session starts
	// only if it returns nil (Revoker.Admit, which documents the errors).
	// Required.
	Admit func(ctx context.Context, label string, epoch int64) error
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
}

// Server is the SSH front door. Serve runs it; Shutdown stops it.
type Server struct {
	cfg      Config
	store    Store
	runner   Runner
	consoles Consoles
	reg      *sessions.Registry
	log      logrus.FieldLogger
	lim      *Limiter
	srv      *ssh.Server
	esc      escapeTexts // console messages naming cfg.Escape

	connsMu sync.Mutex
	conns   map[string]int // open connections per source key
}

// New validates cfg and returns a Server; it starts nothing.
func New(cfg Config, store Store, runner Runner, consoles Consoles, reg *sessions.Registry, log logrus.FieldLogger) (*Server, error) {
	if len(cfg.HostKeys) == 0 {
		return nil, errors.New("bastion: no host key")
	}
	if store == nil || runner == nil || consoles == nil || reg == nil || log == nil || cfg.Admit == nil || cfg.Limiter == nil {
		return nil, errors.New("bastion: missing dependency")
	}
	if cfg.Escape == "" {
		cfg.Escape = "\x05c"
	}
	if err := checkEscape(cfg.Escape); err != nil {
		return nil, err
	}
	if cfg.FailDelay <= 0 {
		cfg.FailDelay = 300 * time.Millisecond
	}
	if cfg.HandshakeTimeout <= 0 {
		cfg.HandshakeTimeout = 30 * time.Second
	}
	if cfg.MaxChannels <= 0 {
		cfg.MaxChannels = 4
	}
	if cfg.MaxConnsPerSource == 0 {
		cfg.MaxConnsPerSource = 64
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	algos := sshalgo.For(cfg.LegacyAlgorithms)
	s := &Server{cfg: cfg, store: store, runner: runner, consoles: consoles, reg: reg, log: log,
		lim: cfg.Limiter, esc: newEscapeTexts(cfg.Escape), conns: map[string]int{}}
	s.srv = &ssh.Server{
		Version:                    "obmd",
		PasswordHandler:            s.password,
		KeyboardInteractiveHandler: s.keyboardInteractive,
		PublicKeyHandler:           s.publicKey,
		ConnCallback:               s.connected,
		BannerHandler: func(ssh.Context) string {
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
					return perms, s.verifiedKey(ctx, key)
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

// Shutdown stops accepting, tells every live session why it ends (the
// registry cuts them: the caller does that first, so consoles and exec get
// "obmd is shutting down"), and waits for connections to close, bounded by
// ctx; stragglers are then closed.
func (s *Server) Shutdown(ctx context.Context) error {
	err := s.srv.Shutdown(ctx)
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return s.srv.Close()
	}
	return err
}

// connected bounds the time a connection may spend before authenticating.
// The deadline is lifted when authentication succeeds. It also turns
// delayed ACKs off (quickAck): they stall OpenSSH's handshake. The
// connection's auth state goes with it: when it closes, a login that
// failed there without being recorded yet is (connEnded).
func (s *Server) connected(ctx ssh.Context, conn net.Conn) net.Conn {
	src := sessions.SourceKey(remoteHost(conn.RemoteAddr()))
	s.connsMu.Lock()
	if s.cfg.MaxConnsPerSource > 0 && s.conns[src] >= s.cfg.MaxConnsPerSource {
		s.connsMu.Unlock()
		s.log.WithFields(logrus.Fields{"remote": conn.RemoteAddr().String(), "limit": s.cfg.MaxConnsPerSource}).Warn("too_many_connections")
		return nil // gliderlabs closes it
	}
	s.conns[src]++
	s.connsMu.Unlock()
	st := &connState{remote: conn.RemoteAddr().String(), src: src, offered: map[string]int64{}}
	st.conn = &countedConn{Conn: quickAck(conn), ended: func() {
		s.connsMu.Lock()
		if s.conns[src]--; s.conns[src] <= 0 {
			delete(s.conns, src)
		}
		s.connsMu.Unlock()
		s.connEnded(st)
	}}
	st.conn.SetDeadline(s.cfg.Now().Add(s.cfg.HandshakeTimeout))
	ctx.SetValue(stateKey{}, st)
	ctx.SetValue(chansKey{}, new(atomic.Int32))
	return st.conn
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

// countedConn runs ended once it is closed: that gives back its slot in
// Server.conns and records a failed login (gliderlabs closes every
// connection it handles, once done). The socket is closed first, so the
// client is not held while that is written.
type countedConn struct {
	net.Conn
	once  sync.Once
	ended func()
}

func (c *countedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.ended)
	return err
}

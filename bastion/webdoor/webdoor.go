// Package webdoor is obmd's web console door: an xterm.js page and a
// WebSocket that serve a node's console in a browser.
//
// The page (GET /nodes/{label}) and its scripts are embedded; the
// WebSocket (GET /nodes/{label}/ws) takes its credential as its first
// message, never in a URL: a node's token, or a one-time ticket an admin
// minted for a dashboard (tickets.go). From then on it keeps the SSH
// door's promises: guesses counted by the shared limiter, an unknown node
// and a wrong token answered alike and no sooner than FailDelay, a
// deadline before authentication, sessions registered, admitted and cut
// through access, audited with the actor "web". protocol.go says what
// travels on the socket.
package webdoor

import (
	"context"
	"embed"
	"errors"
	"io/fs"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/obmd/obmd/bastion/access"
	"github.com/obmd/obmd/bastion/access/sessions"
	"github.com/obmd/obmd/bastion/internal/realip"
	"github.com/obmd/obmd/db"
	"github.com/obmd/obmd/keys"
	"github.com/obmd/obmd/sol"
	"github.com/obmd/obmd/sol/printable"
)

// Store is what the web door reads and writes in the database.
type Store interface {
	// AccessAt reads a node's token and epoch (access.Gate.AccessAt) for
	// a login that took mark (Sessions.Mark) just before.
	AccessAt(ctx context.Context, label string, mark uint64) (db.Access, error)
	// RedeemWebTicket uses up a one-time ticket (db.Store.RedeemWebTicket).
	RedeemWebTicket(ctx context.Context, h keys.TokenHash) (db.WebTicket, error)
	Audit(ctx context.Context, e db.AuditEvent) error
}

// Limiter bounds guessing (authlimit.Limiter, shared with the other
// doors): Begin holds one of the source's tries, Judge says whether the
// node's state lets it go on, End settles it.
type Limiter interface {
	Begin(ctx context.Context, source string) (ok, first bool)
	Judge(source, node string, exists bool) (ok, first bool)
	End(source, node string, exists, failed bool)
}

// Sessions starts every session (access.Revoker.Open): registered, so that
// access changes cut it, admitted at the epoch its login read, watched.
type Sessions interface {
	Open(ctx context.Context, info sessions.Info, host string, unblock func()) (*access.Session, error)
	Mark() uint64
}

// Consoles is the console hub (sol.Manager).
type Consoles interface {
	Attach(ctx context.Context, label string, o sol.AttachOptions) (*sol.Viewer, error)
	Viewers(label string) []sol.ViewerInfo
	// Writer names label's writer wherever in the cluster it is.
	Writer(label string) sol.Who
}

// Config configures the web door. Zero values take the defaults noted.
type Config struct {
	// Limiter bounds guessing; the wiring shares it with the other doors.
	// Required.
	Limiter Limiter
	// FailDelay is the least time a failed login takes, whatever failed
	// (default 300 ms, the SSH door's).
	FailDelay time.Duration
	// PreAuthTimeout bounds the time from the WebSocket's opening to its
	// credential (default 10 s).
	PreAuthTimeout time.Duration
	// MaxMessage bounds a message from the browser once authenticated
	// (default 64 KiB); before, the first message may have 4 KiB. A larger
	// one closes the socket (status 1009).
	MaxMessage int64
	// FrameAncestors are the origins allowed to embed the page in a frame
	// (CSP frame-ancestors); none: it cannot be framed.
	FrameAncestors []string
	// PublicURL is the door's address as browsers reach it
	// ("https://console.example.com"), when a proxy stands in front: ticket
	// links are built on it, and a WebSocket whose Origin is its origin is
	// accepted too. Default: the request's own host.
	PublicURL string
	// TrustedProxies are the reverse proxies whose X-Forwarded-For names
	// the client: behind one, every browser would otherwise be the proxy's
	// address to the guessing limits, the session caps and the audit.
	TrustedProxies realip.Trusted
	// RoleWait, in cluster mode, bounds how long attach waits for the
	// replica holding the node's link to say who writes (as the SSH door).
	RoleWait time.Duration
	// OnAuth, if set, is told of every login's method ("web-token",
	// "web-ticket") and result ("ok", "denied"), for metrics.
	OnAuth func(method, result string)
	// Authenticated, if set, is called with the request's context once a
	// socket has authenticated and its session was admitted: the wiring
	// then spares its connection from the caps on unauthenticated
	// connections (conncap.TrustTenantContext).
	Authenticated func(ctx context.Context)
	// Now is the clock (default time.Now).
	Now func() time.Time
}

// Default limits.
const (
	DefaultPreAuthTimeout = 10 * time.Second
	DefaultMaxMessage     = 64 << 10
	DefaultFailDelay      = 300 * time.Millisecond
	maxFirstMessage       = 4 << 10
)

// files are the page and what it loads: xterm.js as npm ships it
// (static/refresh.sh refreshes it; its licence is served beside it) and the
// page's own script and style.
//
//go:embed index.html static/xterm.js static/xterm.css static/xterm.LICENSE static/console.js static/console.css
var files embed.FS

// Server is the web door. Handler serves it; Shutdown waits for its
// sockets.
type Server struct {
	cfg      Config
	store    Store
	sessions Sessions
	consoles Consoles
	log      logrus.FieldLogger
	mux      *http.ServeMux
	csp      string
	public   *url.URL // Config.PublicURL, parsed; nil if unset

	// wg counts the sockets being served (each handler's goroutine, which
	// owns its socket and waits for its reader); Shutdown waits for it.
	// closed, under mu, is set by Shutdown: no socket is counted after.
	wg     sync.WaitGroup
	mu     sync.Mutex
	closed bool
	// base is the parent of every socket's context before its session
	// starts; Shutdown cancels it, ending the sockets still waiting for a
	// credential.
	base context.Context
	stop context.CancelFunc
}

// New validates cfg and returns a Server; it starts nothing.
func New(cfg Config, store Store, sess Sessions, consoles Consoles, log logrus.FieldLogger) (*Server, error) {
	if store == nil || sess == nil || consoles == nil || log == nil || cfg.Limiter == nil {
		return nil, errors.New("webdoor: missing dependency")
	}
	if cfg.FailDelay <= 0 {
		cfg.FailDelay = DefaultFailDelay
	}
	if cfg.PreAuthTimeout <= 0 {
		cfg.PreAuthTimeout = DefaultPreAuthTimeout
	}
	if cfg.MaxMessage <= 0 {
		cfg.MaxMessage = DefaultMaxMessage
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	s := &Server{cfg: cfg, store: store, sessions: sess, consoles: consoles, log: log}
	s.base, s.stop = context.WithCancel(context.Background())
	if cfg.PublicURL != "" {
		u, err := ParsePublicURL(cfg.PublicURL)
		if err != nil {
			return nil, err
		}
		s.public = u
	}
	csp, err := policy(cfg.FrameAncestors)
	if err != nil {
		return nil, err
	}
	s.csp = csp
	static, err := fs.Sub(files, "static")
	if err != nil {
		return nil, err // cannot happen: embedded
	}
	s.mux = http.NewServeMux()
	s.mux.HandleFunc("GET /nodes/{label}", s.page)
	s.mux.HandleFunc("GET /nodes/{label}/ws", s.socket)
	// Files only: no directory listing.
	s.mux.Handle("GET /static/{file}", http.StripPrefix("/static/", http.FileServerFS(static)))
	s.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) { http.NotFound(w, r) })
	return s, nil
}

// ParsePublicURL checks a public URL: http or https, a host, nothing but
// an optional "/" after it. The scheme's default port is dropped, as a
// browser drops it from the Origin it sends.
func ParsePublicURL(s string) (*url.URL, error) {
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Hostname() == "" ||
		(u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" || u.User != nil {
		return nil, errors.New("web.public_url must be http(s)://host[:port]")
	}
	if p := u.Port(); (u.Scheme == "http" && p == "80") || (u.Scheme == "https" && p == "443") {
		u.Host = strings.TrimSuffix(u.Host, ":"+p)
	}
	u.Path = ""
	return u, nil
}

// policy is the Content-Security-Policy of every answer: scripts, styles
// and the socket from this origin only (xterm.js adds <style> elements of
// its own, hence inline styles; never inline script), nothing else, and
// framing by the listed origins only.
func policy(ancestors []string) (string, error) {
	fa := "'none'"
	if len(ancestors) > 0 {
		for _, a := range ancestors {
			if a == "" || strings.ContainsAny(a, ";,\r\n\t ") {
				return "", errors.New("web.frame_ancestors: each is one CSP source such as https://dash.example.com")
			}
		}
		fa = strings.Join(ancestors, " ")
	}
	return "default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; connect-src 'self'; " +
		"img-src 'self' data:; font-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors " + fa, nil
}

// Handler serves the door, with its security headers on every answer, to
// the client a trusted proxy names (Config.TrustedProxies).
func (s *Server) Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", s.csp)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Cross-Origin-Resource-Policy", "same-origin")
		h.Set("Permissions-Policy", "camera=(), microphone=(), geolocation=(), clipboard-read=()")
		if len(s.cfg.FrameAncestors) == 0 {
			h.Set("X-Frame-Options", "DENY")
		}
		if r.TLS != nil {
			h.Set("Strict-Transport-Security", "max-age=31536000")
		}
		h.Set("Cache-Control", "no-store")
		r, err := realip.Request(r, s.cfg.TrustedProxies)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		s.mux.ServeHTTP(w, r)
	})
}

// page serves the console page, whatever the label (it tells nothing of
// which nodes exist: the page reads the label from its own address).
func (s *Server) page(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	http.ServeFileFS(w, r, files, "index.html")
}

// Shutdown waits, within ctx, for the sockets being served to end (the
// registry's shutdown cuts their sessions first; those still waiting for
// a credential are refused).
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	s.stop()
	done := make(chan struct{})
	go func() { // ends when the sockets have
		s.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// audit records e; a failure to audit is logged, never shown to the client.
func (s *Server) audit(ctx context.Context, e db.AuditEvent) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := s.store.Audit(ctx, e); err != nil {
		s.log.WithError(err).WithField("action", e.Action).Error("audit_failed")
	}
}

func (s *Server) observe(method, result string) {
	if s.cfg.OnAuth != nil {
		s.cfg.OnAuth(method, result)
	}
}

// safe makes untrusted text (a label is any string a client sends)
// printable and bounded, for logs and audit records.
func safe(s string) string { return printable.Clean(s, 100) }

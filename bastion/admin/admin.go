// Package admin owns obmd's admin door: the HTTP admin API, its console
// streams and the health probes.
//
// It serves the obmd-compatible routes HIL's driver uses (node registration,
// token rotation, and the node-token power and console routes), the /v1 JSON
// API for everything else (nodes, keys, node principals, trusted certificate
// authorities and revocations, sessions, audit, lockouts), and the /healthz
// and /readyz probes.
//
// Authentication: admin routes take HTTP basic "admin:<admin token>" and
// answer 404 to a missing or wrong credential, so that an outsider cannot
// tell which nodes exist. Node-token routes take the node's current token in
// "?token=" and answer a wrong or missing one, and an unknown node, with the
// same 401 and body, no sooner than Config.FailDelay. Query strings are
// never logged. Failures count against the guessing limits (Config.Limiter),
// which never refuse the right admin credential. Behind a listed reverse
// proxy (Config.TrustedProxies) the client is the one X-Forwarded-For names.
//
// Node registrations are decoded and checked by their type (Types, the
// wiring's table: the API knows no type itself); node-token requests run as
// sessions opened through the Revoker (Revoker.Open), like SSH sessions.
//
// Fingerprints in /v1 key paths contain "/" and "+" (standard base64): clients
// should escape "/" as %2F ("DELETE /v1/nodes/n1/keys/SHA256:abc%2Fdef");
// an unescaped "/" works too as long as the path stays canonical (no "//").
package admin

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/obmd/obmd/bastion/access"
	"github.com/obmd/obmd/bastion/access/authlimit"
	"github.com/obmd/obmd/bastion/access/sessions"
	"github.com/obmd/obmd/bastion/internal/realip"
	"github.com/obmd/obmd/commands"
	"github.com/obmd/obmd/db"
	"github.com/obmd/obmd/keys"
	"github.com/obmd/obmd/sol"
	"github.com/obmd/obmd/sol/screen"
)

// DefaultMaxBody bounds request bodies when Config.MaxBody is zero.
const DefaultMaxBody = 64 << 10

// DefaultFailDelay is Config.FailDelay's default.
const DefaultFailDelay = 300 * time.Millisecond

// Config configures the API.
type Config struct {
	// AdminToken is the secret of the "admin" basic-auth user. Required.
	AdminToken string
	// Cluster, in cluster mode, lists and kicks the sessions of every
	// replica (GET and DELETE /v1/sessions); nil: this replica's registry.
	Cluster ClusterSessions
	// MaxBody bounds request bodies in bytes (default DefaultMaxBody); a
	// larger body is answered 413.
	MaxBody int64
	// Now is the clock (default time.Now).
	Now func() time.Time
	// FailDelay is the least time a failed node-token check takes, whatever
	// failed (default 300 ms, the SSH door's).
	FailDelay time.Duration
	// Limiter bounds guessing of the admin credential and of node tokens;
	// the wiring shares it with the SSH front door. Required.
	Limiter Limiter
	// Metrics, if set, serves GET /metrics (Prometheus text format; no
	// authentication, like the probes: it carries no node names).
	Metrics http.Handler
	// OnAuth, if set, is told of every authentication attempt's method
	// ("http-admin", "http-token") and result ("ok", "denied"), refused
	// ones included, for metrics.
	OnAuth func(method, result string)
	// TrustedProxies lists the reverse proxies in front of the admin port
	// whose X-Forwarded-For is believed: for a request from one of them,
	// the client is the rightmost address of that header that is not
	// listed (realip.Forwarded), and that address is what limits, audit
	// records, logs and sessions use. From anyone else the header is
	// ignored.
	TrustedProxies realip.Trusted
	// ChangeTimeout bounds the reads an access change makes before it
	// (PUT of a node reads the one stored); the wiring gives the
	// Revoker's bound (default 5 s).
	ChangeTimeout time.Duration
	// Ready, if set, is /readyz's check (default: the store's Ping). An
	// error wrapping db.ErrWriteStuck is reported as writes not
	// completing; any other as the database not reachable.
	Ready func(ctx context.Context) error
	// ReadyNotes, if set, are lines /readyz adds after "ok" when ready:
	// what the cluster lacks that this replica cannot mend (a zone no
	// live replica reaches).
	ReadyNotes func() []string
	// CipherInUse, if set, tells the IPMI cipher suite this replica last
	// negotiated with a node's BMC (sol.Ciphers.Suite), which the node
	// views show as "cipher_in_use".
	CipherInUse func(label string) (suite int, ok bool)
	// ConsoleInUse, if set, tells the console transport ("sol", "ssh")
	// this replica last opened a node's console over (sol/transport's
	// Memory), which the node views show as "console_in_use".
	ConsoleInUse func(label string) (transport string, ok bool)
	// Authenticated, if set, is called with the request's context once a
	// request has presented the admin credential: the wiring then spares
	// its connection from every cap (conncap.TrustContext).
	Authenticated func(ctx context.Context)
	// History, if set, serves the console history: GET
	// /v1/nodes/{label}/console-log and /tenancies (history.go).
	History History
	// TenantSession, if set, is called with the request's context once a
	// node-token request has been read whole and its session admitted:
	// the wiring then spares its connection from the caps on
	// unauthenticated connections, though not from being closed to make
	// room (conncap.TrustTenantContext), so that a tenant cannot hold the
	// port against the rotation that would cut it.
	TenantSession func(ctx context.Context)
	// WebTickets, if set, mints the web console's one-time tickets (POST
	// /v1/nodes/{label}/web-tickets); nil: the web console is off.
	WebTickets WebTickets
}

// Limiter bounds secret guessing per source address and per node
// (authlimit.Limiter). The wiring shares one with the SSH front door, so a
// source locked out by guesses on either is locked out of both.
type Limiter interface {
	// Begin reports whether host (the client's address, no port) may try a
	// secret, and if not, whether the refusal is its lockout's first: that
	// one is audited, the others only logged at Debug. Every allowed Begin
	// is followed by one End.
	Begin(ctx context.Context, host string) (ok, first bool)
	// Judge reports whether a try Begin allowed may check its secret on
	// node, now that the lookup said whether the node exists: not if the
	// node is under attack and host failed on it (first as for Begin).
	Judge(host, node string, exists bool) (ok, first bool)
	// End settles a try Begin allowed; a failed one counts against host
	// and, unless node is "" (the admin credential), the node.
	End(host, node string, exists, failed bool)
	// Limits is the limits in effect; Lockouts lists what they refuse now
	// (at most max entries); Unlock lifts host's lockout and says how the
	// limiter counts host and whether anything refused it.
	Limits() authlimit.Config
	Lockouts(max int) authlimit.Lockouts
	Unlock(host string) (source string, wasLocked bool)
}

// Store is the part of *db.Store the API uses.
type Store interface {
	Ping(ctx context.Context) error
	CreateNode(ctx context.Context, n db.Node) (db.Node, error)
	Node(ctx context.Context, label string) (db.Node, error)
	Nodes(ctx context.Context) ([]db.Node, error)
	UpdateNodeInfo(ctx context.Context, label, typ string, sealed []byte) (db.Node, error)
	SetCapture(ctx context.Context, label, capture string) (db.Node, error)
	SetScreenSize(ctx context.Context, label, size string) (db.Node, error)
	SetZone(ctx context.Context, label, zone string) (db.Node, error)
	DeleteNode(ctx context.Context, label string) (int64, error)
	SetToken(ctx context.Context, label string, h keys.TokenHash) (int64, error)
	RevokeToken(ctx context.Context, label string) (int64, error)
	Access(ctx context.Context, label string) (db.Access, error)
	AddKey(ctx context.Context, k db.Key) error
	Keys(ctx context.Context, label string) ([]db.Key, error)
	DeleteKey(ctx context.Context, label, fingerprint string) (int64, error)
	SSHHostKey(ctx context.Context, label string) (db.SSHHostKey, error)
	DeleteSSHHostKey(ctx context.Context, label string) (bool, error)
	SetNodePrincipals(ctx context.Context, label string, principals []string) (int64, error)
	NodePrincipals(ctx context.Context, label string) ([]string, error)
	AddCA(ctx context.Context, ca db.CA) (created bool, err error)
	CAs(ctx context.Context) ([]db.CA, error)
	DeleteCA(ctx context.Context, fingerprint string) (epoch int64, existed bool, err error)
	Revoke(ctx context.Context, r db.Revocation) (int64, error)
	Revocations(ctx context.Context) ([]db.Revocation, error)
	DeleteRevocation(ctx context.Context, r db.Revocation) (existed bool, err error)
	Audit(ctx context.Context, e db.AuditEvent) error
	AuditEvents(ctx context.Context, q db.AuditQuery) ([]db.AuditEvent, error)
}

// Runner runs one command on a node's BMC (commands.Runner).
type Runner interface {
	Do(ctx context.Context, req commands.Request, cmd commands.Command) (commands.Result, error)
}

// Consoles is the console hub (sol.Manager): a node-token console stream
// is a read-only viewer of it.
type Consoles interface {
	Attach(ctx context.Context, label string, o sol.AttachOptions) (*sol.Viewer, error)
	// Screen is the node's screen where this replica has its console
	// link, else sol.ErrNoScreen (wrapped).
	Screen(ctx context.Context, label string) (screen.Snapshot, error)
}

// Revoker is this replica's access control (access.Revoker).
//
// Change makes an access change: under the node's revocation lock, c.Do
// moves the node's epoch in the database; every live session of the node
// older than it (SSH consoles, exec, HTTP console streams) is then cut, on
// this replica and on the others, and the node's console wiped, before
// Change returns nil. Its errors: c.Do's own, or one wrapping
// access.ErrIncomplete (the database or a replica did not answer: not
// stored, outcome unknown, or not confirmed by every replica), whose text
// says so for the admin.
//
// ChangeCred makes a credential change (a CA removed, a certificate
// revoked) in the same way: stored, the certificate sessions it names cut
// here and on the other replicas, within the bound (access.ChangeCred).
//
// Open starts every node-token session (power routes, the HTTP console):
// registered, admitted at the epoch its token was checked at, and watched
// after a cut; its errors are documented there.
type Revoker interface {
	Change(ctx context.Context, c access.Change) error
	ChangeCred(ctx context.Context, c access.CredChange) error
	Open(ctx context.Context, info sessions.Info, host string, unblock func()) (*access.Session, error)
}

// ClusterSessions is the session list of every replica (the daemon's).
type ClusterSessions interface {
	List(ctx context.Context, node string) []sessions.Info
	// Kick ends session id on the replica holding it with "access to NODE
	// was revoked (why)"; found is false if none does.
	Kick(ctx context.Context, id, why string) (node string, found bool, err error)
}

// Reasons given to Revoker, shown to the users whose sessions end. Those
// of access changes are the database's (db.Reason*), which the change
// records, so that a replica that learns of it from the database tells its
// sessions the same reason.
const (
	WhyNodeDeleted = db.ReasonNodeDeleted
	WhyNodeChanged = db.ReasonNodeChanged
	WhyTokenRotate = db.ReasonTokenRotated
	WhyTokenRevoke = db.ReasonTokenRevoked
	WhyKeyRemoved  = db.ReasonKeyRemoved
	WhyKicked      = sessions.WhyKicked
	WhyPrincipals  = db.ReasonPrincipals
	WhyCARemoved   = db.ReasonCARemoved
	WhyCertRevoked = db.ReasonCertRevoked
)

// API serves the admin HTTP API. Create it with New; it is safe for
// concurrent use and owns no goroutine.
type API struct {
	cfg      Config
	store    Store
	types    Types
	runner   Runner
	consoles Consoles
	revoker  Revoker
	sessions *sessions.Registry
	log      logrus.FieldLogger
	mux      *http.ServeMux
}

// New validates its arguments and returns the API. It starts nothing.
func New(cfg Config, store Store, types Types, runner Runner, consoles Consoles, revoker Revoker, reg *sessions.Registry, log logrus.FieldLogger) (*API, error) {
	switch {
	case cfg.AdminToken == "":
		return nil, errors.New("admin api: an admin token is required")
	case cfg.Limiter == nil:
		return nil, errors.New("admin api: a Limiter is required")
	case cfg.MaxBody < 0:
		return nil, errors.New("admin api: MaxBody must not be negative")
	case store == nil || types == nil || runner == nil || consoles == nil || revoker == nil || reg == nil || log == nil:
		return nil, errors.New("admin api: store, node types, runner, consoles, revoker, sessions and log are required")
	}
	if cfg.MaxBody == 0 {
		cfg.MaxBody = DefaultMaxBody
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.ChangeTimeout <= 0 {
		cfg.ChangeTimeout = 5 * time.Second
	}
	if cfg.FailDelay <= 0 {
		cfg.FailDelay = DefaultFailDelay
	}
	a := &API{cfg: cfg, store: store, types: types, runner: runner, consoles: consoles,
		revoker: revoker, sessions: reg, log: log, mux: http.NewServeMux()}
	a.routes()
	return a, nil
}

// Handler returns the API's root handler.
func (a *API) Handler() http.Handler { return http.HandlerFunc(a.serve) }

func (a *API) routes() {
	// Probes: no authentication.
	a.handle("GET /healthz", a.healthz)
	a.handle("GET /readyz", a.readyz)
	if a.cfg.Metrics != nil {
		a.handle("GET /metrics", a.cfg.Metrics.ServeHTTP)
	}

	// obmd-compatible admin routes.
	a.handle("PUT /node/{label}", a.admin(a.putNodeObmd))
	a.handle("DELETE /node/{label}", a.admin(a.deleteNode))
	a.handle("POST /node/{label}/token", a.admin(a.rotateToken))
	a.handle("DELETE /node/{label}/token", a.admin(a.revokeToken))

	// obmd-compatible node-token routes.
	a.handle("POST /node/{label}/power_on", a.powerOn)
	a.handle("POST /node/{label}/power_off", a.powerOff)
	a.handle("POST /node/{label}/power_cycle", a.powerCycle)
	a.handle("PUT /node/{label}/boot_device", a.bootDevice)
	a.handle("GET /node/{label}/power_status", a.powerStatus)
	a.handle("GET /node/{label}/console", a.console)

	// /v1 JSON API (admin).
	a.handle("GET /v1/nodes", a.admin(a.listNodes))
	a.handle("GET /v1/nodes/{label}", a.admin(a.getNode))
	a.handle("PUT /v1/nodes/{label}", a.admin(a.putNodeV1))
	a.handle("DELETE /v1/nodes/{label}", a.admin(a.deleteNode))
	a.handle("POST /v1/nodes/{label}/token", a.admin(a.rotateToken))
	a.handle("DELETE /v1/nodes/{label}/token", a.admin(a.revokeToken))
	a.handle("POST /v1/nodes/{label}/keys", a.admin(a.addKey))
	a.handle("GET /v1/nodes/{label}/keys", a.admin(a.listKeys))
	a.handle("GET /v1/nodes/{label}/doctor", a.admin(a.doctor))
	a.handle("DELETE /v1/nodes/{label}/ssh-host-key", a.admin(a.resetHostKey))
	a.handle("DELETE /v1/nodes/{label}/keys/{fingerprint...}", a.admin(a.deleteKey))
	a.handle("POST /v1/cas", a.admin(a.addCA))
	a.handle("GET /v1/cas", a.admin(a.listCAs))
	a.handle("POST /v1/cas/revoked", a.admin(a.revoke))
	a.handle("GET /v1/cas/revoked", a.admin(a.listRevocations))
	a.handle("DELETE /v1/cas/revoked/{kind}/{value...}", a.admin(a.deleteRevocation))
	a.handle("DELETE /v1/cas/{fingerprint...}", a.admin(a.deleteCA))
	a.handle("PUT /v1/nodes/{label}/capture", a.admin(a.putCapture))
	a.handle("PUT /v1/nodes/{label}/screen_size", a.admin(a.putScreenSize))
	a.handle("PUT /v1/nodes/{label}/zone", a.admin(a.putZone))
	a.handle("GET /v1/nodes/{label}/console-log", a.admin(a.consoleLog))
	a.handle("GET /v1/nodes/{label}/screen", a.admin(a.screen))
	a.handle("GET /v1/nodes/{label}/tenancies", a.admin(a.tenancies))
	a.handle("POST /v1/nodes/{label}/web-tickets", a.admin(a.webTicket))
	a.handle("GET /v1/audit", a.admin(a.audit))
	a.handle("GET /v1/sessions", a.admin(a.listSessions))
	a.handle("DELETE /v1/sessions/{id}", a.admin(a.kickSession))
	a.handle("GET /v1/lockouts", a.admin(a.listLockouts))
	a.handle("DELETE /v1/lockouts/{addr...}", a.admin(a.unlock))

	// Everything else, including a known path with another method, is the
	// same 404 an unauthenticated admin request gets.
	a.handle("/", func(w http.ResponseWriter, r *http.Request) { notFound(w) })
}

// handle registers fn for pattern, recording the pattern for the request log.
func (a *API) handle(pattern string, fn http.HandlerFunc) {
	a.mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
		if rec, ok := w.(*recorder); ok {
			rec.route = pattern
		}
		fn(w, r)
	})
}

// serve is the root handler: it finds the client behind a trusted proxy
// (client), refuses non-canonical paths (the mux would redirect them,
// re-sending a PUT to another node), then logs one line per request with
// the route pattern, never the raw URL (it may carry ?token=).
func (a *API) serve(w http.ResponseWriter, r *http.Request) {
	start := a.cfg.Now()
	rec := &recorder{ResponseWriter: w, route: "-"}
	peer := r.RemoteAddr
	cr, err := realip.Request(r, a.cfg.TrustedProxies)
	switch {
	case err != nil:
		writeError(rec, http.StatusBadRequest, err.Error())
	case r.URL.EscapedPath() != cleanPath(r.URL.EscapedPath()):
		writeError(rec, http.StatusBadRequest, "path is not canonical (no empty, \".\" or \"..\" segments)")
	default:
		r = cr
		a.mux.ServeHTTP(rec, r)
	}
	status := rec.status
	if status == 0 {
		status = http.StatusOK
	}
	f := logrus.Fields{
		"method":   r.Method,
		"route":    rec.route,
		"status":   status,
		"duration": a.cfg.Now().Sub(start).String(),
		"remote":   r.RemoteAddr,
	}
	if r.RemoteAddr != peer {
		f["proxy"] = peer
	}
	a.log.WithFields(f).Debug("http_request")
}

// admin wraps an admin handler with the basic-auth check. The credential
// is checked first, and a correct one is served whatever the guessing
// limits say: others' failures from the same address (a NAT, a balancer, a
// monitoring probe) never refuse HIL's rotation. A missing or wrong
// credential gets the generic 404 and an audit record, and counts against
// the source (Config.Limiter); once the source is locked out, it gets 429
// instead (the lockout's first refusal audited, the rest counted).
//
// What that does to guessing: the answer to a wrong credential (404 or
// 429) differs from a right one's even during a lockout, so the lockout
// does not slow guessing of the admin credential; its strength does (192
// bits when generated; a configured one must be at least
// MinAdminTokenLen characters). The compare is constant-time, and a right
// credential does no more work before being served than a wrong one does
// before being refused, so timing tells nothing either.
func (a *API) admin(fn http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		user, pass, given := r.BasicAuth()
		// Compare both parts in constant time, without short-circuit.
		okUser := keys.SecretEqual(user, "admin")
		okPass := keys.SecretEqual(pass, a.cfg.AdminToken)
		if given && okUser && okPass {
			a.observe("http-admin", "ok")
			a.authenticated(r)
			fn(w, r)
			return
		}
		route := "-"
		if rec, isRec := w.(*recorder); isRec {
			route = rec.route
		}
		host := remoteHost(r)
		if ok, first := a.cfg.Limiter.Begin(r.Context(), host); !ok {
			a.limited(w, r, "http-admin", db.AuditEvent{Actor: "admin", Action: "admin.auth", Detail: " on " + route}, "source", first)
			return
		}
		a.cfg.Limiter.End(host, "", false, true)
		a.observe("http-admin", "denied")
		detail := "bad credential"
		if !given {
			detail = "no credential"
		}
		a.auditEvent(r, db.AuditEvent{Actor: "admin", Action: "admin.auth", Result: "denied",
			Detail: detail + " on " + route})
		notFound(w)
	}
}

// MinAdminTokenLen is the least length of a configured admin token: the
// guessing limits do not protect it (API.admin), so it must be strong.
const MinAdminTokenLen = 32

// authenticated tells Config.Authenticated that r presented the admin
// credential.
func (a *API) authenticated(r *http.Request) {
	if a.cfg.Authenticated != nil {
		a.cfg.Authenticated(r.Context())
	}
}

// observe reports an authentication attempt to Config.OnAuth.
func (a *API) observe(method, result string) {
	if a.cfg.OnAuth != nil {
		a.cfg.OnAuth(method, result)
	}
}

// limited answers a request the guessing limits refused (429) and counts
// it as a denied attempt of method. The first refusal of a lockout is
// audited as e, denied, its Detail prefixed with the limit; the others are
// only logged at Debug, so a locked-out flood writes nothing to the
// database.
func (a *API) limited(w http.ResponseWriter, r *http.Request, method string, e db.AuditEvent, which string, first bool) {
	a.refused(r, method, e, which, first)
	writeError(w, http.StatusTooManyRequests, "too many failed attempts from your address; try again later")
}

// refused records a try the guessing limits refused, without answering:
// the metric, and an audit row for the lockout's first refusal (the rest
// are logged at Debug).
func (a *API) refused(r *http.Request, method string, e db.AuditEvent, which string, first bool) {
	a.observe(method, "denied")
	e.Result, e.Detail = "denied", "rate limited ("+which+")"+e.Detail
	if first {
		a.auditEvent(r, e)
		return
	}
	a.log.WithFields(logrus.Fields{"action": e.Action, "node": e.Node, "detail": e.Detail, "remote": r.RemoteAddr}).Debug("auth_refused")
}

// remoteHost is the client's address without port.
func remoteHost(r *http.Request) string {
	if host, _, err := net.SplitHostPort(r.RemoteAddr); err == nil {
		return host
	}
	return r.RemoteAddr
}

func (a *API) healthz(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	_, _ = io.WriteString(w, "ok")
}

// readyTimeout bounds /readyz's check: long enough for a write probe to
// count as stuck (the wiring's bound, 2 s) rather than merely slow.
const readyTimeout = 3 * time.Second

func (a *API) readyz(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), readyTimeout)
	defer cancel()
	ready := a.store.Ping
	if a.cfg.Ready != nil {
		ready = a.cfg.Ready
	}
	if err := ready(ctx); err != nil {
		a.log.WithError(err).Warn("readyz_failed")
		msg := "database not reachable"
		if errors.Is(err, db.ErrWriteStuck) {
			msg = "database not completing writes"
		}
		writeError(w, http.StatusServiceUnavailable, msg)
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	body := "ok"
	if a.cfg.ReadyNotes != nil {
		for _, n := range a.cfg.ReadyNotes() {
			body += "\n" + n
		}
	}
	_, _ = io.WriteString(w, body)
}

// auditEvent records e with the request's source; a failure is logged, not
// returned: the operation it describes has already happened. It runs even if
// the client has gone.
func (a *API) auditEvent(r *http.Request, e db.AuditEvent) {
	if e.At.IsZero() {
		e.At = a.cfg.Now()
	}
	if e.Source == "" {
		e.Source = r.RemoteAddr
	}
	ctx, cancel := detached(r)
	defer cancel()
	if err := a.store.Audit(ctx, e); err != nil {
		a.log.WithError(err).WithFields(logrus.Fields{"action": e.Action, "node": e.Node}).Warn("audit_failed")
		return
	}
	if e.Actor == "admin" && e.Result == "ok" {
		a.log.WithFields(logrus.Fields{"action": e.Action, "node": e.Node, "detail": e.Detail, "remote": e.Source}).Info("admin_change")
	}
}

// detached is the context for changes and their audit records: they finish
// (within a bound) even if the client goes away halfway.
func detached(r *http.Request) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(r.Context()), 30*time.Second)
}

// recorder remembers the status and route for the request log. Unwrap lets
// http.ResponseController reach the real writer (Flush, write deadlines).
type recorder struct {
	http.ResponseWriter
	status int
	route  string
}

func (r *recorder) WriteHeader(code int) {
	if r.status == 0 {
		r.status = code
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *recorder) Write(p []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	return r.ResponseWriter.Write(p)
}

func (r *recorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

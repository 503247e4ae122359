package admin

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/obmd/obmd/bastion/access"
	"github.com/obmd/obmd/bastion/access/authlimit"
	"github.com/obmd/obmd/bastion/access/sessions"
	"github.com/obmd/obmd/bastion/internal/realip"
	"github.com/obmd/obmd/bastion/nodes"
	"github.com/obmd/obmd/commands"
	"github.com/obmd/obmd/db"
	"github.com/obmd/obmd/db/dbtest"
	"github.com/obmd/obmd/keys"
	"github.com/obmd/obmd/sol"
	"github.com/obmd/obmd/sol/ipmi"
	"github.com/sirupsen/logrus"
)

const testAdminToken = "adm1n-T0ken-for-tests-only"

// env is one API over a real store, served by an httptest.Server.
type env struct {
	t      *testing.T
	dsn    string
	store  *db.Store
	sealer *keys.Sealer
	runner *fakeRunner
	cons   *sol.Manager
	rev    *fakeRevoker
	reg    *sessions.Registry
	logs   *syncBuffer
	api    *API
	srv    *httptest.Server
	wrap   func(Store) Store
	// limits are the guessing limits of the next start (newEnv: none to
	// speak of; tests that fail on purpose many times stay clear of them).
	limits authlimit.Config
	// failDelay is the next start's Config.FailDelay (newEnv: testFailDelay).
	failDelay time.Duration
	// trusted is the next start's Config.TrustedProxies (newEnv: none).
	trusted realip.Trusted
}

// testFailDelay keeps the many failed token checks of these tests quick.
const testFailDelay = 5 * time.Millisecond

// forEngines runs fn on SQLite and, when OBMD_TEST_MYSQL_DSN is set, MariaDB.
func forEngines(t *testing.T, fn func(t *testing.T, e dbtest.Engine)) {
	for _, eng := range dbtest.Engines() {
		t.Run(eng.Name, func(t *testing.T) { fn(t, eng) })
	}
}

// newEnv builds an env on a fresh database of eng. wrap, if given, wraps
// the store the API sees (to inject races).
func newEnv(t *testing.T, eng dbtest.Engine, wrap func(Store) Store) *env {
	t.Helper()
	sealer, err := keys.NewSealer(bytes.Repeat([]byte{7}, 32))
	if err != nil {
		t.Fatalf("sealer: %v", err)
	}
	reg := sessions.New(sessions.Config{CutWait: 5 * time.Second})
	e := &env{t: t, dsn: eng.DSN(t), sealer: sealer, reg: reg, runner: newFakeRunner(reg),
		cons: newConsoles(t), rev: &fakeRevoker{reg: reg}, logs: &syncBuffer{}, wrap: wrap,
		limits: noLimits, failDelay: testFailDelay}
	e.start()
	return e
}

// start opens the store and serves a new API over it (again after restart).
func (e *env) start() {
	t := e.t
	t.Helper()
	ctx := context.Background()
	quiet := logrus.New()
	quiet.SetOutput(io.Discard)
	st, err := db.Open(ctx, e.dsn, quiet)
	if err != nil {
		t.Fatalf("open store: %v", err)
	}
	if err := st.Migrate(ctx); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	e.store = st
	log := logrus.New()
	log.SetOutput(e.logs)
	log.SetLevel(logrus.DebugLevel)
	log.SetFormatter(&logrus.JSONFormatter{})
	var s Store = st
	if e.wrap != nil {
		s = e.wrap(st)
	}
	var epochs access.Epochs = st
	if ep, ok := s.(access.Epochs); ok { // a wrapper that injects epoch races
		epochs = ep
	}
	e.rev.opener = openerOver(e.reg, epochs)
	e.api, err = New(Config{AdminToken: testAdminToken, Limiter: authlimit.New(e.limits, time.Now),
		FailDelay: e.failDelay, TrustedProxies: e.trusted},
		s, testTypes(e.t, e.sealer), e.runner, e.cons, e.rev, e.reg, log)
	if err != nil {
		t.Fatalf("new api: %v", err)
	}
	e.srv = httptest.NewServer(e.api.Handler())
	t.Cleanup(e.stop)
}

// stop closes the server and the store; safe to call twice.
func (e *env) stop() {
	if e.srv != nil {
		e.srv.Close()
		e.srv = nil
	}
	if e.store != nil {
		if err := e.store.Close(); err != nil {
			e.t.Errorf("close store: %v", err)
		}
		e.store = nil
	}
}

// restart is a daemon restart: a new store handle and API over the same DB.
func (e *env) restart() {
	e.stop()
	e.start()
}

// resp is a response as the tests see it.
type resp struct {
	code   int
	body   string
	header http.Header
}

// auth sets a request's credentials.
type auth func(*http.Request)

var (
	asAdmin auth = func(r *http.Request) { r.SetBasicAuth("admin", testAdminToken) }
	noAuth  auth = func(*http.Request) {}
)

// do sends a request with a raw path (sent as is) and a body without
// Content-Type, as HIL's driver does.
func (e *env) do(method, path, body string, a auth) resp {
	e.t.Helper()
	req, err := http.NewRequest(method, e.srv.URL+path, strings.NewReader(body))
	if err != nil {
		e.t.Fatalf("new request %s %s: %v", method, path, err)
	}
	if body == "" {
		req.Body, req.ContentLength = http.NoBody, 0
	}
	a(req)
	res, err := e.srv.Client().Do(req)
	if err != nil {
		e.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		e.t.Fatalf("%s %s: read body: %v", method, path, err)
	}
	return resp{code: res.StatusCode, body: string(b), header: res.Header}
}

// admin sends an admin request.
func (e *env) admin(method, path, body string) resp {
	e.t.Helper()
	return e.do(method, path, body, asAdmin)
}

// mustNode registers a mock node over the obmd route.
func (e *env) mustNode(label string) {
	e.t.Helper()
	if r := e.admin("PUT", "/node/"+label, `{"type":"mock","info":{"addr":"10.0.0.4","NumWrites":0}}`); r.code != 200 {
		e.t.Fatalf("register %s: got %d %s, want 200", label, r.code, r.body)
	}
}

// mustToken rotates label's token and returns it.
func (e *env) mustToken(label string) string {
	e.t.Helper()
	r := e.admin("POST", "/node/"+label+"/token", "")
	if r.code != 200 {
		e.t.Fatalf("token for %s: got %d %s, want 200", label, r.code, r.body)
	}
	tok, found := strings.CutPrefix(strings.TrimSpace(r.body), `{"token":"`)
	tok, found2 := strings.CutSuffix(tok, `"}`)
	if !found || !found2 || tok == "" {
		t := e.t
		t.Fatalf("token body: got %q, want {\"token\":\"...\"}", r.body)
	}
	return tok
}

// labels lists the stored node labels.
func (e *env) labels() []string {
	e.t.Helper()
	ns, err := e.store.Nodes(context.Background())
	if err != nil {
		e.t.Fatalf("list nodes: %v", err)
	}
	var out []string
	for _, n := range ns {
		out = append(out, n.Label)
	}
	return out
}

// epoch is label's current epoch.
func (e *env) epoch(label string) int64 {
	e.t.Helper()
	ep, err := e.store.Epoch(context.Background(), label)
	if err != nil {
		e.t.Fatalf("epoch of %s: %v", label, err)
	}
	return ep
}

// auditActions lists the audit events of node as "actor action result".
func (e *env) auditEvents(node string) []db.AuditEvent {
	e.t.Helper()
	evs, err := e.store.AuditEvents(context.Background(), db.AuditQuery{Node: node})
	if err != nil {
		e.t.Fatalf("audit events: %v", err)
	}
	return evs
}

func hasAudit(evs []db.AuditEvent, actor, action, result string) bool {
	return slices.ContainsFunc(evs, func(ev db.AuditEvent) bool {
		return ev.Actor == actor && ev.Action == action && ev.Result == result
	})
}

// errJSON is the exact body of an error response.
func errJSON(msg string) string {
	return `{"error":` + strconv.Quote(msg) + "}\n"
}

// syncBuffer is a log sink safe for concurrent writers.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// revokeCall is one Revoker call.
type revokeCall struct {
	Label string
	Epoch int64
	Why   string
}

// fakeRevoker records calls and cuts sessions like the wiring does.
type fakeRevoker struct {
	// opener opens sessions: a real Revoker over the test's database.
	opener *access.Revoker
	reg    *sessions.Registry
	mu     sync.Mutex
	calls  []revokeCall
}

func (f *fakeRevoker) Revoke(label string, epoch int64, why string) {
	f.mu.Lock()
	f.calls = append(f.calls, revokeCall{label, epoch, why})
	f.mu.Unlock()
	f.reg.Cut(label, epoch, &sessions.RevokedError{Node: label, Why: why})
}

func (f *fakeRevoker) Open(ctx context.Context, info sessions.Info, host string, unblock func()) (*access.Session, error) {
	return f.opener.Open(ctx, info, host, unblock)
}

func (f *fakeRevoker) Change(ctx context.Context, c access.Change) error {
	epoch, err := c.Do(ctx)
	if err == nil && epoch > 0 && c.Why != "" {
		f.Revoke(c.Node, epoch, c.Why)
	}
	return err
}

func (f *fakeRevoker) ChangeCred(ctx context.Context, c access.CredChange) error {
	epoch, err := c.Do(ctx)
	if err == nil && epoch > 0 {
		f.mu.Lock()
		f.calls = append(f.calls, revokeCall{"", epoch, c.Why})
		f.mu.Unlock()
		f.reg.CutCerts(func(s sessions.Cert) bool { return s.Seen < epoch && c.Cred.Affects(s.CA, s.Serial, s.KeyID) },
			func(node string) error { return &sessions.RevokedError{Node: node, Why: c.Why} })
	}
	return err
}

func (f *fakeRevoker) take() []revokeCall {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := f.calls
	f.calls = nil
	return out
}

// runCall is one Runner call, with the node's live sessions at that time.
type runCall struct {
	Req      commands.Request
	Cmd      commands.Command
	Sessions []sessions.Info
}

// fakeRunner records commands and answers from errs (by command name), or
// power status "Mock Status". With block set, Do waits for its ctx to end.
type fakeRunner struct {
	reg     *sessions.Registry
	mu      sync.Mutex
	calls   []runCall
	errs    map[commands.Name]error
	block   bool
	started chan struct{} // gets a value when a blocking Do starts
}

func newFakeRunner(reg *sessions.Registry) *fakeRunner {
	return &fakeRunner{reg: reg, errs: map[commands.Name]error{}, started: make(chan struct{}, 1)}
}

func (f *fakeRunner) Do(ctx context.Context, req commands.Request, cmd commands.Command) (commands.Result, error) {
	f.mu.Lock()
	f.calls = append(f.calls, runCall{req, cmd, f.reg.List(req.Node)})
	err, block := f.errs[cmd.Name], f.block
	f.mu.Unlock()
	if block {
		f.started <- struct{}{}
		<-ctx.Done()
		return commands.Result{}, ctx.Err()
	}
	if err != nil {
		return commands.Result{}, err
	}
	res := commands.Result{Node: req.Node, Command: cmd.Name}
	if cmd.Name == commands.CmdPowerStatus {
		res.Power = "Mock Status"
	}
	return res, nil
}

func (f *fakeRunner) set(name commands.Name, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.errs[name] = err
}

func (f *fakeRunner) take() []runCall {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := f.calls
	f.calls = nil
	return out
}

// Node types of these tests: the real table's checks (bastion/daemon's),
// with drivers that are never built (the runner is a fake).
const (
	TypeIPMI     nodes.Type = "ipmi"
	TypeIPMITool nodes.Type = "ipmitool"
	TypeMock     nodes.Type = "mock"
	TypeSim      nodes.Type = "sim"
)

// testTypes is the node types table of these tests, sealing with sealer.
func testTypes(t testing.TB, sealer *keys.Sealer) *nodes.Table {
	noDriver := func(string, sol.Info, logrus.FieldLogger) (sol.BMC, error) {
		return nil, errors.New("no driver in admin tests")
	}
	table, err := nodes.NewTable(sealer,
		nodes.Define(TypeIPMI, nodes.SolKind(TypeIPMI, nodes.SolSpec{Credentials: true, Check: ipmi.Check, New: noDriver})),
		nodes.Define(TypeIPMITool, nodes.SolKind(TypeIPMITool, nodes.SolSpec{Credentials: true, Interface: true, New: noDriver})),
		nodes.Define(TypeMock, nodes.SolKind(TypeMock, nodes.SolSpec{New: noDriver})),
		nodes.Define(TypeSim, nodes.SolKind(TypeSim, nodes.SolSpec{New: noDriver})))
	if err != nil {
		t.Fatal(err)
	}
	return table
}

// newConsoles is a console hub whose every node's console prints "line N\n"
// every few milliseconds, like obmd's mock.
func newConsoles(t testing.TB) *sol.Manager {
	quiet := logrus.New()
	quiet.SetOutput(io.Discard)
	m, err := sol.NewManager(sol.Config{Linger: time.Millisecond}, lineBMCs{}, nil, quiet)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close(context.Background()) })
	return m
}

// lineBMCs resolves every node to a lineBMC.
type lineBMCs struct{}

func (lineBMCs) Resolve(context.Context, string) (sol.BMC, error) { return lineBMC{}, nil }

// lineBMC's console prints "line N\n"; it has no power (the API's runner
// is a fake).
type lineBMC struct{ sol.BMC }

func (lineBMC) OpenConsole(context.Context) (sol.Console, error) {
	pr, pw := io.Pipe()
	go func() { // ends when the console is closed (the write fails)
		for n := 0; ; n++ {
			if _, err := io.WriteString(pw, "line "+strconv.Itoa(n)+"\n"); err != nil {
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
	}()
	return lineConsole{pr}, nil
}

func (lineBMC) DeactivateConsole(context.Context) error { return nil }

type lineConsole struct{ *io.PipeReader }

func (lineConsole) Write(p []byte) (int, error) { return len(p), nil }
func (lineConsole) Break(context.Context) error { return nil }
func (c lineConsole) Close() error              { return c.PipeReader.Close() }

// openerOver is the wiring's Open (access.Revoker) over epochs, without
// consoles to cut.
func openerOver(reg *sessions.Registry, epochs access.Epochs) *access.Revoker {
	quiet := logrus.New()
	quiet.SetOutput(io.Discard)
	return access.NewRevoker(access.RevokerConfig{}, noConsoles{}, reg, epochs, quiet)
}

// noLimits are guessing limits no test reaches by accident.
var noLimits = authlimit.Config{PerSource: 1 << 20, PerNode: 1 << 20}

// noConsoles is an access.Cutter with no console to cut.
type noConsoles struct{}

func (noConsoles) Cut(string, error) {}

// racyStore moves the node's epoch (a token rotation by someone else) the
// first time Epoch is read: the window between authentication and session
// registration.
type racyStore struct {
	*db.Store
	once sync.Once
	err  error // of the injected rotation
}

func (s *racyStore) Epoch(ctx context.Context, label string) (int64, error) {
	s.once.Do(func() { _, s.err = s.Store.SetToken(ctx, label, keys.HashToken("someone else's")) })
	return s.Store.Epoch(ctx, label)
}

// failingStore fails Ping.
type failingStore struct{ Store }

func (failingStore) Ping(context.Context) error { return errors.New("database is down") }

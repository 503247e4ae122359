// Package redfishtest runs a Redfish BMC for tests: metal-operator's mock
// behind a TLS front that runs Redfish sessions.
//
// The mock Redfish server
// (github.com/ironcore-dev/metal-operator/bmc/mock/server) runs on
// 127.0.0.1. The TLS front runs Redfish sessions (which the mock does not:
// its POST to Sessions only adds a collection member), forwards everything
// else to the mock with the session's credentials as basic auth, and records
// what the driver asked for. sol/redfish's tests and the end-to-end tests
// use it.
package redfishtest

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	"github.com/ironcore-dev/metal-operator/bmc/mock/server"
)

// The mock's data: its only system, its admin account and its service
// root's UUID.
const (
	SystemID     = "437XR1138R2"
	SystemPath   = "/redfish/v1/Systems/" + SystemID
	User         = "admin"
	Pass         = "adminpass"
	UUID         = "92384634-2938-2342-8820-489239905423"
	SessionsPath = "/redfish/v1/SessionService/Sessions"
	resetPath    = "/Actions/ComputerSystem.Reset"
)

// BMC is one mock BMC behind its TLS front.
type BMC struct {
	// URL is the front, what a node registers: https://127.0.0.1:port.
	URL string
	// MockURL is the mock itself, plain HTTP: for a test's own reads and
	// setups, which the front does not record.
	MockURL string
	// Cert is the front's certificate, and Pool trusts it.
	Cert *x509.Certificate
	Pool *x509.CertPool

	front *front
}

// Start starts a mock BMC behind TLS, stopped at the test's end. cert, if
// set, is the front's certificate; otherwise httptest's own (valid for
// 127.0.0.1).
func Start(t testing.TB, cert *tls.Certificate) *BMC {
	t.Helper()
	m, mockURL := startMock(t)
	f := newFront(m, mockURL)
	srv := httptest.NewUnstartedServer(f)
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // refused handshakes are the point of some tests
	if cert != nil {
		srv.TLS = &tls.Config{Certificates: []tls.Certificate{*cert}}
	}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	pool := x509.NewCertPool()
	pool.AddCert(srv.Certificate())
	return &BMC{URL: srv.URL, MockURL: mockURL, Cert: srv.Certificate(), Pool: pool, front: f}
}

// Counts returns the sessions still open, created, and requests served.
func (b *BMC) Counts() (live, created, requests int) { return b.front.counts() }

// Recorded returns the ResetType of every reset and the body of every
// PATCH, in order.
func (b *BMC) Recorded() (resets, patches []string) { return b.front.recorded() }

// DropResets makes the front answer resets 204 without passing them on.
func (b *BMC) DropResets() { b.front.set(func(f *front) { f.dropResets = true }) }

// RedirectLogins makes the front answer logins with a 307 to url.
func (b *BMC) RedirectLogins(url string) { b.front.set(func(f *front) { f.redirect = url }) }

// OmitToken makes the front answer logins without X-Auth-Token.
func (b *BMC) OmitToken() { b.front.set(func(f *front) { f.noToken = true }) }

// startMock starts metal-operator's mock Redfish server (plain HTTP, basic
// auth enforced) on a free 127.0.0.1 port and returns its base URL. The mock
// listens on an address it is given and reports none, so the port is picked
// by binding :0 and closing; if another process takes it meanwhile the mock
// logs "Server failed" (or something else answers) and a new port is tried.
func startMock(t testing.TB) (*server.MockServer, string) {
	t.Helper()
	for range 5 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := l.Addr().String()
		l.Close()
		failed := make(chan struct{})
		var once sync.Once
		log := funcr.New(func(_, args string) {
			if strings.Contains(args, "Server failed") {
				once.Do(func() { close(failed) })
			}
		}, funcr.Options{})
		m := server.NewMockServer(log, addr, server.WithAuth())
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { // owned by this test: stop waits for it
			defer close(done)
			m.Start(ctx)
		}()
		stop := func() { cancel(); <-done }
		if mockAnswers(addr, failed) {
			t.Cleanup(stop)
			return m, "http://" + addr
		}
		stop()
	}
	t.Fatal("mock Redfish server did not start on any of 5 ports")
	return nil, ""
}

// mockAnswers waits until the mock's service root answers on addr.
func mockAnswers(addr string, failed <-chan struct{}) bool {
	c := &http.Client{Timeout: time.Second}
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); {
		select {
		case <-failed:
			return false
		default:
		}
		if resp, err := c.Get("http://" + addr + "/redfish/v1/"); err == nil {
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			return resp.StatusCode == http.StatusOK && bytes.Contains(body, []byte(UUID))
		}
		time.Sleep(10 * time.Millisecond)
	}
	return false
}

// front is the TLS face of the mock: it runs Redfish sessions (which the
// mock does not: its POST to Sessions only adds a collection member),
// forwards everything else to the mock with the session's credentials as
// basic auth, and records what the driver asked for.
type front struct {
	mock  *server.MockServer
	proxy *httputil.ReverseProxy

	mu         sync.Mutex
	live       map[string]frontSession // token -> session
	created    int
	deleted    int
	requests   int
	resets     []string // ResetType of every reset, in order
	patches    []string // bodies of every PATCH
	dropResets bool     // answer resets 204 without passing them on
	redirect   string   // answer logins with a 307 to this URL
	noToken    bool     // answer logins without X-Auth-Token
}

type frontSession struct{ id, user, pass string }

func newFront(m *server.MockServer, mockURL string) *front {
	target, _ := url.Parse(mockURL)
	return &front{
		mock:  m,
		proxy: &httputil.ReverseProxy{Rewrite: func(r *httputil.ProxyRequest) { r.SetURL(target) }},
		live:  map[string]frontSession{},
	}
}

func (f *front) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	f.requests++
	redirect := f.redirect
	f.mu.Unlock()
	switch {
	case r.Method == http.MethodPost && strings.TrimSuffix(r.URL.Path, "/") == SessionsPath:
		if redirect != "" {
			http.Redirect(w, r, redirect, http.StatusTemporaryRedirect)
			return
		}
		f.login(w, r)
		return
	case r.Method == http.MethodDelete && strings.HasPrefix(r.URL.Path, SessionsPath+"/"):
		f.logout(w, r)
		return
	}
	if tok := r.Header.Get("X-Auth-Token"); tok != "" {
		f.mu.Lock()
		s, ok := f.live[tok]
		f.mu.Unlock()
		if !ok {
			redfishError(w, http.StatusUnauthorized, "Base.1.8.NoValidSession")
			return
		}
		r.Header.Del("X-Auth-Token")
		r.SetBasicAuth(s.user, s.pass)
	}
	if !f.record(w, r) {
		return
	}
	f.proxy.ServeHTTP(w, r)
}

// record notes resets and PATCHes; false means it answered the request.
func (f *front) record(w http.ResponseWriter, r *http.Request) bool {
	if r.Method != http.MethodPost && r.Method != http.MethodPatch {
		return true
	}
	body, _ := io.ReadAll(r.Body)
	r.Body = io.NopCloser(bytes.NewReader(body))
	f.mu.Lock()
	defer f.mu.Unlock()
	if r.Method == http.MethodPatch {
		f.patches = append(f.patches, string(body))
		return true
	}
	if !strings.HasSuffix(r.URL.Path, resetPath) {
		return true
	}
	var req struct{ ResetType string }
	json.Unmarshal(body, &req)
	f.resets = append(f.resets, req.ResetType)
	if f.dropResets {
		w.WriteHeader(http.StatusNoContent)
		return false
	}
	return true
}

func (f *front) login(w http.ResponseWriter, r *http.Request) {
	var req struct{ UserName, Password string }
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil || !f.mock.Authenticate(req.UserName, req.Password) {
		redfishError(w, http.StatusUnauthorized, "Base.1.8.NoValidSession")
		return
	}
	id, tok := randomHex(), randomHex()
	f.mu.Lock()
	f.live[tok] = frontSession{id: id, user: req.UserName, pass: req.Password}
	f.created++
	f.mu.Unlock()
	loc := SessionsPath + "/" + id
	w.Header().Set("Location", loc)
	f.mu.Lock()
	if !f.noToken {
		w.Header().Set("X-Auth-Token", tok)
	}
	f.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	json.NewEncoder(w).Encode(map[string]string{"@odata.id": loc, "Id": id, "UserName": req.UserName})
}

func (f *front) logout(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	tok := r.Header.Get("X-Auth-Token")
	s, ok := f.live[tok]
	if !ok || SessionsPath+"/"+s.id != r.URL.Path {
		redfishError(w, http.StatusUnauthorized, "Base.1.8.NoValidSession")
		return
	}
	delete(f.live, tok)
	f.deleted++
	w.WriteHeader(http.StatusNoContent)
}

// set changes the front's behaviour under its lock.
func (f *front) set(change func(*front)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	change(f)
}

// counts returns the sessions still open, created, and requests served.
func (f *front) counts() (live, created, requests int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.live), f.created, f.requests
}

func (f *front) recorded() (resets, patches []string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.resets...), append([]string(nil), f.patches...)
}

func redfishError(w http.ResponseWriter, status int, id string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(map[string]any{"error": map[string]any{
		"code": "Base.1.8.GeneralError", "message": "request refused",
		"@Message.ExtendedInfo": []map[string]string{{"MessageId": id}},
	}})
}

func randomHex() string {
	b := make([]byte, 16)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// System reads the system as the mock has it, bypassing the driver.
func (b *BMC) System(t testing.TB) map[string]any {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, b.MockURL+SystemPath, nil)
	req.SetBasicAuth(User, Pass)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("read system from the mock: %v", err)
	}
	defer resp.Body.Close()
	var sys map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&sys); err != nil {
		t.Fatalf("decode system: %v", err)
	}
	return sys
}

// Settled waits until the mock has finished a reset (its lock is gone) and
// returns the system.
func (b *BMC) Settled(t testing.TB) map[string]any {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		sys := b.System(t)
		if _, locked := sys["resourceLock"]; !locked {
			return sys
		}
		if time.Now().After(deadline) {
			t.Fatal("mock system still locked after 5s")
		}
	}
}

// Patch changes the mock's system directly (a test's setup, not recorded).
func (b *BMC) Patch(t testing.TB, body string) {
	t.Helper()
	if err := b.TryPatch(body); err != nil {
		t.Fatal(err)
	}
}

// TryPatch is Patch for goroutines, which must not call t.Fatal.
func (b *BMC) TryPatch(body string) error {
	req, _ := http.NewRequest(http.MethodPatch, b.MockURL+SystemPath, strings.NewReader(body))
	req.SetBasicAuth(User, Pass)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("patch mock: %w", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		return fmt.Errorf("patch mock: HTTP %d", resp.StatusCode)
	}
	return nil
}

// SerialConsole is what the system says of its serial console services
// (ComputerSystem.SerialConsole): IPMI SOL and SSH enabled or not, and
// SSH's port and console entry command (0, "": not said).
type SerialConsole struct {
	IPMI, SSH  bool
	SSHPort    int
	SSHCommand string
}

// SetSerialConsole makes the system report sc.
func (b *BMC) SetSerialConsole(t testing.TB, sc SerialConsole) {
	t.Helper()
	ssh := map[string]any{"ServiceEnabled": sc.SSH, "SharedWithManagerCLI": sc.SSHCommand != ""}
	if sc.SSHPort != 0 {
		ssh["Port"] = sc.SSHPort
	}
	if sc.SSHCommand != "" {
		ssh["ConsoleEntryCommand"] = sc.SSHCommand
	}
	body, err := json.Marshal(map[string]any{"SerialConsole": map[string]any{
		"IPMI": map[string]any{"ServiceEnabled": sc.IPMI}, "SSH": ssh}})
	if err != nil {
		t.Fatal(err)
	}
	b.Patch(t, string(body))
}

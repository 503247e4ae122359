package daemon_test

// obmd behind balancers: the PROXY protocol on the SSH port (a proxy in
// the test that prepends the header, and HAProxy's send-proxy and
// send-proxy-v2) and X-Forwarded-For on the admin port (net/http's
// reverse proxy). The real client is what limits, audit rows, logs and
// sessions see; headers from peers not listed are not honoured.

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	gossh "golang.org/x/crypto/ssh"

	"github.com/obmd/obmd/bastion/access/authlimit"
	"github.com/obmd/obmd/bastion/daemon"
	"github.com/obmd/obmd/bastion/internal/proxyproto"
	"github.com/obmd/obmd/sol/soltest/ipmisim"
)

// pxBalancer is the address the balancers of these tests connect from.
const pxBalancer = "127.0.0.5"

// pxProxy is a TCP proxy: each connection it accepts is forwarded to
// target from the local address from, after header(client, the proxy's
// address) when header is set.
type pxProxy struct {
	Addr string
	ln   net.Listener
	wg   sync.WaitGroup
	mu   sync.Mutex
	open map[net.Conn]bool
}

func pxStartProxy(t testing.TB, target, from string, header func(client, local netip.AddrPort) []byte) *pxProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &pxProxy{Addr: ln.Addr().String(), ln: ln, open: map[net.Conn]bool{}}
	p.wg.Go(func() { // ends when ln is closed
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			p.wg.Go(func() { p.forward(c, target, from, header) })
		}
	})
	t.Cleanup(func() {
		ln.Close()
		p.mu.Lock()
		for c := range p.open {
			c.Close()
		}
		p.mu.Unlock()
		p.wg.Wait()
	})
	return p
}

// forward pipes c to a new connection to target until either side ends.
func (p *pxProxy) forward(c net.Conn, target, from string, header func(client, local netip.AddrPort) []byte) {
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}, Timeout: 10 * time.Second}
	up, err := d.Dial("tcp", target)
	if err != nil {
		c.Close()
		return
	}
	p.mu.Lock()
	p.open[c], p.open[up] = true, true
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		delete(p.open, c)
		delete(p.open, up)
		p.mu.Unlock()
	}()
	if header != nil {
		up.Write(header(netip.MustParseAddrPort(c.RemoteAddr().String()), netip.MustParseAddrPort(c.LocalAddr().String())))
	}
	done := make(chan struct{})
	go func() { io.Copy(up, c); up.Close(); close(done) }() // ends when c or up does
	io.Copy(c, up)
	c.Close()
	up.Close()
	<-done
}

// pxHeader is a header of version v for the client.
func pxHeader(v int) func(client, local netip.AddrPort) []byte {
	return func(client, local netip.AddrPort) []byte {
		return proxyproto.Header{Version: v, Source: client, Dest: local}.Append(nil)
	}
}

// pxTry logs in through addr from src with token and runs power-status;
// it returns the authentication error.
func pxTry(t *testing.T, addr, src, user, token string) error {
	t.Helper()
	c, err := dialFrom(addr, src, user, gossh.Password(token))
	if err != nil {
		return err
	}
	defer c.Close()
	if res, err := runSession(c, "power-status"); err != nil || res.Code != 0 {
		t.Errorf("power-status through %s from %s: got %v, %v; want exit 0", addr, src, res, err)
	}
	return nil
}

// pxSources is the set of addresses (no port) of user's audit rows.
func (o *obmd) pxSources(node string) map[string]int {
	out := map[string]int{}
	for _, e := range o.fdAudit(node) {
		host, _, err := net.SplitHostPort(e.Source)
		if err != nil {
			host = e.Source
		}
		out[host] += int(e.Count)
	}
	return out
}

// pxSourcesUntil polls pxSources until ok holds of them (repeats are
// counted at the end of the aggregation window), for 10 s at most, and
// returns the last.
func (o *obmd) pxSourcesUntil(node string, ok func(map[string]int) bool) map[string]int {
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if src := o.pxSources(node); ok(src) || time.Now().After(deadline) {
			return src
		}
	}
}

// pxLimits are strict guessing limits, so the tests can lock a client out.
func pxLimits(c *daemon.Config) {
	c.AuthLimits = authlimit.Config{PerSource: 3, PerNode: 1000, Window: time.Minute, Lockout: time.Minute}
}

// pxLockoutThrough: through the balancer at addr, three wrong tokens from
// guesser lock guesser out, not the balancer: another client gets in, and
// the audit rows name the clients, never the balancer.
func pxLockoutThrough(t *testing.T, o *obmd, addr, node, tok, guesser, other string) {
	t.Helper()
	for i := range 3 {
		if err := pxTry(t, addr, guesser, node, "guess"); err == nil {
			t.Fatalf("guess %d authenticated", i)
		}
	}
	if err := pxTry(t, addr, guesser, node, tok); err == nil {
		t.Errorf("right token from the locked-out client %s through the balancer: authenticated, want refused", guesser)
	}
	if err := pxTry(t, addr, other, node, tok); err != nil {
		t.Errorf("another client %s through the same balancer: %v, want in", other, err)
	}
	want := func(src map[string]int) bool { return src[guesser] == 4 && src[other] != 0 && src[pxBalancer] == 0 }
	if src := o.pxSourcesUntil(node, want); !want(src) {
		t.Errorf("audit sources of %s: got %v, want 3 failures and a refusal from %s, a login from %s, none from the balancer",
			node, src, guesser, other)
	}
}

// TestProxyProtocol: from a listed balancer, PROXY v1 and v2 headers name
// the client for the guessing limits, the connection caps, audit rows,
// logs and sessions; a connection from it without a header is refused;
// from a peer not listed, a header is not honoured.
func TestProxyProtocol(t *testing.T) {
	t.Parallel()
	o := startObmd(t, pxLimits, func(c *daemon.Config) {
		c.SSH.ProxyProtocolFrom = []string{pxBalancer, "127.0.1.0/24"}
		c.SSH.MaxConnsPerSource = 3
	})
	for _, v := range []int{1, 2} {
		t.Run(fmt.Sprintf("v%d", v), func(t *testing.T) {
			node := fmt.Sprintf("pp%d", v)
			tok := o.addSimNode(node)
			lb := pxStartProxy(t, o.SSHAddr(), pxBalancer, pxHeader(v))
			guesser, other := fmt.Sprintf("127.0.0.%d", 20+v), fmt.Sprintf("127.0.0.%d", 30+v)
			pxLockoutThrough(t, o, lb.Addr, node, tok, guesser, other)

			// The connection cap counts the client, not the balancer.
			var held []*gossh.Client
			for range 3 {
				c, err := dialFrom(lb.Addr, other, node, gossh.Password(tok))
				if err != nil {
					t.Fatalf("connection from %s through the balancer: %v", other, err)
				}
				defer c.Close()
				held = append(held, c)
			}
			if c, err := dialFrom(lb.Addr, other, node, gossh.Password(tok)); err == nil {
				c.Close()
				t.Errorf("a fourth authenticated connection of %s (cap 3): got in, want refused", other)
			}
			third := fmt.Sprintf("127.0.0.%d", 40+v)
			if err := pxTry(t, lb.Addr, third, node, tok); err != nil {
				t.Errorf("a third client through the balancer while %s is at its cap: %v", other, err)
			}
			// Sessions and logs name the client.
			s, err := held[0].NewSession()
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			if err := s.Shell(); err != nil {
				t.Fatal(err)
			}
			waitUntil(t, "the console session", func() bool { return len(o.rvSessions(node)) == 1 })
			var out struct{ Sessions []struct{ Remote string } }
			json.Unmarshal(o.mustAPI(200, "GET", "/v1/sessions?node="+node, nil), &out)
			if len(out.Sessions) != 1 || !strings.HasPrefix(out.Sessions[0].Remote, other+":") {
				t.Errorf("sessions of %s: got %+v, want one from %s", node, out.Sessions, other)
			}
			if !strings.Contains(o.Logs.String(), `"remote":"`+guesser+`:`) {
				t.Errorf("logs: no line names the client %s", guesser)
			}
		})
	}

	t.Run("listed peer without a header", func(t *testing.T) {
		tok := o.addSimNode("pp-none")
		plain := pxStartProxy(t, o.SSHAddr(), pxBalancer, nil)
		if err := pxTry(t, plain.Addr, "127.0.0.50", "pp-none", tok); err == nil {
			t.Errorf("a connection from the balancer without a header: got in, want refused")
		}
		waitUntil(t, "the refusal logged", func() bool { return strings.Contains(o.Logs.String(), "proxy_header_refused") })
		for _, e := range o.fdAudit("pp-none") {
			if e.Action == "auth" {
				t.Errorf("audit of the refused connection: got %+v, want none (it never reached authentication)", e)
			}
		}
	})

	t.Run("spoofed header from a peer not listed", func(t *testing.T) {
		tok := o.addSimNode("pp-spoof")
		spoofed := netip.MustParseAddrPort("127.0.0.99:4444")
		for _, v := range []int{1, 2} {
			direct := pxStartProxy(t, o.SSHAddr(), "127.0.0.51", func(_, local netip.AddrPort) []byte {
				return proxyproto.Header{Version: v, Source: spoofed, Dest: local}.Append(nil)
			})
			for range 4 { // past the limit, if it were the spoofed address's
				pxTry(t, direct.Addr, "127.0.0.52", "pp-spoof", "guess")
			}
		}
		// x/crypto skips a v1 line before the version (RFC 4253 lets a
		// server send such lines; obmd's parser does not read them), so
		// those logins go on as the peer's own.
		src := o.pxSources("pp-spoof")
		if src["127.0.0.99"] != 0 || src["127.0.0.52"] != 0 || src["127.0.0.51"] == 0 {
			t.Errorf("audit sources: got %v, want the peer's own address only, not the spoofed one", src)
		}
		if err := o.fdTryFrom(t, "127.0.0.53", "pp-spoof", tok); err != nil {
			t.Errorf("login from another address: %v", err)
		}
		if strings.Contains(o.Logs.String(), "127.0.0.99") {
			t.Errorf("the spoofed address reached the logs")
		}
	})
}

// pxFreePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func pxFreePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// TestProxyHAProxy: HAProxy in TCP mode with send-proxy-v2 and send-proxy
// in front of obmd: limits, audit and sessions see the clients behind it,
// for x/crypto and OpenSSH.
func TestProxyHAProxy(t *testing.T) {
	t.Parallel()
	ipmisim.Require(t, "haproxy", "ssh", "sshpass")
	o := startObmd(t, pxLimits, func(c *daemon.Config) { c.SSH.ProxyProtocolFrom = []string{pxBalancer} })
	v2, v1 := pxFreePort(t), pxFreePort(t)
	pxHAProxy(t, pxHAProxyConfig("ssh", o.SSHAddr(), v2, v1), v2, v1)
	for i, port := range []int{v2, v1} {
		node := fmt.Sprintf("ha%d", i)
		tok := o.addSimNode(node)
		addr := fmt.Sprintf("127.0.0.1:%d", port)
		guesser, other := fmt.Sprintf("127.0.0.%d", 60+i), fmt.Sprintf("127.0.0.%d", 70+i)
		pxLockoutThrough(t, o, addr, node, tok, guesser, other)
		host, p, _ := net.SplitHostPort(addr)
		res, err := runClient(60*time.Second, "sshpass", append([]string{"-p", tok, "ssh"},
			append(sshArgs(host+":"+p, node, "-b", other, "-o", "PubkeyAuthentication=no"), "power-status")...)...)
		if err != nil || res.Code != 0 {
			t.Errorf("OpenSSH through HAProxy from %s: got %v, %v; want exit 0", other, res, err)
		}
		if src := o.pxSources(node); src[other] < 2 {
			t.Errorf("audit sources of %s: got %v, want the OpenSSH login from %s too", node, src, other)
		}
	}
	// HAProxy's health checks (every 300 ms) are no refused connections.
	if strings.Contains(o.Logs.String(), "proxy_header_refused") {
		t.Errorf("obmd refused HAProxy's health checks")
	}
}

// pxReverseProxy is net/http's reverse proxy to o's admin port, dialing
// from the balancer's address; it appends the client to X-Forwarded-For.
func pxReverseProxy(t testing.TB, o *obmd) string {
	t.Helper()
	target, _ := url.Parse("http://" + o.AdminAddr())
	rp := httputil.NewSingleHostReverseProxy(target)
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(pxBalancer)}, Timeout: 10 * time.Second}
	rp.Transport = &http.Transport{DialContext: d.DialContext}
	srv := httptest.NewServer(rp)
	t.Cleanup(srv.Close)
	return srv.URL
}

// TestProxyForwardedFor: behind a listed reverse proxy, the client in
// X-Forwarded-For is what the guessing limits lock out and what audit rows
// and sessions name; entries a client adds itself are ignored (the
// rightmost address not listed is the client); from a peer not listed the
// header is ignored; a listed proxy's unreadable header is refused.
func TestProxyForwardedFor(t *testing.T) {
	t.Parallel()
	o := startObmd(t, pxLimits, func(c *daemon.Config) { c.Admin.TrustedProxies = []string{pxBalancer} })
	tok := o.addSimNode("xf1")
	base := pxReverseProxy(t, o)
	const guesser, other, spoofer = "127.0.0.44", "127.0.0.45", "127.0.0.46"
	status := "/node/xf1/power_status?token="
	for i := range 3 {
		if code, _ := requestFrom(t, base, guesser, "GET", status+"guess", "", "", nil); code != http.StatusUnauthorized && code != http.StatusNotFound {
			t.Fatalf("guess %d: got %d", i, code)
		}
	}
	if code, _ := requestFrom(t, base, guesser, "GET", status+url.QueryEscape(tok), "", "", nil); code != http.StatusTooManyRequests {
		t.Errorf("right token from the locked-out client behind the proxy: got %d, want 429", code)
	}
	if code, _ := requestFrom(t, base, guesser, "GET", "/v1/nodes", "admin", o.AdminToken(), nil); code != http.StatusOK {
		t.Errorf("right admin token from the locked-out client: got %d, want 200", code)
	}
	if code, _ := requestFrom(t, base, other, "GET", status+url.QueryEscape(tok), "", "", nil); code != http.StatusOK {
		t.Errorf("another client behind the same proxy: got %d, want 200", code)
	}
	// A client that writes its own X-Forwarded-For: the proxy appends its
	// real address, which is the one used.
	spoof := http.Header{"X-Forwarded-For": {"127.0.0.99"}}
	for range 4 {
		requestFrom(t, base, spoofer, "GET", status+"guess", "", "", spoof)
	}
	if code, _ := requestFrom(t, base, "127.0.0.47", "GET", status+url.QueryEscape(tok), "", "", spoof); code != http.StatusOK {
		t.Errorf("another client sending the same forged header: got %d, want 200 (the lockout is the spoofer's own)", code)
	}
	// From a peer not listed, the header is ignored.
	direct := "http://" + o.AdminAddr()
	for range 2 {
		requestFrom(t, direct, "127.0.0.48", "GET", status+"guess", "", "", http.Header{"X-Forwarded-For": {"127.0.0.98"}})
	}
	wantFrom := map[string]int{guesser: 4, other: 1, spoofer: 4, "127.0.0.48": 2, "127.0.0.99": 0, "127.0.0.98": 0, pxBalancer: 0}
	wrong := func(src map[string]int, addr string) bool {
		return src[addr] < wantFrom[addr] || (wantFrom[addr] == 0 && src[addr] != 0)
	}
	src := o.pxSourcesUntil("xf1", func(src map[string]int) bool {
		for addr := range wantFrom {
			if wrong(src, addr) {
				return false
			}
		}
		return true
	})
	for addr, want := range wantFrom {
		if wrong(src, addr) {
			t.Errorf("audit rows from %s: got %d, want %d (all: %v)", addr, src[addr], want, src)
		}
	}
	// A listed proxy's header that names no address is refused.
	if code, body := requestFrom(t, direct, pxBalancer, "GET", "/v1/nodes", "admin", o.AdminToken(),
		http.Header{"X-Forwarded-For": {"not-an-address"}}); code != http.StatusBadRequest {
		t.Errorf("unreadable X-Forwarded-For from the proxy: got %d %s, want 400", code, body)
	}
	// A console stream through the proxy is the client's session.
	code, _ := pxHTTPStream(t, base, other, "/node/xf1/console?token="+url.QueryEscape(tok))
	if code != http.StatusOK {
		t.Fatalf("console stream through the proxy: got %d", code)
	}
	var out struct {
		Sessions []struct{ Kind, Remote string }
	}
	json.Unmarshal(o.mustAPI(200, "GET", "/v1/sessions?node=xf1", nil), &out)
	if len(out.Sessions) != 1 || out.Sessions[0].Remote != other {
		t.Errorf("sessions: got %+v, want the stream of %s", out.Sessions, other)
	}
}

// pxHTTPStream opens a streaming GET from src and leaves it open until
// the end of t; it returns the status.
func pxHTTPStream(t testing.TB, base, src, path string) (int, *http.Response) {
	t.Helper()
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: 10 * time.Second}
	tr := &http.Transport{DialContext: d.DialContext}
	res, err := (&http.Client{Transport: tr}).Get(base + path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { res.Body.Close(); tr.CloseIdleConnections() })
	return res.StatusCode, res
}

package admindoor

// The admin port behind a TCP pass-through balancer that sends the PROXY
// protocol header (HAProxy's send-proxy-v2 and send-proxy), with TLS on
// obmd: the header comes first, then the TLS handshake. Limits and audit
// rows see the clients behind the balancer.

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/obmd/obmd/bastion/e2e/obmdtest"

	"github.com/obmd/obmd/bastion/access/authlimit"
	"github.com/obmd/obmd/bastion/daemon"
	"github.com/obmd/obmd/bastion/internal/proxyproto"
	"github.com/obmd/obmd/sol/soltest/ipmisim"
)

// cert writes net/http's test certificate (for 127.0.0.1, as
// httptest's TLS servers use) and its key to files, and returns them and
// a pool that trusts it.
func cert(t testing.TB) (certFile, keyFile string, pool *x509.CertPool) {
	t.Helper()
	srv := httptest.NewUnstartedServer(nil)
	srv.StartTLS()
	srv.Close()
	c := srv.TLS.Certificates[0]
	keyDER, err := x509.MarshalPKCS8PrivateKey(c.PrivateKey)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	for f, b := range map[string]*pem.Block{certFile: {Type: "CERTIFICATE", Bytes: c.Certificate[0]}, keyFile: {Type: "PRIVATE KEY", Bytes: keyDER}} {
		if err := os.WriteFile(f, pem.EncodeToMemory(b), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	pool = x509.NewCertPool()
	pool.AddCert(srv.Certificate())
	return certFile, keyFile, pool
}

// https sends one request over HTTPS from the local address src and
// returns the status and body (0 when the request failed: err says why).
func https(pool *x509.CertPool, src, method, rawURL, user, pass, body string) (int, []byte, error) {
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: 10 * time.Second}
	client := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{DialContext: d.DialContext,
		TLSClientConfig: &tls.Config{RootCAs: pool}, DisableKeepAlives: true}}
	req, err := http.NewRequest(method, rawURL, strings.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	if user != "" {
		req.SetBasicAuth(user, pass)
	}
	res, err := client.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer res.Body.Close()
	data, err := io.ReadAll(res.Body)
	return res.StatusCode, data, err
}

// TestProxyHAProxyAdmin: HAProxy in TCP mode (send-proxy-v2 and
// send-proxy, with health checks) in front of obmd's admin port, TLS on
// obmd. Through it, a client's wrong tokens lock that client out, not the
// balancer: another client's token and HIL's rotation are served, and the
// audit rows name the clients. A connection from the balancer's address
// without a header is refused; a header from a peer not listed is not
// honoured.
func TestProxyHAProxyAdmin(t *testing.T) {
	t.Parallel()
	ipmisim.Require(t, "haproxy")
	certFile, keyFile, pool := cert(t)
	o := obmdtest.Start(t, obmdtest.StrictLimits, func(c *daemon.Config) {
		c.Admin.TLSCert, c.Admin.TLSKey = certFile, keyFile
		c.Admin.ProxyProtocolFrom = []string{obmdtest.Balancer}
	})
	direct := "https://" + o.AdminAddr()
	v2, v1 := obmdtest.FreePort(t), obmdtest.FreePort(t)
	obmdtest.HAProxy(t, obmdtest.HAProxyConfig("admin", o.AdminAddr(), v2, v1), v2, v1)

	admin := func(src, base, method, path, body string) []byte {
		t.Helper()
		code, data, err := https(pool, src, method, base+path, "admin", o.AdminToken(), body)
		if err != nil || code != http.StatusOK {
			t.Fatalf("%s %s from %s: got %d %s, %v; want 200", method, path, src, code, data, err)
		}
		return data
	}
	rotate := func(src, base, node string) string { // HIL's rotation
		t.Helper()
		var out struct{ Token string }
		if err := json.Unmarshal(admin(src, base, "POST", "/node/"+node+"/token", ""), &out); err != nil || out.Token == "" {
			t.Fatalf("rotation of %s: %v", node, err)
		}
		return out.Token
	}
	for i, port := range []int{v2, v1} {
		node := fmt.Sprintf("hx%d", i)
		base := fmt.Sprintf("https://127.0.0.1:%d", port)
		guesser, other, hil := fmt.Sprintf("127.0.0.%d", 80+i), fmt.Sprintf("127.0.0.%d", 85+i), fmt.Sprintf("127.0.0.%d", 90+i)
		admin("127.0.0.1", direct, "PUT", "/node/"+node, `{"type":"sim","info":{"addr":"sim"}}`)
		tok := rotate(hil, base, node)
		status := "/node/" + node + "/power_status?token="
		for k := range 3 {
			if code, _, err := https(pool, guesser, "GET", base+status+"wrong", "", "", ""); err != nil || code != http.StatusUnauthorized {
				t.Fatalf("guess %d through the balancer: got %d, %v; want 401", k, code, err)
			}
		}
		if code, _, err := https(pool, guesser, "GET", base+status+url.QueryEscape(tok), "", "", ""); code != http.StatusTooManyRequests {
			t.Errorf("right token from the locked-out client through the balancer: got %d, %v; want 429", code, err)
		}
		if code, body, err := https(pool, other, "GET", base+status+url.QueryEscape(tok), "", "", ""); code != http.StatusOK {
			t.Errorf("another client through the same balancer: got %d %s, %v; want 200", code, body, err)
		}
		rotate(hil, base, node)
		sources := func() map[string]int { // events per address, as AuditSources counts them
			var audit struct{ Events []obmdtest.AuditRow }
			if err := json.Unmarshal(admin("127.0.0.1", direct, "GET", "/v1/audit?node="+node, ""), &audit); err != nil {
				t.Fatal(err)
			}
			src := map[string]int{}
			for _, e := range audit.Events {
				host, _, err := net.SplitHostPort(e.Source)
				if err != nil {
					host = e.Source
				}
				src[host] += int(e.Count)
			}
			return src
		}
		want := func(src map[string]int) bool {
			return src[guesser] == 4 && src[other] != 0 && src[hil] != 0 && src[obmdtest.Balancer] == 0
		}
		src := sources()
		for deadline := time.Now().Add(10 * time.Second); !want(src) && time.Now().Before(deadline); src = sources() {
			time.Sleep(50 * time.Millisecond) // repeats are counted at the end of the aggregation window
		}
		if !want(src) {
			t.Errorf("audit sources of %s: got %v, want 3 failures and a refusal from %s, %s and %s, none from the balancer",
				node, src, guesser, other, hil)
		}
	}
	if strings.Contains(o.Logs.String(), "proxy_header_refused") {
		t.Errorf("obmd refused HAProxy's connections or health checks")
	}

	// From the balancer's address without a header: refused (a TLS
	// handshake is no header).
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(obmdtest.Balancer)}, Timeout: 10 * time.Second}
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DialContext: d.DialContext,
		TLSClientConfig: &tls.Config{RootCAs: pool}}}
	if res, err := c.Get(direct + "/healthz"); err == nil {
		res.Body.Close()
		t.Errorf("from the balancer's address without a header: got %d, want the connection refused", res.StatusCode)
	}
	obmdtest.WaitUntil(t, "the refusal logged", func() bool { return strings.Contains(o.Logs.String(), "proxy_header_refused") })

	// From a peer not listed, a header is only bytes before TLS: the
	// handshake fails, the header's client is never believed.
	nc, err := (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.8")}}).Dial("tcp", o.AdminAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	h := proxyproto.Header{Version: 2, Source: netip.MustParseAddrPort("127.0.0.77:1000"), Dest: netip.MustParseAddrPort("127.0.0.1:1")}
	nc.Write(h.Append(nil))
	tc := tls.Client(nc, &tls.Config{RootCAs: pool, ServerName: "127.0.0.1"})
	tc.SetDeadline(time.Now().Add(10 * time.Second))
	if err := tc.Handshake(); err == nil {
		t.Error("TLS after a header from a peer not listed: handshake succeeded, want it refused")
	}
}

// TestAttackAdminBehindTCPBalancer: docs/replicas.md offers a TCP
// pass-through balancer in front of the admin API ("with TLS configured on
// each replica, pass TCP through"), and item 2 of issue 11 wants a correct
// node token refused only by limits that an attacker without it cannot
// trigger for everyone. Through such a balancer there is no
// X-Forwarded-For to read: every client is the balancer's address, so
// five wrong tokens from anyone lock out the node-token routes (power
// calls and console streams) for every client of the balancer, HIL's
// correct token included. The balancer must say who the client is: it
// sends a PROXY header (HAProxy's send-proxy-v2), and obmd believes it
// from the balancer's address (admin_proxy_protocol_from).
//
// (As first written, the test listed the client's address in
// trusted_proxies and sent no header: then no setting could let obmd tell
// the clients apart, and the test could only fail. The guesser and HIL
// now connect from two addresses, as two clients of a balancer do.)
func TestAttackAdminBehindTCPBalancer(t *testing.T) {
	t.Parallel()
	const balancer, guesser, hil = "127.0.0.5", "127.0.0.9", "127.0.0.1"
	o := obmdtest.Start(t, func(c *daemon.Config) {
		c.AuthLimits = authlimit.Config{PerSource: 5, PerNode: 20, Window: time.Minute, Lockout: time.Minute}
		c.Admin.ProxyProtocolFrom = []string{balancer}
	})
	tok := o.AddSimNode("lb1")
	lb := obmdtest.StartPipe(t)
	lb.SetTarget(o.AdminAddr())
	lb.SetBalancer(balancer)
	base := "http://" + lb.Addr()
	for k := range 5 { // anyone behind the balancer
		obmdtest.RequestFrom(t, base, guesser, "GET", fmt.Sprintf("/node/guess-%d/power_status?token=wrong", k), "", "", nil)
	}
	if status, _ := obmdtest.RequestFrom(t, base, guesser, "GET", "/node/lb1/power_status?token="+url.QueryEscape(tok), "", "", nil); status != 429 {
		t.Errorf("the guesser behind the balancer after five wrong tokens: got %d, want 429 (its own lockout)", status)
	}
	status, body := obmdtest.RequestFrom(t, base, hil, "GET", "/node/lb1/power_status?token="+url.QueryEscape(tok), "", "", nil)
	if status != 200 {
		t.Errorf("HIL's power_status with the right token through the balancer, after five wrong tokens from someone else: got %d %s, want 200",
			status, body)
	}
}

// reverseProxy is net/http's reverse proxy to o's admin port, dialing
// from the balancer's address; it appends the client to X-Forwarded-For.
func reverseProxy(t testing.TB, o *obmdtest.Daemon) string {
	t.Helper()
	target, _ := url.Parse("http://" + o.AdminAddr())
	rp := httputil.NewSingleHostReverseProxy(target)
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(obmdtest.Balancer)}, Timeout: 10 * time.Second}
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
	o := obmdtest.Start(t, obmdtest.StrictLimits, func(c *daemon.Config) { c.Admin.TrustedProxies = []string{obmdtest.Balancer} })
	tok := o.AddSimNode("xf1")
	base := reverseProxy(t, o)
	const guesser, other, spoofer = "127.0.0.44", "127.0.0.45", "127.0.0.46"
	status := "/node/xf1/power_status?token="
	for i := range 3 {
		if code, _ := obmdtest.RequestFrom(t, base, guesser, "GET", status+"guess", "", "", nil); code != http.StatusUnauthorized && code != http.StatusNotFound {
			t.Fatalf("guess %d: got %d", i, code)
		}
	}
	if code, _ := obmdtest.RequestFrom(t, base, guesser, "GET", status+url.QueryEscape(tok), "", "", nil); code != http.StatusTooManyRequests {
		t.Errorf("right token from the locked-out client behind the proxy: got %d, want 429", code)
	}
	if code, _ := obmdtest.RequestFrom(t, base, guesser, "GET", "/v1/nodes", "admin", o.AdminToken(), nil); code != http.StatusOK {
		t.Errorf("right admin token from the locked-out client: got %d, want 200", code)
	}
	if code, _ := obmdtest.RequestFrom(t, base, other, "GET", status+url.QueryEscape(tok), "", "", nil); code != http.StatusOK {
		t.Errorf("another client behind the same proxy: got %d, want 200", code)
	}
	// A client that writes its own X-Forwarded-For: the proxy appends its
	// real address, which is the one used.
	spoof := http.Header{"X-Forwarded-For": {"127.0.0.99"}}
	for range 4 {
		obmdtest.RequestFrom(t, base, spoofer, "GET", status+"guess", "", "", spoof)
	}
	if code, _ := obmdtest.RequestFrom(t, base, "127.0.0.47", "GET", status+url.QueryEscape(tok), "", "", spoof); code != http.StatusOK {
		t.Errorf("another client sending the same forged header: got %d, want 200 (the lockout is the spoofer's own)", code)
	}
	// From a peer not listed, the header is ignored.
	direct := "http://" + o.AdminAddr()
	for range 2 {
		obmdtest.RequestFrom(t, direct, "127.0.0.48", "GET", status+"guess", "", "", http.Header{"X-Forwarded-For": {"127.0.0.98"}})
	}
	wantFrom := map[string]int{guesser: 4, other: 1, spoofer: 4, "127.0.0.48": 2, "127.0.0.99": 0, "127.0.0.98": 0, obmdtest.Balancer: 0}
	wrong := func(src map[string]int, addr string) bool {
		return src[addr] < wantFrom[addr] || (wantFrom[addr] == 0 && src[addr] != 0)
	}
	src := o.AuditSourcesUntil("xf1", func(src map[string]int) bool {
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
	if code, body := obmdtest.RequestFrom(t, direct, obmdtest.Balancer, "GET", "/v1/nodes", "admin", o.AdminToken(),
		http.Header{"X-Forwarded-For": {"not-an-address"}}); code != http.StatusBadRequest {
		t.Errorf("unreadable X-Forwarded-For from the proxy: got %d %s, want 400", code, body)
	}
	// A console stream through the proxy is the client's session.
	code, _ := httpStream(t, base, other, "/node/xf1/console?token="+url.QueryEscape(tok))
	if code != http.StatusOK {
		t.Fatalf("console stream through the proxy: got %d", code)
	}
	var out struct {
		Sessions []struct{ Kind, Remote string }
	}
	json.Unmarshal(o.MustAPI(200, "GET", "/v1/sessions?node=xf1", nil), &out)
	if len(out.Sessions) != 1 || out.Sessions[0].Remote != other {
		t.Errorf("sessions: got %+v, want the stream of %s", out.Sessions, other)
	}
}

// httpStream opens a streaming GET from src and leaves it open until
// the end of t; it returns the status.
func httpStream(t testing.TB, base, src, path string) (int, *http.Response) {
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

package daemon_test

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
	"net/netip"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/obmd/obmd/bastion/daemon"
	"github.com/obmd/obmd/bastion/internal/proxyproto"
	"github.com/obmd/obmd/sol/soltest/ipmisim"
)

// pxCert writes net/http's test certificate (for 127.0.0.1, as
// httptest's TLS servers use) and its key to files, and returns them and
// a pool that trusts it.
func pxCert(t testing.TB) (certFile, keyFile string, pool *x509.CertPool) {
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

// pxHTTPS sends one request over HTTPS from the local address src and
// returns the status and body (0 when the request failed: err says why).
func pxHTTPS(pool *x509.CertPool, src, method, rawURL, user, pass, body string) (int, []byte, error) {
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
	certFile, keyFile, pool := pxCert(t)
	o := startObmd(t, pxLimits, func(c *daemon.Config) {
		c.Admin.TLSCert, c.Admin.TLSKey = certFile, keyFile
		c.Admin.ProxyProtocolFrom = []string{pxBalancer}
	})
	direct := "https://" + o.AdminAddr()
	v2, v1 := pxFreePort(t), pxFreePort(t)
	pxHAProxy(t, pxHAProxyConfig("admin", o.AdminAddr(), v2, v1), v2, v1)

	admin := func(src, base, method, path, body string) []byte {
		t.Helper()
		code, data, err := pxHTTPS(pool, src, method, base+path, "admin", o.AdminToken(), body)
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
			if code, _, err := pxHTTPS(pool, guesser, "GET", base+status+"wrong", "", "", ""); err != nil || code != http.StatusUnauthorized {
				t.Fatalf("guess %d through the balancer: got %d, %v; want 401", k, code, err)
			}
		}
		if code, _, err := pxHTTPS(pool, guesser, "GET", base+status+url.QueryEscape(tok), "", "", ""); code != http.StatusTooManyRequests {
			t.Errorf("right token from the locked-out client through the balancer: got %d, %v; want 429", code, err)
		}
		if code, body, err := pxHTTPS(pool, other, "GET", base+status+url.QueryEscape(tok), "", "", ""); code != http.StatusOK {
			t.Errorf("another client through the same balancer: got %d %s, %v; want 200", code, body, err)
		}
		rotate(hil, base, node)
		sources := func() map[string]int { // events per address, as pxSources counts them
			var audit struct{ Events []fdAuditRow }
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
			return src[guesser] == 4 && src[other] != 0 && src[hil] != 0 && src[pxBalancer] == 0
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
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(pxBalancer)}, Timeout: 10 * time.Second}
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DialContext: d.DialContext,
		TLSClientConfig: &tls.Config{RootCAs: pool}}}
	if res, err := c.Get(direct + "/healthz"); err == nil {
		res.Body.Close()
		t.Errorf("from the balancer's address without a header: got %d, want the connection refused", res.StatusCode)
	}
	waitUntil(t, "the refusal logged", func() bool { return strings.Contains(o.Logs.String(), "proxy_header_refused") })

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

// pxHAProxyConfig is HAProxy's configuration of two TCP balancers in front
// of target, from pxBalancer, with health checks: one on port v2 sending
// the PROXY header v2 (send-proxy-v2), one on port v1 sending v1.
func pxHAProxyConfig(name, target string, v2, v1 int) string {
	return fmt.Sprintf(`global
  maxconn 200
defaults
  mode tcp
  timeout connect 5s
  timeout client 60s
  timeout server 60s
listen %[1]s_v2
  bind 127.0.0.1:%[2]d
  server obmd %[4]s send-proxy-v2 source %[5]s check inter 300ms
listen %[1]s_v1
  bind 127.0.0.1:%[3]d
  server obmd %[4]s send-proxy source %[5]s check inter 300ms
`, name, v2, v1, target, pxBalancer)
}

// pxHAProxy runs haproxy with cfg until the test ends and waits until it
// listens on ports.
func pxHAProxy(t *testing.T, cfg string, ports ...int) {
	t.Helper()
	file := filepath.Join(t.TempDir(), "haproxy.cfg")
	if err := os.WriteFile(file, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("haproxy", "-db", "-f", file)
	logs := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		t.Fatalf("haproxy: %v", err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
		if t.Failed() {
			t.Logf("haproxy:\n%s", logs.String())
		}
	})
	for _, port := range ports {
		waitUntil(t, "haproxy to listen", func() bool {
			c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port))
			if err == nil {
				c.Close()
			}
			return err == nil
		})
	}
}

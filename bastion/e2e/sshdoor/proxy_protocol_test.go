package sshdoor

// obmd behind balancers: the PROXY protocol on the SSH port (a proxy in
// the test that prepends the header, and HAProxy's send-proxy and
// send-proxy-v2) and X-Forwarded-For on the admin port (net/http's
// reverse proxy). The real client is what limits, audit rows, logs and
// sessions see; headers from peers not listed are not honoured.

import (
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/obmd/obmd/bastion/e2e/obmdtest"

	gossh "golang.org/x/crypto/ssh"

	"github.com/obmd/obmd/bastion/daemon"
	"github.com/obmd/obmd/bastion/internal/proxyproto"
	"github.com/obmd/obmd/sol/soltest/ipmisim"
)

// try logs in through addr from src with token and runs power-status;
// it returns the authentication error.
func try(t *testing.T, addr, src, user, token string) error {
	t.Helper()
	c, err := obmdtest.DialFrom(addr, src, user, gossh.Password(token))
	if err != nil {
		return err
	}
	defer c.Close()
	if res, err := obmdtest.RunSession(c, "power-status"); err != nil || res.Code != 0 {
		t.Errorf("power-status through %s from %s: got %v, %v; want exit 0", addr, src, res, err)
	}
	return nil
}

// lockoutThrough: through the balancer at addr, three wrong tokens from
// guesser lock guesser out, not the balancer: another client gets in, and
// the audit rows name the clients, never the balancer.
func lockoutThrough(t *testing.T, o *obmdtest.Daemon, addr, node, tok, guesser, other string) {
	t.Helper()
	for i := range 3 {
		if err := try(t, addr, guesser, node, "guess"); err == nil {
			t.Fatalf("guess %d authenticated", i)
		}
	}
	if err := try(t, addr, guesser, node, tok); err == nil {
		t.Errorf("right token from the locked-out client %s through the balancer: authenticated, want refused", guesser)
	}
	if err := try(t, addr, other, node, tok); err != nil {
		t.Errorf("another client %s through the same balancer: %v, want in", other, err)
	}
	want := func(src map[string]int) bool {
		return src[guesser] == 4 && src[other] != 0 && src[obmdtest.Balancer] == 0
	}
	if src := o.AuditSourcesUntil(node, want); !want(src) {
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
	o := obmdtest.Start(t, obmdtest.StrictLimits, func(c *daemon.Config) {
		c.SSH.ProxyProtocolFrom = []string{obmdtest.Balancer, "127.0.1.0/24"}
		c.SSH.MaxConnsPerSource = 3
	})
	for _, v := range []int{1, 2} {
		t.Run(fmt.Sprintf("v%d", v), func(t *testing.T) {
			node := fmt.Sprintf("pp%d", v)
			tok := o.AddSimNode(node)
			lb := obmdtest.StartProxy(t, o.SSHAddr(), obmdtest.Balancer, obmdtest.ProxyHeader(v))
			guesser, other := fmt.Sprintf("127.0.0.%d", 20+v), fmt.Sprintf("127.0.0.%d", 30+v)
			lockoutThrough(t, o, lb.Addr, node, tok, guesser, other)

			// The connection cap counts the client, not the balancer.
			var held []*gossh.Client
			for range 3 {
				c, err := obmdtest.DialFrom(lb.Addr, other, node, gossh.Password(tok))
				if err != nil {
					t.Fatalf("connection from %s through the balancer: %v", other, err)
				}
				defer c.Close()
				held = append(held, c)
			}
			if c, err := obmdtest.DialFrom(lb.Addr, other, node, gossh.Password(tok)); err == nil {
				c.Close()
				t.Errorf("a fourth authenticated connection of %s (cap 3): got in, want refused", other)
			}
			third := fmt.Sprintf("127.0.0.%d", 40+v)
			if err := try(t, lb.Addr, third, node, tok); err != nil {
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
			obmdtest.WaitUntil(t, "the console session", func() bool { return len(o.Sessions(node)) == 1 })
			var out struct{ Sessions []struct{ Remote string } }
			json.Unmarshal(o.MustAPI(200, "GET", "/v1/sessions?node="+node, nil), &out)
			if len(out.Sessions) != 1 || !strings.HasPrefix(out.Sessions[0].Remote, other+":") {
				t.Errorf("sessions of %s: got %+v, want one from %s", node, out.Sessions, other)
			}
			if !strings.Contains(o.Logs.String(), `"remote":"`+guesser+`:`) {
				t.Errorf("logs: no line names the client %s", guesser)
			}
		})
	}

	t.Run("listed peer without a header", func(t *testing.T) {
		tok := o.AddSimNode("pp-none")
		plain := obmdtest.StartProxy(t, o.SSHAddr(), obmdtest.Balancer, nil)
		if err := try(t, plain.Addr, "127.0.0.50", "pp-none", tok); err == nil {
			t.Errorf("a connection from the balancer without a header: got in, want refused")
		}
		obmdtest.WaitUntil(t, "the refusal logged", func() bool { return strings.Contains(o.Logs.String(), "proxy_header_refused") })
		for _, e := range o.Audit("pp-none") {
			if e.Action == "auth" {
				t.Errorf("audit of the refused connection: got %+v, want none (it never reached authentication)", e)
			}
		}
	})

	t.Run("spoofed header from a peer not listed", func(t *testing.T) {
		tok := o.AddSimNode("pp-spoof")
		spoofed := netip.MustParseAddrPort("127.0.0.99:4444")
		for _, v := range []int{1, 2} {
			direct := obmdtest.StartProxy(t, o.SSHAddr(), "127.0.0.51", func(_, local netip.AddrPort) []byte {
				return proxyproto.Header{Version: v, Source: spoofed, Dest: local}.Append(nil)
			})
			for range 4 { // past the limit, if it were the spoofed address's
				try(t, direct.Addr, "127.0.0.52", "pp-spoof", "guess")
			}
		}
		// x/crypto skips a v1 line before the version (RFC 4253 lets a
		// server send such lines; obmd's parser does not read them), so
		// those logins go on as the peer's own.
		src := o.AuditSources("pp-spoof")
		if src["127.0.0.99"] != 0 || src["127.0.0.52"] != 0 || src["127.0.0.51"] == 0 {
			t.Errorf("audit sources: got %v, want the peer's own address only, not the spoofed one", src)
		}
		if err := o.TryFrom(t, "127.0.0.53", "pp-spoof", tok); err != nil {
			t.Errorf("login from another address: %v", err)
		}
		if strings.Contains(o.Logs.String(), "127.0.0.99") {
			t.Errorf("the spoofed address reached the logs")
		}
	})
}

// TestProxyHAProxy: HAProxy in TCP mode with send-proxy-v2 and send-proxy
// in front of obmd: limits, audit and sessions see the clients behind it,
// for x/crypto and OpenSSH.
func TestProxyHAProxy(t *testing.T) {
	t.Parallel()
	ipmisim.Require(t, "haproxy", "ssh", "sshpass")
	o := obmdtest.Start(t, obmdtest.StrictLimits, func(c *daemon.Config) { c.SSH.ProxyProtocolFrom = []string{obmdtest.Balancer} })
	v2, v1 := obmdtest.FreePort(t), obmdtest.FreePort(t)
	obmdtest.HAProxy(t, obmdtest.HAProxyConfig("ssh", o.SSHAddr(), v2, v1), v2, v1)
	for i, port := range []int{v2, v1} {
		node := fmt.Sprintf("ha%d", i)
		tok := o.AddSimNode(node)
		addr := fmt.Sprintf("127.0.0.1:%d", port)
		guesser, other := fmt.Sprintf("127.0.0.%d", 60+i), fmt.Sprintf("127.0.0.%d", 70+i)
		lockoutThrough(t, o, addr, node, tok, guesser, other)
		host, p, _ := net.SplitHostPort(addr)
		res, err := obmdtest.RunClient(60*time.Second, "sshpass", append([]string{"-p", tok, "ssh"},
			append(obmdtest.SSHArgs(host+":"+p, node, "-b", other, "-o", "PubkeyAuthentication=no"), "power-status")...)...)
		if err != nil || res.Code != 0 {
			t.Errorf("OpenSSH through HAProxy from %s: got %v, %v; want exit 0", other, res, err)
		}
		if src := o.AuditSources(node); src[other] < 2 {
			t.Errorf("audit sources of %s: got %v, want the OpenSSH login from %s too", node, src, other)
		}
	}
	// HAProxy's health checks (every 300 ms) are no refused connections.
	if strings.Contains(o.Logs.String(), "proxy_header_refused") {
		t.Errorf("obmd refused HAProxy's health checks")
	}
}

package obmdtest

import (
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/obmd/obmd/bastion/access/authlimit"
	"github.com/obmd/obmd/bastion/daemon"
	"github.com/obmd/obmd/bastion/internal/proxyproto"
)

// Balancer is the address the balancers of these tests connect from.
const Balancer = "127.0.0.5"

// Proxy is a TCP proxy: each connection it accepts is forwarded to
// target from the local address from, after header(client, the proxy's
// address) when header is set.
type Proxy struct {
	Addr string
	ln   net.Listener
	wg   sync.WaitGroup
	mu   sync.Mutex
	open map[net.Conn]bool
}

// StartProxy forwards connections to target from the local address from,
// sending header(client, local) first when header is set; it stops when
// t ends.
func StartProxy(t testing.TB, target, from string, header func(client, local netip.AddrPort) []byte) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &Proxy{Addr: ln.Addr().String(), ln: ln, open: map[net.Conn]bool{}}
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
func (p *Proxy) forward(c net.Conn, target, from string, header func(client, local netip.AddrPort) []byte) {
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

// ProxyHeader is a header of version v for the client.
func ProxyHeader(v int) func(client, local netip.AddrPort) []byte {
	return func(client, local netip.AddrPort) []byte {
		return proxyproto.Header{Version: v, Source: client, Dest: local}.Append(nil)
	}
}

// StrictLimits are strict guessing limits, so the tests can lock a client out.
func StrictLimits(c *daemon.Config) {
	c.AuthLimits = authlimit.Config{PerSource: 3, PerNode: 1000, Window: time.Minute, Lockout: time.Minute}
}

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func FreePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// HAProxyConfig is HAProxy's configuration of two TCP balancers in front
// of target, from Balancer, with health checks: one on port v2 sending
// the PROXY header v2 (send-proxy-v2), one on port v1 sending v1.
func HAProxyConfig(name, target string, v2, v1 int) string {
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
`, name, v2, v1, target, Balancer)
}

// HAProxy runs haproxy with cfg until the test ends and waits until it
// listens on ports.
func HAProxy(t *testing.T, cfg string, ports ...int) {
	t.Helper()
	file := filepath.Join(t.TempDir(), "haproxy.cfg")
	if err := os.WriteFile(file, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("haproxy", "-db", "-f", file)
	logs := &SyncBuffer{}
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
		WaitUntil(t, "haproxy to listen", func() bool {
			c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port))
			if err == nil {
				c.Close()
			}
			return err == nil
		})
	}
}

// AuditSources is the set of addresses (no port) of user's audit rows.
func (o *Daemon) AuditSources(node string) map[string]int {
	out := map[string]int{}
	for _, e := range o.Audit(node) {
		host, _, err := net.SplitHostPort(e.Source)
		if err != nil {
			host = e.Source
		}
		out[host] += int(e.Count)
	}
	return out
}

// AuditSourcesUntil polls AuditSources until ok holds of them (repeats are
// counted at the end of the aggregation window), for 10 s at most, and
// returns the last.
func (o *Daemon) AuditSourcesUntil(node string, ok func(map[string]int) bool) map[string]int {
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if src := o.AuditSources(node); ok(src) || time.Now().After(deadline) {
			return src
		}
	}
}

package dbtest

import (
	"io"
	"net"
	"net/url"
	"strings"
	"sync"
	"testing"

	"github.com/go-sql-driver/mysql"
)

// Proxy forwards TCP connections to a MySQL or PostgreSQL server. It can hold the
// answers on the connections open at a moment (Hold), as a server holds a
// statement it does not answer (a Galera node's wait for the cluster that
// raced a configuration change) while it answers on new connections; and
// it can cut the server off (Cut), as a network partition does.
type Proxy struct {
	// DSN is the DSN StartProxy was given, through the proxy.
	DSN string

	l      net.Listener
	target string
	wg     sync.WaitGroup // the accept loop and the copies

	mu    sync.Mutex
	down  bool // Cut: new connections are refused
	conns map[*proxyConn]struct{}
}

// proxyConn is one client connection and its own to the server.
type proxyConn struct {
	client, server net.Conn
	held           chan struct{} // closed by Hold
	hold           sync.Once
}

// StartProxy starts a proxy to dsn's server (mysql://user:pass@tcp(...)/db,
// or postgres://user:pass@host:port/db) on a loopback port; it closes
// every connection when t ends.
func StartProxy(t testing.TB, dsn string) *Proxy {
	t.Helper()
	return StartProxyOn(t, dsn, "127.0.0.1:0")
}

// StartProxyOn is StartProxy listening on listen (host:port), such as an
// address that a process in another network namespace reaches.
func StartProxyOn(t testing.TB, dsn, listen string) *Proxy {
	t.Helper()
	l, err := net.Listen("tcp", listen)
	if err != nil {
		t.Fatal(err)
	}
	p := &Proxy{l: l, conns: map[*proxyConn]struct{}{}}
	p.target, p.DSN = redirect(t, dsn, l.Addr().String())
	p.wg.Add(1)
	go p.accept() // ends when l closes
	t.Cleanup(func() {
		l.Close()
		p.Cut(true)
		p.wg.Wait()
	})
	return p
}

// redirect returns the server address of dsn (a mysql:// or postgres://
// DSN on TCP), and dsn with addr in its place.
func redirect(t testing.TB, dsn, addr string) (target, redirected string) {
	t.Helper()
	if rest, ok := strings.CutPrefix(dsn, "mysql://"); ok {
		cfg, err := mysql.ParseDSN(rest)
		if err != nil {
			t.Fatal(err)
		}
		target, cfg.Addr = cfg.Addr, addr
		return target, "mysql://" + cfg.FormatDSN()
	}
	u, err := url.Parse(dsn)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") || u.Host == "" {
		t.Fatalf("proxy a DSN that is neither mysql:// nor postgres:// on TCP")
	}
	target, u.Host = u.Host, addr
	return target, u.String()
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		client, err := p.l.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		if p.down {
			client.Close()
		} else {
			p.serve(client)
		}
		p.mu.Unlock()
	}
}

// serve connects client to the server and starts passing bytes both ways.
// p.mu is held.
func (p *Proxy) serve(client net.Conn) {
	server, err := net.Dial("tcp", p.target)
	if err != nil {
		client.Close()
		return
	}
	c := &proxyConn{client: client, server: server, held: make(chan struct{})}
	p.conns[c] = struct{}{}
	p.wg.Add(2)
	go func() { // ends when either side closes
		defer p.wg.Done()
		io.Copy(server, client)
		server.Close()
		p.mu.Lock()
		delete(p.conns, c)
		p.mu.Unlock()
	}()
	go func() { // ends when either side closes
		defer p.wg.Done()
		c.answer()
		client.Close()
	}()
}

// answer passes the server's bytes on to the client until the connection
// is held, then drops them.
func (c *proxyConn) answer() {
	buf := make([]byte, 32<<10)
	for {
		n, err := c.server.Read(buf)
		select {
		case <-c.held:
		default:
			if _, werr := c.client.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// Hold stops passing on the server's answers on every connection open
// now; the client's bytes still reach the server, and connections opened
// later are served.
func (p *Proxy) Hold() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		c.hold.Do(func() { close(c.held) })
	}
}

// Cut(true) closes every connection and refuses new ones until Cut(false).
func (p *Proxy) Cut(down bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.down = down
	if down {
		for c := range p.conns {
			c.client.Close()
			c.server.Close()
		}
		clear(p.conns)
	}
}

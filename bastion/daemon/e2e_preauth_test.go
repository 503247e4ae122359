package daemon_test

// Connections that never authenticate: every phase before authentication
// is bounded by login_grace_time, and the caps on unauthenticated
// connections (global, per source) and on connections per source hold,
// while clients with credentials keep getting in.

import (
	"bufio"
	"errors"
	"io"
	"net"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	gossh "golang.org/x/crypto/ssh"

	"github.com/obmd/obmd/bastion/daemon"
	"github.com/obmd/obmd/sol/soltest/ipmisim"
)

// paConn is a raw TCP connection to the SSH port from a chosen address; it
// reads whatever the server sends until the server closes it.
type paConn struct {
	net.Conn
	banner chan string   // the server's version line, if it sent one
	closed chan struct{} // closed once the server has closed the connection
	at     time.Time     // when that was seen (set before closed is)
}

// paDial connects to o's SSH port from src; the connection is closed at
// the end of t at the latest.
func paDial(t testing.TB, o *obmd, src string) *paConn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: 10 * time.Second}
	nc, err := d.Dial("tcp", o.SSHAddr())
	if err != nil {
		t.Fatalf("dial from %s: %v", src, err)
	}
	c := &paConn{Conn: nc, banner: make(chan string, 1), closed: make(chan struct{})}
	go func() { // ends when the connection does
		br := bufio.NewReader(nc)
		if line, err := br.ReadString('\n'); err == nil {
			c.banner <- line
		}
		io.Copy(io.Discard, br)
		c.at = time.Now()
		close(c.closed)
	}()
	t.Cleanup(func() { nc.Close(); <-c.closed })
	return c
}

// admitted waits for the server's version line: the connection has its
// place.
func (c *paConn) admitted(t testing.TB) {
	t.Helper()
	select {
	case line := <-c.banner:
		if !strings.HasPrefix(line, "SSH-2.0-") {
			t.Fatalf("banner: got %q", line)
		}
	case <-c.closed:
		t.Fatalf("connection from %s closed before the banner", c.LocalAddr())
	case <-time.After(e2eWait):
		t.Fatalf("no banner within %v", e2eWait)
	}
}

func (c *paConn) open() bool {
	select {
	case <-c.closed:
		return false
	default:
		return true
	}
}

// paClosedAt waits for the server to close c and returns when it did.
func (c *paConn) closedAt(t testing.TB, what string) time.Time {
	t.Helper()
	select {
	case <-c.closed:
		return c.at
	case <-time.After(e2eWait + time.Minute):
		t.Fatalf("%s: still open", what)
		return time.Time{}
	}
}

// TestPreauthGrace: a connection is closed at login_grace_time whatever
// phase before authentication it stalls in: the version exchange (nothing
// sent, or half a line), the key exchange, authentication (x/crypto with a
// password or a keyboard-interactive answer it never sends; OpenSSH at its
// password prompt). A login afterwards is not slowed.
func TestPreauthGrace(t *testing.T) {
	t.Parallel()
	const grace = time.Second
	o := startObmd(t, func(c *daemon.Config) { c.SSH.LoginGraceTime = grace })
	tok := o.addSimNode("pg1")
	const src = "127.0.0.80"
	start := time.Now()
	bound := func(what string, at time.Time) {
		t.Helper()
		if took := at.Sub(start); took < grace || took > grace+15*time.Second {
			t.Errorf("%s: closed after %v, want at the grace time %v", what, took.Round(time.Millisecond), grace)
		}
	}
	silent := paDial(t, o, src)
	half := paDial(t, o, src)
	half.Write([]byte("SSH-2.0-"))
	kex := paDial(t, o, src)
	kex.Write([]byte("SSH-2.0-stalls-in-kex\r\n"))

	// x/crypto reads the connection in the background while its callback
	// waits: the server's close is seen there.
	never := make(chan struct{})
	var clients sync.WaitGroup
	defer clients.Wait()
	defer close(never)
	var watched []*paWatch
	for _, auth := range []gossh.AuthMethod{
		gossh.PasswordCallback(func() (string, error) { <-never; return "", errors.New("gave up") }),
		gossh.KeyboardInteractive(func(string, string, []string, []bool) ([]string, error) {
			<-never
			return nil, errors.New("gave up")
		}),
	} {
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: 10 * time.Second}
		nc, err := d.Dial("tcp", o.SSHAddr())
		if err != nil {
			t.Fatal(err)
		}
		w := &paWatch{Conn: nc, closed: make(chan struct{})}
		watched = append(watched, w)
		clients.Go(func() { // ends once never is closed, at the latest
			defer nc.Close()
			if c, _, _, err := gossh.NewClientConn(w, o.SSHAddr(), &gossh.ClientConfig{User: "pg1", Auth: []gossh.AuthMethod{auth},
				HostKeyCallback: gossh.InsecureIgnoreHostKey()}); err == nil {
				c.Close()
				t.Error("authenticated without a secret")
			}
		})
	}

	ipmisim.Require(t, "ssh")
	p := startPTY(t, exec.Command("ssh", append(sshArgs(o.SSHAddr(), "pg1", "-b", src, "-o", "PubkeyAuthentication=no",
		"-o", "PreferredAuthentications=password", "-o", "NumberOfPasswordPrompts=1"), "power-status")...))
	p.expect("password:")

	bound("version exchange, nothing sent", silent.closedAt(t, "silent connection"))
	bound("version exchange, half a line", half.closedAt(t, "half a version line"))
	bound("key exchange", kex.closedAt(t, "connection in key exchange"))
	for i, w := range watched {
		select {
		case <-w.closed:
			bound([]string{"x/crypto password", "x/crypto keyboard-interactive"}[i], w.at)
		case <-time.After(e2eWait + time.Minute):
			t.Errorf("x/crypto client %d: still connected", i)
		}
	}
	// OpenSSH sits at its prompt, reading the terminal: once the server has
	// closed every connection, the password it sends finds none.
	waitUntil(t, "every stalled connection closed", func() bool {
		return o.afMetric(`obmd_ssh_unauthenticated_closed_total{reason="grace"}`) >= 6 &&
			o.afMetric("obmd_ssh_unauthenticated") == 0
	})
	bound("OpenSSH at its password prompt", time.Now())
	p.typeKeys("not-the-token\r")
	if code := p.exit(); code == 0 {
		t.Errorf("OpenSSH after the grace time: exit 0, want a closed connection")
	}
	if err := o.fdTryFrom(t, src, "pg1", tok); err != nil {
		t.Errorf("a login from the same address afterwards: %v", err)
	}
}

// paWatch notes when reading the connection first fails: the server
// closed it.
type paWatch struct {
	net.Conn
	once   sync.Once
	at     time.Time
	closed chan struct{}
}

func (w *paWatch) Read(p []byte) (int, error) {
	n, err := w.Conn.Read(p)
	if err != nil {
		w.once.Do(func() { w.at = time.Now(); close(w.closed) })
	}
	return n, err
}

// paHolder keeps n unauthenticated connections open from src, opening a
// new one a moment after the server closes one: an attacker holding the
// caps full. stop ends it and waits.
type paHolder struct {
	stop func()
}

func paHold(t testing.TB, o *obmd, src string, n int) *paHolder {
	done := make(chan struct{})
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			for {
				d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: 10 * time.Second}
				nc, err := d.Dial("tcp", o.SSHAddr())
				if err == nil {
					closed := make(chan struct{})
					go func() { io.Copy(io.Discard, nc); close(closed) }() // ends with nc
					select {
					case <-closed:
					case <-done:
					}
					nc.Close()
					<-closed
				}
				select {
				case <-done:
					return
				case <-time.After(200 * time.Millisecond):
				}
			}
		})
	}
	var once sync.Once
	h := &paHolder{stop: func() { once.Do(func() { close(done); wg.Wait() }) }}
	t.Cleanup(h.stop)
	return h
}

// slowWrites delays each write on a client's socket after the first (its
// version line, sent at once as every client does): its key exchange
// takes seconds.
type slowWrites struct {
	net.Conn
	delay  time.Duration
	writes int
}

func (c *slowWrites) Write(p []byte) (int, error) {
	if c.writes++; c.writes > 1 {
		time.Sleep(c.delay)
	}
	return c.Conn.Write(p)
}

// TestPreauthCaps: at most max_unauthenticated_per_source unauthenticated
// connections from one address and max_unauthenticated in all are held: a
// newer one displaces the oldest of its address, or, for the global cap,
// of the address holding the most; while an attacker holds every cap full,
// logins with the token (x/crypto and OpenSSH, from the attacker's address
// and from another) get in; an address whose max_conns_per_source
// connections are all authenticated is refused more.
func TestPreauthCaps(t *testing.T) {
	t.Parallel()
	const global, perSource, perSourceAll = 12, 4, 6
	o := startObmd(t, func(c *daemon.Config) {
		c.SSH.MaxUnauthenticated, c.SSH.MaxUnauthenticatedPerSource, c.SSH.MaxConnsPerSource = global, perSource, perSourceAll
		c.SSH.LoginGraceTime = time.Minute
	})
	tok := o.addSimNode("pc1")

	// Per source: the fifth and sixth displace the first two.
	var a []*paConn
	for range 6 {
		c := paDial(t, o, "127.0.0.90")
		c.admitted(t)
		a = append(a, c)
	}
	a[0].closedAt(t, "the oldest connection of the address")
	a[1].closedAt(t, "the second oldest connection of the address")
	for i, c := range a[2:] {
		if !c.open() {
			t.Errorf("connection %d of the address: closed, want the newest %d held", i+2, perSource)
		}
	}
	// Globally: a newer connection displaces the oldest of the address
	// holding the most, never a lone one while others hold more. a[2:]
	// (4 from .90, the oldest), a lone one, 4 from .91 and 3 from .92 fill
	// the cap; 2 from .93 displace the oldest of .90 and of .91 (4 each).
	lone := paDial(t, o, "127.0.0.95")
	lone.admitted(t)
	var b []*paConn
	for _, src := range []string{"127.0.0.91", "127.0.0.91", "127.0.0.91", "127.0.0.91",
		"127.0.0.92", "127.0.0.92", "127.0.0.92", "127.0.0.93", "127.0.0.93"} {
		c := paDial(t, o, src)
		c.admitted(t)
		b = append(b, c)
		if n := o.afMetric("obmd_ssh_unauthenticated"); n > global {
			t.Fatalf("unauthenticated connections: %v, over the cap of %d", n, global)
		}
	}
	a[2].closedAt(t, "the oldest connection of an address holding the most")
	b[0].closedAt(t, "the oldest connection of the other address holding the most")
	for i, c := range append(append([]*paConn{lone}, a[3:]...), b[1:]...) {
		if !c.open() {
			t.Errorf("connection %d of those not displaced: closed, want held", i)
		}
	}
	for _, c := range append(append([]*paConn{lone}, a[3:]...), b[1:]...) {
		c.Close()
	}

	// An attacker holds every cap full; logins get in, from its address
	// and from another, and it still holds the caps afterwards.
	var holders []*paHolder
	for _, src := range []string{"127.0.0.94", "127.0.0.95", "127.0.0.96"} {
		holders = append(holders, paHold(t, o, src, perSource))
	}
	waitUntil(t, "the attacker to fill the caps", func() bool { return o.afMetric("obmd_ssh_unauthenticated") == global })
	for _, src := range []string{"127.0.0.94", "127.0.0.97"} {
		for range 3 {
			if err := o.fdTryFrom(t, src, "pc1", tok); err != nil {
				t.Errorf("x/crypto login from %s with the caps full: %v", src, err)
			}
		}
		if res := o.openssh("pc1", tok, []string{"-b", src}, "power-status"); res.Code != 0 {
			t.Errorf("OpenSSH login from %s with the caps full: %v", src, res)
		}
	}
	// A login whose key exchange takes seconds (a loaded host, a slow
	// link), from the attacker's address: the attacker's silent
	// connections churn its address's cap meanwhile, and only they go.
	slowKex := func(c net.Conn) net.Conn { return &slowWrites{Conn: c, delay: 700 * time.Millisecond} }
	if c, err := dialWrapped(o.SSHAddr(), "127.0.0.94", "pc1", slowKex, gossh.Password(tok)); err != nil {
		t.Errorf("a login with a slow key exchange from the attacker's address: %v", err)
	} else {
		c.Close()
	}
	// A person takes a while at the password prompt: the attacker's
	// connections churn the global cap meanwhile (each one closed comes
	// back and displaces another), but only its own, never the lone
	// connection of the person's address.
	slow := gossh.PasswordCallback(func() (string, error) {
		time.Sleep(3 * time.Second)
		return tok, nil
	})
	if c, err := o.fdDialFrom("127.0.0.99", "pc1", slow); err != nil {
		t.Errorf("a login taking 3 s at the prompt with the caps full: %v", err)
	} else {
		c.Close()
	}
	waitUntil(t, "the attacker to fill the caps again", func() bool { return o.afMetric("obmd_ssh_unauthenticated") == global })
	for _, h := range holders {
		h.stop()
	}

	// An address whose connections are all authenticated is at its cap.
	const busy = "127.0.0.98"
	var clients []*gossh.Client
	for range perSourceAll {
		c, err := o.fdDialFrom(busy, "pc1", gossh.Password(tok))
		if err != nil {
			t.Fatalf("authenticated connection from %s: %v", busy, err)
		}
		clients = append(clients, c)
	}
	extra := paDial(t, o, busy)
	if extra.closedAt(t, "a connection over the cap"); len(extra.banner) > 0 {
		t.Errorf("connection over max_conns_per_source, all authenticated: got a banner, want it refused")
	}
	if got := o.afMetric(`obmd_ssh_unauthenticated_closed_total{reason="refused"}`); got < 1 {
		t.Errorf("refused connections counted: got %v, want at least 1", got)
	}
	// gliderlabs/ssh v0.3.8 races its Shutdown against a handshake that
	// has just completed (its connection WaitGroup): let them end first.
	for _, c := range clients {
		c.Close()
	}
	waitUntil(t, "the connections to end", func() bool { return o.afMetric("obmd_ssh_connections") == 0 })
}

package obmdtest

import (
	"bufio"
	"io"
	"net"
	"strings"
	"testing"
	"time"
)

// PreauthConn is a raw TCP connection to the SSH port from a chosen address; it
// reads whatever the server sends until the server closes it.
type PreauthConn struct {
	net.Conn
	Banner chan string   // the server's version line, if it sent one
	closed chan struct{} // closed once the server has closed the connection
	at     time.Time     // when that was seen (set before closed is)
}

// DialPreauth connects to o's SSH port from src; the connection is closed at
// the end of t at the latest.
func DialPreauth(t testing.TB, o *Daemon, src string) *PreauthConn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: 10 * time.Second}
	nc, err := d.Dial("tcp", o.SSHAddr())
	if err != nil {
		t.Fatalf("dial from %s: %v", src, err)
	}
	c := &PreauthConn{Conn: nc, Banner: make(chan string, 1), closed: make(chan struct{})}
	go func() { // ends when the connection does
		br := bufio.NewReader(nc)
		if line, err := br.ReadString('\n'); err == nil {
			c.Banner <- line
		}
		io.Copy(io.Discard, br)
		c.at = time.Now()
		close(c.closed)
	}()
	t.Cleanup(func() { nc.Close(); <-c.closed })
	return c
}

// Admitted waits for the server's version line: the connection has its
// place.
func (c *PreauthConn) Admitted(t testing.TB) {
	t.Helper()
	select {
	case line := <-c.Banner:
		if !strings.HasPrefix(line, "SSH-2.0-") {
			t.Fatalf("banner: got %q", line)
		}
	case <-c.closed:
		t.Fatalf("connection from %s closed before the banner", c.LocalAddr())
	case <-time.After(Timeout):
		t.Fatalf("no banner within %v", Timeout)
	}
}

// Open reports whether the server still holds c open.
func (c *PreauthConn) Open() bool {
	select {
	case <-c.closed:
		return false
	default:
		return true
	}
}

// ClosedAt waits for the server to close c and returns when it did.
func (c *PreauthConn) ClosedAt(t testing.TB, what string) time.Time {
	t.Helper()
	select {
	case <-c.closed:
		return c.at
	case <-time.After(Timeout + time.Minute):
		t.Fatalf("%s: still open", what)
		return time.Time{}
	}
}

package proxyproto

import (
	"errors"
	"io"
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"
)

// testListener listens on 127.0.0.1 and treats peers from 127.0.0.2 as
// the balancer; refused collects what it refused.
type testListener struct {
	*Listener
	mu      sync.Mutex
	refused []error
}

func newTestListener(t *testing.T, timeout time.Duration) *testListener {
	t.Helper()
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	tl := &testListener{}
	l, err := NewListener(inner, ListenerConfig{Timeout: timeout,
		From: func(a net.Addr) bool { return a.(*net.TCPAddr).IP.Equal(net.IPv4(127, 0, 0, 2)) },
		Refused: func(_ net.Addr, err error) {
			tl.mu.Lock()
			tl.refused = append(tl.refused, err)
			tl.mu.Unlock()
		}})
	if err != nil {
		t.Fatal(err)
	}
	tl.Listener = l
	t.Cleanup(func() { l.Close() })
	return tl
}

func (tl *testListener) dial(t *testing.T, from string) net.Conn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}, Timeout: 5 * time.Second}
	c, err := d.Dial("tcp", tl.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// accept returns the next connection Accept gives, within a bound.
func (tl *testListener) accept(t *testing.T) net.Conn {
	t.Helper()
	got := make(chan accepted, 1)
	go func() { c, err := tl.Accept(); got <- accepted{c, err} }() // ends with Accept (Close ends it)
	select {
	case a := <-got:
		if a.err != nil {
			t.Fatalf("accept: %v", a.err)
		}
		t.Cleanup(func() { a.c.Close() })
		return a.c
	case <-time.After(5 * time.Second):
		t.Fatal("accept: nothing within 5 s")
	}
	return nil
}

// TestListener: a balancer's connection comes out with the client's
// address once its header is read, and what follows the header reads as
// the connection's; anyone else's comes out as it is, a header and all;
// a balancer that stalls holds up no other connection, and one that sends
// no header is closed and reported.
func TestListener(t *testing.T) {
	tl := newTestListener(t, 300*time.Millisecond)
	stalled := tl.dial(t, "127.0.0.2") // sends nothing

	lb := tl.dial(t, "127.0.0.2")
	client := netip.MustParseAddrPort("192.0.2.7:40000")
	lb.Write(append(Header{Version: 2, Source: client, Dest: netip.MustParseAddrPort("192.0.2.1:8080")}.Append(nil), "GET /"...))
	c := tl.accept(t)
	if got := c.RemoteAddr().String(); got != client.String() {
		t.Errorf("balancer's connection: got remote %s, want the header's %s", got, client)
	}
	buf := make([]byte, 5)
	if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "GET /" {
		t.Errorf("after the header: read %q, %v; want the client's bytes", buf, err)
	}

	other := tl.dial(t, "127.0.0.3")
	forged := Header{Version: 1, Source: client, Dest: client}.Append(nil)
	other.Write(forged)
	o := tl.accept(t)
	if got := o.RemoteAddr().(*net.TCPAddr).IP.String(); got != "127.0.0.3" {
		t.Errorf("another peer's connection: got remote %s, want its own address", got)
	}
	buf = make([]byte, len(forged))
	if _, err := io.ReadFull(o, buf); err != nil || string(buf) != string(forged) {
		t.Errorf("another peer's header: read %q, %v; want it passed on as bytes, not honoured", buf, err)
	}

	// The stalled balancer's connection: closed at the timeout, reported.
	stalled.SetReadDeadline(time.Now().Add(5 * time.Second))
	var ne net.Error
	if _, err := stalled.Read(make([]byte, 1)); err == nil || errors.As(err, &ne) && ne.Timeout() {
		t.Errorf("stalled balancer's connection: read %v, want it closed", err)
	}
	tl.mu.Lock()
	defer tl.mu.Unlock()
	if len(tl.refused) != 1 {
		t.Errorf("refused: got %v, want the stalled connection", tl.refused)
	}
}

// TestListenerClose: Close ends Accept, closes the connections whose
// header is being read and returns once the Listener's goroutines have.
func TestListenerClose(t *testing.T) {
	tl := newTestListener(t, time.Minute)
	pending := tl.dial(t, "127.0.0.2")
	time.Sleep(50 * time.Millisecond) // accepted, its header awaited
	done := make(chan error, 1)
	go func() { _, err := tl.Accept(); done <- err }() // ends at Close
	start := time.Now()
	tl.Close()
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("Close took %v with a header awaited for a minute", d)
	}
	if err := <-done; !errors.Is(err, net.ErrClosed) {
		t.Errorf("Accept after Close: got %v, want net.ErrClosed", err)
	}
	pending.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := pending.Read(make([]byte, 1)); err == nil {
		t.Error("pending connection: still open after Close")
	}
}

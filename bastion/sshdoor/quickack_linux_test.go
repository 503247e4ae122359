package sshdoor

import (
	"io"
	"net"
	"slices"
	"testing"
	"time"

	"github.com/obmd/obmd/sol/soltest"
)

// TestQuickAck reproduces OpenSSH's handshake pattern (Nagle on, two small
// writes, the server answers after both) and checks that quickAck removes
// the delayed-ACK stall a plain connection shows.
func TestQuickAck(t *testing.T) {
	plain := roundTrips(t, func(c net.Conn) net.Conn { return c })
	quick := roundTrips(t, quickAck)
	t.Logf("median round: plain %v, quickAck %v", plain, quick)
	if plain < 10*time.Millisecond {
		// Without the stall there is nothing to compare: skip, except under
		// CI, where a skip would hide that quickAck is not exercised.
		soltest.Missing(t, "no delayed ACK on this kernel (plain median %v)", plain)
	}
	if quick*4 > plain {
		t.Errorf("median round with quickAck: got %v, want far below the plain %v", quick, plain)
	}
}

// roundTrips returns the median time of a round: the client (Nagle on)
// writes one byte, then another; the server, its side wrapped by wrap,
// answers one byte once it has both.
func roundTrips(t *testing.T, wrap func(net.Conn) net.Conn) time.Duration {
	t.Helper()
	const rounds = 12
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	done := make(chan error, 1)
	go func() { // the server; ends after rounds or on error, waited for below
		c, err := ln.Accept()
		if err != nil {
			done <- err
			return
		}
		defer c.Close()
		c = wrap(c)
		buf := make([]byte, 2)
		for range rounds {
			if _, err := io.ReadFull(c, buf); err != nil {
				done <- err
				return
			}
			if _, err := c.Write([]byte{'r'}); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.(*net.TCPConn).SetNoDelay(false) // as OpenSSH during the handshake
	c.SetDeadline(time.Now().Add(30 * time.Second))
	var took []time.Duration
	buf := make([]byte, 1)
	for range rounds {
		start := time.Now()
		c.Write([]byte{'a'})
		c.Write([]byte{'b'})
		if _, err := io.ReadFull(c, buf); err != nil {
			t.Fatalf("client read: %v", err)
		}
		took = append(took, time.Since(start))
	}
	if err := <-done; err != nil {
		t.Fatalf("server: %v", err)
	}
	slices.Sort(took)
	return took[rounds/2]
}

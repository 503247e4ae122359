package ipmitool

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/obmd/obmd/sol/soltest"
)

// TestConsoleLinkLoss: a BMC that vanishes makes Read fail within the
// keepalive bound, not after ipmitool's own ~100 s.
func TestConsoleLinkLoss(t *testing.T) {
	s, b := startSim(t)
	c := openConsole(t, b)
	r := soltest.Collect(t, c)
	s.WriteSerial([]byte("up\r\n"))
	r.WaitOutput(t, []byte("up\r\n"), 5*time.Second)

	s.Kill()
	start := time.Now()
	cfg := b.cfg
	bound := cfg.Keepalive + 2*cfg.KeepaliveTimeout
	err := r.Wait(t, bound+10*time.Second)
	elapsed := time.Since(start)
	if !errors.Is(err, ErrLinkLost) {
		t.Errorf("Read after the BMC died: got %v, want ErrLinkLost", err)
	}
	t.Logf("link loss detected after %v (bound %v): %v", elapsed, bound, err)
	if elapsed > bound+5*time.Second {
		t.Errorf("link loss took %v, want within about %v", elapsed, bound)
	}
	closed := time.Now()
	if err := c.Close(); err != nil {
		t.Errorf("Close after link loss: %v", err)
	}
	if d := time.Since(closed); d > 5*time.Second {
		t.Errorf("Close after link loss took %v", d)
	}
	noChildren(t)
	if err := s.Restart(); err != nil {
		t.Fatalf("restart ipmi_sim: %v", err)
	}
}

// TestConsoleStolen: when another session deactivates our payload, the BMC
// stops talking to us without a word; ipmitool's SOL keepalive (our
// default) notices and Read fails. Slow: ipmitool's keepalive runs every
// ~15 s.
func TestConsoleStolen(t *testing.T) {
	if testing.Short() {
		t.Skip("takes ~25 s")
	}
	_, b := startSim(t)
	c := openConsole(t, b)
	defer c.Close()
	r := soltest.Collect(t, c)
	if err := b.DeactivateConsole(context.Background()); err != nil {
		t.Fatalf("DeactivateConsole: %v", err)
	}
	start := time.Now()
	err := r.Wait(t, 90*time.Second)
	if !errors.Is(err, ErrLinkLost) {
		t.Errorf("Read after the payload was taken: got %v, want ErrLinkLost", err)
	}
	t.Logf("stolen payload noticed after %v: %v", time.Since(start), err)
}

// TestConsoleIdle: keepalive probes of a live BMC leave the console alone,
// and run no ipmitool (the ping suffices).
func TestConsoleIdle(t *testing.T) {
	s, b := startSim(t)
	c := openConsole(t, b)
	defer c.Close()
	r := soltest.Collect(t, c)
	deadline := time.Now().Add(4 * b.cfg.Keepalive)
	for time.Now().Before(deadline) {
		if n := len(children(t)); n != 1 {
			t.Fatalf("ipmitool children while idle: got %d, want only the console", n)
		}
		time.Sleep(5 * time.Millisecond)
	}
	s.WriteSerial([]byte("still alive\r\n"))
	r.WaitOutput(t, []byte("still alive"), 5*time.Second)
}

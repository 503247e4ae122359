package redfish

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/obmd/obmd/sol"
	"github.com/obmd/obmd/sol/soltest"
	"github.com/obmd/obmd/sol/soltest/ipmisim"
)

// TestNoConsole: without "sol" details the console calls say plainly that
// the node has none, as sol.ErrNotSupported.
func TestNoConsole(t *testing.T) {
	b, err := New("n", Info{Addr: "https://127.0.0.1:1", User: "u", Pass: "p"}, Config{}, logrus.New())
	if err != nil {
		t.Fatal(err)
	}
	const want = "this node has no serial console configured"
	if _, err := b.OpenConsole(context.Background()); !errors.Is(err, sol.ErrNotSupported) || err.Error() != want {
		t.Errorf("OpenConsole: got %v, want %q wrapping ErrNotSupported", err, want)
	}
	if err := b.DeactivateConsole(context.Background()); !errors.Is(err, sol.ErrNotSupported) || err.Error() != want {
		t.Errorf("DeactivateConsole: got %v, want %q wrapping ErrNotSupported", err, want)
	}
	if b.HasConsole() {
		t.Errorf("HasConsole: got true, want false")
	}
}

// TestConsoleOverIPMI: with "sol" details the console is IPMI SOL on the
// host of addr (ipmi_sim on 127.0.0.1), with the node's user and password.
// Nothing listens on the Redfish port: the console does not need it.
func TestConsoleOverIPMI(t *testing.T) {
	ipmisim.Require(t, "ipmi_sim", "socat")
	s := ipmisim.Start(t)
	info := Info{Addr: "https://127.0.0.1:1", User: ipmisim.User, Pass: ipmisim.Pass,
		SOL: &SOLInfo{Port: s.Port, Cipher: intp(3)}}
	b, err := New("node-1", info, Config{}, logrus.New())
	if err != nil {
		t.Fatal(err)
	}
	r := soltest.Open(t, b)
	if _, err := r.Console.Write([]byte("typed through redfish\r")); err != nil {
		t.Fatalf("Write: %v", err)
	}
	soltest.WaitSerial(t, s, []byte("typed through redfish\r"), 10*time.Second)
	if err := s.WriteSerial([]byte("node says hello\r\n")); err != nil {
		t.Fatal(err)
	}
	r.WaitOutput(t, []byte("node says hello"), 10*time.Second)
	r.Close(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := b.DeactivateConsole(ctx); err != nil {
		t.Errorf("DeactivateConsole: got %v, want nil", err)
	}
}

package ipmi

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bougou/go-ipmi/pkg/command/transport"
	"github.com/bougou/go-ipmi/pkg/types"
	"github.com/sirupsen/logrus"

	"github.com/obmd/obmd/sol"
	"github.com/obmd/obmd/sol/soltest"
	"github.com/obmd/obmd/sol/soltest/bmcs"
	"github.com/obmd/obmd/sol/soltest/ipmisim"
)

// testLogger discards output unless OBMD_TEST_DEBUG=1 (then Debug goes to
// the test log).
func testLogger(t testing.TB) logrus.FieldLogger {
	l := logrus.New()
	l.SetOutput(io.Discard)
	if os.Getenv("OBMD_TEST_DEBUG") == "1" {
		l.SetOutput(tWriter{t})
		l.SetLevel(logrus.DebugLevel)
	}
	return l
}

type tWriter struct{ t testing.TB }

func (w tWriter) Write(p []byte) (int, error) { w.t.Log(string(p)); return len(p), nil }

// fastConfig makes failures show up within a few seconds.
var fastConfig = Config{
	CallTimeout:    5 * time.Second,
	Keepalive:      500 * time.Millisecond,
	AttemptTimeout: 200 * time.Millisecond,
	Retransmit:     100 * time.Millisecond,
}

func newBMC(t testing.TB, info sol.Info, cfg Config) *BMC {
	t.Helper()
	b, err := New("node-sim", info, cfg, testLogger(t))
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return b
}

func newSimBMC(t testing.TB, cfg Config) (*BMC, *ipmisim.Sim) {
	t.Helper()
	s := ipmisim.Start(t)
	return newBMC(t, s.Info(), cfg), s
}

// TestConformance runs the shared power and console tables on both BMCs,
// ipmi_sim (cipher suite 3) and goipmi-server (cipher suite 17), one
// process of each shared by all cases.
func TestConformance(t *testing.T) {
	bmcs.Each(t, func(t *testing.T, m soltest.Machine) {
		driver := func(t *testing.T, info sol.Info) sol.BMC { return newBMC(t, info, Config{}) }
		t.Run("power", func(t *testing.T) { soltest.RunPower(t, soltest.Shared(m, driver)) })
		t.Run("console", func(t *testing.T) { soltest.RunConsole(t, soltest.SharedSerial(m, driver)) })
		t.Run("faults", func(t *testing.T) {
			soltest.RunFaults(t, func(t *testing.T, info sol.Info) sol.BMC { return newBMC(t, info, fastConfig) },
				[]soltest.FaultCase{{Name: "wrong password", Info: m.WrongPassword(), Want: sol.FaultCredentials}})
		})
	})
}

func TestNewValidates(t *testing.T) {
	c := func(i int) *int { return &i }
	good := sol.Info{Addr: "10.0.0.5", User: "admin", Pass: "secret"}
	tests := []struct {
		name    string
		edit    func(i *sol.Info)
		wantErr bool
	}{
		{"minimal", func(*sol.Info) {}, false},
		{"cipher -1 means negotiate", func(i *sol.Info) { i.Cipher = c(-1) }, false},
		{"cipher 17", func(i *sol.Info) { i.Cipher = c(17) }, false},
		{"lanplus", func(i *sol.Info) { i.Interface = "lanplus" }, false},
		{"host name", func(i *sol.Info) { i.Addr = "bmc-17.example" }, false},
		{"no addr", func(i *sol.Info) { i.Addr = "" }, true},
		{"no user", func(i *sol.Info) { i.User = "" }, true},
		{"no pass", func(i *sol.Info) { i.Pass = "" }, true},
		{"long user", func(i *sol.Info) { i.User = strings.Repeat("u", 17) }, true},
		{"long pass", func(i *sol.Info) { i.Pass = strings.Repeat("p", 21) }, true},
		{"bad port", func(i *sol.Info) { i.Port = 70000 }, true},
		{"rc4 cipher", func(i *sol.Info) { i.Cipher = c(4) }, true},
		{"cipher 99", func(i *sol.Info) { i.Cipher = c(99) }, true},
		{"lan interface", func(i *sol.Info) { i.Interface = "lan" }, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			info := good
			tc.edit(&info)
			b, err := New("n", info, Config{}, testLogger(t))
			if got := err != nil; got != tc.wantErr {
				t.Fatalf("error: got %v, want error %v", err, tc.wantErr)
			}
			if err != nil && info.Pass != "" && strings.Contains(err.Error(), info.Pass) {
				t.Errorf("error %q contains the password", err)
			}
			if err == nil && (b.port != 623 || (info.Cipher == nil || *info.Cipher == -1) != (b.cipher == -1)) {
				t.Errorf("defaults: got port %d cipher %d, want 623 and -1 (negotiate) exactly when unpinned", b.port, b.cipher)
			}
		})
	}
}

// TestDeadBMC: a BMC that does not answer makes every operation fail
// within the caller's deadline (go-ipmi would otherwise retry on its own
// schedule), and a closed port fails at once.
func TestDeadBMC(t *testing.T) {
	silent, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	closed, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closedPort := closed.LocalAddr().(*net.UDPAddr).Port
	closed.Close()

	ops := map[string]func(context.Context, *BMC) error{
		"status":     func(ctx context.Context, b *BMC) error { _, err := b.PowerStatus(ctx); return err },
		"on":         func(ctx context.Context, b *BMC) error { return b.PowerOn(ctx) },
		"bootdev":    func(ctx context.Context, b *BMC) error { return b.SetBootDevice(ctx, sol.BootPXE, false) },
		"deactivate": func(ctx context.Context, b *BMC) error { return b.DeactivateConsole(ctx) },
		"console": func(ctx context.Context, b *BMC) error {
			c, err := b.OpenConsole(ctx)
			if err == nil {
				c.Close()
			}
			return err
		},
	}
	const deadline = 1500 * time.Millisecond
	for _, target := range []struct {
		name  string
		port  int
		bound time.Duration
	}{
		{"silent", silent.LocalAddr().(*net.UDPAddr).Port, deadline + 500*time.Millisecond},
		{"closed port", closedPort, 500 * time.Millisecond},
	} {
		for name, op := range ops {
			t.Run(target.name+"/"+name, func(t *testing.T) {
				b := newBMC(t, sol.Info{Addr: "127.0.0.1", Port: target.port, User: "admin", Pass: "x"}, Config{})
				ctx, cancel := context.WithTimeout(context.Background(), deadline)
				defer cancel()
				start := time.Now()
				err := op(ctx, b)
				if err == nil {
					t.Fatal("got nil error, want one")
				}
				if d := time.Since(start); d > target.bound {
					t.Errorf("failed after %v, want within %v (%v)", d, target.bound, err)
				}
			})
		}
	}

	t.Run("killed sim", func(t *testing.T) {
		b, s := newSimBMC(t, Config{})
		s.Kill()
		start := time.Now()
		if _, err := b.PowerStatus(context.Background()); err == nil {
			t.Fatal("got nil error, want one")
		}
		if d := time.Since(start); d > time.Second {
			t.Errorf("failed after %v, want within 1s", d)
		}
	})
}

// openConsole opens b's console and collects its output.
func openConsole(t *testing.T, b sol.BMC) *soltest.Reader {
	t.Helper()
	return soltest.Open(t, b)
}

func TestConsoleLinkLoss(t *testing.T) {
	t.Run("killed BMC", func(t *testing.T) {
		b, s := newSimBMC(t, fastConfig)
		r := openConsole(t, b)
		s.Kill()
		start := time.Now()
		err := r.Wait(t, 5*time.Second)
		t.Logf("Read failed after %v: %v", time.Since(start), err)
	})
	t.Run("silent BMC", func(t *testing.T) {
		s := ipmisim.Start(t)
		rl := startRelay(t, s.Port)
		info := s.Info()
		info.Port = rl.port()
		b := newBMC(t, info, fastConfig)
		r := openConsole(t, b)
		rl.silent.Store(true)
		start := time.Now()
		err := r.Wait(t, 10*time.Second)
		t.Logf("Read failed after %v: %v", time.Since(start), err)
		if _, err := r.Console.Write([]byte("x")); err == nil {
			t.Error("Write after link loss: got nil error, want one")
		}
	})
	t.Run("silent BMC during a paste", func(t *testing.T) {
		s := ipmisim.Start(t)
		rl := startRelay(t, s.Port)
		info := s.Info()
		info.Port = rl.port()
		b := newBMC(t, info, fastConfig)
		r := openConsole(t, b)
		done := make(chan error, 1)
		go func() { _, err := r.Console.Write(soltest.Paste(1<<20, 3)); done <- err }()
		time.Sleep(100 * time.Millisecond)
		rl.silent.Store(true)
		select {
		case err := <-done:
			if err == nil {
				t.Error("Write: got nil error, want one")
			}
		case <-time.After(10 * time.Second):
			t.Fatal("Write still blocked 10s after the link went silent")
		}
		r.Wait(t, 5*time.Second)
	})
}

// TestRemoteDeactivate: someone runs `sol deactivate`. The console notices
// within a few keepalives, and closing it later does not end the console
// that took the payload since.
func TestRemoteDeactivate(t *testing.T) {
	for _, tc := range []struct {
		name        string
		noOwnerInfo bool
	}{{"owner by session", false}, {"activation status only", true}} {
		t.Run(tc.name, func(t *testing.T) {
			b, s := newSimBMC(t, fastConfig)
			b.noOwnerInfo = tc.noOwnerInfo
			first := openConsole(t, b)
			if err := b.DeactivateConsole(context.Background()); err != nil {
				t.Fatalf("DeactivateConsole: %v", err)
			}
			err := first.Wait(t, 5*time.Second)
			if !strings.Contains(err.Error(), errLost.Error()) {
				t.Errorf("Read error: got %v, want one saying %q", err, errLost)
			}
			second := openConsole(t, b)
			if !tc.noOwnerInfo {
				// The stale console knows it lost the payload: closing it
				// must not end the new one.
				first.Close(t)
			}
			if _, err := second.Console.Write([]byte("still mine\r")); err != nil {
				t.Fatalf("Write on the second console: %v", err)
			}
			soltest.WaitSerial(t, s, []byte("still mine\r"), 5*time.Second)
			s.WriteSerial([]byte("output after\r\n"))
			second.WaitOutput(t, []byte("output after\r\n"), 5*time.Second)
		})
	}
}

// TestStalePayload: a client that died holding the payload (no deactivate,
// no close session) blocks OpenConsole until DeactivateConsole frees it.
func TestStalePayload(t *testing.T) {
	b, s := newSimBMC(t, Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	abandoned, err := b.dial(ctx)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	if _, err := abandoned.c.ActivatePayload(ctx, &transport.ActivatePayloadRequest{
		PayloadType: types.PayloadTypeSOL, PayloadInstance: 1,
	}); err != nil {
		t.Fatalf("activate: %v", err)
	}
	// Die: drop the socket without a word to the BMC (a cancelled context
	// keeps go-ipmi from sending Close Session, and stops its keepalive).
	abandoned.d.close()
	dead, kill := context.WithCancel(ctx)
	kill()
	abandoned.c.Close(dead)

	if _, err := b.OpenConsole(ctx); !errors.Is(err, sol.ErrPayloadActive) {
		t.Fatalf("OpenConsole over a stale payload: got %v, want ErrPayloadActive", err)
	}
	if err := b.DeactivateConsole(ctx); err != nil {
		t.Fatalf("DeactivateConsole: %v", err)
	}
	r := openConsole(t, b)
	if _, err := r.Console.Write([]byte("recovered\r")); err != nil {
		t.Fatalf("Write: %v", err)
	}
	soltest.WaitSerial(t, s, []byte("recovered\r"), 5*time.Second)
}

// TestLossyLink: with datagrams dropped both ways, input arrives exactly
// once and in order (resends, duplicate acks) and so does output.
func TestLossyLink(t *testing.T) {
	s := ipmisim.Start(t)
	rl := startRelay(t, s.Port)
	info := s.Info()
	info.Port = rl.port()
	b := newBMC(t, info, Config{Retransmit: 50 * time.Millisecond})
	r := openConsole(t, b)
	rl.setLoss(0.1)

	data := soltest.Paste(16<<10, 7)
	if _, err := r.Console.Write(data); err != nil {
		t.Fatalf("Write: %v", err)
	}
	soltest.WaitSerial(t, s, data, 30*time.Second)
	if got := s.Serial(); !bytes.Equal(got, data) {
		t.Errorf("serial port: got %d bytes, want exactly the %d written", len(got), len(data))
	}

	var want bytes.Buffer
	for i := range 20 {
		line := []byte(strings.Repeat(string(rune('a'+i)), 40) + "\r\n")
		want.Write(line)
		s.WriteSerial(line)
		time.Sleep(20 * time.Millisecond)
	}
	r.WaitOutput(t, want.Bytes(), 30*time.Second)
	if got := r.Output(); !bytes.Equal(got, want.Bytes()) {
		t.Errorf("output: got %q, want %q", got, want.Bytes())
	}
}

func TestBreak(t *testing.T) {
	b, s := newSimBMC(t, Config{})
	r := openConsole(t, b)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := r.Console.Break(ctx); err != nil {
		t.Fatalf("Break: %v", err)
	}
	if _, err := r.Console.Write([]byte("after break\r")); err != nil {
		t.Fatalf("Write: %v", err)
	}
	soltest.WaitSerial(t, s, []byte("after break\r"), 5*time.Second)
}

// TestConcurrent runs power operations in parallel with an open console.
func TestConcurrent(t *testing.T) {
	b, s := newSimBMC(t, Config{})
	r := openConsole(t, b)
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if st, err := b.PowerStatus(context.Background()); err != nil || st != sol.PowerOn {
				t.Errorf("PowerStatus %d: got (%q, %v), want (on, nil)", i, st, err)
			}
		}()
	}
	if _, err := r.Console.Write([]byte("typing meanwhile\r")); err != nil {
		t.Errorf("Write: %v", err)
	}
	wg.Wait()
	soltest.WaitSerial(t, s, []byte("typing meanwhile\r"), 5*time.Second)
}

// TestCycleWhenOff: cycling a machine that is off leaves it on, whether the
// BMC cycles anyway (ipmi_sim) or refuses (completion code 0xD5).
func TestCycleWhenOff(t *testing.T) {
	b, s := newSimBMC(t, Config{})
	ctx := context.Background()
	if err := b.PowerOff(ctx, false); err != nil {
		t.Fatalf("PowerOff: %v", err)
	}
	if err := b.PowerCycle(ctx); err != nil {
		t.Fatalf("PowerCycle: %v", err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for !s.PowerOn() {
		if time.Now().After(deadline) {
			t.Fatalf("machine power: got off, want on (actions %q)", s.Actions())
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("actions: %q", s.Actions())
}

// TestFaults: a wrong password, a silent BMC and a closed port are each
// classified, for power and console alike.
func TestFaults(t *testing.T) {
	s := ipmisim.Start(t)
	soltest.RunFaults(t, func(t *testing.T, info sol.Info) sol.BMC { return newBMC(t, info, fastConfig) },
		ipmisim.FaultCases(t, s))
}

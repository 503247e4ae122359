package transport_test

import (
	"context"
	"errors"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/obmd/obmd/sol"
	"github.com/obmd/obmd/sol/soltest"
	"github.com/obmd/obmd/sol/soltest/sshbmc"
	"github.com/obmd/obmd/sol/sshconsole"
	"github.com/obmd/obmd/sol/transport"
)

const wait = 15 * time.Second

// base is a node's driver whose SOL console fails with err (nil: a
// console that works), and that may say what its BMC offers.
type base struct {
	sol.BMC
	err      error
	services *sol.ConsoleServices

	mu    sync.Mutex
	opens int
}

func (b *base) OpenConsole(context.Context) (sol.Console, error) {
	b.mu.Lock()
	b.opens++
	b.mu.Unlock()
	if b.err != nil {
		return nil, b.err
	}
	return solConsole{}, nil
}

func (b *base) DeactivateConsole(context.Context) error { return nil }

func (b *base) Diagnose(context.Context) []sol.Check {
	return []sol.Check{sol.Pass(sol.CheckAddress, "ok"), sol.Pass(sol.CheckPower, "on"), sol.Pass(sol.CheckSOL, "SOL free")}
}

func (b *base) solOpens() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.opens
}

// discovering is a base that is a Discoverer.
type discovering struct{ *base }

func (d discovering) ConsoleServices(context.Context) (sol.ConsoleServices, error) {
	return *d.services, nil
}

// solConsole is a SOL console that never prints.
type solConsole struct{}

func (solConsole) Read([]byte) (int, error)    { select {} }
func (solConsole) Write(p []byte) (int, error) { return len(p), nil }
func (solConsole) Break(context.Context) error { return nil }
func (solConsole) Close() error                { return nil }

func quiet() logrus.FieldLogger {
	l := logrus.New()
	l.SetOutput(io.Discard)
	return l
}

func newTransports(t *testing.T, keys sshconsole.HostKeys, mem *transport.Memory) *transport.Transports {
	t.Helper()
	c, err := sshconsole.NewClient(sshconsole.Config{}, keys, nil, quiet())
	if err != nil {
		t.Fatal(err)
	}
	tr, err := transport.New(c, mem, nil, quiet())
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

func open(t *testing.T, b sol.BMC) (sol.Console, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	return b.OpenConsole(ctx)
}

// TestCheckInfo: the console fields are checked (errors naming the field,
// never a password) and folded to their canonical form.
func TestCheckInfo(t *testing.T) {
	for _, tc := range []struct {
		name string
		ci   sol.ConsoleInfo
		want string // field named, "" for valid
	}{
		{"default", sol.ConsoleInfo{}, ""},
		{"sol", sol.ConsoleInfo{Console: "sol"}, ""},
		{"ssh idrac", sol.ConsoleInfo{Console: "ssh", SSHVendor: "idrac", SSHPort: 2222}, ""},
		{"auto", sol.ConsoleInfo{Console: "auto", SSHUser: "u", SSHPass: "p", SSHCommand: "console 1"}, ""},
		{"bad console", sol.ConsoleInfo{Console: "telnet"}, "info.console"},
		{"ssh field with sol", sol.ConsoleInfo{SSHPort: 22}, "info.ssh_port"},
		{"bad port", sol.ConsoleInfo{Console: "ssh", SSHPort: 70000}, "info.ssh_port"},
		{"bad vendor", sol.ConsoleInfo{Console: "ssh", SSHVendor: "hp"}, "info.ssh_vendor"},
		{"control in command", sol.ConsoleInfo{Console: "ssh", SSHCommand: "vsp\r"}, "info.ssh_command"},
		{"control in password", sol.ConsoleInfo{Console: "ssh", SSHPass: "se\x01cret"}, "info.ssh_pass"},
		{"bad host key", sol.ConsoleInfo{Console: "ssh", SSHHostKey: "ssh-ed25519 notbase64"}, "info.ssh_host_key"},
	} {
		_, err := transport.CheckInfo(tc.ci)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: got %v, want valid", tc.name, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: got %v, want an error naming %s", tc.name, err, tc.want)
		case err != nil && strings.Contains(err.Error(), "se\x01cret"):
			t.Errorf("%s: the error shows the password: %v", tc.name, err)
		}
	}
	key := sshbmc.Start(t, sshbmc.Options{}).HostKey()
	a, _ := transport.CheckInfo(sol.ConsoleInfo{Console: "sol"})
	b, _ := transport.CheckInfo(sol.ConsoleInfo{Console: "ssh", SSHVendor: "openbmc", SSHPort: 2200,
		SSHHostKey: sshconsole.KeyLine(key) + " a comment"})
	c, _ := transport.CheckInfo(sol.ConsoleInfo{Console: "ssh", SSHVendor: "openbmc", SSHHostKey: sshconsole.KeyLine(key)})
	if a != (sol.ConsoleInfo{}) || b != c {
		t.Errorf("canonical forms: %+v; %+v vs %+v", a, b, c)
	}
}

// TestWrapSOL: a node whose console is SOL keeps its driver as it is.
func TestWrapSOL(t *testing.T) {
	tr := newTransports(t, sshbmc.NewKeys(), transport.NewMemory())
	b := &base{}
	got, err := tr.Wrap("n1", b, transport.Target{Host: "h", User: "u", Pass: "p"})
	if err != nil || got != sol.BMC(b) {
		t.Errorf("Wrap: got %v, %v, want the driver itself", got, err)
	}
}

// TestAutoFallsBack: "auto" on a driver without discovery tries SOL, falls
// back to SSH when SOL fails at the protocol level, remembers SSH (and
// tries it first from then on: SOL is not tried again), and shows it.
func TestAutoFallsBack(t *testing.T) {
	m := sshbmc.Start(t, sshbmc.Options{Vendor: "xcc"})
	mem := transport.NewMemory()
	tr := newTransports(t, sshbmc.NewKeys(), mem)
	ci := m.ConsoleInfo()
	ci.Console = sol.ConsoleAuto
	b := &base{err: sol.NewError(sol.FaultNoAnswer, errors.New("IPMI over LAN is off"))}
	d, err := tr.Wrap("n1", b, transport.Target{Host: m.Host, User: "u", Pass: "p", Info: ci})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		con, err := open(t, d)
		if err != nil {
			t.Fatalf("open %d: %v", i, err)
		}
		r := soltest.Collect(t, con)
		m.WriteSerial([]byte("over ssh\r\n"))
		r.WaitOutput(t, []byte("over ssh\r\n"), wait)
		r.Close(t)
	}
	if got := b.solOpens(); got != 1 {
		t.Errorf("SOL tried %d times, want once (then SSH is remembered)", got)
	}
	if got, ok := mem.InUse("n1"); !ok || got != sol.ConsoleSSH {
		t.Errorf("in use: got %q, %v, want ssh", got, ok)
	}
	if _, err := tr.Wrap("n1", b, transport.Target{Host: m.Host, User: "u", Pass: "p"}); err != nil {
		t.Fatal(err)
	}
	if got, ok := mem.InUse("n1"); ok {
		t.Errorf("in use after the node went back to SOL: got %q, want nothing remembered", got)
	}
}

// TestAutoHostKeyNoFallback: a changed host key on the remembered SSH
// console is refused, not worked around through SOL.
func TestAutoHostKeyNoFallback(t *testing.T) {
	m := sshbmc.Start(t, sshbmc.Options{Vendor: "openbmc"})
	mem := transport.NewMemory()
	tr := newTransports(t, sshbmc.NewKeys(), mem)
	ci := m.ConsoleInfo()
	ci.Console = sol.ConsoleAuto
	b := &base{err: sol.NewError(sol.FaultNoAnswer, errors.New("IPMI over LAN is off"))}
	d, _ := tr.Wrap("n1", b, transport.Target{Host: m.Host, User: "u", Pass: "p", Info: ci})
	con, err := open(t, d)
	if err != nil {
		t.Fatal(err)
	}
	con.Close()
	b.err = nil // SOL would work now
	m.RotateHostKey(t)
	_, err = open(t, d)
	var e *sol.Error
	if !errors.As(err, &e) || e.Fault != sol.FaultHostKey {
		t.Errorf("changed key: got %v, want FaultHostKey", err)
	}
	if got := b.solOpens(); got != 1 {
		t.Errorf("SOL tried %d times after the key changed, want no fallback", got)
	}
}

// TestAutoDiscovery: "auto" on a driver whose BMC says IPMI SOL is off and
// SSH on picks SSH at once, on the port and with the command the BMC
// reports (the node's info sets neither); a BMC that says both are off is
// refused, and doctor says why.
func TestAutoDiscovery(t *testing.T) {
	m := sshbmc.Start(t, sshbmc.Options{Vendor: "generic", NoExec: true})
	mem := transport.NewMemory()
	tr := newTransports(t, sshbmc.NewKeys(), mem)
	services := &sol.ConsoleServices{IPMI: sol.ConsoleService{Known: true},
		SSH: sol.ConsoleService{Known: true, Enabled: true, Port: m.Port, Command: "console"}}
	b := discovering{&base{services: services}}
	ci := sol.ConsoleInfo{Console: sol.ConsoleAuto, SSHUser: sshbmc.User, SSHPass: sshbmc.Pass}
	d, err := tr.Wrap("n1", b, transport.Target{Host: m.Host, User: "u", Pass: "p", Info: ci})
	if err != nil {
		t.Fatal(err)
	}
	checks := d.(sol.Diagnoser).Diagnose(context.Background())
	var text []string
	for _, c := range checks {
		text = append(text, c.Name+": "+c.Tenant)
	}
	joined := strings.Join(text, "\n")
	if !sol.Passed(checks) || !strings.Contains(joined, "transport: auto: ssh (Redfish: IPMI SOL off, SSH on)") ||
		strings.Contains(joined, "SOL free") || !strings.Contains(joined, sol.CheckSSHConsole) {
		t.Errorf("doctor:\n%s\nwant the transport step naming SSH and why, then the SSH steps, not SOL's", joined)
	}
	con, err := open(t, d)
	if err != nil {
		t.Fatal(err)
	}
	con.Close()
	if b.solOpens() != 0 {
		t.Errorf("SOL was tried though the BMC says it is off")
	}
	mem.Forget("n1")

	// A driver that cannot tell (an IPMI node) asks the Redfish service
	// its node names (Target.Discover) instead.
	plain := &base{}
	d2, err := tr.Wrap("n2", plain, transport.Target{Host: m.Host, User: "u", Pass: "p", Info: ci,
		Discover: discovering{&base{services: services}}})
	if err != nil {
		t.Fatal(err)
	}
	con, err = open(t, d2)
	if err != nil {
		t.Fatal(err)
	}
	con.Close()
	if inUse, _ := mem.InUse("n2"); plain.solOpens() != 0 || inUse != sol.ConsoleSSH {
		t.Errorf("IPMI driver with a Redfish service saying SOL off: SOL opened %d times, in use %q; want SSH at once",
			plain.solOpens(), inUse)
	}
	mem.Forget("n2")
	services.SSH.Enabled = false
	if _, err := open(t, d); err == nil || !strings.Contains(err.Error(), "no serial console service") {
		t.Errorf("both off: got %v, want a refusal saying no service is enabled", err)
	}
}

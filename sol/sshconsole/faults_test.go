package sshconsole_test

import (
	"errors"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/obmd/obmd/sol"
	"github.com/obmd/obmd/sol/soltest"
	"github.com/obmd/obmd/sol/soltest/sshbmc"
	"github.com/obmd/obmd/sol/sshconsole"
)

// TestOpenFaults: a refused password, a closed port and a console command
// the CLI does not know are classified, name the BMC's address for the log
// and never for tenants, and never show the password.
func TestOpenFaults(t *testing.T) {
	b := sshbmc.Start(t, sshbmc.Options{Vendor: "ilo"})
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := l.Addr().(*net.TCPAddr).Port
	l.Close()
	const badPass = "not-the-pass-7b2e"
	c := newClient(t, sshbmc.NewKeys(), nil)
	for _, tc := range []struct {
		name   string
		change func(*sshconsole.Target)
		want   sol.Fault
		addr   string
	}{
		{"wrong password", func(tg *sshconsole.Target) { tg.Pass = badPass }, sol.FaultCredentials, b.Addr()},
		{"closed port", func(tg *sshconsole.Target) { tg.Port = closed }, sol.FaultUnreachable, "127.0.0.1:" + strconv.Itoa(closed)},
		{"unknown command", func(tg *sshconsole.Target) { tg.Command = "consoel" }, sol.FaultRejected, b.Addr()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tg := target(t, "n1-"+strings.ReplaceAll(tc.name, " ", "-"), b)
			tc.change(&tg)
			con, err := c.Open(ctxWait(t), tg)
			if err == nil {
				con.Close()
			}
			var e *sol.Error
			switch {
			case !errors.As(err, &e) || e.Fault != tc.want:
				t.Fatalf("got %v, want fault %v", err, tc.want)
			case !strings.Contains(err.Error(), tc.addr):
				t.Errorf("detail %q does not name %s", err, tc.addr)
			case strings.Contains(sol.TenantText(err), "127.0.0.1"), strings.Contains(err.Error(), badPass):
				t.Errorf("leak: error %q, tenant text %q", err, sol.TenantText(err))
			}
		})
	}
}

// TestBusyFreed: a console another session holds is ErrBusy (so
// sol.ErrPayloadActive); Free (the vendor's command) frees it, ending the
// other session's console, and the next Open attaches.
func TestBusyFreed(t *testing.T) {
	b := sshbmc.Start(t, sshbmc.Options{Vendor: "ilo"})
	c := newClient(t, sshbmc.NewKeys(), nil)
	tg := target(t, "n1", b)
	first, err := c.Open(ctxWait(t), tg)
	if err != nil {
		t.Fatal(err)
	}
	r := soltest.Collect(t, first)
	_, err = c.Open(ctxWait(t), tg)
	if !errors.Is(err, sshconsole.ErrBusy) || !errors.Is(err, sol.ErrPayloadActive) {
		t.Fatalf("second Open: got %v, want ErrBusy", err)
	}
	if err := c.Free(ctxWait(t), tg); err != nil {
		t.Fatalf("Free: %v", err)
	}
	r.Wait(t, wait)
	second, err := c.Open(ctxWait(t), tg)
	if err != nil {
		t.Fatalf("Open after Free: %v", err)
	}
	second.Close()
	if s := b.Stats(); s.Freed != 1 || s.Refused != 1 || s.Held {
		t.Errorf("stats: %+v, want one refusal, one free, nothing held", s)
	}
}

// TestShellOnly: a BMC that refuses the console command as the session's
// command gets it typed at its CLI's prompt.
func TestShellOnly(t *testing.T) {
	b, _, r := attached(t, sshbmc.Options{NoExec: true})
	if err := b.WriteSerial([]byte("hello\r\n")); err != nil {
		t.Fatal(err)
	}
	r.WaitOutput(t, []byte("hello\r\n"), wait)
	if got := string(r.Output()); got != "hello\r\n" {
		t.Errorf("output: got %q, want the host's alone (no prompt, no echo)", got)
	}
}

// TestBreak: a break is an RFC 4335 request; a BMC that refuses it is
// ErrNoBreak, which is sol.ErrNotSupported.
func TestBreak(t *testing.T) {
	for _, refuse := range []bool{false, true} {
		b := sshbmc.Start(t, sshbmc.Options{Vendor: "openbmc", NoBreak: refuse})
		c := newClient(t, sshbmc.NewKeys(), nil)
		con, err := c.Open(ctxWait(t), target(t, "n1", b))
		if err != nil {
			t.Fatal(err)
		}
		err = con.Break(ctxWait(t))
		con.Close()
		switch {
		case b.Stats().Breaks != 1:
			t.Errorf("refuse %v: the BMC saw %d breaks, want 1", refuse, b.Stats().Breaks)
		case refuse && !errors.Is(err, sol.ErrNotSupported):
			t.Errorf("refused: got %v, want ErrNotSupported", err)
		case !refuse && err != nil:
			t.Errorf("break: got %v", err)
		}
	}
}

// TestKeepalive: a BMC that stops answering ends the console within the
// keepalive's bound; one that drops the connection ends it at once.
func TestKeepalive(t *testing.T) {
	b := sshbmc.Start(t, sshbmc.Options{Vendor: "openbmc"})
	c := newClient(t, sshbmc.NewKeys(), nil) // keepalive 200 ms x 3
	con, err := c.Open(ctxWait(t), target(t, "n1", b))
	if err != nil {
		t.Fatal(err)
	}
	r := soltest.Collect(t, con)
	b.Freeze()
	defer b.Thaw()
	start := time.Now()
	err = r.Wait(t, wait)
	if took := time.Since(start); !errors.Is(err, sshconsole.ErrLinkLost) || took > 5*time.Second {
		t.Errorf("frozen BMC: Read ended after %v with %v, want ErrLinkLost within the keepalive bound", took, err)
	}
	b.Thaw()

	con, err = c.Open(ctxWait(t), target(t, "n1", b))
	if err != nil {
		t.Fatal(err)
	}
	r = soltest.Collect(t, con)
	b.DropConnections()
	if err := r.Wait(t, wait); !errors.Is(err, sshconsole.ErrLinkLost) {
		t.Errorf("dropped connection: got %v, want ErrLinkLost", err)
	}
}

// TestBannerNotASCII: CLI output before the Ready text that is not ASCII
// (a Latin-1 sign, bytes that are not UTF-8) neither shifts where the
// host's output starts nor panics: the host's output alone reaches the
// console.
func TestBannerNotASCII(t *testing.T) {
	greeting := "\xa9 Hewlett Packard Enterprise \xa9\xa9 " + strings.Repeat("\xff", 200) + " \u0130LO\r\n"
	b, _, r := attached(t, sshbmc.Options{Vendor: "ilo", Greeting: greeting})
	if err := b.WriteSerial([]byte("hello\r\n")); err != nil {
		t.Fatal(err)
	}
	r.WaitOutput(t, []byte("hello\r\n"), wait)
	if got := string(r.Output()); got != "hello\r\n" {
		t.Errorf("output: got %q, want the host's alone", got)
	}
}

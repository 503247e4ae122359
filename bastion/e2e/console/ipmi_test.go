package console

// End-to-end console tests against a real BMC: OpenIPMI's ipmi_sim with
// its SOL on a pty, reached by the native driver ("ipmi") and by ipmitool
// ("ipmitool"), through the real OpenSSH client with a PTY.

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/obmd/obmd/bastion/e2e/obmdtest"

	"github.com/creack/pty"

	"github.com/obmd/obmd/sol/soltest/ipmisim"
)

// TestConsoleIPMIOpenSSH is a person's session on a real BMC, per driver:
// serial output on the screen, keys on the serial port, a 64 KiB paste
// intact, ~B a break, Ctrl-E c . a detach with exit 0. It logs the echo
// latency of a keystroke and the time of the paste.
func TestConsoleIPMIOpenSSH(t *testing.T) {
	t.Parallel()
	ipmisim.Require(t, "ipmitool")
	o := obmdtest.Start(t)
	for _, typ := range obmdtest.IPMIDrivers {
		t.Run(typ, func(t *testing.T) {
			t.Parallel()
			s := ipmisim.Start(t)
			label := "real-" + typ
			tok := o.AddIPMINode(label, typ, s)
			p := obmdtest.SSHPTY(t, o.SSHAddr(), label, tok, nil)
			p.Expect("[obmd: console of " + label + "; you are writing; no one else attached;")
			obmdtest.PrintUntilSeen(t, s.WriteSerial, "sync", func(m string) bool { return strings.Contains(p.Out.String(), m) })
			p.Pos = p.Out.Len()

			// Serial output reaches the screen untouched.
			if err := s.WriteSerial([]byte("BIOS: printed on the serial port\r\n")); err != nil {
				t.Fatal(err)
			}
			p.Expect("BIOS: printed on the serial port\r\n")
			// Keys reach the serial port.
			p.TypeKeys("root\r")
			s.WaitSerial(t, []byte("root\r"), obmdtest.Timeout)

			lat := echoLatency(t, p, s, 20)
			slices.Sort(lat)
			t.Logf("%s: keystroke echo (ssh -> obmd -> BMC -> serial -> BMC -> obmd -> ssh): median %v, max %v over %d keys",
				typ, lat[len(lat)/2].Round(100*time.Microsecond), lat[len(lat)-1].Round(100*time.Microsecond), len(lat))

			// A 64 KiB paste arrives intact (ending at a line start, so the
			// break below is possible for ipmitool too).
			paste := paste(64 << 10)
			before := len(s.Serial())
			start := time.Now()
			var wg sync.WaitGroup
			wg.Add(1)
			go func() { // the pty takes the paste as fast as ssh reads it
				defer wg.Done()
				if _, err := p.Master.Write(paste); err != nil {
					t.Errorf("paste: %v", err)
				}
			}()
			deadline := time.Now().Add(60 * time.Second)
			for len(s.Serial()) < before+len(paste) && time.Now().Before(deadline) {
				time.Sleep(2 * time.Millisecond)
			}
			took := time.Since(start)
			wg.Wait()
			if got := s.Serial()[before:]; !bytes.Equal(got, paste) {
				t.Fatalf("paste: got %d bytes on the serial port (differ at %d), want the %d pasted", len(got), diff(got, paste), len(paste))
			}
			t.Logf("%s: 64 KiB paste through obmd to the serial port in %v (%.0f KiB/s)",
				typ, took.Round(time.Millisecond), 64/took.Seconds())

			// ~B: OpenSSH sends an RFC 4335 break request; the driver sends
			// a SOL break. The Enter before it, which OpenSSH sends just
			// ahead of the request, must reach the BMC first: ipmitool takes
			// its break command only at a line start.
			p.TypeKeys("mid-line")
			s.WaitSerial(t, []byte("mid-line"), obmdtest.Timeout)
			p.TypeKeys("\r~B")
			obmdtest.WaitUntil(t, "break audited", func() bool {
				return slices.Contains(o.ConsoleAudit(label), "console.break ok")
			})
			if typ == "ipmi" {
				// The native driver's break packet (SOL control bit 0x10).
				if got := o.LogLinesWith(`"msg":"sol_tx"`, `"op":16`, label); len(got) == 0 {
					t.Errorf("no SOL break packet in the daemon log")
				}
			}

			// Output still flows after all that, then detach.
			if err := s.WriteSerial([]byte("still-alive\r\n")); err != nil {
				t.Fatal(err)
			}
			p.Expect("still-alive\r\n")
			p.Detach()
		})
	}
}

// echoLatency types n keys and, as a host echoing its input would,
// writes each back to the serial port as soon as it arrives there; it
// returns the time from keystroke to echo on the screen.
func echoLatency(t testing.TB, p *obmdtest.PTY, s *ipmisim.Sim, n int) []time.Duration {
	t.Helper()
	var out []time.Duration
	for i := range n {
		key := byte('a' + i%26)
		before, from := len(s.Serial()), p.Out.Len()
		start := time.Now()
		p.TypeKeys(string([]byte{key}))
		deadline := time.Now().Add(obmdtest.Timeout)
		for len(s.Serial()) <= before {
			if time.Now().After(deadline) {
				t.Fatalf("key %q never reached the serial port", key)
			}
			time.Sleep(200 * time.Microsecond)
		}
		echo := []byte{'[', key, ']'}
		if err := s.WriteSerial(echo); err != nil {
			t.Fatal(err)
		}
		if _, ok := p.Out.Find(from, echo, obmdtest.Timeout); !ok {
			t.Fatalf("echo %q never reached the screen", echo)
		}
		out = append(out, time.Since(start))
	}
	return out
}

// paste is n bytes of text in lines of 79 characters and CR, as a
// pasted file arrives from a terminal. It contains no escape of OpenSSH
// ("~" after a newline), of obmd (Ctrl-E) or of ipmitool ("~").
func paste(n int) []byte {
	const chars = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 .,;:-_=+()[]{}<>/|!@#$%^&*"
	r := rand.New(rand.NewPCG(1, 2))
	out := make([]byte, n)
	for i := range out {
		if i%80 == 79 || i == n-1 {
			out[i] = '\r'
		} else {
			out[i] = chars[r.IntN(len(chars))]
		}
	}
	return out
}

// diff is the first index where a and b differ.
func diff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

// TestConsoleIPMIRestart kills ipmi_sim under two viewers and brings it
// back, per driver: both viewers are told the link was lost, then
// restored, and output and keys flow again without anyone reconnecting.
// With the native driver, keys typed into the dead link arrive too, once
// the BMC is back (ipmitool takes them and loses them with its process).
// (ipmitool notices a dead BMC only through the driver's keepalive, after
// ~10 s of silence.)
func TestConsoleIPMIRestart(t *testing.T) {
	t.Parallel()
	ipmisim.Require(t, "ipmitool")
	o := obmdtest.Start(t)
	for _, typ := range obmdtest.IPMIDrivers {
		t.Run(typ, func(t *testing.T) {
			t.Parallel()
			s := ipmisim.Start(t)
			label := "phoenix-" + typ
			tok := o.AddIPMINode(label, typ, s)
			// The first to attach writes: a's banner before b attaches.
			a := o.GoConsole(t, label, tok, obmdtest.SessionOpts{})
			a.Notice("you are writing; no one else attached")
			b := o.GoConsole(t, label, tok, obmdtest.SessionOpts{PTY: true})
			b.Notice("you are read-only")
			obmdtest.PrintUntilSeen(t, s.WriteSerial, "sync", allSaw([]*obmdtest.GoSession{a, b}))
			s.Kill()
			start := time.Now()
			a.TypeKeys("while-down\r")
			for _, g := range []*obmdtest.GoSession{a, b} {
				g.Notice("[obmd: console link lost, reconnecting]")
			}
			t.Logf("%s: viewers told of the dead BMC after %v", typ, time.Since(start).Round(time.Millisecond))
			if err := s.Restart(); err != nil {
				t.Fatalf("restart ipmi_sim: %v", err)
			}
			for _, g := range []*obmdtest.GoSession{a, b} {
				g.Notice("[obmd: console link restored]")
			}
			marks := []int{a.Out.Len(), b.Out.Len()}
			obmdtest.PrintUntilSeen(t, s.WriteSerial, "sync", func(m string) bool {
				return strings.Contains(a.Out.String()[marks[0]:], m) && strings.Contains(b.Out.String()[marks[1]:], m)
			})
			a.TypeKeys("after-restart\r")
			want := "after-restart\r"
			if typ == "ipmi" {
				want = "while-down\r" + want
			}
			s.WaitSerial(t, []byte(want), obmdtest.Timeout)
			if got := o.LogLinesWith(`"state":"lost"`, label); len(got) == 0 {
				t.Errorf("no link state change to lost in the daemon log")
			}
		})
	}
}

// TestConsoleIPMIStalePayload: a client killed during SOL leaves the
// payload active on the BMC (ipmi_sim holds it ~29 s); obmd deactivates it
// and its console opens anyway, with either driver.
func TestConsoleIPMIStalePayload(t *testing.T) {
	t.Parallel()
	ipmisim.Require(t, "ipmitool")
	o := obmdtest.Start(t)
	for _, typ := range obmdtest.IPMIDrivers {
		t.Run(typ, func(t *testing.T) {
			t.Parallel()
			s := ipmisim.Start(t)
			stalePayload(t, s)
			label := "stale-" + typ
			tok := o.AddIPMINode(label, typ, s)
			g := o.GoConsole(t, label, tok, obmdtest.SessionOpts{})
			obmdtest.PrintUntilSeen(t, s.WriteSerial, "sync", func(m string) bool { return strings.Contains(g.Out.String(), m) })
			if got := o.LogLinesWith(`"state":"deactivating"`, label); len(got) == 0 {
				t.Errorf("console opened without deactivating the stale payload")
			}
			g.TypeKeys("keys-after-recovery\r")
			s.WaitSerial(t, []byte("keys-after-recovery\r"), obmdtest.Timeout)
		})
	}
}

// stalePayload activates SOL on s with ipmitool and kills it with
// SIGKILL, leaving the payload active.
func stalePayload(t *testing.T, s *ipmisim.Sim) {
	t.Helper()
	// ipmitool sol activate needs a pty; the password goes in its
	// environment (-E), never on its command line.
	c := exec.Command("ipmitool", "-I", "lanplus", "-C", "3", "-H", "127.0.0.1", "-p", fmt.Sprint(s.Port),
		"-U", ipmisim.User, "-E", "sol", "activate")
	c.Env = append(os.Environ(), "IPMI_PASSWORD="+ipmisim.Pass)
	f, err := pty.Start(c)
	if err != nil {
		t.Fatalf("start ipmitool: %v", err)
	}
	screen := obmdtest.NewBuffer()
	copied := make(chan struct{})
	go func() { defer close(copied); copyQuiet(screen, f) }() // ends when ipmitool is gone (EIO)
	defer func() {
		c.Process.Kill()
		c.Wait()
		<-copied
		f.Close()
	}()
	screen.Wait(t, "ipmitool", 0, "[SOL Session operational")
	if err := c.Process.Kill(); err != nil { // SIGKILL: no deactivation
		t.Fatal(err)
	}
}

// copyQuiet copies until r fails (a pty's EIO when its child is gone).
func copyQuiet(w *obmdtest.Buffer, r *os.File) {
	buf := make([]byte, 4096)
	for {
		n, err := r.Read(buf)
		w.Write(buf[:n])
		if err != nil {
			return
		}
	}
}

// TestConsoleBreakAfterEnter: a break request right behind the keystrokes
// that end a line (as OpenSSH sends "Enter" then ~B's request) is sent
// after them, so ipmitool, which takes a break only at a line start, never
// refuses it.
func TestConsoleBreakAfterEnter(t *testing.T) {
	t.Parallel()
	ipmisim.Require(t, "ipmitool")
	s := ipmisim.Start(t)
	o := obmdtest.Start(t)
	tok := o.AddIPMINode("brk", "ipmitool", s)
	g := o.GoConsole(t, "brk", tok, obmdtest.SessionOpts{PTY: true})
	obmdtest.PrintUntilSeen(t, s.WriteSerial, "sync", allSaw([]*obmdtest.GoSession{g}))
	const n = 30
	for i := range n {
		g.TypeKeys(fmt.Sprintf("line %d\r", i))
		if _, err := g.Session.SendRequest("break", false, []byte{0, 0, 0x03, 0xe8}); err != nil {
			t.Fatal(err)
		}
	}
	s.WaitSerial(t, []byte(fmt.Sprintf("line %d\r", n-1)), obmdtest.Timeout)
	obmdtest.WaitUntil(t, "every break audited", func() bool {
		k := 0
		for _, a := range o.ConsoleAudit("brk") {
			if strings.HasPrefix(a, "console.break") {
				k++
			}
		}
		return k == n || strings.Contains(g.Stderr.String(), "break not sent")
	})
	if e := g.Stderr.String(); strings.Contains(e, "break not sent") {
		t.Errorf("a break was refused: %q", obmdtest.Tail(e, 300))
	}
}

// TestConsoleIPMIBinarySafe: every byte value passes untouched both ways
// through a real BMC, per driver; ipmitool's own escapes typed at a line
// start ("~." would end its session, "~B" send a break) reach the serial
// port as plain bytes and the link stays up.
func TestConsoleIPMIBinarySafe(t *testing.T) {
	t.Parallel()
	ipmisim.Require(t, "ipmitool")
	o := obmdtest.Start(t)
	all := make([]byte, 256)
	for i := range all {
		all[i] = byte(i)
	}
	for _, typ := range obmdtest.IPMIDrivers {
		t.Run(typ, func(t *testing.T) {
			t.Parallel()
			s := ipmisim.Start(t)
			label := "bin-" + typ
			tok := o.AddIPMINode(label, typ, s)
			g := o.GoConsole(t, label, tok, obmdtest.SessionOpts{})
			obmdtest.PrintUntilSeen(t, s.WriteSerial, "sync", allSaw([]*obmdtest.GoSession{g}))

			from := g.Out.Len()
			want := append(bytes.Clone(all), "<end>"...)
			if err := s.WriteSerial(want); err != nil {
				t.Fatal(err)
			}
			end := g.Out.Wait(t, "console output", from, "<end>")
			if got := g.Out.Bytes()[from:end]; !bytes.Equal(got, want) {
				t.Errorf("output: got %q, want the 256 byte values then <end>", got)
			}

			before := len(s.Serial())
			in := append(bytes.Clone(all), "\r~.\r~B\r~?\n~~<in-end>"...)
			g.TypeKeys(string(in))
			s.WaitSerial(t, []byte("<in-end>"), obmdtest.Timeout)
			if got := s.Serial()[before:]; !bytes.Equal(got, in) {
				t.Errorf("serial side: got %q, want %q", got, in)
			}
			obmdtest.PrintUntilSeen(t, s.WriteSerial, "sync", allSaw([]*obmdtest.GoSession{g})) // the link is still up
			if e := g.Stderr.String(); strings.Contains(e, "link lost") {
				t.Errorf("notices: got %q, want the link never lost", e)
			}
		})
	}
}

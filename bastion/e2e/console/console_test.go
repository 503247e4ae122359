package console

// End-to-end tests of interactive consoles on the built-in simulator ("sim"
// and "mock" types): the bastion-level flow (banner, escapes, notices,
// break, detach, no-PTY consoles, window changes, console-log, the HTTP
// stream) through the real OpenSSH client and x/crypto. Real BMCs are in
// ipmi_test.go, many viewers in viewers_test.go.

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/obmd/obmd/bastion/e2e/obmdtest"

	"github.com/creack/pty"
	gossh "golang.org/x/crypto/ssh"

	"github.com/obmd/obmd/sol"
	"github.com/obmd/obmd/sol/sim"
	"github.com/obmd/obmd/sol/soltest/ipmisim"
)

// TestConsoleSimOpenSSH walks one person's session through the real
// OpenSSH client with a PTY: banner, typing, output, every escape, ~B,
// window change, and detach with exit 0.
func TestConsoleSimOpenSSH(t *testing.T) {
	t.Parallel()
	o := obmdtest.Start(t)
	tok := o.AddSimNode("s1")
	bmc := o.Lab().BMC("s1", sim.ModeNormal)
	p := obmdtest.SSHPTY(t, o.SSHAddr(), "s1", tok, nil)
	p.Expect("[obmd: console of s1; you are writing; no one else attached; Ctrl-E c ? for help]")

	// Keys reach the serial side; the host's answer reaches the screen.
	p.TypeKeys("echo hello-sim\r")
	p.Expect("hello-sim\r\nsim$ ")
	if got := bmc.Typed(); !bytes.Contains(got, []byte("echo hello-sim\r")) {
		t.Errorf("typed: got %q, want it to contain %q", got, "echo hello-sim\r")
	}
	bmc.Inject([]byte("kernel: printed by the host\r\n"))
	p.Expect("kernel: printed by the host\r\n")

	// OpenSSH's ~B (after a newline) is an RFC 4335 break request; each
	// break is confirmed.
	p.TypeKeys("\r~B")
	p.Expect("[obmd: break sent]")
	obmdtest.WaitUntil(t, "break from ~B", func() bool { return bmc.Breaks() == 1 })
	// Ctrl-E c b too.
	p.TypeKeys(obmdtest.EscBreak)
	p.Expect("[obmd: break sent]")
	obmdtest.WaitUntil(t, "break from the escape", func() bool { return bmc.Breaks() == 2 })

	// The help: one escape a line.
	p.TypeKeys(obmdtest.EscHelp)
	p.Expect("[obmd escapes: Ctrl-E c, then]\r\n  .       detach\r\n  f       take over writing\r\n  s       become read-only\r\n" +
		"  b       send a serial break\r\n  r       redraw the screen\r\n  p       play back the scrollback\r\n  Ctrl-E  send Ctrl-E c itself\r\n  ?       this help\r\n")
	p.TypeKeys(obmdtest.EscPlayback)
	p.Expect("kernel: printed by the host\r\n") // the scrollback again
	p.TypeKeys("\x05cz")
	p.Expect("[obmd: unknown escape; Ctrl-E c ? for help]")

	// Read-only: keys stop reaching the node and the user is told why.
	p.TypeKeys(obmdtest.EscReadOnly)
	p.Expect("[obmd: you are read-only]")
	p.TypeKeys("ignored-keys")
	p.Expect("[obmd: read-only: your keys are not sent; Ctrl-E c f takes over writing]")
	p.TypeKeys(obmdtest.EscTakeOver)
	p.Expect("[obmd: you are writing]")

	// A window change is accepted: the session goes on.
	if err := pty.Setsize(p.Master, &pty.Winsize{Rows: 50, Cols: 132}); err != nil {
		t.Fatal(err)
	}
	p.TypeKeys("echo after-resize\r")
	p.Expect("after-resize\r\nsim$ ")
	if bytes.Contains(bmc.Typed(), []byte("ignored-keys")) {
		t.Errorf("keys typed while read-only reached the node: %q", bmc.Typed())
	}
	if bytes.Contains(bmc.Typed(), []byte{0x05}) {
		t.Errorf("escape bytes reached the node: %q", bmc.Typed())
	}

	p.Detach()
	// Both breaks are audited (the second may be counted into a row of
	// its own at the end of the aggregation window).
	obmdtest.WaitUntil(t, "two console.break ok audited", func() bool {
		_, events := o.AuditTotals("s1")
		return events["console.break ok"] == 2
	})
}

// TestConsoleBinarySafe sends every byte value both ways, with and without
// a PTY: console bytes are never rewritten (no "\n" -> "\r\n"), and only an
// escape sequence is taken from the input.
func TestConsoleBinarySafe(t *testing.T) {
	t.Parallel()
	o := obmdtest.Start(t)
	all := make([]byte, 256)
	for i := range all {
		all[i] = byte(i)
	}
	for _, tc := range []struct {
		name string
		pty  bool
	}{{"no pty", false}, {"pty", true}} {
		t.Run(tc.name, func(t *testing.T) {
			label := "bin-" + strings.ReplaceAll(tc.name, " ", "-")
			tok := o.AddSimNode(label)
			bmc := o.Lab().BMC(label, sim.ModeNormal)
			bmc.PowerOff(t.Context(), false) // a powered-off host does not echo
			g := o.GoConsole(t, label, tok, obmdtest.SessionOpts{PTY: tc.pty})
			g.Notice("console of " + label)
			obmdtest.WaitUntil(t, "console open", bmc.ConsoleActive)

			// Output: all 256 values, then a marker.
			bmc.Inject(append(bytes.Clone(all), "<end>"...))
			g.Expect("<end>")
			if got := g.Out.Bytes(); !bytes.Equal(got, append(bytes.Clone(all), "<end>"...)) {
				t.Errorf("output: got %q, want the 256 byte values then <end>", got)
			}

			// Input: all 256 values (0x05 is followed by 0x06, not 'c', so
			// the escape parser releases it), then a split escape prefix
			// that turns out to be data (with a PTY) or is data anyway
			// (without: no escapes), then the detach escape.
			g.TypeKeys(string(all))
			g.TypeKeys("\x05")
			g.TypeKeys("x\x05")
			g.TypeKeys("c")
			g.TypeKeys("z")
			if !tc.pty {
				g.TypeKeys(obmdtest.EscDetach)
			}
			g.TypeKeys("<in-end>")
			want := append(bytes.Clone(all), "\x05x<in-end>"...)
			if !tc.pty {
				want = append(bytes.Clone(all), "\x05x\x05cz"+obmdtest.EscDetach+"<in-end>"...)
			}
			obmdtest.WaitUntil(t, "input on the serial side", func() bool { return bytes.HasSuffix(bmc.Typed(), []byte("<in-end>")) })
			if got := bmc.Typed(); !bytes.Equal(got, want) {
				t.Errorf("serial side: got %q, want %q", got, want)
			}
			if tc.pty {
				g.Notice("unknown escape")
			} else if e := g.Stderr.String(); strings.Contains(e, "escape") && !strings.Contains(e, "no escapes") || strings.Contains(e, "detached") {
				t.Errorf("notices without a PTY: got %q, want no escape handled", e)
			}
		})
	}
}

// TestConsoleNoPTY is a console for scripts: `ssh -T` with stdin and
// stdout as pipes. Console bytes alone go to stdout; the banner and notices
// go to stderr; there are no escapes (the detach escape is data for the
// node), and the console lasts until the client closes it.
func TestConsoleNoPTY(t *testing.T) {
	t.Parallel()
	ipmisim.Require(t, "ssh", "sshpass")
	o := obmdtest.Start(t)
	tok := o.AddSimNode("script")
	bmc := o.Lab().BMC("script", sim.ModeNormal)
	sc := obmdtest.SSHNoPTY(t, o.SSHAddr(), "script", tok)
	sc.Stderr.Wait(t, "stderr", 0, "[obmd: console of script; you are writing; no one else attached; no escapes without a terminal (ssh -t)]")
	obmdtest.WaitUntil(t, "console open", bmc.ConsoleActive)
	fmt.Fprint(sc.Stdin, "echo from-a-script\n")
	sc.Out.Wait(t, "stdout", 0, "from-a-script\r\nsim$ ")
	bmc.Inject([]byte("line\nwith bare LF\n"))
	sc.Out.Wait(t, "stdout", 0, "line\nwith bare LF\n")
	fmt.Fprint(sc.Stdin, obmdtest.EscDetach+"\n")
	obmdtest.WaitUntil(t, "the escape on the serial side", func() bool { return bytes.Contains(bmc.Typed(), []byte(obmdtest.EscDetach+"\n")) })
	bmc.Inject([]byte("still here\n"))
	sc.Out.Wait(t, "stdout", 0, "still here\n")
	if sc.End.Ended() {
		t.Errorf("ssh -T console ended after the detach escape: %v", sc.End.Err)
	}
	if s := sc.Out.String(); strings.Contains(s, "obmd") || strings.Contains(s, "\r\r") {
		t.Errorf("stdout: got %q, want console bytes only", s)
	}
	if s := sc.Stderr.String(); strings.Contains(s, "detached") {
		t.Errorf("stderr: got %q, want no detach", s)
	}
}

// TestConsoleNoPTYEOF: a console without a PTY whose client sent input
// ends when the client ends it: `ssh -T node < script.txt` (the real
// OpenSSH client) sends the script to the node, shows the node's answer
// and exits 0; so does a read-only console given input. A client whose
// input is empty (`ssh -T node < /dev/null`, a reader) keeps its console,
// as does one with --ignore-eof, after a pause longer than the one that
// ends the others; so does a client that never ends its input
// (TestConsoleNoPTY).
func TestConsoleNoPTYEOF(t *testing.T) {
	t.Parallel()
	ipmisim.Require(t, "ssh", "sshpass")
	o := obmdtest.Start(t)
	tok := o.AddSimNode("eof")
	bmc := o.Lab().BMC("eof", sim.ModeNormal)
	script := filepath.Join(t.TempDir(), "script.txt")
	if err := os.WriteFile(script, []byte("echo from-a-script\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ssh := func(cmd ...string) *exec.Cmd {
		args := append([]string{"-e", "ssh", "-T"}, obmdtest.SSHArgs(o.SSHAddr(), "eof", "-o", "PubkeyAuthentication=no")...)
		c := exec.Command("sshpass", append(args, cmd...)...)
		c.Env = append(os.Environ(), "SSHPASS="+tok)
		return c
	}
	run := func(stdin string, cmd ...string) obmdtest.Result {
		t.Helper()
		c := ssh(cmd...)
		f, err := os.Open(stdin)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		var out, errb bytes.Buffer
		c.Stdin, c.Stdout, c.Stderr, c.WaitDelay = f, &out, &errb, obmdtest.ClientWaitDelay
		done := make(chan error, 1)
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		go func() { done <- c.Wait() }() // reaps ssh
		select {
		case err = <-done:
		case <-time.After(obmdtest.Timeout):
			c.Process.Kill()
			<-done
			t.Fatalf("ssh -T eof %s < %s: still running after %v; stderr %q", strings.Join(cmd, " "), stdin, obmdtest.Timeout, errb.String())
		}
		res := obmdtest.Result{Stdout: out.String(), Stderr: errb.String()}
		if ee := (*exec.ExitError)(nil); errors.As(err, &ee) {
			res.Code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return res
	}

	res := run(script)
	if res.Code != 0 || !strings.Contains(res.Stdout, "from-a-script\r\nsim$ ") ||
		!strings.Contains(res.Stderr, "[obmd: console of eof; you are writing;") {
		t.Errorf("ssh -T eof < script.txt: got %v, want exit 0 with the node's answer", res)
	}
	if typed := bmc.Typed(); !bytes.Equal(typed, []byte("echo from-a-script\n")) {
		t.Errorf("serial side: got %q, want the script", typed)
	}
	res = run(script, "console", "--read-only")
	if res.Code != 0 || !strings.Contains(res.Stderr, "this session is read-only: your keys are not sent") {
		t.Errorf("ssh -T eof console --read-only < script.txt: got %v, want exit 0", res)
	}
	if typed := bmc.Typed(); !bytes.Equal(typed, []byte("echo from-a-script\n")) {
		t.Errorf("serial side after the read-only console: got %q, want the script once", typed)
	}

	// These stay: a reader with an empty input, and --ignore-eof.
	for _, tc := range []struct {
		name, stdin string
		cmd         []string
	}{{"empty input", os.DevNull, nil}, {"--ignore-eof", script, []string{"console", "--ignore-eof"}}} {
		t.Run(tc.name, func(t *testing.T) {
			f, err := os.Open(tc.stdin)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			c := ssh(tc.cmd...)
			out, errb, end := obmdtest.NewBuffer(), obmdtest.NewBuffer(), obmdtest.NewEnd()
			c.Stdin, c.Stdout, c.Stderr, c.WaitDelay = f, out, errb, obmdtest.ClientWaitDelay
			if err := c.Start(); err != nil {
				t.Fatal(err)
			}
			go func() { end.Finish(0, c.Wait()) }() // reaps ssh
			t.Cleanup(func() {
				c.Process.Kill()
				<-end.Done
			})
			errb.Wait(t, "stderr", 0, "[obmd: console of eof;")
			obmdtest.PrintUntilSeen(t, obmdtest.Inject(bmc), "first", obmdtest.Shows(out)) // the link is up
			time.Sleep(eofQuietForTests)
			if end.Ended() {
				t.Fatalf("the console ended after the end of its input: %v", end.Err)
			}
			obmdtest.PrintUntilSeen(t, obmdtest.Inject(bmc), "later", obmdtest.Shows(out))
		})
	}
}

// eofQuietForTests is longer than the pause in its output after which a
// console without a PTY whose input ended ends (eofQuiet).
const eofQuietForTests = 1500 * time.Millisecond

// TestConsoleWindowChangeAndTermType: pty-req with a terminal type and
// window-change requests (with a reply wanted) are accepted.
func TestConsoleWindowChangeAndTermType(t *testing.T) {
	t.Parallel()
	o := obmdtest.Start(t)
	tok := o.AddSimNode("win")
	g := o.GoConsole(t, "win", tok, obmdtest.SessionOpts{PTY: true})
	g.Notice("console of win")
	for _, size := range [][2]uint32{{132, 50}, {80, 24}, {1, 1}} {
		payload := gossh.Marshal(struct{ Cols, Rows, Width, Height uint32 }{size[0], size[1], 0, 0})
		ok, err := g.Session.SendRequest("window-change", true, payload)
		if err != nil || !ok {
			t.Errorf("window-change %v: got ok %v err %v, want accepted", size, ok, err)
		}
	}
	g.TypeKeys("echo still-here\r")
	g.Expect("still-here")
}

// TestConsoleLog: `console-log` prints the scrollback of the node's console
// (as the node sent it), `--lines N` its last N lines.
func TestConsoleLog(t *testing.T) {
	t.Parallel()
	o := obmdtest.Start(t)
	tok := o.AddSimNode("logged")
	bmc := o.Lab().BMC("logged", sim.ModeNormal)
	g := o.GoConsole(t, "logged", tok, obmdtest.SessionOpts{})
	obmdtest.WaitUntil(t, "console open", bmc.ConsoleActive)
	bmc.Inject([]byte("first\r\nsecond\r\nthird\r\n"))
	g.Expect("third\r\n")
	for _, tc := range []struct{ cmd, want string }{
		{"console-log", "first\r\nsecond\r\nthird\r\n"},
		{"console-log --lines 2", "second\r\nthird\r\n"},
		{"console-log --lines=1", "third\r\n"},
	} {
		res, err := o.ExecGo("logged", tok, tc.cmd)
		if err != nil || res.Code != 0 || res.Stdout != tc.want {
			t.Errorf("%s: got %v (err %v), want exit 0 and %q", tc.cmd, res, err, tc.want)
		}
	}
}

// TestConsoleHTTPStream: obmd's GET /node/{label}/console is a read-only
// viewer of the same console, live output only: no banner, no scrollback,
// no notices, and its keys (none) never make it the writer.
func TestConsoleHTTPStream(t *testing.T) {
	t.Parallel()
	o := obmdtest.Start(t)
	tok := o.AddSimNode("web")
	bmc := o.Lab().BMC("web", sim.ModeNormal)
	g := o.GoConsole(t, "web", tok, obmdtest.SessionOpts{})
	obmdtest.WaitUntil(t, "console open", bmc.ConsoleActive)
	bmc.Inject([]byte("before-the-stream\r\n"))
	g.Expect("before-the-stream")

	web := o.ConsoleHTTP(t, "web", tok)
	got := web.Out
	// The stream attaches after its headers: print until it shows.
	for i := 0; ; i++ {
		bmc.Inject(fmt.Appendf(nil, "live-%d\r\n", i))
		if _, ok := got.Find(0, []byte("live-"), 50*time.Millisecond); ok {
			break
		}
		if i > 200 {
			t.Fatalf("the HTTP stream never showed live output; got %q", got.String())
		}
	}
	bmc.Inject([]byte("after-the-stream\r\n"))
	got.Wait(t, "HTTP stream", 0, "after-the-stream\r\n")
	g.TypeKeys("echo typed-by-ssh\r") // the SSH viewer still writes
	got.Wait(t, "HTTP stream", 0, "typed-by-ssh\r\nsim$ ")
	web.Stop()
	if s := got.String(); strings.Contains(s, "before-the-stream") || strings.Contains(s, "obmd") {
		t.Errorf("HTTP stream: got %q, want live output only", s)
	}
}

// TestConsoleMockHTTPCounter: the mock type's HTTP console streams
// "0\n1\n2\n..." from 0 for every new stream, as obmd's mock did (HIL's
// tests read the first 50 lines and expect 0..49), also right after a
// previous stream ended.
func TestConsoleMockHTTPCounter(t *testing.T) {
	t.Parallel()
	o := obmdtest.Start(t)
	o.AddNode("node-99", "mock", sol.Info{Addr: "10.0.0.4"})
	tok := o.Rotate("node-99")
	for stream := 0; stream < 3; stream++ {
		web := o.ConsoleHTTP(t, "node-99", tok)
		web.CountsFrom0(t, fmt.Sprintf("stream %d", stream), 5)
		web.Stop()
	}
}

// TestConsoleMockDisplaced: a mock console has one reader at a time, as
// obmd's did; an SSH viewer displaced by a new HTTP stream is told why.
func TestConsoleMockDisplaced(t *testing.T) {
	t.Parallel()
	o := obmdtest.Start(t)
	o.AddNode("node-98", "mock", sol.Info{Addr: "10.0.0.4"})
	tok := o.Rotate("node-98")
	_, s := o.NewSession(t, "node-98", tok)
	out := obmdtest.NewBuffer()
	s.Stdout, s.Stderr = out, out
	if err := s.Shell(); err != nil {
		t.Fatal(err)
	}
	out.Wait(t, "the SSH viewer", 0, "\n2\n")
	o.ConsoleHTTP(t, "node-98", tok).CountsFrom0(t, "new HTTP stream", 1)
	if err := s.Wait(); err == nil {
		t.Errorf("displaced SSH viewer: exit 0, want a failure")
	}
	if !strings.Contains(out.String(), "another reader opened this console") {
		t.Errorf("displaced SSH viewer: got %q, want to be told why", obmdtest.Tail(out.String(), 200))
	}
}

package automation

// End-to-end tests of the automation commands (issue 17): wait-for, send,
// expect and power-cycle --wait-for over the real OpenSSH client, against
// the simulator and ipmi_sim: success, timeout (exit 5), cut by rotation,
// the write role, the audit.

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/obmd/obmd/bastion/e2e/obmdtest"

	gossh "golang.org/x/crypto/ssh"

	"github.com/obmd/obmd/bastion/daemon"
	"github.com/obmd/obmd/sol"
	"github.com/obmd/obmd/sol/sim"
	"github.com/obmd/obmd/sol/soltest/ipmisim"
)

// background runs an OpenSSH command in the background; the channel gets
// its result. It checks for the client first, in the test's goroutine,
// where a skip or a failure may end the test.
func background(o *obmdtest.Daemon, label, tok string, cmd ...string) <-chan obmdtest.Result {
	ipmisim.Require(o.T, "ssh", "sshpass")
	done := make(chan obmdtest.Result, 1)
	go func() { done <- o.OpenSSHIn(label, tok, nil, nil, cmd...) }() // ends with the command (bounded by runClient)
	return done
}

// startSim starts a daemon with one simulator node, label; it returns the
// daemon, the node's token and its BMC.
func startSim(t *testing.T, label string) (*obmdtest.Daemon, string, *sim.BMC) {
	t.Helper()
	o := obmdtest.Start(t)
	tok := o.AddSimNode(label)
	return o, tok, o.Lab().BMC(label, sim.ModeNormal)
}

func simInject(b *sim.BMC) func([]byte) error {
	return func(p []byte) error { b.Inject(p); return nil }
}

// auditEvents returns label's audit events as "action result detail".
func auditEvents(o *obmdtest.Daemon, label string) []string {
	o.T.Helper()
	var out struct {
		Events []struct{ Action, Result, Detail string }
	}
	data := o.MustAPI(200, "GET", "/v1/audit?node="+label+"&limit=1000", nil)
	if err := json.Unmarshal(data, &out); err != nil {
		o.T.Fatalf("decode audit: %v", err)
	}
	var acts []string
	for _, e := range out.Events {
		acts = append(acts, e.Action+" "+e.Result+" "+e.Detail)
	}
	return acts
}

func has(acts []string, prefix string) bool {
	for _, a := range acts {
		if strings.HasPrefix(a, prefix) {
			return true
		}
	}
	return false
}

// TestAutomateWaitForSim: wait-for over OpenSSH on the simulator prints the
// matching line (and, with --json, the match, its offset and time), exits
// 5 at its timeout, searches the history with --since, never writes to the
// node (even with input on its stdin), and is audited.
func TestAutomateWaitForSim(t *testing.T) {
	t.Parallel()
	o, tok, bmc := startSim(t, "aw")

	done := background(o, "aw", tok, "wait-for", "'ready-[0-9]+'", "--timeout", "30s")
	res := obmdtest.PrintUntil(t, simInject(bmc), "ready", done)
	if res.Code != 0 || !strings.HasPrefix(res.Stdout, "ready-") || strings.Count(res.Stdout, "\n") != 1 {
		t.Fatalf("wait-for: got %+v, want exit 0 and one line ready-N", res)
	}
	seen := strings.TrimSuffix(res.Stdout, "\n") // reached obmd (earlier lines may have come before the link)

	done = background(o, "aw", tok, "wait-for", "'json-[0-9]+'", "--json")
	res = obmdtest.PrintUntil(t, simInject(bmc), "json", done)
	var js struct {
		OK     bool
		Match  string
		Line   string
		Offset *int64
		Time   time.Time
	}
	if err := json.Unmarshal([]byte(res.Stdout), &js); err != nil || res.Code != 0 || !js.OK ||
		!strings.HasPrefix(js.Match, "json-") || js.Offset == nil || time.Since(js.Time) > time.Minute {
		t.Fatalf("wait-for --json: got %+v (%v), decoded %+v", res, err, js)
	}

	// Nothing matches: exit 5 at the timeout; stdin is never typed.
	res = o.OpenSSHIn("aw", tok, strings.NewReader("injected-by-a-waiter\r"), nil, "wait-for", "never-printed", "--timeout", "1s")
	if res.Code != 5 || !strings.Contains(res.Stderr, "no match within 1s") {
		t.Errorf("wait-for timeout: got %+v, want exit 5 and the reason", res)
	}
	if bytes.Contains(bmc.Typed(), []byte("injected")) {
		t.Errorf("wait-for wrote its stdin to the node: %q", bmc.Typed())
	}
	// Text already printed: not seen by default, found with --since.
	if res := o.OpenSSH("aw", tok, nil, "wait-for", "'"+seen+`\r'`, "--timeout", "1s"); res.Code != 5 {
		t.Errorf("wait-for of old text without --since: got %+v, want 5", res)
	}
	for _, since := range [][]string{{"--since", "10m"}, {"--tenancy"}} {
		args := append([]string{"wait-for", "'" + seen + `\r'`, "--timeout", "5s"}, since...)
		if res := o.OpenSSH("aw", tok, nil, args...); res.Code != 0 || res.Stdout != seen+"\n" {
			t.Errorf("%v: got %+v, want the old line", args, res)
		}
	}
	// Bad patterns are usage errors.
	for _, pat := range []string{"'('", "'" + strings.Repeat("a", 1100) + "'", "'a{5000}'"} {
		if res := o.OpenSSH("aw", tok, nil, "wait-for", pat); res.Code != 2 {
			t.Errorf("wait-for %.20s: got %+v, want exit 2", pat, res)
		}
	}
	acts := auditEvents(o, "aw")
	if !has(acts, "console.wait ok matched after") || !has(acts, "console.wait timeout timed out after") {
		t.Errorf("audit: got %q, want console.wait ok and timeout", acts)
	}
}

// TestAutomateSendSim: send reaches the node byte-exact (TEXT escapes,
// --hex, --stdin), is refused with exit 4 while a console writes, and
// with --force writes and hands the role back; the audit has the byte
// count, never the bytes. A login refused because the database was
// unavailable is made again (judgedSend).
func TestAutomateSendSim(t *testing.T) {
	t.Parallel()
	o, tok, bmc := startSim(t, "as")

	if res := judgedSend(o, "as", tok, nil, "send", `'echo sent-one\r'`); res.Code != 0 || res.Stdout != "as: sent 14 bytes\n" {
		t.Fatalf("send: got %+v", res)
	}
	obmdtest.WaitUntil(t, "send's bytes on the node", func() bool { return bytes.Contains(bmc.Typed(), []byte("echo sent-one\r")) })
	if res := judgedSend(o, "as", tok, nil, "send", "--hex", "00ff0d"); res.Code != 0 {
		t.Fatalf("send --hex: got %+v", res)
	}
	obmdtest.WaitUntil(t, "send --hex's bytes", func() bool { return bytes.Contains(bmc.Typed(), []byte{0, 0xff, '\r'}) })
	raw := []byte("stdin\x01\x7f\n\r\xfe")
	if res := judgedSend(o, "as", tok, raw, "send", "--stdin", "--json"); res.Code != 0 ||
		!strings.Contains(res.Stdout, `"bytes":10`) {
		t.Fatalf("send --stdin: got %+v", res)
	}
	obmdtest.WaitUntil(t, "send --stdin's bytes", func() bool { return bytes.Contains(bmc.Typed(), raw) })

	// A console writes: send is refused, --force writes and hands back.
	p := obmdtest.SSHPTY(t, o.SSHAddr(), "as", tok, nil)
	p.Expect("you are writing")
	if res := judgedSend(o, "as", tok, nil, "send", "refused"); res.Code != 4 || !strings.Contains(res.Stderr, "another session is writing") {
		t.Errorf("send while a console writes: got %+v, want exit 4", res)
	}
	if bytes.Contains(bmc.Typed(), []byte("refused")) {
		t.Errorf("a refused send reached the node")
	}
	if res := judgedSend(o, "as", tok, nil, "send", "--force", `'echo forced\r'`); res.Code != 0 {
		t.Errorf("send --force: got %+v", res)
	}
	p.Expect("you are writing again")
	p.TypeKeys("echo still-mine\r")
	p.Expect("still-mine\r\nsim$ ")
	obmdtest.WaitUntil(t, "forced bytes", func() bool { return bytes.Contains(bmc.Typed(), []byte("echo forced\r")) })
	p.Detach()

	acts := auditEvents(o, "as")
	for _, want := range []string{"console.send ok 14 bytes", "console.send busy 7 bytes", "console.send ok 12 bytes (forced)"} {
		if !has(acts, want) {
			t.Errorf("audit: no %q in %q", want, acts)
		}
	}
	if strings.Contains(strings.Join(acts, "\n"), "sent-one") {
		t.Errorf("audit holds the bytes sent: %q", acts)
	}
}

// judgedSend runs an ssh command on label with stdin (nil: none), again while
// obmd refused its login because the database was unavailable (sshpass
// exits 5, as for a wrong token): on a loaded machine a write held past
// access.WriteStall makes the database count as stuck for a moment, and
// logins fail closed then. The tests that use it need each command
// judged, not its login.
func judgedSend(o *obmdtest.Daemon, label, tok string, stdin []byte, cmd ...string) obmdtest.Result {
	o.T.Helper()
	var res obmdtest.Result
	o.JudgedLogin("127.0.0.1", label, func() error {
		var in io.Reader
		if stdin != nil {
			in = bytes.NewReader(stdin)
		}
		res = o.OpenSSHIn(label, tok, in, nil, cmd...)
		return fmt.Errorf("exit %d, stderr %q", res.Code, res.Stderr)
	})
	return res
}

// TestAutomateWaitForSinceAttach: wait-for --since attach finds text the
// node printed before the command, while a console watched and after it
// left (the link closed since): what an attach replays; without --since
// the same text is not seen (exit 5); a line that comes after the replay
// is found too, and the text of an earlier tenancy never is.
func TestAutomateWaitForSinceAttach(t *testing.T) {
	t.Parallel()
	o, tok, bmc := startSim(t, "at")
	p := obmdtest.SSHPTY(t, o.SSHAddr(), "at", tok, nil)
	p.Expect("you are writing")
	seen := obmdtest.PrintUntilSeen(t, simInject(bmc), "before", obmdtest.Shows(p.Out))
	p.Detach()
	obmdtest.WaitUntil(t, "the link closed", func() bool { return !bmc.ConsoleActive() })

	res := o.OpenSSH("at", tok, nil, "wait-for", "'"+seen+"'", "--since", "attach", "--timeout", "5s")
	if res.Code != 0 || res.Stdout != seen+"\n" {
		t.Errorf("wait-for --since attach: got %+v, want exit 0 and %s", res, seen)
	}
	if res := o.OpenSSH("at", tok, nil, "wait-for", "'"+seen+"'", "--timeout", "1s"); res.Code != 5 {
		t.Errorf("wait-for without --since: got %+v, want 5", res)
	}
	done := background(o, "at", tok, "wait-for", "'after-[0-9]+'", "--since", "attach", "--timeout", "30s")
	if res := obmdtest.PrintUntil(t, simInject(bmc), "after", done); res.Code != 0 || !strings.HasPrefix(res.Stdout, "after-") {
		t.Errorf("wait-for --since attach of live text: got %+v", res)
	}
	tok = o.Rotate("at")
	if res := o.OpenSSH("at", tok, nil, "wait-for", "'"+seen+"'", "--since", "attach", "--timeout", "1s"); res.Code != 5 {
		t.Errorf("wait-for --since attach in the next tenancy: got %+v, want 5", res)
	}
}

// TestAutomateSendLinkDown: a send whose bytes the console link does not
// take (the BMC stops answering: the link cannot open) fails with exit 1
// and says so, rather than exiting 0 with its bytes dropped; the bytes are
// not typed later, when the link is back, and a send then succeeds.
func TestAutomateSendLinkDown(t *testing.T) {
	t.Parallel()
	o := obmdtest.Start(t, func(c *daemon.Config) {
		c.Console.OpenTimeout = 500 * time.Millisecond
		c.Console.Backoff = sol.Backoff{Min: 10 * time.Millisecond, Max: 50 * time.Millisecond} // back at once
		c.Commands.Timeout = time.Second
	})
	tok := o.AddSimNode("al")
	bmc := o.Lab().BMC("al", sim.ModeNormal)
	bmc.SetFail(errors.New("the BMC stopped answering"))
	res := o.OpenSSH("al", tok, nil, "send", `'lost-bytes\r'`)
	if res.Code != 1 || !strings.Contains(res.Stderr, "the console link did not take the input") {
		t.Errorf("send into a link that cannot open: got %+v, want exit 1 and the reason", res)
	}
	bmc.SetFail(nil)
	if res := o.OpenSSH("al", tok, nil, "send", `'sent-bytes\r'`); res.Code != 0 {
		t.Fatalf("send once the BMC answers: got %+v", res)
	}
	obmdtest.WaitUntil(t, "the second send typed", func() bool { return bytes.Contains(bmc.Typed(), []byte("sent-bytes\r")) })
	if bytes.Contains(bmc.Typed(), []byte("lost-bytes")) {
		t.Errorf("the send reported failed was typed later: %q", bmc.Typed())
	}
	if acts := auditEvents(o, "al"); !has(acts, "console.send error 11 bytes: the console link did not take the input") {
		t.Errorf("audit: got %q, want the failed send", acts)
	}
}

// TestAutomatePowerCycleWaitSim: power-cycle --wait-for 'login:' returns 0
// after the simulator's boot text, 5 when it never comes.
func TestAutomatePowerCycleWaitSim(t *testing.T) {
	t.Parallel()
	o, tok, _ := startSim(t, "ap")
	res := o.OpenSSH("ap", tok, nil, "power-cycle", "--wait-for", "'login:'", "--timeout", "30s")
	if res.Code != 0 || res.Stdout != "ap: power cycled\nsim login: \n" {
		t.Errorf("power-cycle --wait-for: got %+v", res)
	}
	res = o.OpenSSH("ap", tok, nil, "power-on", "--wait-for", "never-printed", "--timeout", "1s", "--json")
	if res.Code != 5 || !strings.Contains(res.Stdout, `"ok":false`) {
		t.Errorf("power-on --wait-for that never comes: got %+v, want 5", res)
	}
}

// TestAutomateExpectSim: an expect script over ssh -T ... expect --stdin
// runs its steps in order; the first failing step stops it, named by line.
func TestAutomateExpectSim(t *testing.T) {
	t.Parallel()
	o, tok, bmc := startSim(t, "ae")
	script := "# boot and log in\nsend echo marker-a\\r\nwait 'marker-a\\r\\n' 10s\nsleep 10ms\nsend echo marker-b\\r\nwait marker-b\n"
	res := o.OpenSSHIn("ae", tok, strings.NewReader(script), []string{"-T"}, "expect", "--stdin")
	if res.Code != 0 || res.Stdout != "ae: expect: 5 steps done\n" {
		t.Fatalf("expect: got %+v", res)
	}
	if !bytes.Contains(bmc.Typed(), []byte("echo marker-a\recho marker-b\r")) {
		t.Errorf("typed: %q", bmc.Typed())
	}
	res = o.OpenSSHIn("ae", tok, strings.NewReader("send x\\r\n\nwait never-printed 1s\nsend not-sent\n"), []string{"-T"}, "expect", "--stdin")
	if res.Code != 5 || !strings.Contains(res.Stderr, "line 3") {
		t.Errorf("failing expect: got %+v, want 5 naming line 3", res)
	}
	if bytes.Contains(bmc.Typed(), []byte("not-sent")) {
		t.Errorf("a step after the failing one ran")
	}
	// `^` is a line start: the echoed command (mid-line) does not match,
	// its output's line does, though it began in an earlier chunk.
	res = o.OpenSSHIn("ae", tok, strings.NewReader("send echo anchor-x\\r\nwait '^anchor-x' 10s\n"), []string{"-T"}, "expect", "--stdin", "--json")
	if res.Code != 0 || !strings.Contains(res.Stdout, `"line":"anchor-x"`) {
		t.Errorf("expect with ^: got %+v, want the output's line", res)
	}
	// An inline script: `;` between steps, `\;` a literal one.
	res = o.OpenSSH("ae", tok, nil, "expect", `'send echo semi\;colon\r;wait ^semi\;colon 10s'`, "--json")
	if res.Code != 0 || !strings.Contains(res.Stdout, `"line":"semi;colon"`) || !bytes.Contains(bmc.Typed(), []byte("echo semi;colon\r")) {
		t.Errorf("inline expect with \\;: got %+v, typed %q", res, bmc.Typed())
	}
	if res := o.OpenSSH("ae", tok, nil, "expect", "'send a;bogus step'"); res.Code != 2 || !strings.Contains(res.Stderr, "line 2") {
		t.Errorf("bad script: got %+v, want 2 naming line 2", res)
	}
}

// TestAutomateIPMI: against ipmi_sim (a host writing boot text on the
// serial side): wait-for sees it, power-cycle --wait-for sees the login
// prompt after the power operation, an expect script gets the host's
// answer (and a wait that never matches is exit 5), send reaches the
// serial side byte-exact, and a rotation cuts a waiting wait-for (exit 3).
func TestAutomateIPMI(t *testing.T) {
	t.Parallel()
	ipmisim.Require(t, "ipmitool", "ssh", "sshpass")
	o := obmdtest.Start(t)
	s := ipmisim.Start(t)
	tok := o.AddIPMINode("ai", "ipmitool", s)

	done := background(o, "ai", tok, "wait-for", "'boot-[0-9]+ done'", "--timeout", "40s")
	var n atomic.Int32
	res := obmdtest.PrintUntil(t, func(p []byte) error {
		return s.WriteSerial(fmt.Appendf(nil, "boot-%d done\r\n", n.Add(1)))
	}, "line", done)
	if res.Code != 0 || !strings.Contains(res.Stdout, " done") {
		t.Fatalf("wait-for on ipmi_sim: got %+v", res)
	}

	// power-cycle --wait-for: the host prints its login prompt after it.
	done = background(o, "ai", tok, "power-cycle", "--wait-for", "'host login:'", "--timeout", "40s")
	res = obmdtest.PrintUntil(t, func(p []byte) error { return s.WriteSerial([]byte("host login: \r\n")) }, "login", done)
	if res.Code != 0 || res.Stdout != "ai: power cycled\nhost login: \n" {
		t.Errorf("power-cycle --wait-for on ipmi_sim: got %+v", res)
	}

	// expect: the host answers what the script sends; then a wait that
	// never matches is exit 5, naming its line.
	s.ResetSerial()
	answered := make(chan struct{})
	go func() { // ends once it answered, or at the test's end (WaitSerial fails it)
		defer close(answered)
		s.WaitSerial(t, []byte("ping\r"), obmdtest.Timeout)
		_ = s.WriteSerial([]byte("pong from the host\r\n"))
	}()
	res = o.OpenSSHIn("ai", tok, strings.NewReader("send ping\\r\nwait 'pong from' 30s\n"), []string{"-T"}, "expect", "--stdin", "--json")
	<-answered
	if res.Code != 0 || !strings.Contains(res.Stdout, `"steps":2`) || !strings.Contains(res.Stdout, `"line":"pong from the host"`) {
		t.Errorf("expect on ipmi_sim: got %+v", res)
	}
	res = o.OpenSSH("ai", tok, nil, "expect", "'wait never-printed 1s'")
	if res.Code != 5 || !strings.Contains(res.Stderr, "line 1 (wait)") {
		t.Errorf("expect timeout on ipmi_sim: got %+v", res)
	}

	// Byte-exact, ending mid-line: the link closes (linger) right after,
	// and ipmitool, which cannot be told to leave mid-line, is killed only
	// once it has had time to send what it was given. ipmi_sim takes a SOL
	// packet numbered as the last one it acknowledged for a retransmission
	// and drops its data, whatever session sent either (it never forgets
	// that number), and each ipmitool numbers its packets from 1: the
	// send's, first on a new link, would be lost after the ping's, first
	// on the link before. A new ipmi_sim, once that link has closed,
	// remembers nothing.
	obmdtest.WaitUntil(t, "the link closed", func() bool { return linkStates(o, "ai", "open") == linkStates(o, "ai", "closed") })
	s.Kill()
	if err := s.Restart(); err != nil {
		t.Fatalf("restart ipmi_sim: %v", err)
	}
	s.ResetSerial()
	if res := o.OpenSSH("ai", tok, nil, "send", "--hex", "6c730d00ff"); res.Code != 0 {
		t.Fatalf("send on ipmi_sim: got %+v", res)
	}
	s.WaitSerial(t, []byte("ls\r\x00\xff"), obmdtest.Timeout)

	done = background(o, "ai", tok, "wait-for", "never-printed", "--timeout", "60s")
	obmdtest.WaitUntil(t, "the waiting session", func() bool {
		r, err := o.ExecGo("ai", tok, "sessions")
		return err == nil && strings.Count(r.Stdout, "exec") >= 2
	})
	o.Rotate("ai")
	select {
	case res := <-done:
		if res.Code != 3 {
			t.Errorf("wait-for cut by rotation: got %+v, want exit 3", res)
		}
	case <-time.After(obmdtest.Timeout):
		t.Fatal("wait-for not cut by the rotation")
	}
}

// TestAutomateHostileGo, over x/crypto/ssh on the simulator: a client that
// disconnects mid-wait leaves no session behind; binary output is matched
// and printed escaped; a send reading stdin, an expect script and
// power-cycle --wait-for that wait are cut by a rotation (exit 3).
func TestAutomateHostileGo(t *testing.T) {
	t.Parallel()
	o, tok, bmc := startSim(t, "ah")
	execs := func() int {
		r, err := o.ExecGo("ah", tok, "sessions")
		if err != nil {
			return -1
		}
		return strings.Count(r.Stdout, " exec ") - 1 // not this one
	}

	c, s := o.NewSession(t, "ah", tok)
	if err := s.Start("wait-for never-printed --timeout 10m"); err != nil {
		t.Fatal(err)
	}
	obmdtest.WaitUntil(t, "the waiting session", func() bool { return execs() == 1 })
	c.Close() // mid-wait
	obmdtest.WaitUntil(t, "the session gone after the disconnect", func() bool { return execs() == 0 })

	// Bytes that are not UTF-8 match as U+FFFD.
	done := make(chan obmdtest.Result, 1)
	go func() { // ends with the command
		r, _ := o.ExecGo("ah", tok, `wait-for '\x00\x{FFFD}bin' --json --timeout 20s`)
		done <- r
	}()
	res := obmdtest.PrintUntil(t, func([]byte) error { bmc.Inject([]byte("junk\x1b[31m\x00\xffbin\r\n")); return nil }, "bin", done)
	if res.Code != 0 || !strings.Contains(res.Stdout, `"line":"junk\u001b[31m\u0000\ufffdbin"`) {
		t.Errorf("binary wait-for: got %+v", res)
	}

	// send --stdin whose stdin never ends: cut by the rotation too.
	c2, s2 := o.NewSession(t, "ah", tok)
	defer c2.Close()
	if _, err := s2.StdinPipe(); err != nil { // held open
		t.Fatal(err)
	}
	if err := s2.Start("send --stdin"); err != nil {
		t.Fatal(err)
	}
	obmdtest.WaitUntil(t, "the send reading stdin", func() bool { return execs() == 1 })
	tok = o.Rotate("ah")
	var ee *gossh.ExitError
	if err := s2.Wait(); !errors.As(err, &ee) || ee.ExitStatus() != 3 {
		t.Errorf("send --stdin cut by rotation: got %v, want exit 3", err)
	}

	for _, cmd := range []string{"expect 'send a\\r;wait never-printed 10m'", "power-cycle --wait-for never-printed --timeout 10m"} {
		done := make(chan obmdtest.Result, 1)
		go func() { // ends with the command (cut)
			r, _ := o.ExecGo("ah", tok, cmd)
			done <- r
		}()
		obmdtest.WaitUntil(t, "the waiting "+cmd, func() bool { return execs() == 1 })
		tok = o.Rotate("ah")
		select {
		case res := <-done:
			if res.Code != 3 {
				t.Errorf("%s cut by rotation: got %+v, want exit 3", cmd, res)
			}
		case <-time.After(obmdtest.Timeout):
			t.Fatalf("%s not cut", cmd)
		}
	}
}

// linkStates counts the times label's console link reached state (its log).
func linkStates(o *obmdtest.Daemon, label, state string) int {
	return strings.Count(o.Logs.String(), `"msg":"console link state","node":"`+label+`","part":"sol","state":"`+state+`"`)
}

package daemon_test

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

	gossh "golang.org/x/crypto/ssh"

	"github.com/obmd/obmd/bastion/daemon"
	"github.com/obmd/obmd/sol"
	"github.com/obmd/obmd/sol/sim"
	"github.com/obmd/obmd/sol/soltest/ipmisim"
)

// auBackground runs an OpenSSH command in the background; the channel gets
// its result.
func (o *obmd) auBackground(label, tok string, cmd ...string) <-chan execResult {
	done := make(chan execResult, 1)
	go func() { done <- o.opensshIn(label, tok, nil, nil, cmd...) }() // ends with the command (bounded by runClient)
	return done
}

// auPrintUntil prints numbered lines with print until done delivers.
func auPrintUntil(t *testing.T, print func([]byte) error, prefix string, done <-chan execResult) execResult {
	t.Helper()
	deadline := time.Now().Add(e2eWait)
	for i := 0; ; i++ {
		if err := print(fmt.Appendf(nil, "%s-%d\r\n", prefix, i)); err != nil {
			t.Fatal(err)
		}
		select {
		case res := <-done:
			return res
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: the command did not end within %v", prefix, e2eWait)
		}
	}
}

// auSim starts a daemon with one simulator node, label; it returns the
// daemon, the node's token and its BMC.
func auSim(t *testing.T, label string) (*obmd, string, *sim.BMC) {
	t.Helper()
	o := startObmd(t)
	tok := o.addSimNode(label)
	return o, tok, o.Lab().BMC(label, sim.ModeNormal)
}

func simInject(b *sim.BMC) func([]byte) error {
	return func(p []byte) error { b.Inject(p); return nil }
}

// auAudit returns label's audit events as "action result detail".
func (o *obmd) auAudit(label string) []string {
	o.t.Helper()
	var out struct {
		Events []struct{ Action, Result, Detail string }
	}
	data := o.mustAPI(200, "GET", "/v1/audit?node="+label+"&limit=1000", nil)
	if err := json.Unmarshal(data, &out); err != nil {
		o.t.Fatalf("decode audit: %v", err)
	}
	var acts []string
	for _, e := range out.Events {
		acts = append(acts, e.Action+" "+e.Result+" "+e.Detail)
	}
	return acts
}

func auHas(acts []string, prefix string) bool {
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
	o, tok, bmc := auSim(t, "aw")

	done := o.auBackground("aw", tok, "wait-for", "'ready-[0-9]+'", "--timeout", "30s")
	res := auPrintUntil(t, simInject(bmc), "ready", done)
	if res.Code != 0 || !strings.HasPrefix(res.Stdout, "ready-") || strings.Count(res.Stdout, "\n") != 1 {
		t.Fatalf("wait-for: got %+v, want exit 0 and one line ready-N", res)
	}
	seen := strings.TrimSuffix(res.Stdout, "\n") // reached obmd (earlier lines may have come before the link)

	done = o.auBackground("aw", tok, "wait-for", "'json-[0-9]+'", "--json")
	res = auPrintUntil(t, simInject(bmc), "json", done)
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
	res = o.opensshIn("aw", tok, strings.NewReader("injected-by-a-waiter\r"), nil, "wait-for", "never-printed", "--timeout", "1s")
	if res.Code != 5 || !strings.Contains(res.Stderr, "no match within 1s") {
		t.Errorf("wait-for timeout: got %+v, want exit 5 and the reason", res)
	}
	if bytes.Contains(bmc.Typed(), []byte("injected")) {
		t.Errorf("wait-for wrote its stdin to the node: %q", bmc.Typed())
	}
	// Text already printed: not seen by default, found with --since.
	if res := o.openssh("aw", tok, nil, "wait-for", "'"+seen+`\r'`, "--timeout", "1s"); res.Code != 5 {
		t.Errorf("wait-for of old text without --since: got %+v, want 5", res)
	}
	for _, since := range [][]string{{"--since", "10m"}, {"--tenancy"}} {
		args := append([]string{"wait-for", "'" + seen + `\r'`, "--timeout", "5s"}, since...)
		if res := o.openssh("aw", tok, nil, args...); res.Code != 0 || res.Stdout != seen+"\n" {
			t.Errorf("%v: got %+v, want the old line", args, res)
		}
	}
	// Bad patterns are usage errors.
	for _, pat := range []string{"'('", "'" + strings.Repeat("a", 1100) + "'", "'a{5000}'"} {
		if res := o.openssh("aw", tok, nil, "wait-for", pat); res.Code != 2 {
			t.Errorf("wait-for %.20s: got %+v, want exit 2", pat, res)
		}
	}
	acts := o.auAudit("aw")
	if !auHas(acts, "console.wait ok matched after") || !auHas(acts, "console.wait timeout timed out after") {
		t.Errorf("audit: got %q, want console.wait ok and timeout", acts)
	}
}

// TestAutomateSendSim: send reaches the node byte-exact (TEXT escapes,
// --hex, --stdin), is refused with exit 4 while a console writes, and
// with --force writes and hands the role back; the audit has the byte
// count, never the bytes. A login refused because the database was
// unavailable is made again (auSend).
func TestAutomateSendSim(t *testing.T) {
	t.Parallel()
	o, tok, bmc := auSim(t, "as")

	if res := o.auSend("as", tok, nil, "send", `'echo sent-one\r'`); res.Code != 0 || res.Stdout != "as: sent 14 bytes\n" {
		t.Fatalf("send: got %+v", res)
	}
	waitUntil(t, "send's bytes on the node", func() bool { return bytes.Contains(bmc.Typed(), []byte("echo sent-one\r")) })
	if res := o.auSend("as", tok, nil, "send", "--hex", "00ff0d"); res.Code != 0 {
		t.Fatalf("send --hex: got %+v", res)
	}
	waitUntil(t, "send --hex's bytes", func() bool { return bytes.Contains(bmc.Typed(), []byte{0, 0xff, '\r'}) })
	raw := []byte("stdin\x01\x7f\n\r\xfe")
	if res := o.auSend("as", tok, raw, "send", "--stdin", "--json"); res.Code != 0 ||
		!strings.Contains(res.Stdout, `"bytes":10`) {
		t.Fatalf("send --stdin: got %+v", res)
	}
	waitUntil(t, "send --stdin's bytes", func() bool { return bytes.Contains(bmc.Typed(), raw) })

	// A console writes: send is refused, --force writes and hands back.
	p := sshPTY(t, o.SSHAddr(), "as", tok, nil)
	p.expect("you are writing")
	if res := o.auSend("as", tok, nil, "send", "refused"); res.Code != 4 || !strings.Contains(res.Stderr, "another session is writing") {
		t.Errorf("send while a console writes: got %+v, want exit 4", res)
	}
	if bytes.Contains(bmc.Typed(), []byte("refused")) {
		t.Errorf("a refused send reached the node")
	}
	if res := o.auSend("as", tok, nil, "send", "--force", `'echo forced\r'`); res.Code != 0 {
		t.Errorf("send --force: got %+v", res)
	}
	p.expect("you are writing again")
	p.typeKeys("echo still-mine\r")
	p.expect("still-mine\r\nsim$ ")
	waitUntil(t, "forced bytes", func() bool { return bytes.Contains(bmc.Typed(), []byte("echo forced\r")) })
	p.detach()

	acts := o.auAudit("as")
	for _, want := range []string{"console.send ok 14 bytes", "console.send busy 7 bytes", "console.send ok 12 bytes (forced)"} {
		if !auHas(acts, want) {
			t.Errorf("audit: no %q in %q", want, acts)
		}
	}
	if strings.Contains(strings.Join(acts, "\n"), "sent-one") {
		t.Errorf("audit holds the bytes sent: %q", acts)
	}
}

// auSend runs an ssh command on label with stdin (nil: none), again while
// obmd refused its login because the database was unavailable (sshpass
// exits 5, as for a wrong token): on a loaded machine a write held past
// access.WriteStall makes the database count as stuck for a moment, and
// logins fail closed then. The tests that use it need each command
// judged, not its login.
func (o *obmd) auSend(label, tok string, stdin []byte, cmd ...string) execResult {
	o.t.Helper()
	var res execResult
	o.judgedLogin("127.0.0.1", label, func() error {
		var in io.Reader
		if stdin != nil {
			in = bytes.NewReader(stdin)
		}
		res = o.opensshIn(label, tok, in, nil, cmd...)
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
	o, tok, bmc := auSim(t, "at")
	p := sshPTY(t, o.SSHAddr(), "at", tok, nil)
	p.expect("you are writing")
	seen := printUntilSeen(t, simInject(bmc), "before", shows(p.out))
	p.detach()
	waitUntil(t, "the link closed", func() bool { return !bmc.ConsoleActive() })

	res := o.openssh("at", tok, nil, "wait-for", "'"+seen+"'", "--since", "attach", "--timeout", "5s")
	if res.Code != 0 || res.Stdout != seen+"\n" {
		t.Errorf("wait-for --since attach: got %+v, want exit 0 and %s", res, seen)
	}
	if res := o.openssh("at", tok, nil, "wait-for", "'"+seen+"'", "--timeout", "1s"); res.Code != 5 {
		t.Errorf("wait-for without --since: got %+v, want 5", res)
	}
	done := o.auBackground("at", tok, "wait-for", "'after-[0-9]+'", "--since", "attach", "--timeout", "30s")
	if res := auPrintUntil(t, simInject(bmc), "after", done); res.Code != 0 || !strings.HasPrefix(res.Stdout, "after-") {
		t.Errorf("wait-for --since attach of live text: got %+v", res)
	}
	tok = o.rotate("at")
	if res := o.openssh("at", tok, nil, "wait-for", "'"+seen+"'", "--since", "attach", "--timeout", "1s"); res.Code != 5 {
		t.Errorf("wait-for --since attach in the next tenancy: got %+v, want 5", res)
	}
}

// TestAutomateSendLinkDown: a send whose bytes the console link does not
// take (the BMC stops answering: the link cannot open) fails with exit 1
// and says so, rather than exiting 0 with its bytes dropped; the bytes are
// not typed later, when the link is back, and a send then succeeds.
func TestAutomateSendLinkDown(t *testing.T) {
	t.Parallel()
	o := startObmd(t, func(c *daemon.Config) {
		c.Console.OpenTimeout = 500 * time.Millisecond
		c.Console.Backoff = sol.Backoff{Min: 10 * time.Millisecond, Max: 50 * time.Millisecond} // back at once
		c.PowerTimeout = time.Second
	})
	tok := o.addSimNode("al")
	bmc := o.Lab().BMC("al", sim.ModeNormal)
	bmc.SetFail(errors.New("the BMC stopped answering"))
	res := o.openssh("al", tok, nil, "send", `'lost-bytes\r'`)
	if res.Code != 1 || !strings.Contains(res.Stderr, "the console link did not take the input") {
		t.Errorf("send into a link that cannot open: got %+v, want exit 1 and the reason", res)
	}
	bmc.SetFail(nil)
	if res := o.openssh("al", tok, nil, "send", `'sent-bytes\r'`); res.Code != 0 {
		t.Fatalf("send once the BMC answers: got %+v", res)
	}
	waitUntil(t, "the second send typed", func() bool { return bytes.Contains(bmc.Typed(), []byte("sent-bytes\r")) })
	if bytes.Contains(bmc.Typed(), []byte("lost-bytes")) {
		t.Errorf("the send reported failed was typed later: %q", bmc.Typed())
	}
	if acts := o.auAudit("al"); !auHas(acts, "console.send error 11 bytes: the console link did not take the input") {
		t.Errorf("audit: got %q, want the failed send", acts)
	}
}

// TestAutomatePowerCycleWaitSim: power-cycle --wait-for 'login:' returns 0
// after the simulator's boot text, 5 when it never comes.
func TestAutomatePowerCycleWaitSim(t *testing.T) {
	t.Parallel()
	o, tok, _ := auSim(t, "ap")
	res := o.openssh("ap", tok, nil, "power-cycle", "--wait-for", "'login:'", "--timeout", "30s")
	if res.Code != 0 || res.Stdout != "ap: power cycled\nsim login: \n" {
		t.Errorf("power-cycle --wait-for: got %+v", res)
	}
	res = o.openssh("ap", tok, nil, "power-on", "--wait-for", "never-printed", "--timeout", "1s", "--json")
	if res.Code != 5 || !strings.Contains(res.Stdout, `"ok":false`) {
		t.Errorf("power-on --wait-for that never comes: got %+v, want 5", res)
	}
}

// TestAutomateExpectSim: an expect script over ssh -T ... expect --stdin
// runs its steps in order; the first failing step stops it, named by line.
func TestAutomateExpectSim(t *testing.T) {
	t.Parallel()
	o, tok, bmc := auSim(t, "ae")
	script := "# boot and log in\nsend echo marker-a\\r\nwait 'marker-a\\r\\n' 10s\nsleep 10ms\nsend echo marker-b\\r\nwait marker-b\n"
	res := o.opensshIn("ae", tok, strings.NewReader(script), []string{"-T"}, "expect", "--stdin")
	if res.Code != 0 || res.Stdout != "ae: expect: 5 steps done\n" {
		t.Fatalf("expect: got %+v", res)
	}
	if !bytes.Contains(bmc.Typed(), []byte("echo marker-a\recho marker-b\r")) {
		t.Errorf("typed: %q", bmc.Typed())
	}
	res = o.opensshIn("ae", tok, strings.NewReader("send x\\r\n\nwait never-printed 1s\nsend not-sent\n"), []string{"-T"}, "expect", "--stdin")
	if res.Code != 5 || !strings.Contains(res.Stderr, "line 3") {
		t.Errorf("failing expect: got %+v, want 5 naming line 3", res)
	}
	if bytes.Contains(bmc.Typed(), []byte("not-sent")) {
		t.Errorf("a step after the failing one ran")
	}
	// `^` is a line start: the echoed command (mid-line) does not match,
	// its output's line does, though it began in an earlier chunk.
	res = o.opensshIn("ae", tok, strings.NewReader("send echo anchor-x\\r\nwait '^anchor-x' 10s\n"), []string{"-T"}, "expect", "--stdin", "--json")
	if res.Code != 0 || !strings.Contains(res.Stdout, `"line":"anchor-x"`) {
		t.Errorf("expect with ^: got %+v, want the output's line", res)
	}
	// An inline script: `;` between steps, `\;` a literal one.
	res = o.openssh("ae", tok, nil, "expect", `'send echo semi\;colon\r;wait ^semi\;colon 10s'`, "--json")
	if res.Code != 0 || !strings.Contains(res.Stdout, `"line":"semi;colon"`) || !bytes.Contains(bmc.Typed(), []byte("echo semi;colon\r")) {
		t.Errorf("inline expect with \\;: got %+v, typed %q", res, bmc.Typed())
	}
	if res := o.openssh("ae", tok, nil, "expect", "'send a;bogus step'"); res.Code != 2 || !strings.Contains(res.Stderr, "line 2") {
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
	o := startObmd(t)
	s := ipmisim.Start(t)
	tok := o.addIPMINode("ai", "ipmitool", s)

	done := o.auBackground("ai", tok, "wait-for", "'boot-[0-9]+ done'", "--timeout", "40s")
	var n atomic.Int32
	res := auPrintUntil(t, func(p []byte) error {
		return s.WriteSerial(fmt.Appendf(nil, "boot-%d done\r\n", n.Add(1)))
	}, "line", done)
	if res.Code != 0 || !strings.Contains(res.Stdout, " done") {
		t.Fatalf("wait-for on ipmi_sim: got %+v", res)
	}

	// power-cycle --wait-for: the host prints its login prompt after it.
	done = o.auBackground("ai", tok, "power-cycle", "--wait-for", "'host login:'", "--timeout", "40s")
	res = auPrintUntil(t, func(p []byte) error { return s.WriteSerial([]byte("host login: \r\n")) }, "login", done)
	if res.Code != 0 || res.Stdout != "ai: power cycled\nhost login: \n" {
		t.Errorf("power-cycle --wait-for on ipmi_sim: got %+v", res)
	}

	// expect: the host answers what the script sends; then a wait that
	// never matches is exit 5, naming its line.
	s.ResetSerial()
	answered := make(chan struct{})
	go func() { // ends once it answered, or at the test's end (WaitSerial fails it)
		defer close(answered)
		s.WaitSerial(t, []byte("ping\r"), e2eWait)
		_ = s.WriteSerial([]byte("pong from the host\r\n"))
	}()
	res = o.opensshIn("ai", tok, strings.NewReader("send ping\\r\nwait 'pong from' 30s\n"), []string{"-T"}, "expect", "--stdin", "--json")
	<-answered
	if res.Code != 0 || !strings.Contains(res.Stdout, `"steps":2`) || !strings.Contains(res.Stdout, `"line":"pong from the host"`) {
		t.Errorf("expect on ipmi_sim: got %+v", res)
	}
	res = o.openssh("ai", tok, nil, "expect", "'wait never-printed 1s'")
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
	waitUntil(t, "the link closed", func() bool { return o.auLinks("ai", "open") == o.auLinks("ai", "closed") })
	s.Kill()
	if err := s.Restart(); err != nil {
		t.Fatalf("restart ipmi_sim: %v", err)
	}
	s.ResetSerial()
	if res := o.openssh("ai", tok, nil, "send", "--hex", "6c730d00ff"); res.Code != 0 {
		t.Fatalf("send on ipmi_sim: got %+v", res)
	}
	s.WaitSerial(t, []byte("ls\r\x00\xff"), e2eWait)

	done = o.auBackground("ai", tok, "wait-for", "never-printed", "--timeout", "60s")
	waitUntil(t, "the waiting session", func() bool {
		r, err := o.execGo("ai", tok, "sessions")
		return err == nil && strings.Count(r.Stdout, "exec") >= 2
	})
	o.rotate("ai")
	select {
	case res := <-done:
		if res.Code != 3 {
			t.Errorf("wait-for cut by rotation: got %+v, want exit 3", res)
		}
	case <-time.After(e2eWait):
		t.Fatal("wait-for not cut by the rotation")
	}
}

// TestAutomateHostileGo, over x/crypto/ssh on the simulator: a client that
// disconnects mid-wait leaves no session behind; binary output is matched
// and printed escaped; a send reading stdin, an expect script and
// power-cycle --wait-for that wait are cut by a rotation (exit 3).
func TestAutomateHostileGo(t *testing.T) {
	t.Parallel()
	o, tok, bmc := auSim(t, "ah")
	execs := func() int {
		r, err := o.execGo("ah", tok, "sessions")
		if err != nil {
			return -1
		}
		return strings.Count(r.Stdout, " exec ") - 1 // not this one
	}

	c, s := o.session(t, "ah", tok)
	if err := s.Start("wait-for never-printed --timeout 10m"); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the waiting session", func() bool { return execs() == 1 })
	c.Close() // mid-wait
	waitUntil(t, "the session gone after the disconnect", func() bool { return execs() == 0 })

	// Bytes that are not UTF-8 match as U+FFFD.
	done := make(chan execResult, 1)
	go func() { // ends with the command
		r, _ := o.execGo("ah", tok, `wait-for '\x00\x{FFFD}bin' --json --timeout 20s`)
		done <- r
	}()
	res := auPrintUntil(t, func([]byte) error { bmc.Inject([]byte("junk\x1b[31m\x00\xffbin\r\n")); return nil }, "bin", done)
	if res.Code != 0 || !strings.Contains(res.Stdout, `"line":"junk\u001b[31m\u0000\ufffdbin"`) {
		t.Errorf("binary wait-for: got %+v", res)
	}

	// send --stdin whose stdin never ends: cut by the rotation too.
	c2, s2 := o.session(t, "ah", tok)
	defer c2.Close()
	if _, err := s2.StdinPipe(); err != nil { // held open
		t.Fatal(err)
	}
	if err := s2.Start("send --stdin"); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the send reading stdin", func() bool { return execs() == 1 })
	tok = o.rotate("ah")
	var ee *gossh.ExitError
	if err := s2.Wait(); !errors.As(err, &ee) || ee.ExitStatus() != 3 {
		t.Errorf("send --stdin cut by rotation: got %v, want exit 3", err)
	}

	for _, cmd := range []string{"expect 'send a\\r;wait never-printed 10m'", "power-cycle --wait-for never-printed --timeout 10m"} {
		done := make(chan execResult, 1)
		go func() { // ends with the command (cut)
			r, _ := o.execGo("ah", tok, cmd)
			done <- r
		}()
		waitUntil(t, "the waiting "+cmd, func() bool { return execs() == 1 })
		tok = o.rotate("ah")
		select {
		case res := <-done:
			if res.Code != 3 {
				t.Errorf("%s cut by rotation: got %+v, want exit 3", cmd, res)
			}
		case <-time.After(e2eWait):
			t.Fatalf("%s not cut", cmd)
		}
	}
}

// auLinks counts the times label's console link reached state (its log).
func (o *obmd) auLinks(label, state string) int {
	return strings.Count(o.Logs.String(), `"msg":"console link state","node":"`+label+`","part":"sol","state":"`+state+`"`)
}

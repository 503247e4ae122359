package commands

import (
	"bytes"
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/obmd/obmd/sol"
	"github.com/obmd/obmd/sol/screen"
)

// fakeConsole is a Console fed by a channel; Send records. Its screen
// draws the output Next has returned.
type fakeConsole struct {
	replay []byte // the first output, when opened with Replay
	out    chan []byte
	sent   bytes.Buffer
	busy   bool
	breaks int
	term   *screen.Terminal
	size   screen.Size // of term (zero: 80x25)
	looks  int         // Screen calls
}

func (f *fakeConsole) Next(ctx context.Context) ([]byte, time.Time, error) {
	if p := f.replay; p != nil {
		f.replay = nil
		f.draw(p)
		return p, time.Now(), nil
	}
	select {
	case p, ok := <-f.out:
		if !ok {
			return nil, time.Time{}, sol.ErrCut
		}
		f.draw(p)
		return p, time.Now(), nil
	case <-ctx.Done():
		return nil, time.Time{}, ctx.Err()
	}
}

func (f *fakeConsole) Send(_ context.Context, p []byte, force bool) error {
	if f.busy && !force {
		return sol.ErrWriterBusy
	}
	f.sent.Write(p)
	return nil
}
func (f *fakeConsole) Break(context.Context, bool) error { f.breaks++; return nil }
func (f *fakeConsole) Ready(context.Context) error       { return nil }

func (f *fakeConsole) draw(p []byte) {
	if f.term == nil {
		f.term, _ = screen.New(f.size)
	}
	f.term.Write(p)
}

func (f *fakeConsole) Screen(context.Context) (screen.Snapshot, error) {
	f.looks++
	f.draw(nil)
	return f.term.Snapshot(), nil
}

func (f *fakeConsole) ScreenText(ctx context.Context) (string, error) {
	s, err := f.Screen(ctx)
	return s.Text(), err
}
func (f *fakeConsole) Close() {}

// TestMatcherAcrossChunks: a match split over chunks is found, with its
// offset from the first byte searched and its whole line; a match
// consumes the output before it.
func TestMatcherAcrossChunks(t *testing.T) {
	var m matcher
	re := mustPattern(`log+in:`)
	m.feed([]byte("boot\r\nsim lo"), time.Now())
	if _, ok := m.findT(re); ok {
		t.Fatal("matched half a word")
	}
	m.feed([]byte("gin: \r\nmore"), time.Now())
	mt, ok := m.findT(re)
	if !ok || mt.Text != "login:" || mt.Line != "sim login: " || mt.Offset != 10 {
		t.Fatalf("got %+v %v", mt, ok)
	}
	if _, ok := m.findT(re); ok {
		t.Error("the same match twice")
	}
}

// TestMatcherWindow: output beyond the window is forgotten, bounded.
func TestMatcherWindow(t *testing.T) {
	var m matcher
	for range 100 {
		m.feed(bytes.Repeat([]byte("x"), 4096), time.Now())
	}
	if len(m.buf) > window || m.base != 100*4096-window {
		t.Errorf("buf %d base %d", len(m.buf), m.base)
	}
}

// TestWaitTimesOut: a pattern that never matches ends with ErrTimedOut
// (exit 5); a console that ends is its error, not a timeout.
func TestWaitTimesOut(t *testing.T) {
	con := &fakeConsole{out: make(chan []byte, 1)}
	con.out <- []byte("nothing here")
	var m matcher
	_, err := m.wait(context.Background(), con, mustPattern("never"), 50*time.Millisecond)
	if !errors.Is(err, ErrTimedOut) || ExitCode(err) != ExitTimedOut || Message(err) != "no match within 50ms: timed out" {
		t.Errorf("got %v (exit %d, %q)", err, ExitCode(err), Message(err))
	}
	close(con.out)
	if _, err := m.wait(context.Background(), con, mustPattern("never"), time.Minute); !errors.Is(err, sol.ErrCut) {
		t.Errorf("ended console: got %v", err)
	}
}

func TestParseAutomation(t *testing.T) {
	good := map[string]func(Command) bool{
		"wait-for login: --timeout 30s":      func(c Command) bool { return c.Pattern == "login:" && c.Timeout == 30*time.Second },
		"wait-for x --since 10m":             func(c Command) bool { return c.SinceMode == SinceTime && c.SinceAgo == 10*time.Minute },
		"wait-for x --since attach":          func(c Command) bool { return c.SinceMode == SinceAttach },
		"wait-for x --tenancy":               func(c Command) bool { return c.SinceMode == SinceTenancy },
		`send root\r`:                        func(c Command) bool { b, _ := sendBytes(c); return string(b) == "root\r" },
		`send a b\x00\\`:                     func(c Command) bool { b, _ := sendBytes(c); return string(b) == "a b\x00\\" },
		"send --hex 0d0a --force":            func(c Command) bool { b, _ := sendBytes(c); return string(b) == "\r\n" && c.Force },
		"send --stdin":                       func(c Command) bool { return c.Stdin },
		"expect --stdin --timeout 1m":        func(c Command) bool { return c.Stdin && c.Timeout == time.Minute },
		"power-cycle --wait-for login:":      func(c Command) bool { return c.Pattern == "login:" },
		"power-on --wait-for=x --timeout 1s": func(c Command) bool { return c.Pattern == "x" && c.Timeout == time.Second },
	}
	for line, ok := range good {
		argv, _ := Split(line)
		cmd, err := Parse(argv)
		if err != nil || !ok(cmd) {
			t.Errorf("%s: got %+v, %v", line, cmd, err)
		}
	}
	for _, line := range []string{"wait-for", "wait-for (", "wait-for x --timeout 0s", "wait-for x --timeout 25h",
		"wait-for x --since yesterday", "send", "send --stdin x", `send a\q`, `send \x1`, "send --hex zz",
		"expect", "expect 'bogus'", "power-off --wait-for x", "power-cycle --timeout 1s", "bootdev pxe --timeout 1s",
		"wait-for a{2000}"} {
		argv, _ := Split(line)
		if _, err := Parse(argv); ExitCode(err) != ExitUsage {
			t.Errorf("%.40s: got %v, want a usage error", line, err)
		}
	}
	// A huge pattern (an expect script's, or one past Split) is refused.
	if _, err := Parse([]string{"wait-for", strings.Repeat("a", MaxPattern+1)}); ExitCode(err) != ExitUsage {
		t.Errorf("huge pattern: got %v", err)
	}
}

func TestParseScript(t *testing.T) {
	steps, err := ParseScript("# c\n\nwait 'sim login:' 2m\nsend root\\r\nsleep 1s\nbreak\nwait x\n")
	if err != nil || len(steps) != 5 || steps[0].Line != 3 || steps[0].Pattern != "sim login:" ||
		steps[0].Timeout != 2*time.Minute || string(steps[1].Data) != "root\r" || steps[2].Timeout != time.Second ||
		steps[3].Kind != StepBreak || steps[4].Timeout != 0 {
		t.Fatalf("got %+v, %v", steps, err)
	}
	for script, line := range map[string]string{"send a\nwait (": "line 2", "sleep forever": "line 1",
		"\n\nbreak now": "line 3", "wait x 0s": "line 1", "launch": "line 1"} {
		if _, err := ParseScript(script); err == nil || !strings.Contains(err.Error(), line) {
			t.Errorf("%q: got %v, want %s", script, err, line)
		}
	}
	if _, err := ParseScript(strings.Repeat("break\n", maxSteps+1)); err == nil {
		t.Error("too many steps accepted")
	}
}

// runOn runs line for node-17 with con as its console and stdin.
func runOn(t *testing.T, env *testEnv, con Console, stdin string, line string) (stdout, stderr string, code int) {
	t.Helper()
	argv, err := Split(line)
	if err != nil {
		t.Fatal(err)
	}
	cmd, err := Parse(argv)
	if err != nil {
		t.Fatal(err)
	}
	rq := req("node-17")
	rq.Stdin = strings.NewReader(stdin)
	rq.OpenConsole = func(_ context.Context, o ConsoleOptions) (Console, error) {
		if fc, ok := con.(*fakeConsole); ok && o.Replay { // the attach replay: the scrollback here
			fc.replay = env.r.consoles.Scrollback("node-17")
		}
		return con, nil
	}
	var out, errb bytes.Buffer
	code = env.r.Run(context.Background(), rq, cmd, &out, &errb)
	return out.String(), errb.String(), code
}

// TestRunAutomation through Runner.Run: wait-for --since attach finds the
// scrollback; send is refused with exit 4 while another writes, audited
// with the byte count only; expect reports its failing line; with no
// console transport the commands fail cleanly.
func TestRunAutomation(t *testing.T) {
	env := newEnv(t, Config{})
	con := &fakeConsole{out: make(chan []byte)}
	out, _, code := runOn(t, env, con, "", "wait-for 'line [2]' --since attach --timeout 1s")
	if code != ExitOK || out != "line 2\n" {
		t.Errorf("wait-for --since attach: got %d %q", code, out)
	}
	out, _, code = runOn(t, env, con, "", "wait-for 'line 3' --since attach --json")
	if code != ExitOK || !strings.Contains(out, `"line":"\u001b[1mline 3\u001b[0m"`) || !strings.Contains(out, `"offset":20`) {
		t.Errorf("wait-for --json: got %d %q", code, out)
	}
	con.busy = true
	_, errOut, code := runOn(t, env, con, "", "send secret-word")
	if code != ExitBusy || !strings.Contains(errOut, "another session is writing") {
		t.Errorf("busy send: got %d %q", code, errOut)
	}
	_, _, code = runOn(t, env, con, "secret\x00\n", "send --stdin --force")
	if code != ExitOK || con.sent.String() != "secret\x00\n" {
		t.Errorf("send --stdin --force: got %d, sent %q", code, con.sent.String())
	}
	var details []string
	for _, e := range env.audit.events {
		if e.Action == ActionConsoleSend {
			details = append(details, e.Result+" "+e.Detail)
		}
	}
	if strings.Join(details, ",") != "busy 11 bytes,ok 8 bytes (forced)" {
		t.Errorf("console.send audit: got %q", details)
	}
	_, errOut, code = runOn(t, env, con, "break\nwait nothing 10ms\nsend x\n", "expect --stdin")
	if code != ExitTimedOut || !strings.Contains(errOut, "expect: line 2 (wait): no match within 10ms") || con.breaks != 1 {
		t.Errorf("expect: got %d %q (breaks %d)", code, errOut, con.breaks)
	}

	var outb, errb bytes.Buffer
	code = env.r.Run(context.Background(), req("node-17"), Command{Name: CmdWaitFor, Pattern: "x"}, &outb, &errb)
	if code != ExitFailed {
		t.Errorf("no console: got %d %q", code, errb.String())
	}
}

// BenchmarkMatcherNoMatch: the cost of a pattern that never matches on a
// console printing 4 KiB chunks (each search covers the 64 KiB window).
func BenchmarkMatcherNoMatch(b *testing.B) {
	re := mustPattern(`(a|b)*c{3}[0-9]+login:`)
	chunk := bytes.Repeat([]byte("kernel: some boot text ab\r\n"), 4096/27)
	var m matcher
	b.SetBytes(int64(len(chunk)))
	for b.Loop() {
		m.feed(chunk, time.Time{})
		if _, ok := m.findT(re); ok {
			b.Fatal("matched")
		}
	}
}

// TestMatcherSpan: a match within maxSpan of new output is found after
// many misses; the window keeps its line.
func TestMatcherSpan(t *testing.T) {
	var m matcher
	re := mustPattern(`begin[^\n]*end`)
	m.feed([]byte("noise\n"), time.Now())
	for range 20 {
		m.feed(bytes.Repeat([]byte("x"), 1000), time.Now())
		if _, ok := m.findT(re); ok {
			t.Fatal("matched noise")
		}
	}
	m.feed([]byte("\nbegin "+strings.Repeat("y", 6000)), time.Now())
	if _, ok := m.findT(re); ok {
		t.Fatal("matched half")
	}
	m.feed([]byte(strings.Repeat("y", 1000)+" end\n"), time.Now())
	mt, ok := m.findT(re)
	if !ok || mt.Offset != 6+20000+1 || !strings.HasPrefix(mt.Line, "begin y") {
		t.Fatalf("got %+v %v", mt.Offset, ok)
	}
}

// TestTenantGuideScript: the example script of the tenant guide's
// "Automating a console" (docs/tenant.md) parses, every step of it.
func TestTenantGuideScript(t *testing.T) {
	data, err := os.ReadFile("../docs/tenant.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(data), "\n# boot.exp:")
	block, _, ok2 := strings.Cut(rest, "\n```")
	if !ok || !ok2 {
		t.Fatal("docs/tenant.md: no boot.exp block")
	}
	steps, err := ParseScript("#" + block)
	if err != nil || len(steps) != 9 {
		t.Fatalf("the tenant guide's script: %d steps, %v", len(steps), err)
	}
}

// TestMatcherBigChunk: a match at the start of a chunk larger than the
// window is found, and what follows it is kept for the next search.
func TestMatcherBigChunk(t *testing.T) {
	var m matcher
	big := append([]byte("early-marker\n"), bytes.Repeat([]byte("z"), 3*window)...)
	big = append(big, "late-marker\n"...)
	mt, ok := m.scanT(big, time.Now(), mustPattern("early-marker"))
	if !ok || mt.Offset != 0 {
		t.Fatalf("early: got %+v %v", mt, ok)
	}
	if _, ok := m.findT(mustPattern("late-marker")); !ok {
		t.Error("what followed the match was lost")
	}
}

// mustPattern compiles a wait's pattern, or panics.
func mustPattern(val string) *pattern {
	p, err := compilePattern(CmdWaitFor, val)
	if err != nil {
		panic(err)
	}
	return p
}

// TestMatcherLineStart: `^` matches at a line start even when the line
// began in an earlier chunk, and never mid-line: not at the rest of a
// line after a match, not at a chunk boundary, not at a long line's cut;
// the first byte searched is a line start.
func TestMatcherLineStart(t *testing.T) {
	now := time.Now()
	login := mustPattern(`^login:`)
	var m matcher
	if mt, ok := m.scanT([]byte("login: first"), now, login); !ok || mt.Offset != 0 {
		t.Errorf("at the first byte searched: got %+v, %v", mt, ok)
	}
	// A line that started in an earlier chunk.
	m = matcher{}
	for _, c := range []string{"boot\r\nlog", "in: "} {
		if mt, ok := m.scanT([]byte(c), now, login); ok {
			if c == "boot\r\nlog" || mt.Offset != 6 || mt.Line != "login: " {
				t.Errorf("after chunk %q: got %+v", c, mt)
			}
		} else if c == "in: " {
			t.Error("^login: at a line begun in the previous chunk: no match")
		}
	}
	// Mid-line: within a chunk, across chunks, after a match.
	m = matcher{}
	for _, c := range []string{"xlogin: ", "ab", "login:", " tail\r\nzz"} {
		if mt, ok := m.scanT([]byte(c), now, login); ok {
			t.Errorf("chunk %q: ^login: matched mid-line: %+v", c, mt)
		}
	}
	m = matcher{}
	if _, ok := m.scanT([]byte("key: login: and more\r\nlogin: ok"), now, mustPattern(`key: `)); !ok {
		t.Fatal("the first wait did not match")
	}
	if mt, ok := m.findT(login); !ok || mt.Line != "login: ok" {
		t.Errorf("^login: after a match mid-line: got %+v, %v, want the next line's", mt, ok)
	}
	// A long line, cut maxSpan back: ^ does not match at the cut.
	m = matcher{}
	long := append(bytes.Repeat([]byte("y"), 3*maxSpan), []byte("login:")...)
	for len(long) > 0 {
		k := min(len(long), 1000)
		if mt, ok := m.scanT(long[:k], now, login); ok {
			t.Fatalf("^login: in a long line: %+v", mt)
		}
		long = long[k:]
	}
	if mt, ok := m.scanT([]byte("\r\nlogin: z"), now, login); !ok || mt.Line != "login: z" {
		t.Errorf("after the long line: got %+v, %v", mt, ok)
	}
	// \Q...\E quoting to the end of the pattern is kept.
	m = matcher{}
	if mt, ok := m.scanT([]byte("x a)b(c y"), now, mustPattern(`\Qa)b(c`)); !ok || mt.Text != "a)b(c" {
		t.Errorf("\\Q pattern: got %+v, %v", mt, ok)
	}
	// (?-m) keeps ^ at the first byte searched only.
	m = matcher{}
	if _, ok := m.scanT([]byte("a\nb"), now, mustPattern(`(?-m)^b`)); ok {
		t.Error("(?-m)^b matched after a newline")
	}
}

// TestInlineScript: in expect's SCRIPT argument `;` separates steps, `\;`
// is a literal `;` (in a send and in a wait's pattern), and `\\;` is an
// escaped backslash followed by a separator.
func TestInlineScript(t *testing.T) {
	steps, err := ParseScript(InlineScript(`send echo a\;b\r;wait 'a\;b' 1s;send c\\;sleep 1ms`))
	if err != nil {
		t.Fatal(err)
	}
	if len(steps) != 4 || string(steps[0].Data) != "echo a;b\r" || steps[1].Pattern != "a;b" ||
		string(steps[2].Data) != `c\` || steps[3].Kind != StepSleep || steps[3].Line != 4 {
		t.Errorf("got %+v", steps)
	}
	if _, err := Parse([]string{"expect", `send a\;b`}); err != nil {
		t.Errorf("expect with \\; in SCRIPT: %v", err)
	}
	// In a script on stdin \; is a ';' too.
	if steps, err := ParseScript("send x\\;y\n"); err != nil || string(steps[0].Data) != "x;y" {
		t.Errorf("stdin script with \\;: got %+v, %v", steps, err)
	}
}

// TestWaitForHostileLine: the matched line a tenant's console printed
// reaches the caller's terminal with its control sequences (an OSC title,
// a bell, a screen clear, a bidi override) escaped, in text as in --json.
func TestWaitForHostileLine(t *testing.T) {
	env := newEnv(t, Config{})
	hostile := "\x1b]0;pwned\x07login: \x1b[2J\u202eevil\u009b\r\n"
	for _, line := range []string{"wait-for login --timeout 1s", "wait-for login --timeout 1s --json"} {
		con := &fakeConsole{out: make(chan []byte, 1)}
		con.out <- []byte(hostile)
		out, _, code := runOn(t, env, con, "", line)
		if code != ExitOK || !strings.Contains(out, "login:") {
			t.Fatalf("%s: got %d %q", line, code, out)
		}
		if strings.ContainsAny(out, "\x1b\x07\u202e\u009b") {
			t.Errorf("%s: raw control characters reach the caller: %q", line, out)
		}
	}
}

// findT is m.find with no deadline (it cannot fail).
func (m *matcher) findT(p *pattern) (Match, bool) {
	mt, ok, err := m.find(context.Background(), p)
	if err != nil {
		panic(err)
	}
	return mt, ok
}

// scanT is m.scan with no deadline (it cannot fail).
func (m *matcher) scanT(data []byte, at time.Time, p *pattern) (Match, bool) {
	mt, ok, err := m.scan(context.Background(), data, at, p)
	if err != nil {
		panic(err)
	}
	return mt, ok
}

// TestParseJoinedWords: OpenSSH sends a remote command's words joined by
// spaces (the user's quotes are gone); wait-for's REGEX, --wait-for's RE
// and expect's SCRIPT take their words joined by single spaces, as send's
// TEXT does, wherever the flags are; quotes obmd sees keep spaces; a word
// that starts with - is an unknown flag whose error says to quote it.
func TestParseJoinedWords(t *testing.T) {
	for line, want := range map[string]string{
		"wait-for Reached target .*Multi-User --since 10m": "Reached target .*Multi-User",
		"wait-for a --timeout 1s b":                        "a b",
		`wait-for "a  b" --tenancy`:                        "a  b",
		"power-cycle --wait-for login prompt --timeout 1m": "login prompt",
		"power-on --wait-for=a b --json":                   "a b",
	} {
		argv, err := Split(line)
		if err != nil {
			t.Fatal(err)
		}
		if cmd, err := Parse(argv); err != nil || cmd.Pattern != want || len(cmd.Args) != 0 {
			t.Errorf("%s: got %q %q, %v; want the pattern %q", line, cmd.Pattern, cmd.Args, err, want)
		}
	}
	argv, _ := Split(`expect send a\;b\r;wait done --timeout 1m`)
	cmd, err := Parse(argv)
	if err != nil || cmd.Script() != `send a\;b\r;wait done` || cmd.Timeout != time.Minute {
		t.Fatalf("expect: got %q, %v", cmd.Script(), err)
	}
	steps, err := ParseScript(InlineScript(cmd.Script()))
	if err != nil || len(steps) != 2 || string(steps[0].Data) != "a;b\r" || steps[1].Pattern != "done" {
		t.Errorf("expect's steps: got %+v, %v", steps, err)
	}
	for line, want := range map[string]string{
		"wait-for link -up":            `unknown flag "-up" (a word of the regular expression that starts with - must be quoted`,
		"expect send ls -l":            `unknown flag "-l" (a word of the script`,
		"power-cycle --wait-for a -b":  `unknown flag "-b" (a word of the regular expression`,
		"power-on foo":                 `unexpected argument "foo"`,
		"power-cycle foo --wait-for x": `unexpected argument "foo"`,
		"power-off --wait-for x":       `unknown flag "--wait-for"`,
	} {
		argv, _ := Split(line)
		if _, err := Parse(argv); ExitCode(err) != ExitUsage || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: got %v, want a usage error with %q", line, err, want)
		}
	}
}

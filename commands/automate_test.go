package commands

import (
	"bytes"
	"context"
	"errors"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/obmd/obmd/sol"
)

// fakeConsole is a Console fed by a channel; Send records.
type fakeConsole struct {
	out    chan []byte
	sent   bytes.Buffer
	busy   bool
	breaks int
}

func (f *fakeConsole) Next(ctx context.Context) ([]byte, time.Time, error) {
	select {
	case p, ok := <-f.out:
		if !ok {
			return nil, time.Time{}, sol.ErrCut
		}
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
func (f *fakeConsole) Close()                            {}

// TestMatcherAcrossChunks: a match split over chunks is found, with its
// offset from the first byte searched and its whole line; a match
// consumes the output before it.
func TestMatcherAcrossChunks(t *testing.T) {
	var m matcher
	re := regexp.MustCompile(`log+in:`)
	m.feed([]byte("boot\r\nsim lo"), time.Now())
	if _, ok := m.find(re); ok {
		t.Fatal("matched half a word")
	}
	m.feed([]byte("gin: \r\nmore"), time.Now())
	mt, ok := m.find(re)
	if !ok || mt.Text != "login:" || mt.Line != "sim login: " || mt.Offset != 10 {
		t.Fatalf("got %+v %v", mt, ok)
	}
	if _, ok := m.find(re); ok {
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
	_, err := m.wait(context.Background(), con, regexp.MustCompile("never"), 50*time.Millisecond)
	if !errors.Is(err, ErrTimedOut) || ExitCode(err) != ExitTimedOut || Message(err) != "no match within 50ms: timed out" {
		t.Errorf("got %v (exit %d, %q)", err, ExitCode(err), Message(err))
	}
	close(con.out)
	if _, err := m.wait(context.Background(), con, regexp.MustCompile("never"), time.Minute); !errors.Is(err, sol.ErrCut) {
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
	if err != nil || len(steps) != 5 || steps[0].Line != 3 || steps[0].re.String() != "sim login:" ||
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

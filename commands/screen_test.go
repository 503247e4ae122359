package commands

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/obmd/obmd/sol"
	"github.com/obmd/obmd/sol/screen"
	"github.com/obmd/obmd/sol/screen/screentest"
)

// TestWaitScreen: wait --screen matches the screen, not the bytes: a menu
// drawn once then only repainted matches though the last output holds
// none of it; text put together by cursor movements matches; a screen
// that already shows the pattern matches at once; the match's line is
// its row.
func TestWaitScreen(t *testing.T) {
	bios := screentest.BIOSSetup(2000)
	con := &fakeConsole{out: make(chan []byte, 1)}
	con.out <- bios.Output
	var m matcher
	mt, err := m.waitScreen(context.Background(), con, mustPattern(`Build Date and Time +03/14`), 10*time.Second)
	if err != nil || mt.Text != "Build Date and Time     03/14" || !strings.HasPrefix(mt.Line, "│ Build Date and Time") {
		t.Fatalf("the menu: got %+v, %v", mt, err)
	}
	if tail := bios.Output[len(bios.Output)-16<<10:]; strings.Contains(string(tail), "Build Date") {
		t.Fatal("the fixture's last 16 KiB hold the text: the test proves nothing")
	}
	// Already shown: at once, with no output.
	if mt, err := m.waitScreen(context.Background(), con, mustPattern(`^.*Aptio Setup`), time.Second); err != nil || mt.Offset != 0 {
		t.Errorf("already shown: got %+v, %v", mt, err)
	}
	// Drawn backwards with cursor addressing: no byte run holds it.
	if mt, err := m.waitScreen(context.Background(), con, mustPattern(`^world$`), 100*time.Millisecond); !errors.Is(err, ErrTimedOut) {
		t.Errorf("before the output came: got %+v, %v", mt, err)
	}
	con.out <- []byte("\x1b[2J\x1b[5;5Hd\x1b[5;4Hl\x1b[5;3Hr\x1b[5;2Ho\x1b[5;1Hw")
	mt, err = m.waitScreen(context.Background(), con, mustPattern(`^world$`), 10*time.Second)
	if err != nil || mt.Line != "world" || mt.Offset != int64(len("\n\n\n\n")) {
		t.Errorf("drawn backwards: got %+v, %v", mt, err)
	}
	go func() {
		for range 5 {
			con.out <- []byte("\x1b[5;1Hw")
		}
	}()
	_, err = m.waitScreen(context.Background(), con, mustPattern(`never`), 500*time.Millisecond)
	if !errors.Is(err, ErrTimedOut) {
		t.Errorf("never shown: got %v, want a timeout", err)
	}
	close(con.out)
	if _, err := m.waitScreen(context.Background(), con, mustPattern(`never`), time.Minute); !errors.Is(err, sol.ErrCut) {
		t.Errorf("ended console: got %v", err)
	}
}

// TestWaitScreenPolls: output that keeps coming is drawn, and the screen
// looked at, at most once per screenPoll (the first look aside), however
// many chunks come.
func TestWaitScreenPolls(t *testing.T) {
	con := &fakeConsole{out: make(chan []byte)}
	stop := make(chan struct{})
	go func() {
		for i := 0; ; i++ {
			select {
			case con.out <- []byte("x"):
			case <-stop:
				return
			}
		}
	}()
	var m matcher
	const d = 10 * screenPoll
	_, err := m.waitScreen(context.Background(), con, mustPattern(`never`), d)
	close(stop)
	if !errors.Is(err, ErrTimedOut) {
		t.Fatalf("got %v, want a timeout", err)
	}
	if con.looks > int(d/screenPoll)+2 {
		t.Errorf("%d looks at the screen in %v, want at most one per %v", con.looks, d, screenPoll)
	}
}

// TestRunScreen through Runner.Run: screen prints the rows, --json the
// snapshot, --ansi a redraw untouched; wait-for --screen and an expect
// script's wait --screen match the screen; --screen with --since is a
// usage error.
func TestRunScreen(t *testing.T) {
	env := newEnv(t, Config{})
	con := &fakeConsole{out: make(chan []byte, 1)}
	con.out <- []byte("\x1b[2J\x1b[3;5H\x1b[7mBoot Menu\x1b[0m\x1b[1;1H")
	out, _, code := runOn(t, env, con, "", "wait-for --screen 'Boot Menu' --timeout 5s")
	if code != ExitOK || out != "    Boot Menu\n" {
		t.Errorf("wait-for --screen: got %d %q", code, out)
	}
	out, _, code = runOn(t, env, con, "", "screen")
	if code != ExitOK || out != "\n\n    Boot Menu"+strings.Repeat("\n", 23) {
		t.Errorf("screen: got %d %q", code, out)
	}
	out, _, code = runOn(t, env, con, "", "screen --json")
	if code != ExitOK || !strings.Contains(out, `"screen":{"cols":80,"rows":25,"cursor":{"row":0,"col":0,"visible":true},"alt_screen":false,"lines":["","","    Boot Menu",`) ||
		!strings.Contains(out, `"spans":[{"row":2,"col":4,"len":9,"reverse":true}]}`) {
		t.Errorf("screen --json: got %d %q", code, out)
	}
	out, _, code = runOn(t, env, con, "", "screen --ansi")
	if code != ExitOK || !strings.HasPrefix(out, "\x1b[?25l") || strings.HasSuffix(out, "\n") {
		t.Errorf("screen --ansi: got %d %q", code, out)
	}
	out, errOut, code := runOn(t, env, con, "", "expect 'wait --screen ^Boot 1s'")
	if code != ExitTimedOut || !strings.Contains(errOut, "line 1 (wait)") {
		t.Errorf("expect wait --screen ^Boot (not at a row's start): got %d %q %q", code, out, errOut)
	}
	if out, errOut, code = runOn(t, env, con, "", "expect 'wait --screen \"^ +Boot Menu\" 1s'"); code != ExitOK {
		t.Errorf("expect wait --screen: got %d %q %q", code, out, errOut)
	}
	for _, line := range []string{"wait-for --screen x --since 10m", "wait-for --screen x --tenancy", "screen --ansi --json", "screen x"} {
		argv, _ := Split(line)
		if _, err := Parse(argv); ExitCode(err) != ExitUsage {
			t.Errorf("%s: got %v, want a usage error", line, err)
		}
	}
	if steps, err := ParseScript("wait '--screen' 1s\nwait --screen x"); err != nil || steps[0].Screen || steps[0].Pattern != "--screen" ||
		!steps[1].Screen || steps[1].Pattern != "x" {
		t.Errorf("--screen quoted is a pattern: got %+v, %v", steps, err)
	}
}

// TestWaitScreenBudget: a wait --screen with the costliest pattern allowed
// over the largest screen, full and changing all the time, spends the
// command's search budget (well under half a core, where it would take a
// whole one without it), and answers at its timeout (here within a
// generous second), not when its search is done.
func TestWaitScreenBudget(t *testing.T) {
	class := `[\p{L}\p{M}\p{N}\p{P}\p{S}\n]` // worstClass's, across rows
	worst := `(?i)` + class + `{1000}` + class + `{1000}\x01`
	con := &fakeConsole{out: make(chan []byte, 1), size: screen.Size{Cols: screen.MaxCols, Rows: screen.MaxRows}}
	con.out <- bytes.Repeat([]byte("a"), screen.MaxCols*screen.MaxRows-1)
	stop := make(chan struct{})
	go func() { // a clock in the corner; ends with the test's wait
		for i := 0; ; i++ {
			select {
			case con.out <- []byte{0x1b, '7', 0x1b, '[', 'H', 'a' + byte(i%26), 0x1b, '8'}:
			case <-stop:
				return
			}
		}
	}()
	m := matcher{meter: meter{rate: SearchCPU}}
	cpu0, wall0 := cpuTime(t), time.Now()
	_, err := m.waitScreen(context.Background(), con, mustPattern(worst), time.Second)
	cpu, wall := cpuTime(t)-cpu0, time.Since(wall0)
	close(stop)
	t.Logf("%v of CPU in %v", cpu, wall)
	if !errors.Is(err, ErrTimedOut) {
		t.Fatalf("got %v, want the timeout", err)
	}
	if late := wall - time.Second; late > time.Second {
		t.Errorf("answered %v after the timeout", late)
	}
	if cpu > wall*4/10 {
		t.Errorf("the search used %v of CPU in %v", cpu, wall)
	}
}

// BenchmarkScreenLook: one look of a screen wait at a BIOS menu (80x25)
// and at the largest screen full of text (200x100): the screen's text
// (taken by its owner, with no copy of the screen), and a search that
// misses.
func BenchmarkScreenLook(b *testing.B) {
	bios := screentest.BIOSSetup(100)
	for _, c := range []struct {
		name string
		size screen.Size
		out  []byte
	}{
		{"bios-80x25", screen.Size{}, bios.Output},
		{"full-200x100", screen.Size{Cols: screen.MaxCols, Rows: screen.MaxRows}, bytes.Repeat([]byte("word "), 4000)},
	} {
		b.Run(c.name, func(b *testing.B) {
			term, _ := screen.New(c.size)
			term.Write(c.out)
			re := mustPattern(`Boot Option #[0-9]+ +\[UEFI`)
			var mt meter
			b.ReportAllocs()
			for b.Loop() {
				text := term.Text()
				if loc, err := re.find(context.Background(), &mt, []byte(text)); loc != nil || err != nil {
					b.Fatal(loc, err)
				}
			}
		})
	}
}

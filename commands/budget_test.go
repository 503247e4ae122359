package commands

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"regexp/syntax"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"
)

// hugePattern is a ~1000-byte pattern that compiles to about 156,000
// instructions (about 40 MB of programs as the code before the budgets
// compiled it, three times).
var hugePattern = strings.Repeat(`(?:.{0,1000})`, 78)

// worstClass is a large case-folded class: the most expensive instruction
// per byte found for Go's NFA (a binary search of many ranges, on input
// that keeps every thread alive).
const worstClass = `(?i)[\p{L}\p{M}\p{N}\p{P}\p{S}]`

// worstPattern is the costliest pattern within MaxProgram: 2,000
// instructions of worstClass, each alive on every byte of a long line of
// letters (worstLine) that never matches.
var worstPattern = worstClass + `{1000}` + worstClass + `{1000}\n`

// worstLine is n bytes of a line without newline that keeps every
// instruction of worstPattern alive.
func worstLine(n int) []byte { return bytes.Repeat([]byte("a"), n) }

// allocated is the bytes f allocated.
func allocated(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// TestPatternBudget: a pattern is refused by its compiled size (its
// program and its mid-line variant's), not its text: a short pattern that
// compiles to a huge program is a usage error naming the limit, found
// without compiling it (little memory); the largest allowed one passes.
func TestPatternBudget(t *testing.T) {
	if c, err := checkPattern(CmdWaitFor, worstPattern); err != nil || c.cost() > MaxProgram || c.cost() < MaxProgram-200 {
		t.Fatalf("the worst allowed pattern: cost %d, %v; want at most %d, close to it", c.cost(), err, MaxProgram)
	}
	for _, line := range [][]string{
		{"wait-for", hugePattern},
		{"power-cycle", "--wait-for", hugePattern},
		{"wait-for", `(?:ab){1000}(?:cd){1000}`}, // just over: its exact size counts
		{"expect", "wait " + hugePattern},
	} {
		var err error
		n := allocated(func() { _, err = Parse(line) })
		if ExitCode(err) != ExitUsage || !strings.Contains(err.Error(), fmt.Sprint(MaxProgram)) {
			t.Errorf("%.30s: got %v, want a usage error naming the limit %d", line, err, MaxProgram)
		}
		if n > 4<<20 {
			t.Errorf("%.30s: refusing it allocated %d MB", line, n>>20)
		}
	}
	if _, err := Parse([]string{"wait-for", `(?:ab){1000}`}); err != nil {
		t.Errorf("a 2,000-instruction pattern: %v", err)
	}
}

// TestProgBound: the bound computed without compiling is never below the
// instructions regexp compiles (what keeps a refused pattern from being
// compiled), and not far above them.
func TestProgBound(t *testing.T) {
	for _, pat := range []string{`login:`, `Reached target .*Multi-User`, `(?:ab){1000}`, `.{0,1000}x`, `a{3,}`,
		`(a|b|c){1000}`, `(?:a*)*`, `(?:a+)+b?`, `x{0}`, `x{0,0}y`, `(?i)k{5,9}`, `(?:(?:a{2}){3}){4}`, `(?:a|)*`, `(?:a?){500}`,
		`[^\n]{2,1000}`, `\b(?:\B.){1,1000}`, `(?s:.){10}|(?:a|b){0,100}c`, `(?:(?:a{2}|b){0,3}){9}`, `^$|\A\z`,
		worstPattern, `(?U)a+?b*?`, `(?m)^(?:x{7}){1,10}$`, ``, `()`, `(?:)+`, `(?:a{0,5}){0,}`, `(?:a{1,}){5}`} {
		tree, err := syntax.Parse(pat, syntax.Perl&^syntax.OneLine)
		if err != nil {
			t.Fatalf("%q: %v", pat, err)
		}
		tree = stripCaptures(tree)
		b := progBound(tree)
		exact, err := progLen(tree.String())
		if err != nil {
			t.Fatalf("%q: %v", pat, err)
		}
		if b < int64(exact) || b > 3*int64(exact)+8 {
			t.Errorf("%q: bound %d, exact %d", pat, b, exact)
		}
	}
}

// FuzzProgBound: whatever the pattern, the bound is never below the
// compiled size.
func FuzzProgBound(f *testing.F) {
	for _, seed := range []string{`a{2,5}`, `(?:ab|c*){3}d+?`, `(?i)[a-z]{0,20}`, `x{0,}y{1,}z{2,}`, `(?:a?b?){4}`} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, pat string) {
		tree, err := syntax.Parse(pat, syntax.Perl&^syntax.OneLine)
		if err != nil {
			return
		}
		tree = stripCaptures(tree)
		if b := progBound(tree); b <= 1<<16 {
			if exact, err := progLen(tree.String()); err == nil && int64(exact) > b {
				t.Fatalf("%q: bound %d below the compiled size %d", pat, b, exact)
			}
		}
	})
}

// TestScriptBudget: an expect script's patterns count together; a script
// of many worst-case waits is refused with a usage error naming the limit
// and its line, with little memory (the code before the budgets compiled
// and kept every wait's pattern: about 40 MB each); a long script of
// small waits passes, and a step's pattern is compiled only when it runs.
func TestScriptBudget(t *testing.T) {
	for name, tc := range map[string]struct {
		script, want string
	}{
		"huge waits": {strings.Repeat("wait '"+hugePattern+"' 1s\n", 16), "line 1"},
		"worst waits": {strings.Repeat("wait '"+worstPattern+"' 1s\n", 64),
			fmt.Sprintf("line %d: the script's patterns compile to more than %d", MaxScriptProgram/MaxProgram+1, MaxScriptProgram)},
	} {
		var err error
		n := allocated(func() { _, err = ParseScript(tc.script) })
		if ExitCode(err) != ExitUsage || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want a usage error with %q", name, err, tc.want)
		}
		if n > 32<<20 {
			t.Errorf("%s: refusing it allocated %d MB", name, n>>20)
		}
	}
	steps, err := ParseScript(strings.Repeat("wait 'login: '\nsend root\\r\n", maxSteps/2))
	if err != nil || len(steps) != maxSteps {
		t.Fatalf("a long script of small waits: %d steps, %v", len(steps), err)
	}
	// Through Runner.Run, on stdin: refused before the console opens.
	env := newEnv(t, Config{})
	opened := false
	rq := req("node-17")
	rq.Stdin = strings.NewReader(strings.Repeat("wait '"+hugePattern+"'\n", 16))
	rq.OpenConsole = func(context.Context, ConsoleOptions) (Console, error) {
		opened = true
		return &fakeConsole{out: make(chan []byte)}, nil
	}
	var out, errb bytes.Buffer
	if code := env.r.Run(context.Background(), rq, Command{Name: CmdExpect, Stdin: true}, &out, &errb); code != ExitUsage || opened {
		t.Errorf("expect --stdin: got exit %d (%q), console opened %v; want 2 before opening it", code, errb.String(), opened)
	}
}

// TestSearchInterrupted: a search of the worst allowed pattern over a long
// line ends within a slice of its context's end, with the context's cause,
// whether the cause comes in the middle of a slice or while the command
// waits for its budget.
func TestSearchInterrupted(t *testing.T) {
	p := mustPattern(worstPattern)
	in := worstLine(window)
	for _, rate := range []time.Duration{0, time.Millisecond} {
		cause := errors.New("token rotated")
		ctx, cancel := context.WithCancelCause(context.Background())
		mt := meter{rate: rate}
		done := make(chan error, 1)
		go func() { // waited for below
			_, err := mt.find(ctx, p.re, p.size, in, false)
			done <- err
		}()
		time.Sleep(200 * time.Millisecond) // well into the search (seconds of CPU uninterrupted)
		cancel(cause)
		cut := time.Now()
		select {
		case err := <-done:
			if !errors.Is(err, cause) {
				t.Errorf("rate %v: got %v, want the cause", rate, err)
			}
			if took := time.Since(cut); took > time.Second {
				t.Errorf("rate %v: the search ended %v after its context", rate, took)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("rate %v: the search did not end within 30 s of its context", rate)
		}
	}
}

// TestWaitTimeoutDuringSearch: a wait whose pattern is the worst allowed,
// over a long line without newline, answers at its timeout (within a
// slice; here within a generous second), not when its searches are done.
func TestWaitTimeoutDuringSearch(t *testing.T) {
	con := &fakeConsole{out: make(chan []byte, 64)}
	for range 64 {
		con.out <- worstLine(1024)
	}
	var m matcher
	start := time.Now()
	_, err := m.wait(context.Background(), con, mustPattern(worstPattern), 500*time.Millisecond)
	if !errors.Is(err, ErrTimedOut) {
		t.Fatalf("got %v, want the timeout", err)
	}
	if late := time.Since(start) - 500*time.Millisecond; late > time.Second {
		t.Errorf("answered %v after the timeout", late)
	}
}

// cpuTime is the CPU time this process used so far.
func cpuTime(t *testing.T) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		t.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// TestSearchCPUBudget: a command searching with the worst allowed pattern
// spends at most about its budget per second (here: well under half a
// core, where it would take a whole one without the budget), and its
// search goes on: paused, not dropped (a search that costs more than the
// budget's burst ends, with its answer).
func TestSearchCPUBudget(t *testing.T) {
	p := mustPattern(worstPattern)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	mt := meter{rate: SearchCPU}
	cpu0, wall0 := cpuTime(t), time.Now()
	_, err := mt.find(ctx, p.re, p.size, worstLine(window), false)
	cpu, wall := cpuTime(t)-cpu0, time.Since(wall0)
	t.Logf("%v of CPU in %v", cpu, wall)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("got %v, want the search still running at its deadline", err)
	}
	if cpu > wall*4/10 {
		t.Errorf("the search used %v of CPU in %v", cpu, wall)
	}

	mt = meter{rate: 20 * SearchCPU}
	if loc, err := mt.find(context.Background(), p.re, p.size, worstLine(2300), false); loc != nil || err != nil {
		t.Errorf("a search past the burst: got %v, %v, want its end: no match", loc, err)
	}
}

// TestMeterOwed: the budget refills at SearchCPU per second, saves up at
// most searchBurst, and what a slice used beyond it is owed as a pause.
func TestMeterOwed(t *testing.T) {
	now := time.Unix(1000, 0)
	mt := meter{rate: SearchCPU, now: func() time.Time { return now }}
	if d := mt.owed(); d != 0 || mt.tokens != searchBurst {
		t.Fatalf("fresh: owed %v, tokens %v", d, mt.tokens)
	}
	mt.tokens -= searchBurst + SearchCPU // a slice that ran long
	if d := mt.owed(); d != time.Second {
		t.Errorf("after a slice of %v: owed %v, want 1s", searchBurst+SearchCPU, d)
	}
	now = now.Add(time.Hour)
	if d := mt.owed(); d != 0 || mt.tokens != searchBurst {
		t.Errorf("an hour later: owed %v, tokens %v, want 0 and %v", d, mt.tokens, searchBurst)
	}
}

// TestWaitAmortized: with a pattern whose search costs more than a slice,
// a console printing one byte at a time is searched once per
// amortize-th of the span (not once per byte), and a match is never
// missed: one that arrives among tiny chunks is found, and so is one that
// arrives last, with nothing after it (searchDelay later).
func TestWaitAmortized(t *testing.T) {
	p := mustPattern(`(?:[a-z]{1,64} ){2}(?:login|prompt):`)
	if p.size*maxSpan <= sliceSteps {
		t.Fatalf("the pattern is too cheap (%d instructions) for this test", p.size)
	}
	var m matcher
	m.feed(bytes.Repeat([]byte("noise noise\r\n"), maxSpan/13+1), time.Now())
	if _, ok := m.findT(p); ok {
		t.Fatal("matched noise")
	}
	m.feed([]byte("x"), time.Now())
	if m.due(p) {
		t.Error("a search is due after one byte")
	}
	m.feed(bytes.Repeat([]byte("y"), maxSpan/4), time.Now())
	if !m.due(p) {
		t.Error("no search due after an amortize-th of the span")
	}
	var short matcher
	short.feed([]byte("noise noise\r\n"), time.Now())
	short.findT(p)
	short.feed([]byte("x"), time.Now())
	if !(&matcher{}).due(p) || !short.due(p) {
		t.Error("a search that fits in a slice is not due at once")
	}

	for _, tail := range []string{"", "\r\nmore output\r\n"} {
		con := &fakeConsole{out: make(chan []byte, 1<<16)}
		for _, c := range bytes.Repeat([]byte("noise words\r\n"), 1000) {
			con.out <- []byte{c}
		}
		for _, c := range []byte("\r\nthe system login: " + tail) {
			con.out <- []byte{c}
		}
		var m matcher
		mt, err := m.wait(context.Background(), con, p, 10*time.Second)
		if err != nil || mt.Text != "the system login:" {
			t.Errorf("tail %q: got %+v, %v", tail, mt, err)
		}
	}
}

// BenchmarkSearchWorst is what Go's regexp costs at the bounds: the worst
// allowed pattern (MaxProgram) over a line of its worst input, in ns per
// step (instruction x byte) and per byte, searched as a wait does (in
// slices). The budgets' figures (sliceSteps, SearchCPU) come from it.
func BenchmarkSearchWorst(b *testing.B) {
	p := mustPattern(worstPattern)
	for _, in := range []struct {
		name string
		data []byte
	}{{"letters", worstLine(maxSpan)}, {"invalid", bytes.Repeat([]byte{0xff}, maxSpan)}} {
		b.Run(in.name, func(b *testing.B) {
			var mt meter
			b.SetBytes(int64(len(in.data)))
			for b.Loop() {
				if loc, err := mt.find(context.Background(), p.re, p.size, in.data, false); loc != nil || err != nil {
					b.Fatalf("got %v, %v", loc, err)
				}
			}
			perByte := float64(b.Elapsed().Nanoseconds()) / float64(b.N*len(in.data))
			b.ReportMetric(perByte/float64(p.size), "ns/step")
			b.ReportMetric(perByte, "ns/byte")
		})
	}
}

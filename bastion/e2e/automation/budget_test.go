package automation

// End-to-end tests of the automation budgets: a tenant's patterns are
// bounded by their compiled size (memory), its searches by slices and a
// CPU budget (a timeout, a hang-up and a cut end them at once, whatever
// the pattern and the output). These tests do not run in parallel: they
// read the process's heap, CPU time and goroutines.

import (
	"bytes"
	"regexp"
	"runtime"
	"runtime/pprof"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/obmd/obmd/bastion/e2e/obmdtest"
)

// budgetHuge is a ~1000-byte pattern that compiles to about 156,000
// instructions (tens of MB as compiled before the budgets).
var budgetHuge = strings.Repeat(`(?:.{0,1000})`, 78)

// budgetClass is a large case-folded class: Go's costliest instruction
// per byte found.
const budgetClass = `(?i)[\p{L}\p{M}\p{N}\p{P}\p{S}]`

// budgetWorst is the costliest pattern the budget allows (about 4,000
// instructions with its mid-line form): over a long line of letters every
// instruction stays alive on every byte, and it never matches.
const budgetWorst = budgetClass + `{1000}` + budgetClass + `{1000}\n`

// goroutinesIn counts this process's goroutines whose stack holds fn.
func goroutinesIn(fn string) int {
	var b bytes.Buffer
	pprof.Lookup("goroutine").WriteTo(&b, 2)
	return strings.Count(b.String(), fn+"(")
}

// processCPU is the CPU time this process used so far.
func processCPU(t *testing.T) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		t.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// cpuOver is the CPU time this process used during d.
func cpuOver(t *testing.T, d time.Duration) time.Duration {
	c := processCPU(t)
	time.Sleep(d)
	return processCPU(t) - c
}

// TestAutomateBudgetMemory, through OpenSSH: a pattern that compiles to a
// huge program is refused (exit 2, the limit named), alone, after
// --wait-for, and as the many waits of an expect script on stdin (the code
// before the budgets compiled and kept them all: about 40 MB each); obmd
// allocates little doing so.
func TestAutomateBudgetMemory(t *testing.T) {
	o, tok, _ := startSim(t, "bm")
	script := strings.Repeat("wait "+budgetHuge+" 1s\n", 16)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for _, c := range []struct {
		stdin string
		cmd   []string
	}{
		{"", []string{"wait-for", budgetHuge}},
		{"", []string{"power-cycle", "--wait-for", budgetHuge[:13*70]}},
		{script, []string{"expect", "--stdin"}},
	} {
		res := o.OpenSSHIn("bm", tok, strings.NewReader(c.stdin), []string{"-T"}, c.cmd...)
		if res.Code != 2 || !strings.Contains(res.Stderr, "more than 4096 instructions") {
			t.Errorf("%s: got %+v, want exit 2 naming the limit", c.cmd[0], res)
		}
	}
	runtime.ReadMemStats(&after)
	if n := after.TotalAlloc - before.TotalAlloc; n > 64<<20 {
		t.Errorf("obmd allocated %d MB refusing them", n>>20)
	}
	if acts := auditEvents(o, "bm"); has(acts, "power.cycle") {
		t.Errorf("a refused power-cycle --wait-for ran: %q", acts)
	}
}

// TestAutomateBudgetSearch: the worst pattern the budget allows, over a
// long line without newline in the tenancy's history (wait-for
// --tenancy) and live: --timeout 3s answers within a slice of 3 s (the
// audit says when, from obmd's side; here within a generous 1.5 s); while
// it searches, obmd spends at most its budget of CPU (not a core); a
// hang-up and a rotation end the search at once: its goroutine is gone and
// the CPU with it.
func TestAutomateBudgetSearch(t *testing.T) {
	o, tok, bmc := startSim(t, "bs")
	// The line goes into the history while a viewer holds the link.
	_, hold := o.NewSession(t, "bs", tok)
	if err := hold.Start("wait-for never-printed --timeout 1m"); err != nil {
		t.Fatal(err)
	}
	obmdtest.WaitUntil(t, "the console link", func() bool { return bmc.ConsoleActive() })
	line := bytes.Repeat([]byte("a"), 4096)
	for range 64 {
		bmc.Inject(line)
	}
	obmdtest.WaitUntil(t, "the long line in the history", func() bool {
		r, err := o.ExecGo("bs", tok, "console-log")
		return err == nil && strings.Count(r.Stdout, "a") >= 64*4096
	})
	hold.Close()

	// A timeout, answered at its deadline, not at the searches' end.
	res := o.OpenSSH("bs", tok, nil, "wait-for", budgetWorst, "--tenancy", "--timeout", "3s")
	if res.Code != 5 || !strings.Contains(res.Stderr, "no match within 3s") {
		t.Fatalf("wait-for --tenancy --timeout 3s: got %+v, want exit 5", res)
	}
	budgetLate(t, o, "bs", 3*time.Second)

	// Live: a line without newline printed while it waits.
	done := background(o, "bs", tok, "wait-for", budgetWorst, "--timeout", "3s")
	obmdtest.WaitUntil(t, "the live search", func() bool { return goroutinesIn("commands.(*Runner).waitFor") == 1 })
	for i := 0; i < 3*64; i++ {
		bmc.Inject(line[:1024])
		time.Sleep(10 * time.Millisecond)
	}
	if res := <-done; res.Code != 5 {
		t.Fatalf("live wait-for --timeout 3s: got %+v, want exit 5", res)
	}
	budgetLate(t, o, "bs", 3*time.Second)

	for _, end := range []string{"hang-up", "rotation"} {
		c, s := o.NewSession(t, "bs", tok)
		if err := s.Start("wait-for " + budgetWorst + " --tenancy --timeout 10m"); err != nil {
			t.Fatal(err)
		}
		obmdtest.WaitUntil(t, end+": the search", func() bool { return goroutinesIn("commands.(*meter).find") == 1 })
		cpu := cpuOver(t, 2*time.Second)
		t.Logf("%s: %v of CPU in 2 s while searching", end, cpu)
		if cpu > time.Second {
			t.Errorf("%s: obmd used %v of CPU in 2 s for one search", end, cpu)
		}
		switch end {
		case "hang-up":
			s.Close()
		case "rotation":
			tok = o.Rotate("bs")
		}
		ended := time.Now()
		obmdtest.WaitUntil(t, end+": the search gone", func() bool { return goroutinesIn("commands.(*Runner).waitFor") == 0 })
		t.Logf("%s: the search ended %v after it", end, time.Since(ended))
		if took := time.Since(ended); took > time.Second {
			t.Errorf("%s: the search ended %v after it", end, took)
		}
		cpu = cpuOver(t, time.Second)
		t.Logf("%s: %v of CPU in the second after", end, cpu)
		if cpu > 300*time.Millisecond {
			t.Errorf("%s: obmd still used %v of CPU in the second after", end, cpu)
		}
		c.Close()
	}
}

// budgetLate checks the last console.wait of label timed out within 1.5 s
// of timeout, as obmd's audit says (from the console's opening to the
// answer).
func budgetLate(t *testing.T, o *obmdtest.Daemon, label string, timeout time.Duration) {
	t.Helper()
	re := regexp.MustCompile(`^console\.wait timeout timed out after (\S+)$`)
	var took time.Duration
	for _, a := range auditEvents(o, label) {
		if m := re.FindStringSubmatch(a); m != nil {
			took, _ = time.ParseDuration(m[1]) // the newest first
			break
		}
	}
	t.Logf("timed out after %v (timeout %v)", took, timeout)
	if late := took - timeout; took == 0 || late > 1500*time.Millisecond {
		t.Errorf("the wait timed out after %v: %v late, want within 1.5 s of %v", took, late, timeout)
	}
}

// TestAutomateQuotingOpenSSH: the README's forms through OpenSSH, which
// joins the remote command's words with spaces: wait-for's REGEX words
// and an inline expect script work unquoted for obmd; to keep two spaces
// (or a word starting with -) the command is quoted for obmd as well, and
// the unquoted form of a word starting with - says so.
func TestAutomateQuotingOpenSSH(t *testing.T) {
	t.Parallel()
	o, tok, bmc := startSim(t, "aq")
	done := background(o, "aq", tok, "wait-for", "Reached target .*Multi-User", "--since", "10m", "--timeout", "30s")
	res := obmdtest.PrintUntil(t, simInject(bmc), "Reached target Multi-User System", done)
	if res.Code != 0 || !strings.HasPrefix(res.Stdout, "Reached target Multi-User System-") {
		t.Errorf("wait-for 'Reached target .*Multi-User' --since 10m: got %+v", res)
	}

	res = o.OpenSSH("aq", tok, nil, "expect", `send echo a\;b\r;wait ^a\;b 10s`, "--json")
	if res.Code != 0 || !strings.Contains(res.Stdout, `"line":"a;b"`) {
		t.Errorf("expect 'send echo a\\;b\\r;wait ^a\\;b 10s': got %+v", res)
	}

	// Two spaces: the natural form joins them into one, obmd's quotes
	// keep them; a word starting with - or a quote needs them.
	for _, c := range []struct {
		args []string
		code int
	}{
		{[]string{"wait-for", "two  spaces", "--timeout", "2s"}, 5},
		{[]string{`wait-for 'two  spaces' --timeout 30s`}, 0},
		{[]string{"wait-for", "link -up", "--timeout", "30s"}, 2},
		{[]string{`wait-for 'link -up' --timeout 30s`}, 0},
		{[]string{`wait-for "it's up" --timeout 30s`}, 0},
	} {
		done := background(o, "aq", tok, c.args...)
		res := obmdtest.PrintUntil(t, simInject(bmc), "two  spaces, link -up, it's up", done)
		if res.Code != c.code {
			t.Errorf("%q: got %+v, want exit %d", c.args, res, c.code)
		}
		if c.code == 2 && !strings.Contains(res.Stderr, "must be quoted for obmd") {
			t.Errorf("%q: got %q, want the quoting rule", c.args, res.Stderr)
		}
	}
	if res := o.OpenSSH("aq", tok, nil, "help", "wait-for"); !strings.Contains(res.Stdout, `ssh NODE "wait-for 'a  b'"`) {
		t.Errorf("help wait-for: no quoting rule in %q", res.Stdout)
	}
}

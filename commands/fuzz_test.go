package commands

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"unicode"
)

func FuzzSplitParse(f *testing.F) {
	for _, seed := range []string{
		"", "power-status", "power-on --json", "power-off --soft", "power-cycle --force --json",
		"power-reset", "bootdev pxe --persistent", "bootdev 'disk'", `bootdev "cdrom`, "console --read-only",
		"console-log --lines 10", "console-log --lines=100000", "console-log --lines", "sessions", "help bootdev",
		"version --json", "-h", "power-on --help", "foo bar", "\x1b[2J", "power-on\u009b", "a\u202eb",
		"\xff\xfe", strings.Repeat("x ", 20), strings.Repeat("y", 2000), `""`, `'`, "--json",
		"wait-for 'login:' --timeout 5m --since 10m", "wait-for (a|b)* --tenancy", "wait-for x --since=attach",
		`send 'root\r'`, `send a\x4`, "send --hex 0d0a --force", "send --stdin", "expect 'wait x 1s;send y\\r;break'",
		"expect --stdin --timeout 1m", "power-cycle --wait-for login: --timeout 1s", "power-on --wait-for=",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, line string) {
		argv, err := Split(line)
		if err == nil {
			if len(argv) > MaxWords {
				t.Fatalf("got %d words, want at most %d", len(argv), MaxWords)
			}
			_, err = Parse(argv)
		}
		checkFuzzErr(t, err)
		// Parse must be safe on its own too, whatever a transport hands it.
		_, err = Parse(strings.Split(line, "\x00"))
		checkFuzzErr(t, err)
	})
}

func checkFuzzErr(t *testing.T, err error) {
	t.Helper()
	if err == nil {
		return
	}
	var ue *UsageError
	if !errors.As(err, &ue) {
		t.Fatalf("got %v (%T), want a *UsageError", err, err)
	}
	if len(ue.Msg) > 400 {
		t.Fatalf("got a %d-byte message, want a short one", len(ue.Msg))
	}
	for _, r := range ue.Msg {
		if r != ' ' && !unicode.IsPrint(r) {
			t.Fatalf("message %q holds non-printable %U", ue.Msg, r)
		}
	}
}

// FuzzScript: ParseScript never panics, and refuses with a usage error
// naming a line.
func FuzzScript(f *testing.F) {
	for _, seed := range []string{"wait 'login:' 10m\nsend root\\r\nsleep 1s\nbreak\n", "# c\n\nwait (", "send \\x", "wait \"a b\" 0s",
		strings.Repeat("break\n", 1001), "sleep -1s", "wait ' 1s"} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, script string) {
		steps, err := ParseScript(script)
		checkFuzzErr(t, err)
		if err == nil && (len(steps) == 0 || len(steps) > maxSteps) {
			t.Fatalf("got %d steps", len(steps))
		}
	})
}

// FuzzMatcherChunks: whatever the console prints (any bytes) and however
// it arrives cut, a wait finds the matches a search of the whole output
// finds, at the same offsets, with the same text. The patterns match a
// fixed number of characters and look at nothing after the match (a `$`
// or `a+` may rightly match sooner in output that is still arriving).
func FuzzMatcherChunks(f *testing.F) {
	pats := []string{`.`, `x.`, `.x`, `^.`, `\x{FFFD}`, `[^a-z\n]`, `é`, `€.`, `\bx.`, `\B.`, `^\x{FFFD}|é`, `a.b`}
	for _, seed := range []string{"xé x€ x😀\n", "\xff\xc3\xa9\xe2\x82x", "é€😀x€\n\xa9", "a\xc3b\n\xf0\x9f\x98"} {
		for i := range pats {
			f.Add([]byte(seed), uint8(i), uint64(0x5555555555555555))
		}
	}
	compiled := make([]*pattern, len(pats))
	for i, src := range pats {
		compiled[i] = mustPattern(src)
	}
	f.Fuzz(func(t *testing.T, out []byte, which uint8, seed uint64) {
		p := compiled[int(which)%len(pats)]
		out = append(out[:min(len(out), 128)], '\n') // the output goes on: nothing is left incomplete
		var want []found
		for _, loc := range p.re.FindAllIndex(out, -1) {
			want = append(want, found{int64(loc[0]), string(out[loc[0]:loc[1]])})
		}
		var cuts []int
		for c := 1; c < len(out); c++ {
			if seed>>(c%64)&1 == 1 {
				cuts = append(cuts, c)
			}
		}
		if got := scanCut(p, out, cuts); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("pattern %q, output %q cut at %v: got %v, want %v", p.src, out, cuts, got, want)
		}
	})
}

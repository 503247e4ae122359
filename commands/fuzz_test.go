package commands

import (
	"errors"
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

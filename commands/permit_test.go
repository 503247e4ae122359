package commands

import (
	"bytes"
	"strings"
	"testing"
)

// TestUsesConsole: every command line that reads or types on the console
// says so, and only those; every command of the help is classified here,
// so that a command added later must be too.
func TestUsesConsole(t *testing.T) {
	tests := []struct {
		line string
		want bool
	}{
		{"console", true},
		{"console --read-only", true},
		{"console-log", true},
		{"console-log --follow", true},
		{"console-log --timestamps --json", true},
		{"wait-for login", true},
		{"wait-for --screen login", true},
		{"screen", true},
		{"screen --ansi", true},
		{"send root", true},
		{"expect 'wait login'", true},
		{"power-on --wait-for login", true},
		{"power-cycle --wait-for login --timeout 1m", true},
		{"power-status", false},
		{"power-on", false},
		{"power-off --soft", false},
		{"power-cycle --force", false},
		{"power-reset", false},
		{"bootdev pxe", false},
		{"sessions", false},
		{"doctor", false},
		{"help console", false},
		{"version --json", false},
	}
	seen := map[Name]bool{}
	for _, tt := range tests {
		argv, err := Split(tt.line)
		if err != nil {
			t.Fatalf("split %q: %v", tt.line, err)
		}
		cmd, err := Parse(argv)
		if err != nil {
			t.Fatalf("parse %q: %v", tt.line, err)
		}
		seen[cmd.Name] = true
		if got := cmd.UsesConsole(); got != tt.want {
			t.Errorf("%q: uses the console %v, want %v", tt.line, got, tt.want)
		}
	}
	for _, s := range table() {
		if !seen[s.name] {
			t.Errorf("command %s is not classified by this test", s.name)
		}
	}
	if !(Command{Name: "frob"}).UsesConsole() {
		t.Errorf("a command not listed: does not use the console, want it to (fail closed)")
	}
}

// TestNotAllowedError: a refusal prints its reason and exits 3, in text
// and in JSON.
func TestNotAllowedError(t *testing.T) {
	err := &NotAllowedError{Command: CmdConsoleLog, Why: "this certificate does not permit the console (no permit-pty)"}
	for _, asJSON := range []bool{false, true} {
		var out, errOut bytes.Buffer
		code := WriteError(&out, &errOut, "n1", Command{Name: CmdConsoleLog, JSON: asJSON}, err)
		want := "obmd: console-log: this certificate does not permit the console (no permit-pty)\n"
		if code != ExitNotAllowed || errOut.String() != want {
			t.Errorf("json %v: got exit %d, stderr %q; want %d, %q", asJSON, code, errOut.String(), ExitNotAllowed, want)
		}
		if asJSON && !strings.Contains(out.String(), `"ok":false`) {
			t.Errorf("json: stdout %q, want the failure as JSON", out.String())
		}
	}
}

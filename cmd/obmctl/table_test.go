package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite docs/obmctl.md's reference from the command table")

// TestTable: the table is one a reader and the parser can rely on: names
// unique, every command documented and runnable, arguments written as
// help shows them, and a flag's name meaning one thing in every command
// (so that a flag before the command parses before the command is known).
func TestTable(t *testing.T) {
	tab := commandTable()
	names := map[string]bool{}
	kinds := map[string]flagKind{}
	for _, f := range globalFlags() {
		kinds[f.name] = f.kind
	}
	argForm := regexp.MustCompile(`^\[?[A-Z][A-Z|-]*(\.\.\.)?\]?$|^FILE\|-$`)
	for _, cmd := range tab {
		if names[cmd.name] || isGroup(tab, cmd.name) {
			t.Errorf("%s: named twice, or also a group", cmd.name)
		}
		names[cmd.name] = true
		if cmd.summary == "" || cmd.run == nil {
			t.Errorf("%s: no summary or no run", cmd.name)
		}
		for i, a := range cmd.args {
			variadic := strings.HasSuffix(strings.TrimSuffix(a, "]"), "...")
			if !argForm.MatchString(a) || variadic && i != len(cmd.args)-1 {
				t.Errorf("%s: argument %q is not NAME, [NAME] or a last NAME...", cmd.name, a)
			}
		}
		for _, f := range cmd.flags {
			if k, ok := kinds[f.name]; ok && k != f.kind {
				t.Errorf("%s: flag --%s is of another kind elsewhere", cmd.name, f.name)
			}
			kinds[f.name] = f.kind
			if f.usage == "" || (f.kind == boolFlag) != (f.arg == "") || f.name == "h" || f.name == "help" {
				t.Errorf("%s: flag --%s: no usage, an argument name that does not match its kind, or a reserved name", cmd.name, f.name)
			}
		}
	}
}

// TestParse: how a command line is read; each case shows its command,
// arguments and flags, or its error.
func TestParse(t *testing.T) {
	tab := commandTable()
	tests := []struct {
		args []string
		want string // "name args flags" or "error: ..." or "help"
	}{
		{[]string{"node", "ls"}, "node ls [] map[]"},
		{[]string{"--json", "node", "ls"}, "node ls [] map[json:true]"},
		{[]string{"node", "--json", "ls"}, "node ls [] map[json:true]"},
		{[]string{"node", "ls", "-json=false"}, "node ls [] map[json:false]"},
		{[]string{"--type", "sim", "node", "add", "n1"}, "node add [n1] map[type:sim]"},
		{[]string{"node", "add", "--addr=a=b", "n1", "--cipher", "-1"}, "node add [n1] map[addr:a=b cipher:-1]"},
		{[]string{"key", "add", "n1", "-"}, "key add [n1 -] map[]"},
		{[]string{"principals", "n1", "--", "--none"}, "principals [n1 --none] map[]"},
		{[]string{"principals", "n1", "a", "b", "c"}, "principals [n1 a b c] map[]"},
		{[]string{"help", "node", "add"}, "help [node add] map[]"},
		{[]string{"node", "add", "-h"}, "help"},
		{[]string{"--help"}, "help"},
		{nil, "error: no command"},
		{[]string{"node"}, "error: node: which one?"},
		{[]string{"node", "frob"}, `error: unknown command "node frob"`},
		{[]string{"node", "show"}, "error: node show needs LABEL"},
		{[]string{"node", "show", "a", "b"}, `error: node show: unexpected argument "b"`},
		{[]string{"node", "ls", "--type", "sim"}, "error: node ls: unknown flag --type"},
		{[]string{"--type", "sim", "node", "ls"}, "error: node ls: unknown flag --type"},
		{[]string{"--bogus", "node", "ls"}, "error: unknown flag --bogus"},
		{[]string{"node", "add", "n1", "--port"}, "error: flag --port needs a value (P)"},
		{[]string{"node", "add", "n1", "--port", "x"}, `error: --port "x": want a whole number`},
		{[]string{"node", "ls", "--json=maybe"}, `error: --json "maybe": want true or false`},
		{[]string{"node", "add", "n1", "hunter2"}, `error: node add: unexpected argument "hunter2" (the BMC password is never an argument: use --pass-file, OBMD_BMC_PASS or the prompt)`},
	}
	for _, tt := range tests {
		in, err := parse(tab, tt.args)
		var got string
		var h *helpRequest
		switch {
		case errors.As(err, &h):
			got = "help"
		case err != nil:
			got = "error: " + err.Error()
		default:
			got = fmt.Sprintf("%s %v %v", in.cmd.name, in.args, in.vals)
		}
		if got != tt.want {
			t.Errorf("%q: got %s, want %s", tt.args, got, tt.want)
		}
	}
}

// TestFieldNames: the API's field names in node add's errors become the
// flags the user typed.
func TestFieldNames(t *testing.T) {
	tab := commandTable()
	add, _ := lookup(tab, []string{"node", "add"})
	for in, want := range map[string]string{
		"info.addr is required": "--addr is required",
		"info.sol.port 70000 is out of range (1-65535, or 0 for 623)":       "--sol-port 70000 is out of range (1-65535, or 0 for 623)",
		"info.addr must not carry credentials: use info.user and info.pass": "--addr must not carry credentials: use --user and the BMC password",
		"info.pass is longer than 20 bytes, the IPMI limit":                 "the BMC password is longer than 20 bytes, the IPMI limit",
		"node \"x\" not found":   "node \"x\" not found",
		"info.unheard_of is odd": "info.unheard_of is odd",
	} {
		if got := add.fieldNames(in); got != want {
			t.Errorf("%q: got %q, want %q", in, got, want)
		}
	}
}

// TestReference: docs/obmctl.md's reference is the table's (go test
// ./cmd/obmctl -run TestReference -update rewrites it).
func TestReference(t *testing.T) {
	path := filepath.Join("..", "..", "docs", "obmctl.md")
	doc, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	before, rest, ok1 := strings.Cut(string(doc), referenceBegin)
	_, after, ok2 := strings.Cut(rest, referenceEnd)
	if !ok1 || !ok2 {
		t.Fatalf("%s: no %q ... %q section", path, referenceBegin, referenceEnd)
	}
	want := before + referenceBegin + "\n" + reference(commandTable()) + referenceEnd + after
	if want == string(doc) {
		return
	}
	if *update {
		if err := os.WriteFile(path, []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	t.Errorf("%s's reference differs from obmctl's command table: run go test ./cmd/obmctl -run TestReference -update", path)
}

const (
	referenceBegin = "<!-- reference: generated from cmd/obmctl's command table (go test ./cmd/obmctl -run TestReference -update) -->"
	referenceEnd   = "<!-- end of reference -->"
)

// reference is the Markdown reference of the table.
func reference(tab []command) string {
	var b strings.Builder
	b.WriteString("\n## Global flags\n\nAnywhere on the line, with every command.\n\n")
	flagTable(&b, globalFlags())
	b.WriteString("\n" + exitCodes + "\n\n## Commands\n")
	for i := range tab {
		cmd := &tab[i]
		fmt.Fprintf(&b, "\n### obmctl %s\n\n%s\n", cmd.synopsis(), sentence(cmd.summary))
		if cmd.help != "" {
			b.WriteString(cmd.help + "\n")
		}
		if len(cmd.flags) > 0 {
			b.WriteString("\n")
			flagTable(&b, cmd.flags)
		}
	}
	b.WriteString("\n")
	return b.String()
}

func flagTable(b *strings.Builder, flags []flagDef) {
	b.WriteString("| flag | meaning |\n|---|---|\n")
	for _, f := range flags {
		cell := func(s string) string { return strings.ReplaceAll(s, "|", `\|`) } // GitHub tables split at "|", even in code
		fmt.Fprintf(b, "| `%s` | %s |\n", cell(f.synopsis()), cell(f.describe()))
	}
}

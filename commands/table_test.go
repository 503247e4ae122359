package commands

import (
	"errors"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// flagWord is a flag as help and the docs write one.
var flagWord = regexp.MustCompile(`--[a-z][a-z-]*`)

// TestHelpFollowsTable: `help COMMAND` names every flag the command's row
// declares and no flag it does not, and Parse takes each of them; the
// list (`help`) names no flag that no command has.
func TestHelpFollowsTable(t *testing.T) {
	all := map[string]bool{"--json": true}
	for _, c := range table() {
		help := CommandUsage(c.name)
		own := map[string]bool{"--json": true}
		for _, f := range c.flags {
			if f.refused != nil {
				continue
			}
			own[f.name], all[f.name] = true, true
			if !strings.Contains(help, f.name) {
				t.Errorf("help %s does not name %s:\n%s", c.name, f.name, help)
			}
			if _, err := Parse(flagArgv(c, f)); isFlagError(err) {
				t.Errorf("%s %s: help shows it, Parse refuses it: %v", c.name, f.name, err)
			}
		}
		for _, w := range flagWord.FindAllString(help, -1) {
			if !own[w] {
				t.Errorf("help %s names %s, which %s does not take:\n%s", c.name, w, c.name, help)
			}
		}
	}
	for _, w := range flagWord.FindAllString(Usage(), -1) {
		if !all[w] {
			t.Errorf("help names %s, which no command takes", w)
		}
	}
}

// flagArgv calls c with f and what both need to parse.
func flagArgv(c command, f flag) []string {
	argv := []string{string(c.name)}
	if c.args != "" && !f.alt {
		argv = append(argv, sample(c.args))
	}
	for _, g := range c.flags {
		if g.name == f.with {
			argv = append(argv, g.name, sample(g.arg))
		}
	}
	argv = append(argv, f.name)
	if f.arg != "" {
		argv = append(argv, sample(f.arg))
	}
	return argv
}

// sample is a valid value of an argument help names arg.
func sample(arg string) string {
	switch arg {
	case "DEVICE":
		return "pxe"
	case "[COMMAND]":
		return "help"
	case "N":
		return "10"
	case "D", "WHEN":
		return "10m"
	}
	return "x"
}

// isFlagError reports whether err refuses a flag as unknown or misplaced.
func isFlagError(err error) bool {
	var ue *UsageError
	return errors.As(err, &ue) && (strings.Contains(ue.Msg, "unknown flag") ||
		strings.Contains(ue.Msg, "unexpected argument") || strings.Contains(ue.Msg, "goes with"))
}

// TestTenantGuideCommandTable: the command table of the tenant guide
// (docs/tenant.md, "Commands") is the one the code declares, row for row:
// a command, flag or argument added, dropped or renamed in either fails.
func TestTenantGuideCommandTable(t *testing.T) {
	data, err := os.ReadFile("../docs/tenant.md")
	if err != nil {
		t.Fatal(err)
	}
	const head = "| command | does | prints |\n|---|---|---|\n"
	_, rest, ok := strings.Cut(string(data), head)
	if !ok {
		t.Fatal("docs/tenant.md: no command table")
	}
	rows, _, _ := strings.Cut(rest, "\n\n")
	if want := docsTable(); rows+"\n" != want {
		t.Errorf("docs/tenant.md's command table differs from the code's; want:\n%s%s", head, want)
	}
}

// docsTable is the rows of the tenant guide's command table, in help's
// order.
func docsTable() string {
	var b strings.Builder
	for _, c := range table() {
		b.WriteString("|")
		for _, cell := range []string{"`" + c.fullSynopsis() + "`", c.summary, c.prints} {
			if cell != "" {
				b.WriteString(" " + strings.ReplaceAll(cell, "|", `\|`))
			}
			b.WriteString(" |")
		}
		b.WriteString("\n")
	}
	return b.String()
}

// fullSynopsis names every flag, each one that goes with another inside
// that one's brackets (the docs' table).
func (c command) fullSynopsis() string {
	words := []string{string(c.name)}
	if args := c.argsAndAlts(); args != "" {
		words = append(words, args)
	}
	for _, f := range c.flags {
		if f.refused != nil || f.alt || f.with != "" {
			continue
		}
		u := f.usage()
		for _, g := range c.flags {
			if g.with == f.name {
				u += " [" + g.usage() + "]"
			}
		}
		words = append(words, "["+u+"]")
	}
	return strings.Join(words, " ")
}

// TestTableWellFormed: names and flags are unique, and a flag goes only
// with a flag of its own command.
func TestTableWellFormed(t *testing.T) {
	var names []Name
	for _, c := range table() {
		if slices.Contains(names, c.name) {
			t.Errorf("command %s twice", c.name)
		}
		names = append(names, c.name)
		var flags []string
		for _, f := range c.flags {
			if slices.Contains(flags, f.name) {
				t.Errorf("%s: flag %s twice", c.name, f.name)
			}
			flags = append(flags, f.name)
			if (f.set == nil) == (f.refused == nil) {
				t.Errorf("%s %s: wants one of set and refused", c.name, f.name)
			}
			if f.arg != "" && f.what == "" && f.refused == nil {
				t.Errorf("%s %s: takes %s but does not say what it is", c.name, f.name, f.arg)
			}
		}
		for _, f := range c.flags {
			if f.with != "" && !slices.Contains(flags, f.with) {
				t.Errorf("%s %s goes with %s, which %s does not take", c.name, f.name, f.with, c.name)
			}
		}
	}
}

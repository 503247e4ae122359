package commands

import (
	"fmt"
	"strings"
)

// command is one row of the exec grammar: how a command is called, what it
// takes and what it does. Parse, help (Usage, CommandUsage) and
// docs/tenant.md's command table (which the package's tests keep in step)
// read the table; nothing else says what a command accepts.
type command struct {
	name Name
	// args names its arguments as help shows them: "DEVICE", "[COMMAND]",
	// "REGEX", "TEXT...". word takes them.
	args string
	// flags are its flags (--json and --help go with every command).
	flags []flag
	// summary is its line in Usage and in the docs' table; detail, if
	// set, is what `help COMMAND` adds (lines of at most 78 columns).
	summary, detail string
	// prints is what it prints, as the docs' table says.
	prints string
	// word takes one argument; ok false: it takes no more (an unexpected
	// argument). nil: it takes none.
	word func(c *Command, w string) (ok bool, err error)
	// text names what its words are when one may start with "-" (a
	// regular expression, send's text, a script): an unknown flag's error
	// then says to quote it. "" (or nil): none may.
	text func(c *Command) string
	// check checks the command once every word is read (and completes
	// it: wait-for's Pattern).
	check func(c *Command) error
}

// flag is one flag of a command.
type flag struct {
	name string // "--lines"
	// arg names its value in help ("N"); "" for a flag without one, which
	// is only ever the word itself (no "=").
	arg string
	// what its value is, for the error when it is missing ("a number").
	what string
	// set applies it to the command (val: its value; "" without one).
	set func(c *Command, val string) error
	// brief: help's one-line synopsis names it; the others are "[flags]".
	brief bool
	// alt: it stands instead of the command's arguments
	// ("TEXT...|--stdin").
	alt bool
	// with is the flag it goes only with (--timeout with --wait-for): a
	// usage error without it, and named after it rather than alone.
	with string
	// refused: no flag of the command but a word it refuses as its own
	// error (unknownFlag or unexpectedArg) rather than as text to quote;
	// help and the docs never show it.
	refused func(c command, word string) error
}

// table is every command, in the order help lists them (and the docs'
// table). A function, not
// a package variable, so that nothing package-level is mutable.
func table() []command {
	timeout := flag{name: "--timeout", arg: "D", what: "a duration", set: setTimeout}
	force := flag{name: "--force", set: func(c *Command, _ string) error { c.Force = true; return nil }}
	stdin := flag{name: "--stdin", alt: true, set: func(c *Command, _ string) error { c.Stdin = true; return nil }}
	waitFor := flag{name: "--wait-for", arg: "RE", what: "a regular expression", set: setPattern}
	// wait-for, send and expect refuse --wait-for (power-on's and
	// power-cycle's) as a flag, whatever their words may hold.
	notWaitFor := flag{name: "--wait-for", arg: "RE", refused: unknownFlag}
	return []command{
		{name: CmdConsole, summary: "attach to the serial console (the default)",
			flags: []flag{
				{name: "--read-only", brief: true, set: func(c *Command, _ string) error { c.ReadOnly = true; return nil }},
				{name: "--ignore-eof", set: func(c *Command, _ string) error { c.IgnoreEOF = true; return nil }},
			},
			detail: "--read-only: watch; nothing this session types or escapes reaches the node.\n" +
				"Without a terminal (ssh -T < script.txt), the console ends once the input you\n" +
				"sent does (EOF): it goes to the node, then the output until it pauses.\n" +
				"--ignore-eof: keep the console after the end of your input, until you hang up."},
		{name: CmdConsoleLog, summary: "print this tenancy's console history", prints: "the bytes the node sent",
			flags: []flag{
				{name: "--lines", arg: "N", what: "a number", brief: true, set: setLines},
				{name: "--since", arg: "WHEN", what: "a duration or a time", set: setLogSince},
				{name: "--timestamps", set: func(c *Command, _ string) error { c.Timestamps = true; return nil }},
				{name: "--follow", set: func(c *Command, _ string) error { c.Follow = true; return nil }},
				{name: "--cast", set: func(c *Command, _ string) error { c.Cast = true; return nil }},
			},
			detail: "--lines N: only the last N lines (1 to 100000).\n--since 10m|RFC3339: only what came since.\n" +
				"--timestamps: each line prefixed with the time its first byte arrived, and obmd's markers.\n" +
				"--follow: then the live output until you hang up.\n--cast: asciicast v2 (asciinema play).",
			check: checkConsoleLog},
		{name: CmdWaitFor, args: "REGEX", summary: "wait for console text matching REGEX (RE2)", prints: "the matching line",
			flags: []flag{
				timeout,
				{name: "--since", arg: "WHEN", what: "attach, now, a duration or a time", set: setWaitSince},
				{name: "--tenancy", set: func(c *Command, _ string) error { c.SinceMode = SinceTenancy; return nil }},
				{name: "--screen", set: func(c *Command, _ string) error { c.Screen = true; return nil }},
				notWaitFor,
			},
			detail: "Exits 0 printing the matching line, 5 at the timeout; never writes.\n" +
				"--timeout D: how long to wait (default 5m, at most 24h).\n" +
				"--since WHEN: where the search starts:\n" +
				"  now: only output after the command starts (the default); attach: also\n" +
				"  what an attach replays now; 10m|RFC3339: this tenancy's history since.\n" +
				"--tenancy: also this tenancy's whole history.\n" +
				"--screen: match the screen instead (its rows joined by newlines), as it\n" +
				"  shows now and as it changes, however it was drawn: a menu that the last\n" +
				"  bytes no longer hold matches; prints the row holding the match.\n" +
				"(?m) is implied: ^ matches where a line starts, never mid-line.\n" +
				"REGEX is its words joined by single spaces, as ssh joins a command's words:\n" +
				"  ssh NODE wait-for 'Reached target .*Multi-User' works. To keep two spaces,\n" +
				"  a word starting with - or a quote, quote REGEX for obmd too:\n" +
				"  ssh NODE \"wait-for 'a  b'\".\n" +
				fmt.Sprintf("REGEX compiles to at most %d instructions; --timeout ends a long search.", MaxProgram),
			word: addWord, text: always("regular expression"), check: checkWaitFor},
		{name: CmdScreen, summary: "print what the console shows now (its screen)", prints: "its rows",
			flags: []flag{{name: "--ansi", brief: true, set: func(c *Command, _ string) error { c.ANSI = true; return nil }}},
			detail: "The screen obmd's terminal emulator holds of the node's console: a BIOS\n" +
				"menu, an installer, whatever its output drew, not its last bytes. Its rows,\n" +
				"trailing spaces trimmed; --json adds its size, the cursor and the cells\n" +
				"drawn with attributes. --ansi: a redraw for your terminal (clear, then the\n" +
				"cells with their attributes and the cursor).",
			check: checkScreen},
		{name: CmdSend, args: "TEXT...", summary: "type on the console, as the writer", prints: "`node-17: sent 5 bytes`",
			flags: []flag{
				stdin,
				{name: "--hex", set: func(c *Command, _ string) error { c.Hex = true; return nil }},
				force,
				{name: "--timeout", arg: "D", refused: unexpectedArg}, // send never waits
				notWaitFor,
			},
			detail: "TEXT: the words joined by spaces, with \\r \\n \\t \\\\ \\; \\xHH escapes; nothing\n" +
				"is added (send 'root\\r' types root and Enter). --stdin: stdin's bytes.\n" +
				"--hex: TEXT is bytes in hex (\"0d0a\"). Exits 4 while another session writes,\n" +
				"unless --force: then it writes for a moment and hands the role back.",
			word: addWord, text: always("text"), check: checkSend},
		{name: CmdExpect, args: "SCRIPT", summary: "run an expect script on the console", prints: "`node-17: expect: 4 steps done`",
			flags: []flag{stdin, timeout, force, notWaitFor},
			detail: "Lines: wait REGEX [TIMEOUT] | send TEXT | sleep D | break | # a comment.\n" +
				"Stops at the first failing step, naming its line; exits 5 if a wait timed out.\n" +
				"SCRIPT: the script, steps separated by ';' (\\; is a ';'). --stdin: from stdin.\n" +
				"--timeout D: a wait's default (5m). --force: send even while a session writes.\n" +
				"SCRIPT is its words joined by single spaces, as ssh joins a command's words:\n" +
				"  ssh NODE expect 'send a\\;b\\r;wait b' works. To keep two spaces, a word\n" +
				"  starting with - or a quote, quote SCRIPT for obmd too:\n" +
				"  ssh NODE \"expect 'send ls  -l\\r'\".\n" +
				fmt.Sprintf("Its waits compile to at most %d instructions each, %d together.", MaxProgram, MaxScriptProgram),
			word: addWord, text: always("script"), check: checkExpect},
		{name: CmdPowerStatus, summary: "print the power state", prints: "`node-17: power on`"},
		{name: CmdPowerOn, summary: "power on (--wait-for: then wait for RE)", prints: "`node-17: powered on`",
			flags: []flag{withBrief(waitFor), withFlag(timeout, waitFor)},
			detail: "--wait-for RE: then wait for output after the power operation to match RE;\n" +
				"exits 5 if it did not come within --timeout D (default 5m). The words after\n" +
				"RE join it, as wait-for's do (see help wait-for).",
			word: joinPattern, text: patternText, check: checkWaitPattern},
		{name: CmdPowerOff, summary: "power off (--soft: ask the OS to shut down)", prints: "`node-17: powered off`",
			flags:  []flag{{name: "--soft", brief: true, set: func(c *Command, _ string) error { c.Soft = true; return nil }}},
			detail: "--soft: ask the OS to shut down (ACPI) instead of cutting power."},
		{name: CmdPowerCycle, summary: "power off, then on (--force: hard reset)", prints: "`node-17: power cycled`",
			flags: []flag{withBrief(force), waitFor, withFlag(timeout, waitFor)},
			detail: "--force: hard reset instead of power off and on.\n" +
				"--wait-for RE: then wait for output after the power operation to match RE;\n" +
				"exits 5 if it did not come within --timeout D (default 5m). The words after\n" +
				"RE join it, as wait-for's do (see help wait-for).",
			word: joinPattern, text: patternText, check: checkWaitPattern},
		{name: CmdPowerReset, summary: "hard reset (power stays on)", prints: "`node-17: reset`"},
		{name: CmdBootdev, args: "DEVICE", summary: "next boot device: pxe|disk|bios|cdrom|none", prints: "`node-17: next boot from pxe`",
			flags:  []flag{{name: "--persistent", brief: true, set: func(c *Command, _ string) error { c.Persistent = true; return nil }}},
			detail: "DEVICE: pxe, disk, bios, cdrom or none.\n--persistent: every boot, not only the next one.",
			word:   setDevice, check: checkDevice},
		{name: CmdSessions, summary: "list the live sessions on this node", prints: "a table"},
		{name: CmdDoctor, summary: "check the BMC step by step, changing nothing", prints: "one line per step",
			detail: "Checks, in order, the BMC's address, the login, the power status and the\nconsole (for Redfish also the service, the system and its resets), stops at\nthe first that fails and says what to do about it. Exit 0 only if all pass."},
		{name: CmdHelp, args: "[COMMAND]", summary: "print this help, or one command's", prints: "this help", word: setTopic},
		{name: CmdVersion, summary: "print the obmd version", prints: "the version"},
	}
}

// lookup is the row of the command called name.
func lookup(name Name) (command, bool) {
	for _, c := range table() {
		if c.name == name {
			return c, true
		}
	}
	return command{}, false
}

func withBrief(f flag) flag { f.brief = true; return f }

func withFlag(f, with flag) flag { f.with = with.name; return f }

func always(text string) func(*Command) string { return func(*Command) string { return text } }

// synopsis is the command as help's list shows it: its name, its
// arguments (or the flags that stand instead), its brief flags, and
// "[flags]" for the others; a flag that goes with another is that one's.
func (c command) synopsis() string {
	words := []string{string(c.name)}
	if args := c.argsAndAlts(); args != "" {
		words = append(words, args)
	}
	more := false
	for _, f := range c.flags {
		switch {
		case f.refused != nil, f.alt, f.with != "":
		case f.brief:
			words = append(words, "["+f.usage()+"]")
		default:
			more = true
		}
	}
	if more {
		words = append(words, "[flags]")
	}
	return strings.Join(words, " ")
}

// argsAndAlts is the command's arguments and the flags that stand
// instead of them.
func (c command) argsAndAlts() string {
	alts := []string{}
	if c.args != "" {
		alts = append(alts, c.args)
	}
	for _, f := range c.flags {
		if f.alt {
			alts = append(alts, f.usage())
		}
	}
	return strings.Join(alts, "|")
}

// usage is "--name ARG" ("--name" without a value).
func (f flag) usage() string {
	if f.arg == "" {
		return f.name
	}
	return f.name + " " + f.arg
}

// Usage is the help text: one line per command, then the common flag and
// the exit codes. Lines fit 80 columns; it ends with a newline.
func Usage() string {
	var b strings.Builder
	b.WriteString("usage: ssh NODE@HOST [COMMAND [ARGS...]] [--json]\n\n")
	tab := table()
	width := 0
	for _, c := range tab {
		width = max(width, len(c.synopsis()))
	}
	for _, c := range tab {
		fmt.Fprintf(&b, "  %-*s  %s\n", width, c.synopsis(), c.summary)
	}
	b.WriteString("\n--json on any command prints one JSON object on stdout.\n")
	b.WriteString("Exit codes: 0 done, 1 operation failed, 2 usage error, 3 not allowed,\n")
	b.WriteString("4 busy (another power operation or doctor run on this node is in flight, or\n")
	b.WriteString("another session writes), 5 timed out (wait-for, expect, --wait-for).\n")
	return b.String()
}

// CommandUsage is the help text of one command (Usage for "" or an unknown
// name). It ends with a newline.
func CommandUsage(name Name) string {
	c, ok := lookup(name)
	if !ok {
		return Usage()
	}
	text := "usage: " + c.synopsis() + " [--json]\n  " + c.summary + "\n"
	if c.detail != "" {
		text += "  " + strings.ReplaceAll(c.detail, "\n", "\n  ") + "\n"
	}
	return text
}

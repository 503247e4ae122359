package commands

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/obmd/obmd/sol"
)

// MaxLines bounds console-log --lines.
const MaxLines = 100000

// spec describes one command for help text and parsing.
type spec struct {
	name     Name
	synopsis string // arguments and flags after the name, without --json
	summary  string // one short line for Usage
	detail   string // what the flags mean, for CommandUsage ("" if none)
}

// specs lists every command in help order. A function, not a package
// variable, so that nothing package-level is mutable.
func specs() []spec {
	return []spec{
		{CmdConsole, "[--read-only] [flags]", "attach to the serial console (the default)",
			"--read-only: watch; nothing this session types or escapes reaches the node.\n" +
				"Without a terminal (ssh -T < script.txt), the console ends once the input you\n" +
				"sent does (EOF): it goes to the node, then the output until it pauses.\n" +
				"--ignore-eof: keep the console after the end of your input, until you hang up."},
		{CmdConsoleLog, "[--lines N] [flags]",
			"print this tenancy's console history",
			"--lines N: only the last N lines (1 to 100000).\n--since 10m|RFC3339: only what came since.\n" +
				"--timestamps: each line prefixed with the time its first byte arrived, and obmd's markers.\n" +
				"--follow: then the live output until you hang up.\n--cast: asciicast v2 (asciinema play)."},
		{CmdWaitFor, "REGEX [flags]",
			"wait for console text matching REGEX (RE2)",
			"Exits 0 printing the matching line, 5 at the timeout; never writes.\n" +
				"--timeout D: how long to wait (default 5m, at most 24h).\n" +
				"--since WHEN: where the search starts:\n" +
				"  now: only output after the command starts (the default); attach: also\n" +
				"  what an attach replays now; 10m|RFC3339: this tenancy's history since.\n" +
				"--tenancy: also this tenancy's whole history.\n" +
				"(?m) is implied: ^ matches where a line starts, never mid-line.\n" +
				"REGEX is its words joined by single spaces, as ssh joins a command's words:\n" +
				"  ssh NODE wait-for 'Reached target .*Multi-User' works. To keep two spaces,\n" +
				"  a word starting with - or a quote, quote REGEX for obmd too:\n" +
				"  ssh NODE \"wait-for 'a  b'\".\n" +
				fmt.Sprintf("REGEX compiles to at most %d instructions; --timeout ends a long search.", MaxProgram)},
		{CmdSend, "TEXT...|--stdin [flags]", "type on the console, as the writer",
			"TEXT: the words joined by spaces, with \\r \\n \\t \\\\ \\; \\xHH escapes; nothing\n" +
				"is added (send 'root\\r' types root and Enter). --stdin: stdin's bytes.\n" +
				"--hex: TEXT is bytes in hex (\"0d0a\"). Exits 4 while another session writes,\n" +
				"unless --force: then it writes for a moment and hands the role back."},
		{CmdExpect, "SCRIPT|--stdin [flags]", "run an expect script on the console",
			"Lines: wait REGEX [TIMEOUT] | send TEXT | sleep D | break | # a comment.\n" +
				"Stops at the first failing step, naming its line; exits 5 if a wait timed out.\n" +
				"SCRIPT: the script, steps separated by ';' (\\; is a ';'). --stdin: from stdin.\n" +
				"--timeout D: a wait's default (5m). --force: send even while a session writes.\n" +
				"SCRIPT is its words joined by single spaces, as ssh joins a command's words:\n" +
				"  ssh NODE expect 'send a\\;b\\r;wait b' works. To keep two spaces, a word\n" +
				"  starting with - or a quote, quote SCRIPT for obmd too:\n" +
				"  ssh NODE \"expect 'send ls  -l\\r'\".\n" +
				fmt.Sprintf("Its waits compile to at most %d instructions each, %d together.", MaxProgram, MaxScriptProgram)},
		{CmdPowerStatus, "", "print the power state", ""},
		{CmdPowerOn, "[--wait-for RE]", "power on (--wait-for: then wait for RE)",
			"--wait-for RE: then wait for output after the power operation to match RE;\n" +
				"exits 5 if it did not come within --timeout D (default 5m). The words after\n" +
				"RE join it, as wait-for's do (see help wait-for)."},
		{CmdPowerOff, "[--soft]", "power off (--soft: ask the OS to shut down)",
			"--soft: ask the OS to shut down (ACPI) instead of cutting power."},
		{CmdPowerCycle, "[--force] [flags]", "power off, then on (--force: hard reset)",
			"--force: hard reset instead of power off and on.\n" +
				"--wait-for RE: then wait for output after the power operation to match RE;\n" +
				"exits 5 if it did not come within --timeout D (default 5m). The words after\n" +
				"RE join it, as wait-for's do (see help wait-for)."},
		{CmdPowerReset, "", "hard reset (power stays on)", ""},
		{CmdBootdev, "DEVICE [--persistent]", "next boot device: pxe|disk|bios|cdrom|none",
			"DEVICE: pxe, disk, bios, cdrom or none.\n--persistent: every boot, not only the next one."},
		{CmdSessions, "", "list the live sessions on this node", ""},
		{CmdDoctor, "", "check the BMC step by step, changing nothing",
			"Checks, in order, the BMC's address, the login, the power status and the\nconsole (for Redfish also the service, the system and its resets), stops at\nthe first that fails and says what to do about it. Exit 0 only if all pass."},
		{CmdHelp, "[COMMAND]", "print this help, or one command's", ""},
		{CmdVersion, "", "print the obmd version", ""},
	}
}

func lookup(name Name) (spec, bool) {
	for _, s := range specs() {
		if s.name == name {
			return s, true
		}
	}
	return spec{}, false
}

func (s spec) command() string {
	if s.synopsis == "" {
		return string(s.name)
	}
	return string(s.name) + " " + s.synopsis
}

// Usage is the help text: one line per command, then the common flag and
// the exit codes. Lines fit 80 columns; it ends with a newline.
func Usage() string {
	var b strings.Builder
	b.WriteString("usage: ssh NODE@HOST [COMMAND [ARGS...]] [--json]\n\n")
	width := 0
	for _, s := range specs() {
		width = max(width, len(s.command()))
	}
	for _, s := range specs() {
		fmt.Fprintf(&b, "  %-*s  %s\n", width, s.command(), s.summary)
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
	s, ok := lookup(name)
	if !ok {
		return Usage()
	}
	text := "usage: " + s.command() + " [--json]\n  " + s.summary + "\n"
	if s.detail != "" {
		text += "  " + strings.ReplaceAll(s.detail, "\n", "\n  ") + "\n"
	}
	return text
}

// Parse turns argv (from Split) into a Command. Empty argv is console.
// --json is accepted anywhere after the command name; -h or --help after a
// command asks for that command's help (Name CmdHelp, Topic the command).
// Flags take the forms shown by Usage; --lines also takes --lines=N.
//
// Errors are *UsageError with one safe line. On error the returned Command
// still carries what could be parsed (Name when known, JSON when --json was
// given) so that the error can be rendered in the form the user asked for.
func Parse(argv []string) (Command, error) {
	if len(argv) == 0 {
		return Command{Name: CmdConsole}, nil
	}
	var cmd Command
	// Anywhere, even first: a script that asked for JSON gets its error as
	// JSON too (`--json power-on` is still a usage error).
	for _, a := range argv {
		if a == "--json" {
			cmd.JSON = true
		}
	}
	name := Name(argv[0])
	if name == "-h" || name == "--help" {
		name = CmdHelp
	}
	if _, ok := lookup(name); !ok {
		if name == "--json" {
			return cmd, &UsageError{Msg: `--json must follow a command; try "help"`}
		}
		return cmd, &UsageError{Msg: fmt.Sprintf(`unknown command %s; try "help"`, quote(string(name)))}
	}
	cmd.Name = name
	args := argv[1:]
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--json":
		case a == "-h" || a == "--help":
			return Command{Name: CmdHelp, Topic: name, JSON: cmd.JSON}, nil
		case name == CmdPowerOff && a == "--soft":
			cmd.Soft = true
		case name == CmdPowerCycle && a == "--force":
			cmd.Force = true
		case name == CmdBootdev && a == "--persistent":
			cmd.Persistent = true
		case name == CmdConsole && a == "--read-only":
			cmd.ReadOnly = true
		case name == CmdConsole && a == "--ignore-eof":
			cmd.IgnoreEOF = true
		case name == CmdConsoleLog && (a == "--lines" || strings.HasPrefix(a, "--lines=")):
			val, err := flagValue(args, &i, "--lines", "a number")
			if err != nil {
				return cmd, err
			}
			if cmd.Lines, err = parseLines(val); err != nil {
				return cmd, err
			}
		case name == CmdConsoleLog && (a == "--since" || strings.HasPrefix(a, "--since=")):
			val, err := flagValue(args, &i, "--since", "a duration or a time")
			if err != nil {
				return cmd, err
			}
			if cmd.SinceAgo, cmd.SinceAt, err = parseSince(val); err != nil {
				return cmd, err
			}
		case name == CmdConsoleLog && a == "--timestamps":
			cmd.Timestamps = true
		case name == CmdConsoleLog && a == "--follow":
			cmd.Follow = true
		case name == CmdConsoleLog && a == "--cast":
			cmd.Cast = true
		case a == "--wait-for" || strings.HasPrefix(a, "--wait-for="):
			if name != CmdPowerOn && name != CmdPowerCycle {
				return cmd, usagef(name, "%s: unknown flag %s; try \"help %s\"", name, quote(a), name)
			}
			if err := parsePattern(&cmd, args, &i, "--wait-for"); err != nil {
				return cmd, err
			}
		case isAutomation(name) || name == CmdPowerOn || name == CmdPowerCycle:
			handled, err := parseAutomation(&cmd, args, &i)
			if err != nil {
				return cmd, err
			}
			if !handled {
				return cmd, usagef(name, "%s: unexpected argument %s", name, quote(a))
			}
		case strings.HasPrefix(a, "-") && a != "-":
			return cmd, usagef(name, "%s: unknown flag %s; try \"help %s\"", name, quote(a), name)
		case name == CmdBootdev && cmd.Device == "":
			dev, err := parseBootDevice(a)
			if err != nil {
				return cmd, err
			}
			cmd.Device = dev
		case name == CmdHelp && cmd.Topic == "":
			if _, ok := lookup(Name(a)); !ok {
				return cmd, &UsageError{Msg: fmt.Sprintf(`unknown command %s; try "help"`, quote(a))}
			}
			cmd.Topic = Name(a)
		default:
			return cmd, usagef(name, "%s: unexpected argument %s", name, quote(a))
		}
	}
	if name == CmdBootdev && cmd.Device == "" {
		return cmd, usagef(name, "bootdev needs a device: pxe, disk, bios, cdrom or none")
	}
	if err := checkAutomation(&cmd); err != nil {
		return cmd, err
	}
	if cmd.JSON && (cmd.Follow || cmd.Cast) {
		return cmd, usagef(name, "console-log: --json does not go with --follow or --cast")
	}
	return cmd, nil
}

// flagValue is the value of flag args[*i]: after "=" or the next word
// (then *i moves past it).
func flagValue(args []string, i *int, flag, what string) (string, error) {
	return flagValueOf(CmdConsoleLog, args, i, flag, what)
}

// flagValueOf is flagValue for command name's usage.
func flagValueOf(name Name, args []string, i *int, flag, what string) (string, error) {
	if val, ok := strings.CutPrefix(args[*i], flag+"="); ok {
		return val, nil
	}
	if *i+1 == len(args) {
		return "", usagef(name, "%s needs %s", flag, what)
	}
	*i++
	return args[*i], nil
}

func usagef(name Name, format string, args ...any) *UsageError {
	return &UsageError{Msg: fmt.Sprintf(format, args...), Command: name}
}

func parseLines(val string) (int, error) {
	bad := usagef(CmdConsoleLog, "--lines wants a number from 1 to %d, not %s", MaxLines, quote(val))
	if val == "" || len(val) > 6 || strings.Trim(val, "0123456789") != "" {
		return 0, bad
	}
	n, err := strconv.Atoi(val)
	if err != nil || n < 1 || n > MaxLines {
		return 0, bad
	}
	return n, nil
}

// parseBootDevice accepts the devices of the IPMI drivers, in any case.
func parseBootDevice(a string) (string, error) {
	switch dev := strings.ToLower(a); dev {
	case sol.BootPXE, sol.BootDisk, sol.BootBIOS, sol.BootCDROM, sol.BootNone:
		return dev, nil
	}
	return "", usagef(CmdBootdev, "bootdev: unknown device %s; want pxe, disk, bios, cdrom or none", quote(a))
}

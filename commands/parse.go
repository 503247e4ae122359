package commands

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/obmd/obmd/sol"
)

// MaxLines bounds console-log --lines.
const MaxLines = 100000

// Parse turns argv (from Split) into a Command, by the command table
// (table.go). Empty argv is console. --json is accepted anywhere after the
// command name; -h or --help after a command asks for that command's help
// (Name CmdHelp, Topic the command). A flag with a value takes it as the
// next word or after "=" (--lines N, --lines=N); one without takes neither.
//
// Errors are *UsageError with one safe line. On error the returned Command
// still carries what could be parsed (Name when known, JSON when --json was
// given) so that the error can be rendered in the form the user asked for.
func Parse(argv []string) (Command, error) {
	if len(argv) == 0 {
		return Command{Name: CmdConsole}, nil
	}
	// Anywhere, even first: a script that asked for JSON gets its error as
	// JSON too (`--json power-on` is still a usage error).
	cmd := Command{JSON: slices.Contains(argv, "--json")}
	name := Name(argv[0])
	if name == "-h" || name == "--help" {
		name = CmdHelp
	}
	row, ok := lookup(name)
	if !ok {
		if name == "--json" {
			return cmd, &UsageError{Msg: `--json must follow a command; try "help"`}
		}
		return cmd, &UsageError{Msg: fmt.Sprintf(`unknown command %s; try "help"`, quote(string(name)))}
	}
	cmd.Name = name
	given := map[string]bool{}
	args := argv[1:]
	for i := 0; i < len(args); i++ {
		a := args[i]
		f := row.flag(a)
		switch {
		case a == "--json":
		case a == "-h" || a == "--help":
			return Command{Name: CmdHelp, Topic: name, JSON: cmd.JSON}, nil
		case f != nil:
			if err := row.setFlag(&cmd, f, args, &i); err != nil {
				return cmd, err
			}
			given[f.name] = true
		case strings.HasPrefix(a, "-") && a != "-":
			return cmd, row.notAFlag(&cmd, a)
		default:
			if err := row.takeWord(&cmd, a); err != nil {
				return cmd, err
			}
		}
	}
	for _, f := range row.flags {
		if f.with != "" && given[f.name] && !given[f.with] {
			return cmd, usagef(name, "%s: %s goes with %s", name, f.name, f.with)
		}
	}
	if row.check != nil {
		if err := row.check(&cmd); err != nil {
			return cmd, err
		}
	}
	return cmd, nil
}

// flag is c's flag that word gives ("--lines", "--lines=10"), or nil.
func (c command) flag(word string) *flag {
	for i, f := range c.flags {
		if word == f.name || f.arg != "" && strings.HasPrefix(word, f.name+"=") {
			return &c.flags[i]
		}
	}
	return nil
}

// setFlag applies flag f, which args[*i] gives, taking its value (then *i
// moves past it if it is the next word).
func (c command) setFlag(cmd *Command, f *flag, args []string, i *int) error {
	if f.refused != nil {
		return f.refused(c, args[*i])
	}
	val := ""
	if f.arg != "" {
		var err error
		if val, err = flagValue(c.name, args, i, f.name, f.what); err != nil {
			return err
		}
	}
	return f.set(cmd, val)
}

// notAFlag refuses word, which looks like a flag c does not take. When c's
// words may start with "-", the error says how to keep one.
func (c command) notAFlag(cmd *Command, word string) error {
	if c.text != nil {
		if text := c.text(cmd); text != "" {
			return usagef(c.name, "%s: unknown flag %s (a word of the %s that starts with - must be quoted "+
				"for obmd as well as for the shell; see \"help %s\")", c.name, quote(word), text, c.name)
		}
	}
	return unknownFlag(c, word)
}

// takeWord gives c the argument word.
func (c command) takeWord(cmd *Command, word string) error {
	if c.word == nil {
		return unexpectedArg(c, word)
	}
	ok, err := c.word(cmd, word)
	if err == nil && !ok {
		err = unexpectedArg(c, word)
	}
	return err
}

// unknownFlag refuses word as a flag c does not take.
func unknownFlag(c command, word string) error {
	return usagef(c.name, "%s: unknown flag %s; try \"help %s\"", c.name, quote(word), c.name)
}

// unexpectedArg refuses word as an argument too many.
func unexpectedArg(c command, word string) error {
	return usagef(c.name, "%s: unexpected argument %s", c.name, quote(word))
}

// flagValue is the value of command name's flag args[*i]: after "=" or
// the next word (then *i moves past it).
func flagValue(name Name, args []string, i *int, flag, what string) (string, error) {
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

// setLines is console-log --lines N.
func setLines(c *Command, val string) (err error) {
	c.Lines, err = parseLines(val)
	return err
}

// setLogSince is console-log --since.
func setLogSince(c *Command, val string) (err error) {
	c.SinceAgo, c.SinceAt, err = parseSince(val)
	return err
}

// checkConsoleLog: --json prints one object, which --follow and --cast
// do not.
func checkConsoleLog(c *Command) error {
	if c.JSON && (c.Follow || c.Cast) {
		return usagef(c.Name, "console-log: --json does not go with --follow or --cast")
	}
	return nil
}

// setDevice is bootdev's DEVICE (one).
func setDevice(c *Command, w string) (bool, error) {
	if c.Device != "" {
		return false, nil
	}
	dev, err := parseBootDevice(w)
	if err != nil {
		return true, err
	}
	c.Device = dev
	return true, nil
}

func checkDevice(c *Command) error {
	if c.Device == "" {
		return usagef(c.Name, "bootdev needs a device: pxe, disk, bios, cdrom or none")
	}
	return nil
}

// setTopic is help's COMMAND (one).
func setTopic(c *Command, w string) (bool, error) {
	if c.Topic != "" {
		return false, nil
	}
	if _, ok := lookup(Name(w)); !ok {
		return true, &UsageError{Msg: fmt.Sprintf(`unknown command %s; try "help"`, quote(w))}
	}
	c.Topic = Name(w)
	return true, nil
}

// parseBootDevice accepts the devices of the IPMI drivers, in any case.
func parseBootDevice(a string) (string, error) {
	switch dev := strings.ToLower(a); dev {
	case sol.BootPXE, sol.BootDisk, sol.BootBIOS, sol.BootCDROM, sol.BootNone:
		return dev, nil
	}
	return "", usagef(CmdBootdev, "bootdev: unknown device %s; want pxe, disk, bios, cdrom or none", quote(a))
}

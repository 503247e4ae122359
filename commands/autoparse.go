package commands

import (
	"bytes"
	"context"
	"encoding/hex"
	"fmt"
	"regexp"
	"strings"
	"time"
)

// Bounds of the automation commands (wait-for, send, expect, --wait-for).
const (
	// MaxPattern bounds a regular expression, in bytes.
	MaxPattern = 1024
	// DefaultWait is the timeout of a wait without --timeout.
	DefaultWait = 5 * time.Minute
	// MaxWait bounds --timeout and a script's wait.
	MaxWait = 24 * time.Hour
	// MaxSend bounds the bytes of one send (and send --stdin).
	MaxSend = 64 << 10
	// MaxScript bounds an expect script, in bytes.
	MaxScript = 64 << 10
)

// wait-for --since modes.
const (
	SinceNow     = "now"     // output after the command starts (the default)
	SinceAttach  = "attach"  // also what an attach replays now (ConsoleOptions.Replay)
	SinceTime    = "time"    // also the tenancy's history since SinceAgo/SinceAt
	SinceTenancy = "tenancy" // also the tenancy's whole history
)

// OnConsole reports whether cmd works on the node's console (wait-for,
// send, expect, --wait-for, screen): it needs Request.OpenConsole, and a
// client that leaves ends it (it may wait for hours).
func (c Command) OnConsole() bool { return isAutomation(c.Name) || c.Pattern != "" }

func isAutomation(name Name) bool {
	return name == CmdWaitFor || name == CmdSend || name == CmdExpect || name == CmdScreen
}

// setTimeout is --timeout D (wait-for, expect, --wait-for).
func setTimeout(c *Command, val string) (err error) {
	c.Timeout, err = parseWait(c.Name, val)
	return err
}

// setWaitSince is wait-for --since: attach, now, or a time as console-log
// --since takes it.
func setWaitSince(c *Command, val string) (err error) {
	switch val {
	case SinceNow, SinceAttach:
		c.SinceMode = val
		return nil
	}
	c.SinceMode = SinceTime
	c.SinceAgo, c.SinceAt, err = parseSince(val)
	if err != nil {
		err = usagef(c.Name, "--since wants attach, now, a duration (10m) or an RFC 3339 time, not %s", quote(val))
	}
	return err
}

// setPattern is --wait-for RE; the words after it join it (joinPattern),
// and checkWaitPattern checks it.
func setPattern(c *Command, val string) error {
	if val == "" {
		return usagef(c.Name, "%s: empty regular expression", c.Name)
	}
	c.Pattern = val
	return nil
}

// joinPattern takes a word after --wait-for RE: it joins RE. Before
// --wait-for, a power command takes no word.
func joinPattern(c *Command, w string) (bool, error) {
	if c.Pattern == "" {
		return false, nil
	}
	c.Pattern += " " + w
	return true, nil
}

// patternText names what the words of a power command are once it has
// --wait-for.
func patternText(c *Command) string {
	if c.Pattern != "" {
		return "regular expression"
	}
	return ""
}

// addWord takes a word of wait-for's REGEX, send's TEXT or expect's
// SCRIPT: OpenSSH sends the words of a remote command joined by spaces;
// they are joined again (Command.Args).
func addWord(c *Command, w string) (bool, error) {
	c.Args = append(c.Args, w)
	return true, nil
}

// pattern is a wait's regular expression with (?m) implied: `^` matches
// at the start of any line, `$` at the end of one (before a \n) or of the
// output so far. mid is the same after one byte of context, for a search
// that starts mid-line (the rest of a line after a match, or a long line
// cut): its `^` never matches at the search's start. Both are compiled
// without the pattern's capture groups. size and midSize are their
// programs' instructions: what a search costs per byte searched.
type pattern struct {
	src           string // as given
	re, mid       *regexp.Regexp
	size, midSize int
	prefix        []byte // re.LiteralPrefix
}

// compilePattern checks val against the budgets (checkPattern) and
// compiles it.
func compilePattern(name Name, val string) (*pattern, error) {
	c, err := checkPattern(name, val)
	if err != nil {
		return nil, err
	}
	return c.compile()
}

// find is the leftmost match of p in in.
func (p *pattern) find(ctx context.Context, mt *meter, in []byte) ([]int, error) {
	if !p.mayMatch(in) {
		return nil, nil
	}
	return mt.find(ctx, p.re, p.size, in, false)
}

// findAfter is the leftmost match of p in in[1:], in[0] being the byte
// before it (never a \n): offsets in in[1:].
func (p *pattern) findAfter(ctx context.Context, mt *meter, in []byte) ([]int, error) {
	if !p.mayMatch(in[1:]) {
		return nil, nil
	}
	sub, err := mt.find(ctx, p.mid, p.midSize, in, true)
	if err != nil || sub == nil || sub[2] < 1 {
		return nil, err
	}
	return []int{sub[2] - 1, sub[3] - 1}, nil
}

// mayMatch is false when in lacks p's literal prefix, which every match
// of p begins with: no search is needed (the usual miss of a pattern
// such as `login:` costs a scan for its text, not a search).
func (p *pattern) mayMatch(in []byte) bool {
	return len(p.prefix) == 0 || bytes.Contains(in, p.prefix)
}

func parseWait(name Name, val string) (time.Duration, error) {
	d, err := time.ParseDuration(val)
	if err != nil || d <= 0 || d > MaxWait {
		return 0, usagef(name, "%s: --timeout wants a duration from 1ms to 24h, not %s", name, quote(val))
	}
	return d, nil
}

// checkWaitFor sets wait-for's Pattern (its words joined by single
// spaces) and checks it against the budgets.
func checkWaitFor(c *Command) error {
	if len(c.Args) == 0 {
		return usagef(c.Name, "wait-for needs a regular expression")
	}
	c.Pattern, c.Args = strings.Join(c.Args, " "), nil
	if c.Screen && c.SinceMode != "" && c.SinceMode != SinceNow {
		return usagef(c.Name, "wait-for --screen matches what the screen shows: --since and --tenancy do not go with it")
	}
	return checkWaitPattern(c)
}

// checkScreen refuses screen --ansi --json (a redraw is no JSON).
func checkScreen(c *Command) error {
	if c.ANSI && c.JSON {
		return usagef(c.Name, "screen --ansi prints a redraw for a terminal, not JSON")
	}
	return nil
}

// checkWaitPattern checks a wait's pattern, if any, against the budgets.
func checkWaitPattern(c *Command) error {
	if c.Pattern == "" {
		return nil
	}
	_, err := checkPattern(c.Name, c.Pattern)
	return err
}

// checkSend checks send's TEXT (or --stdin, not both).
func checkSend(c *Command) error {
	if c.Stdin == (len(c.Args) > 0) {
		return usagef(c.Name, "send needs TEXT or --stdin (not both)")
	}
	if c.Stdin {
		return nil
	}
	_, err := sendBytes(*c)
	return err
}

// checkExpect checks expect's SCRIPT (or --stdin, not both) against the
// budgets.
func checkExpect(c *Command) error {
	if c.Stdin == (len(c.Args) > 0) {
		return usagef(c.Name, "expect needs SCRIPT or --stdin (not both)")
	}
	if c.Stdin {
		return nil
	}
	_, err := ParseScript(InlineScript(c.Script()))
	return err
}

// Script is expect's SCRIPT: its words joined by single spaces.
func (c Command) Script() string { return strings.Join(c.Args, " ") }

// sendBytes is what send TEXT... (or --hex) writes.
func sendBytes(cmd Command) ([]byte, error) {
	text := strings.Join(cmd.Args, " ")
	var b []byte
	var err error
	if cmd.Hex {
		b, err = hex.DecodeString(strings.ReplaceAll(text, " ", ""))
		if err != nil {
			return nil, usagef(CmdSend, "send --hex: not hex: %s", quote(text))
		}
	} else if b, err = unescape(text); err != nil {
		return nil, usagef(CmdSend, "send: %v", err)
	}
	if len(b) == 0 || len(b) > MaxSend {
		return nil, usagef(CmdSend, "send: 1 to %d bytes", MaxSend)
	}
	return b, nil
}

// unescape reads send's escapes: \r \n \t \\ \xHH, and \; (a `;`, as in
// an inline expect script: InlineScript); any other backslash is an error
// (so that a typo never types something else).
func unescape(s string) ([]byte, error) {
	out := make([]byte, 0, len(s))
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c != '\\' {
			out = append(out, c)
			continue
		}
		if i+1 == len(s) {
			return nil, fmt.Errorf("a lone \\ at the end")
		}
		i++
		switch s[i] {
		case 'r':
			out = append(out, '\r')
		case 'n':
			out = append(out, '\n')
		case 't':
			out = append(out, '\t')
		case '\\', ';':
			out = append(out, s[i])
		case 'x':
			if i+3 > len(s) {
				return nil, fmt.Errorf("\\x wants two hex digits")
			}
			v, err := hex.DecodeString(s[i+1 : i+3])
			if err != nil {
				return nil, fmt.Errorf("\\x wants two hex digits")
			}
			out = append(out, v[0])
			i += 2
		default:
			return nil, fmt.Errorf("unknown escape %s", quote(s[i-1:i+1]))
		}
	}
	return out, nil
}

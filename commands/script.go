package commands

import (
	"fmt"
	"strings"
	"time"
)

// An expect script is a list of steps, one per line:
//
//	wait REGEX [TIMEOUT]   wait for console output matching REGEX (RE2);
//	                       REGEX may be 'quoted' or "quoted" to hold spaces
//	wait --screen REGEX [TIMEOUT]
//	                       wait until the screen shows REGEX (wait-for --screen)
//	send TEXT              type TEXT (the rest of the line, send's escapes)
//	sleep D                pause for D (a Go duration, at most 24h)
//	break                  send a serial break
//
// Blank lines and lines starting with # are skipped. A wait searches
// output that arrived after the previous wait's match (or the script's
// start), so `send` then `wait` never misses a fast answer. A script given
// as expect's argument (InlineScript) separates its steps with `;`.

// InlineScript turns expect's SCRIPT argument into a script: `;` separates
// steps (an exec line holds no newline), `\;` is a literal `;`, and `\\`
// stays the escaped backslash it is for send (so `\\;` is a backslash,
// then a separator); every other byte is kept.
func InlineScript(arg string) string {
	var b strings.Builder
	for i := 0; i < len(arg); i++ {
		switch c := arg[i]; {
		case c == '\\' && i+1 < len(arg) && arg[i+1] == ';':
			b.WriteByte(';')
			i++
		case c == '\\' && i+1 < len(arg) && arg[i+1] == '\\':
			b.WriteString(`\\`)
			i++
		case c == ';':
			b.WriteByte('\n')
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}

// StepKind is what a script step does.
type StepKind string

// Step kinds.
const (
	StepWait  StepKind = "wait"
	StepSend  StepKind = "send"
	StepSleep StepKind = "sleep"
	StepBreak StepKind = "break"
)

// Step is one line of an expect script.
type Step struct {
	Line int // 1-based line number in the script
	Kind StepKind
	// Pattern is a wait's regular expression, checked against the
	// budgets; it is compiled when the step runs, so that a script holds
	// one compiled pattern at a time.
	Pattern string
	Timeout time.Duration // wait (0: the command's --timeout) or sleep
	Screen  bool          // wait --screen: the screen, not the output's bytes
	Data    []byte        // send
	cost    int           // a wait's compiled size (MaxScriptProgram)
}

// maxSteps bounds a script's steps.
const maxSteps = 1000

// ParseScript parses an expect script; the error names the bad line. Its
// waits' patterns are each within MaxProgram, and MaxScriptProgram
// together.
func ParseScript(text string) ([]Step, error) {
	if len(text) > MaxScript {
		return nil, usagef(CmdExpect, "expect: a script is at most %d bytes", MaxScript)
	}
	var steps []Step
	total := 0
	for i, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(strings.TrimSuffix(line, "\r"))
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		st, err := parseStep(line)
		if err != nil {
			return nil, usagef(CmdExpect, "expect: line %d: %v", i+1, err)
		}
		st.Line = i + 1
		if total += st.cost; total > MaxScriptProgram {
			return nil, usagef(CmdExpect, "expect: line %d: the script's patterns compile to more than %d "+
				"instructions together (the limit; each one counts)", i+1, MaxScriptProgram)
		}
		if steps = append(steps, st); len(steps) > maxSteps {
			return nil, usagef(CmdExpect, "expect: at most %d steps", maxSteps)
		}
	}
	if len(steps) == 0 {
		return nil, usagef(CmdExpect, "expect: the script has no steps")
	}
	return steps, nil
}

func parseStep(line string) (Step, error) {
	word, rest, _ := strings.Cut(line, " ")
	rest = strings.TrimSpace(rest)
	switch StepKind(word) {
	case StepWait:
		screen := false
		if w, tail := cutWord(rest); w == "--screen" && strings.HasPrefix(rest, w) { // '--screen' quoted is a pattern
			screen, rest = true, tail
		}
		pat, tail := cutWord(rest)
		if pat == "" {
			return Step{}, fmt.Errorf("wait needs a regular expression")
		}
		c, err := checkPattern(CmdExpect, pat)
		if err != nil {
			return Step{}, err
		}
		st := Step{Kind: StepWait, Pattern: pat, Screen: screen, cost: c.cost()}
		if tail != "" {
			if st.Timeout, err = parseWait(CmdExpect, tail); err != nil {
				return Step{}, err
			}
		}
		return st, nil
	case StepSend:
		b, err := unescape(rest)
		if err != nil {
			return Step{}, err
		}
		if len(b) == 0 || len(b) > MaxSend {
			return Step{}, fmt.Errorf("send wants 1 to %d bytes", MaxSend)
		}
		return Step{Kind: StepSend, Data: b}, nil
	case StepSleep:
		d, err := time.ParseDuration(rest)
		if err != nil || d < 0 || d > MaxWait {
			return Step{}, fmt.Errorf("sleep wants a duration up to 24h, not %s", quote(rest))
		}
		return Step{Kind: StepSleep, Timeout: d}, nil
	case StepBreak:
		if rest != "" {
			return Step{}, fmt.Errorf("break takes no argument")
		}
		return Step{Kind: StepBreak}, nil
	}
	return Step{}, fmt.Errorf("unknown step %s (wait, send, sleep, break)", quote(word))
}

// cutWord cuts the first word of s, which may be quoted with ' or ".
func cutWord(s string) (word, rest string) {
	if s != "" && (s[0] == '\'' || s[0] == '"') {
		if end := strings.IndexByte(s[1:], s[0]); end >= 0 {
			return s[1 : end+1], strings.TrimSpace(s[end+2:])
		}
	}
	word, rest, _ = strings.Cut(s, " ")
	return word, strings.TrimSpace(rest)
}

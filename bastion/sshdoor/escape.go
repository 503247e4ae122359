package sshdoor

import (
	"bytes"
	"fmt"
	"strings"
)

// Escape commands, typed after the escape prefix (default Ctrl-E c, as in
// conserver; it never collides with OpenSSH's "~" escapes). The prefix's
// own first byte after the prefix (Ctrl-E c Ctrl-E) sends the prefix to
// the node. Escapes exist only on a session with a PTY: without one
// (scripts, `ssh -T`, binary transfers) every byte goes to the node, as
// OpenSSH does with its "~".
const (
	EscDetach   = '.'
	EscHelp     = '?'
	EscTakeOver = 'f'
	EscReadOnly = 's'
	EscBreak    = 'b'
	EscRedraw   = 'r'
	EscPlayback = 'p'
)

// escCommands are the command keys: the prefix may not start with one, so
// that prefix + its first byte is never a command.
const escCommands = string(EscDetach) + string(EscHelp) + string(EscTakeOver) + string(EscReadOnly) + string(EscBreak) + string(EscRedraw) + string(EscPlayback)

// checkEscape validates an escape prefix: two bytes, the first not a
// command key.
func checkEscape(prefix string) error {
	if len(prefix) != 2 {
		return fmt.Errorf("bastion: escape prefix must be 2 bytes, got %d", len(prefix))
	}
	if strings.IndexByte(escCommands, prefix[0]) >= 0 {
		return fmt.Errorf("bastion: escape prefix may not start with %q, an escape command", prefix[0])
	}
	return nil
}

// escapeParser splits a viewer's keystrokes into console input and escape
// commands. It keeps state across calls, so a prefix split over two reads
// still counts. The zero value is unusable; use newEscapeParser.
type escapeParser struct {
	prefix []byte // e.g. {0x05, 'c'}
	held   int    // how many bytes of prefix have been seen and held back
}

// escapeEvent is one parser output: Data to send, or a Cmd (one of the Esc*
// constants, or any other byte for an unknown command). The prefix followed
// by its own first byte is Data: the prefix itself.
type escapeEvent struct {
	Data []byte
	Cmd  byte
}

func newEscapeParser(prefix []byte) *escapeParser {
	return &escapeParser{prefix: bytes.Clone(prefix)}
}

// Feed consumes p and returns the events it completes, in order. Data slices
// may alias p. A prefix byte that turns out not to start an escape is
// released as data, so nothing typed is lost.
func (e *escapeParser) Feed(p []byte) []escapeEvent {
	var out []escapeEvent
	start := 0 // start of pending plain data in p
	flush := func(end int) {
		if end > start {
			out = append(out, escapeEvent{Data: p[start:end]})
		}
	}
	for i := 0; i < len(p); i++ {
		b := p[i]
		switch {
		case e.held == len(e.prefix):
			// b is the command, or asks for the prefix itself.
			e.held = 0
			if b == e.prefix[0] {
				out = append(out, escapeEvent{Data: bytes.Clone(e.prefix)})
			} else {
				out = append(out, escapeEvent{Cmd: b})
			}
			start = i + 1
		case b == e.prefix[e.held]:
			if e.held == 0 {
				flush(i)
			}
			e.held++
			start = i + 1
		case e.held > 0:
			// Not an escape after all: release what was held, then look at
			// b afresh (it may start a new prefix).
			out = append(out, escapeEvent{Data: bytes.Clone(e.prefix[:e.held])})
			e.held = 0
			start = i
			i--
		}
	}
	if e.held == 0 || start < len(p) {
		flush(len(p))
	}
	return out
}

package bastion

import "bytes"

// Escape commands, typed after the escape prefix (default Ctrl-E c, as in
// conserver; it never collides with OpenSSH's "~" escapes).
const (
	EscDetach   = '.'
	EscHelp     = '?'
	EscTakeOver = 'f'
	EscReadOnly = 's'
	EscBreak    = 'b'
	EscReplay   = 'r'
)

// escapeParser splits a viewer's keystrokes into console input and escape
// commands. It keeps state across calls, so a prefix split over two reads
// still counts. The zero value is unusable; use newEscapeParser.
type escapeParser struct {
	prefix []byte // e.g. {0x05, 'c'}
	held   int    // how many bytes of prefix have been seen and held back
}

// escapeEvent is one parser output: Data to send, or a Cmd (one of the Esc*
// constants, or any other byte for an unknown command).
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
			// b is the command.
			e.held = 0
			out = append(out, escapeEvent{Cmd: b})
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

package ipmitool

import (
	"bytes"
	"time"
)

// encoder neutralises ipmitool's SOL escapes in viewer input.
//
// ipmitool (lib/ipmi_sol.c, processSolUserInput) treats the escape character
// as a command prefix only when the previous character it processed was CR
// or LF, or nothing yet (its last_was_cr starts true). "esc esc" there sends
// one literal esc and clears last_was_cr. Its state survives across reads, so
// the encoder mirrors it across Writes: at a line start it doubles the escape
// character, everywhere else bytes pass untouched. Every byte a viewer sends
// thus reaches the serial port exactly once and none is ever a command.
//
// The escape commands ipmitool runs for us (Break: "esc B", Close: "esc .")
// are only possible at a line start; "esc B" leaves last_was_cr set (ipmitool
// skips its bookkeeping for escape commands), so the encoder stays at a line
// start after it.
type encoder struct {
	esc       byte
	lineStart bool // mirrors ipmitool's last_was_cr
}

func newEncoder(esc byte) encoder { return encoder{esc: esc, lineStart: true} }

// encode appends the safe form of p to dst and advances the state.
func (e *encoder) encode(dst, p []byte) []byte {
	for _, c := range p {
		if e.lineStart && c == e.esc {
			dst = append(dst, c, c)
			e.lineStart = false
			continue
		}
		dst = append(dst, c)
		e.lineStart = c == '\r' || c == '\n'
	}
	return dst
}

// consumed returns how many bytes of p (as passed to encode from the state
// before) are fully contained in the first n bytes of their encoding.
func (e encoder) consumed(p []byte, n int) int {
	for i, c := range p {
		w := 1
		if e.lineStart && c == e.esc {
			w = 2
			e.lineStart = false
		} else {
			e.lineStart = c == '\r' || c == '\n'
		}
		if n < w {
			return i
		}
		n -= w
	}
	return len(p)
}

// Lines ipmitool prints on its stdout (our pty) that are not console output.
// The session banner is consumed while opening; the command echoes appear
// only after we send the command, at any position in the output stream
// (ipmitool prints them between two SOL packets), so the filter strips
// them only while one is expected.
func bannerLine(esc byte) []byte {
	return []byte("[SOL Session operational.  Use " + string([]byte{esc}) + "? for help]\n")
}

func breakLine(esc byte) []byte     { return []byte(string([]byte{esc}) + "B [send break]\n") }
func terminateLine(esc byte) []byte { return []byte(string([]byte{esc}) + ". [terminated ipmitool]\n") }

// markerTTL is how long the filter waits for an expected line before it
// gives up on it (ipmitool prints it at once, before any later output).
const markerTTL = 2 * time.Second

// holdTTL is how long output that may begin an expected line is held back
// waiting for the rest of it.
const holdTTL = 50 * time.Millisecond

// filter removes the expected ipmitool lines from the output stream. Every
// other byte passes through untouched and in order. Not safe for concurrent
// use: the console guards it.
type filter struct {
	expect []marker // in the order ipmitool will print them
	hold   []byte   // a proper prefix of expect[0].line, held back
	heldAt time.Time
}

type marker struct {
	line     []byte
	deadline time.Time
}

// expectLine registers a line ipmitool is about to print.
func (f *filter) expectLine(line []byte, now time.Time) {
	f.expect = append(f.expect, marker{line: line, deadline: now.Add(markerTTL)})
}

// feed appends to dst the console output in p, minus expected lines.
func (f *filter) feed(dst, p []byte, now time.Time) []byte {
	f.expire(now)
	data := p
	if len(f.hold) > 0 {
		data = append(f.hold, p...)
		f.hold = nil
	}
	for len(f.expect) > 0 && len(data) > 0 {
		m := f.expect[0].line
		if i := bytes.Index(data, m); i >= 0 {
			dst = append(dst, data[:i]...)
			data = data[i+len(m):]
			f.expect = f.expect[1:]
			continue
		}
		k := partialSuffix(data, m)
		dst = append(dst, data[:len(data)-k]...)
		if k > 0 {
			f.hold = append([]byte(nil), data[len(data)-k:]...)
			f.heldAt = now
		}
		return dst
	}
	return append(dst, data...)
}

// holding reports whether output is held back, and until when at most.
func (f *filter) holding() (time.Time, bool) {
	return f.heldAt.Add(holdTTL), len(f.hold) > 0
}

// flush releases held output (the expected line did not follow it).
func (f *filter) flush(dst []byte) []byte {
	dst = append(dst, f.hold...)
	f.hold = nil
	return dst
}

// expire forgets expected lines that never came.
func (f *filter) expire(now time.Time) {
	for len(f.expect) > 0 && now.After(f.expect[0].deadline) {
		f.expect = f.expect[1:]
	}
}

// partialSuffix returns the length of the longest proper prefix of m that
// data ends with.
func partialSuffix(data, m []byte) int {
	k := len(m) - 1
	if k > len(data) {
		k = len(data)
	}
	for ; k > 0; k-- {
		if bytes.HasSuffix(data, m[:k]) {
			return k
		}
	}
	return 0
}

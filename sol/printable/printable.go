// Package printable is obmd's one sanitizer for untrusted text shown on
// terminals and in logs, audit records and errors.
//
// Untrusted text is node labels and user names a client sent, a peer's name,
// a driver's or a library's error text. Clean makes such text safe to print
// on a terminal, in a log line, an audit record or an error message without
// quoting it; Quote quotes it for an error message that echoes input.
// Neither lets a control character, an escape sequence, a bidirectional
// override or an invalid byte through, and both bound the length.
package printable

import (
	"fmt"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Cut marks text that was shortened.
const Cut = "..."

// Clean returns s with every non-printable rune (C0 and C1 controls, DEL,
// format characters such as U+202E, non-ASCII spaces; a plain space stays)
// written as a Go escape (\x1b, \u009b, \t) and every invalid byte as \xNN.
// Printable text, non-ASCII letters included, is unchanged. With max > 0,
// the result is cut to at most max bytes (at a rune boundary) and Cut is
// appended when anything was cut.
func Clean(s string, max int) string {
	in, cut := bound(s, max) // escapes only lengthen: the rest cannot fit
	out := in
	if !clean(in) {
		var b strings.Builder
		for i := 0; i < len(in); {
			r, size := utf8.DecodeRuneInString(in[i:])
			switch {
			case r == utf8.RuneError && size == 1:
				fmt.Fprintf(&b, `\x%02x`, in[i])
			case !printable(r):
				q := strconv.QuoteRuneToASCII(r)
				b.WriteString(q[1 : len(q)-1])
			default:
				b.WriteString(in[i : i+size])
			}
			i += size
		}
		out = b.String()
	}
	if out, shorter := bound(out, max); shorter || cut {
		return out + Cut
	}
	return out
}

// Quote returns s Go-quoted (strconv.Quote: non-printable runes and invalid
// bytes escaped, and the quote itself), for an error message that repeats
// what a client sent. With max > 0, only the first max bytes of s are
// quoted (cut at a rune boundary) and Cut follows the closing quote when s
// was longer.
func Quote(s string, max int) string {
	s, cut := bound(s, max)
	q := strconv.Quote(s)
	if cut {
		q += Cut
	}
	return q
}

// IsClean reports whether Clean would return s unchanged (no bound).
func IsClean(s string) bool { return clean(s) }

func clean(s string) bool {
	for i, r := range s {
		if r == utf8.RuneError {
			if _, size := utf8.DecodeRuneInString(s[i:]); size == 1 {
				return false
			}
		}
		if !printable(r) {
			return false
		}
	}
	return true
}

// printable is unicode.IsPrint, plus the ASCII space.
func printable(r rune) bool { return r == ' ' || unicode.IsPrint(r) }

// bound cuts s to at most max bytes (max > 0) on a rune boundary.
func bound(s string, max int) (string, bool) {
	if max <= 0 || len(s) <= max {
		return s, false
	}
	cut := max
	for cut > 0 && cut > max-utf8.UTFMax && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut], true
}

package commands

import (
	"fmt"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"
)

// Limits on an exec request line. Real commands are a few words long; the
// limits keep a hostile client from making us parse or log megabytes.
const (
	MaxLineBytes = 1024
	MaxWords     = 16
)

// quoteLimit bounds how much of a user's input an error message repeats.
const quoteLimit = 40

// Split turns an exec request line (what `ssh node@host LINE` sends) into
// argv. Words are separated by spaces; single or double quotes group a word
// (no escapes inside them: a quote ends at the next quote of the same kind).
// A line longer than MaxLineBytes, with more than MaxWords words, with an
// unterminated quote, that is not valid UTF-8 or that holds any non-printable
// character (C0 controls including tab and newline, DEL, C1 controls, format
// characters such as bidi overrides, non-ASCII spaces) is a *UsageError whose
// text quotes at most a short, escaped excerpt of the input.
func Split(line string) ([]string, error) {
	if len(line) > MaxLineBytes {
		return nil, &UsageError{Msg: fmt.Sprintf("command line too long (%d bytes, at most %d)", len(line), MaxLineBytes)}
	}
	if !utf8.ValidString(line) {
		return nil, &UsageError{Msg: fmt.Sprintf("command line is not valid UTF-8: %s", quote(line))}
	}
	for i, r := range line {
		if r != ' ' && !unicode.IsPrint(r) {
			return nil, &UsageError{Msg: fmt.Sprintf("non-printable character %s at byte %d of the command line", strconv.QuoteRuneToASCII(r), i)}
		}
	}
	var (
		words  []string
		cur    strings.Builder
		inWord bool
		inQ    rune // the open quote, 0 outside quotes
	)
	for _, r := range line {
		switch {
		case inQ != 0:
			if r == inQ {
				inQ = 0
			} else {
				cur.WriteRune(r)
			}
		case r == '\'' || r == '"':
			inQ, inWord = r, true
		case r == ' ':
			if inWord {
				words = append(words, cur.String())
				cur.Reset()
				inWord = false
			}
		default:
			cur.WriteRune(r)
			inWord = true
		}
	}
	if inQ != 0 {
		return nil, &UsageError{Msg: fmt.Sprintf("unterminated %s quote in the command line", strconv.QuoteRuneToASCII(inQ))}
	}
	if inWord {
		words = append(words, cur.String())
	}
	if len(words) > MaxWords {
		return nil, &UsageError{Msg: fmt.Sprintf("too many words in the command line (%d, at most %d)", len(words), MaxWords)}
	}
	return words, nil
}

// quote renders untrusted input for an error message: its first quoteLimit
// runes, Go-quoted (every non-printable character and invalid byte escaped),
// and "..." after the closing quote when it was cut.
func quote(s string) string {
	n := 0
	for i := range s {
		if n == quoteLimit {
			return strconv.Quote(s[:i]) + "..."
		}
		n++
	}
	return strconv.Quote(s)
}

// clean makes text safe for a terminal without quoting it: every
// non-printable rune becomes a Go escape (\x1b, \u009b, \t) and every invalid
// byte \xNN. Printable text, including non-ASCII letters, is unchanged. Used
// for node labels and error text, which are printed after a trusted prefix.
func clean(s string) string {
	if isClean(s) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case r != ' ' && !unicode.IsPrint(r):
			q := strconv.QuoteRuneToASCII(r)
			b.WriteString(q[1 : len(q)-1])
		default:
			b.WriteString(s[i : i+size])
		}
		i += size
	}
	return b.String()
}

func isClean(s string) bool {
	for i, r := range s {
		if r == utf8.RuneError {
			if _, size := utf8.DecodeRuneInString(s[i:]); size == 1 {
				return false
			}
		}
		if r != ' ' && !unicode.IsPrint(r) {
			return false
		}
	}
	return true
}

// truncate cuts s to at most n bytes on a rune boundary, marking the cut.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n
	for cut > 0 && cut > n-utf8.UTFMax && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "..."
}

// escapeJSON rewrites the non-printable non-ASCII runes that encoding/json
// leaves raw (DEL, C1 controls, bidi overrides, ...) as \u escapes, so that
// JSON output piped to a terminal cannot carry control sequences. It is only
// correct on encoding/json output, where non-ASCII runes occur inside strings
// only.
func escapeJSON(b []byte) []byte {
	dirty := false
	for _, r := range string(b) {
		if r >= 0x7f && !unicode.IsPrint(r) {
			dirty = true
			break
		}
	}
	if !dirty {
		return b
	}
	out := make([]byte, 0, len(b)+32)
	for _, r := range string(b) {
		if r < 0x7f || unicode.IsPrint(r) {
			out = utf8.AppendRune(out, r)
			continue
		}
		if r1, r2 := utf16.EncodeRune(r); r1 != utf8.RuneError {
			out = fmt.Appendf(out, `\u%04x\u%04x`, r1, r2)
		} else {
			out = fmt.Appendf(out, `\u%04x`, r)
		}
	}
	return out
}

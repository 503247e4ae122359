package commands

import (
	"fmt"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/obmd/obmd/sol/printable"
)

// Limits on an exec request line. Real commands are a few words long; the
// limits keep a hostile client from making us parse or log megabytes.
const (
	MaxLineBytes = 1024
	MaxWords     = 16
)

// quoteLimit bounds how many bytes of a user's input an error message
// repeats.
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

// quote renders untrusted input for an error message: at most quoteLimit
// bytes of it, Go-quoted, "..." after the closing quote when it was cut.
func quote(s string) string { return printable.Quote(s, quoteLimit) }

// clean makes text safe for a terminal without quoting it (printable.Clean):
// used for node labels and error text, printed after a trusted prefix;
// max > 0 bounds what is printed.
func clean(s string, max int) string { return printable.Clean(s, max) }

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

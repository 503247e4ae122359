package docs

// How a transcript's lines are compared with what a terminal showed:
// both sides normalised (volatile values replaced, spacing collapsed,
// blank lines dropped), "..." as a wildcard, «...» as what is typed.

import (
	"fmt"
	"regexp"
	"strings"
)

// volatile are the values that differ from run to run, each replaced by
// a placeholder on both sides, so a document can show realistic ones.
var volatile = []struct {
	re   *regexp.Regexp
	with string
}{
	{regexp.MustCompile(`\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)`), "<time>"},
	// Measured durations ("took 12.3ms", "(3s ago)"); settings like "5m" stay.
	{regexp.MustCompile(`\b\d+\.\d+(ns|µs|us|ms|s|m|h)\b|\b\d+(ns|µs|us|ms)\b|\b\d+s ago\b`), "<duration>"},
	// A client's port (ephemeral); obmd's own (2222, 8080, 9623) stay.
	{regexp.MustCompile(`(127\.0\.0\.1|\[::1\]):[1-6]\d{4}\b`), "$1:<port>"},
	// Session IDs: "#12" in notices; the first column of session tables.
	{regexp.MustCompile(`#\d+\b`), "#<id>"},
	{regexp.MustCompile(`^\d+ +(console|exec|http)\b`), "<id> $1"},
	{regexp.MustCompile(`\b0x[0-9a-f]{8}\b`), "0x<BMC session>"},
	{regexp.MustCompile(`\breplica=\S+`), "replica=<replica>"},
	{regexp.MustCompile(`\bversion=\S+`), "version=<version>"},
	{regexp.MustCompile(` {2,}|\t`), "  "},
}

var fingerprintRE = regexp.MustCompile(`SHA256:[A-Za-z0-9+/]{43}`)

// tokenRE finds a word of 32 base64url characters; isToken says whether
// it looks like a token (obmd's are random: some digit or capital letter,
// where a setting's name has none).
var tokenRE = regexp.MustCompile(`(?:^|[^A-Za-z0-9_-])([A-Za-z0-9_-]{32})(?:$|[^A-Za-z0-9_-])`)

func isTokenChar(r rune) bool {
	return r == '_' || r == '-' || r >= '0' && r <= '9' || r >= 'A' && r <= 'Z' || r >= 'a' && r <= 'z'
}

func isToken(w string) bool {
	return strings.IndexFunc(w, func(r rune) bool { return r >= '0' && r <= '9' || r >= 'A' && r <= 'Z' }) >= 0
}

var ansiRE = regexp.MustCompile(`\x1b(\[[0-9;?]*[ -/]*[@-~]|\][^\x07\x1b]*(\x07|\x1b\\)|[()][0-9A-Za-z]|[=>])`)

// normalise turns terminal output (or a document's line) into the lines
// that are compared: no escape sequences or carriage returns, volatile
// values replaced, trailing spaces trimmed.
func normalise(s string) []string {
	s = ansiRE.ReplaceAllString(s, "")
	s = strings.ReplaceAll(s, "\r", "")
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		lines[i] = normaliseLine(l)
	}
	return lines
}

func normaliseLine(l string) string {
	l = strings.TrimRight(l, " \t")
	l = fingerprintRE.ReplaceAllString(l, "SHA256:<fingerprint>") // before tokens: it may hold one's shape
	l = tokenRE.ReplaceAllStringFunc(l, func(m string) string {
		i := strings.IndexFunc(m, isTokenChar)
		tok := m[i : i+32]
		if !isToken(tok) {
			return m
		}
		return m[:i] + "<token>" + m[i+32:]
	})
	for _, v := range volatile {
		l = v.re.ReplaceAllString(l, v.with)
	}
	return strings.TrimRight(l, " ")
}

// nonBlank drops the empty lines: a blank line more or less (a notice's
// leading newline, a terminal's CR LF) is not what a document is about.
func nonBlank(lines []string) []string {
	var out []string
	for _, l := range lines {
		if l != "" {
			out = append(out, l)
		}
	}
	return out
}

// pattern is one expected line: a regular expression for the line, or
// any number of lines ("...").
type pattern struct {
	text string         // as normalised, for messages
	any  bool           // the line "...": zero or more lines
	re   *regexp.Regexp // the line, "..." inside it matching anything
}

// promptPattern matches the line an input is typed on (not empty): as
// shown before the «, "..." matching anything.
func promptPattern(prompt string) *regexp.Regexp {
	if p := normaliseLine(prompt); p != "..." && p != "" {
		return patterns([]string{p})[0].re
	}
	return regexp.MustCompile("")
}

func patterns(lines []string) []pattern {
	var out []pattern
	for _, l := range nonBlank(lines) {
		l = normaliseLine(l)
		if l == "..." {
			out = append(out, pattern{text: l, any: true})
			continue
		}
		parts := strings.Split(l, "...")
		for i, p := range parts {
			parts[i] = regexp.QuoteMeta(p)
		}
		out = append(out, pattern{text: l, re: regexp.MustCompile("^" + strings.Join(parts, ".*") + "$")})
	}
	return out
}

// matchEnds returns every n (smallest first) such that want matches
// got[:n] line by line.
func matchEnds(want []pattern, got []string) []int {
	var ends []int
	seen := map[[2]int]bool{}
	var walk func(i, j int)
	walk = func(i, j int) {
		if seen[[2]int{i, j}] {
			return
		}
		seen[[2]int{i, j}] = true
		if i == len(want) {
			ends = append(ends, j)
			return
		}
		if want[i].any {
			for k := j; k <= len(got); k++ {
				walk(i+1, k)
			}
			return
		}
		if j < len(got) && want[i].re.MatchString(got[j]) {
			walk(i+1, j+1)
		}
	}
	walk(0, 0)
	smallestFirst(ends)
	return ends
}

func smallestFirst(a []int) {
	for i := 1; i < len(a); i++ {
		for j := i; j > 0 && a[j] < a[j-1]; j-- {
			a[j], a[j-1] = a[j-1], a[j]
		}
	}
}

// matchAll reports whether want matches all of got.
func matchAll(want []pattern, got []string) bool {
	for _, n := range matchEnds(want, got) {
		if n == len(got) {
			return true
		}
	}
	return false
}

// matchPrefix returns the fewest lines of got that want matches.
func matchPrefix(want []pattern, got []string) (int, bool) {
	ends := matchEnds(want, got)
	if len(ends) == 0 {
		return 0, false
	}
	return ends[0], true
}

// segment is the part of a command's expected output up to one input:
// the lines before it, then the start of the line the input is typed on
// (a prompt) and the input. The last segment of a command has no input.
type segment struct {
	lines  []string
	prompt string // the line's text before «, as shown
	input  string // the «...» text; "" for the last segment
	hasIn  bool
}

var inputRE = regexp.MustCompile(`^(.*?)«([^»]+)»\s*$`)

func segments(expect []string) []segment {
	var out []segment
	var cur segment
	for _, l := range expect {
		if m := inputRE.FindStringSubmatch(l); m != nil {
			cur.prompt, cur.input, cur.hasIn = m[1], m[2], true
			out = append(out, cur)
			cur = segment{}
			continue
		}
		cur.lines = append(cur.lines, l)
	}
	return append(out, cur)
}

// keys turns an input's text into the bytes typed: "Enter"; a key
// sequence starting with a Ctrl- chord or Enter ("Ctrl-E c .", "Enter ~
// ."), each word a key;
// or text, typed and followed by Enter. named resolves text that stands
// for a value ("the token").
func keys(in string, named func(string) (string, bool)) (string, error) {
	switch {
	case in == "Enter":
		return "\r", nil
	case strings.HasPrefix(in, "Ctrl-"), strings.HasPrefix(in, "Enter "):
		var b strings.Builder
		for _, k := range strings.Fields(in) {
			switch {
			case len(k) == 6 && strings.HasPrefix(k, "Ctrl-") && k[5] >= 'A' && k[5] <= 'Z':
				b.WriteByte(k[5] - 'A' + 1)
			case k == "Enter":
				b.WriteByte('\r')
			case len(k) == 1:
				b.WriteString(k)
			default:
				return "", fmt.Errorf("key %q in «%s»: want Ctrl-X, Enter or one character", k, in)
			}
		}
		return b.String(), nil
	}
	if v, ok := named(in); ok {
		return v + "\r", nil
	}
	return in + "\r", nil
}

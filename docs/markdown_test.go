package docs

// Reading the examples out of the markdown: fenced blocks, their info
// strings, and the steps of a terminal transcript.

import (
	"fmt"
	"regexp"
	"strings"
	"time"
	"unicode"
)

// block is one fenced shell example.
type block struct {
	file    string // "README.md", "docs/tenant.md"
	line    int    // of the opening fence, 1-based
	id      string // file and first line: the key of pendingFix
	lang    string // "sh" (run, exit status 0) or "console" (a transcript)
	term    string // the terminal it is typed into ("1" unless term=N)
	noTest  string // why it is not run, when the info string says no-test
	timeout time.Duration
	body    []string
}

// where names a block for a reader of the test's output.
func (b block) where() string { return fmt.Sprintf("%s:%d", b.file, b.line) }

// Languages of the blocks that are run; every other block is text.
var runLangs = map[string]string{"sh": "sh", "shell": "sh", "bash": "sh", "console": "console"}

// defaultTimeout bounds each command of an example (and each wait for a
// prompt in a transcript); timeout=D in the info string changes it.
const defaultTimeout = 30 * time.Second

// parseBlocks returns the runnable blocks of one markdown file, and an
// error for what the test refuses: an unclosed fence, a no-test without a
// reason, an unknown attribute, a transcript fenced as plain text.
func parseBlocks(file, text string) ([]block, error) {
	var out []block
	lines := strings.Split(text, "\n")
	seen := map[string]int{}
	for i := 0; i < len(lines); i++ {
		indent, info, ok := fence(lines[i])
		if !ok {
			continue
		}
		start := i
		var body []string
		for i++; ; i++ {
			if i == len(lines) {
				return nil, fmt.Errorf("%s:%d: the fence is never closed", file, start+1)
			}
			if _, rest, ok := fence(lines[i]); ok && rest == "" {
				break
			}
			body = append(body, dedent(lines[i], indent))
		}
		words := strings.Fields(info)
		lang := ""
		if len(words) > 0 {
			lang = words[0]
		}
		kind, run := runLangs[lang]
		if !run {
			if len(body) > 0 && strings.HasPrefix(body[0], "$ ") {
				return nil, fmt.Errorf("%s:%d: a transcript (a line starting with \"$ \") must be fenced as ```console", file, start+1)
			}
			continue
		}
		b := block{file: file, line: start + 1, lang: kind, term: "1", timeout: defaultTimeout, body: body}
		if err := b.attributes(words[1:]); err != nil {
			return nil, fmt.Errorf("%s:%d: %w", file, start+1, err)
		}
		b.id = file + ": " + firstLine(body)
		if seen[b.id]++; seen[b.id] > 1 {
			b.id += fmt.Sprintf(" #%d", seen[b.id])
		}
		out = append(out, b)
	}
	return out, nil
}

// attributes reads the info string after the language: term=N,
// timeout=D, and no-test followed by its reason (the rest of the line).
func (b *block) attributes(words []string) error {
	for j, w := range words {
		switch k, v, _ := strings.Cut(w, "="); {
		case strings.HasPrefix(w, "no-test"):
			b.noTest = strings.TrimSpace(strings.TrimPrefix(strings.Join(words[j:], " "), "no-test"))
			b.noTest = strings.TrimSpace(strings.TrimPrefix(b.noTest, ":"))
			if b.noTest == "" {
				return fmt.Errorf("no-test needs a reason: ```sh no-test: why")
			}
			return nil
		case k == "term" && v != "":
			b.term = v
		case k == "timeout":
			d, err := time.ParseDuration(v)
			if err != nil {
				return fmt.Errorf("timeout: %w", err)
			}
			b.timeout = d
		default:
			return fmt.Errorf("unknown attribute %q (term=N, timeout=D, no-test: reason)", w)
		}
	}
	return nil
}

var fenceRE = regexp.MustCompile("^( *)```(.*)$")

// fence reports whether line opens or closes a fenced block, with its
// indentation and info string.
func fence(line string) (indent int, info string, ok bool) {
	m := fenceRE.FindStringSubmatch(line)
	if m == nil {
		return 0, "", false
	}
	return len(m[1]), strings.TrimSpace(m[2]), true
}

// dedent removes up to n leading spaces (a fence inside a list item).
func dedent(s string, n int) string {
	for i := 0; i < n && strings.HasPrefix(s, " "); i++ {
		s = s[1:]
	}
	return s
}

func firstLine(body []string) string {
	for _, l := range body {
		if l = strings.TrimSpace(l); l != "" {
			return strings.TrimPrefix(l, "$ ")
		}
	}
	return "(empty)"
}

// command is one command of a block: the lines typed (a continued line
// or a here-document spans several), and for a transcript the lines it
// shows after it. A transcript block that starts without "$ " continues
// the command still running in its terminal: typed is nil.
type command struct {
	typed  []string
	expect []string
}

var heredocRE = regexp.MustCompile(`<<-?\s*'?"?([A-Za-z_]+)'?"?`)

// commands splits a block into commands. In a sh block every line is a
// command unless it continues (a trailing backslash, a here-document);
// comments and blank lines are skipped. In a transcript "$ " starts a
// command, and the lines that continue it may start with "> ", as a
// shell shows them.
func (b block) commands() []command {
	var out []command
	lines := b.body
	for i := 0; i < len(lines); i++ {
		l := lines[i]
		if b.lang == "console" {
			if !strings.HasPrefix(l, "$ ") {
				if len(out) == 0 {
					out = append(out, command{})
				}
				last := &out[len(out)-1]
				last.expect = append(last.expect, l)
				continue
			}
			l = strings.TrimPrefix(l, "$ ")
		} else if t := strings.TrimSpace(l); t == "" || strings.HasPrefix(t, "#") {
			continue
		}
		typed := []string{l}
		for cont := continues(l); cont != "" && i+1 < len(lines); {
			i++
			next := lines[i]
			if b.lang == "console" {
				next = strings.TrimPrefix(strings.TrimPrefix(next, "> "), ">")
			}
			typed = append(typed, next)
			if cont == "\\" {
				cont = continues(next)
			} else if strings.TrimSpace(next) == cont {
				cont = ""
			}
		}
		out = append(out, command{typed: typed})
	}
	return out
}

// continues says how a command line goes on: "\\" for a trailing
// backslash, the terminator of a here-document, or "".
func continues(l string) string {
	if strings.HasSuffix(l, "\\") {
		return "\\"
	}
	if m := heredocRE.FindStringSubmatch(l); m != nil && !strings.Contains(l, "<<<") {
		return m[1]
	}
	return ""
}

// anchors are the link targets of a page's headings, as GitHub makes
// them: the heading in lower case, spaces as "-", punctuation dropped, a
// repeated one numbered ("-1", "-2"). Lines in fenced blocks are no
// headings.
func anchors(text string) map[string]bool {
	out := map[string]bool{}
	fenced := false
	for _, l := range strings.Split(text, "\n") {
		if _, _, ok := fence(l); ok {
			fenced = !fenced
			continue
		}
		h := strings.TrimLeft(l, "#")
		if fenced || h == l || !strings.HasPrefix(h, " ") {
			continue
		}
		var b strings.Builder
		for _, r := range strings.ToLower(strings.TrimSpace(h)) {
			switch {
			case unicode.IsLetter(r), unicode.IsDigit(r), r == '-', r == '_':
				b.WriteRune(r)
			case r == ' ':
				b.WriteByte('-')
			}
		}
		a := b.String()
		for i := 1; out[a]; i++ {
			a = fmt.Sprintf("%s-%d", b.String(), i)
		}
		out[a] = true
	}
	return out
}

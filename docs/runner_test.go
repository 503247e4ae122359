package docs

// Running one page's examples, in the order a reader meets them, in the
// terminals they name.

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// page is one document being run: its terminals, the directory and
// environment they start in, and the last token it showed.
type page struct {
	t       *testing.T
	dir     string   // the terminals' working directory
	scratch string   // the test's own files (bash rc files)
	env     []string // the terminals' environment
	rcExtra string   // appended to every terminal's bash rc
	terms   map[string]*terminal
	token   string // "the token": the last one the page's output showed
	pending map[string]string
}

func (p *page) close() {
	for _, term := range p.terms {
		term.close()
	}
	p.terms = nil
}

func (p *page) terminal(name string) (*terminal, error) {
	if term, ok := p.terms[name]; ok {
		return term, nil
	}
	term, err := startTerminal(name, p.dir, p.scratch, p.env, p.rcExtra)
	if err != nil {
		return nil, err
	}
	if p.terms == nil {
		p.terms = map[string]*terminal{}
	}
	p.terms[name] = term
	return term, nil
}

// drop ends a terminal after a failure if a command still runs in it,
// so the next example gets a fresh one rather than a command hanging; a
// terminal back at its prompt keeps its state (variables, directory).
func (p *page) drop(name string) {
	if term, ok := p.terms[name]; ok && term.busy {
		term.close()
		delete(p.terms, name)
	}
}

// run runs blocks in order; every example that fails is reported.
func (p *page) run(blocks []block) {
	for i, b := range blocks {
		switch reason, pending := p.pending[b.id]; {
		case b.noTest != "":
			p.t.Logf("not run: %s (%s): %s", b.where(), b.id, b.noTest)
			continue
		case pending:
			p.t.Logf("pending %s, not run: %s (%s)", reason, b.where(), b.id)
			continue
		}
		if err := p.runBlock(b, p.continued(blocks[i+1:], b.term)); err != nil {
			p.t.Errorf("%s (%s):\n%v", b.where(), b.id, err)
			p.drop(b.term)
		}
	}
}

// continued reports whether a later example continues what runs in
// terminal term: a transcript in it that starts without a command.
func (p *page) continued(later []block, term string) bool {
	for _, b := range later {
		if b.term != term || b.noTest != "" || p.pending[b.id] != "" {
			continue
		}
		return b.lang == "console" && len(b.commands()) > 0 && b.commands()[0].typed == nil
	}
	return false
}

func (p *page) runBlock(b block, continues bool) error {
	term, err := p.terminal(b.term)
	if err != nil {
		return err
	}
	cmds := b.commands()
	for i, c := range cmds {
		if b.lang == "sh" {
			if err := p.runSh(b, term, c); err != nil {
				return err
			}
			continue
		}
		if err := p.runTranscript(b, term, c, continues && i == len(cmds)-1); err != nil {
			return fmt.Errorf("$ %s\n%w", strings.Join(c.typed, "\n> "), err)
		}
	}
	return nil
}

// runSh types one command of a sh block: it must exit 0.
func (p *page) runSh(b block, term *terminal, c command) error {
	if err := term.typeLines(c.typed); err != nil {
		return err
	}
	out, status, err := term.waitPrompt(b.timeout)
	p.saw(out)
	if err != nil || status != 0 {
		if err == nil {
			err = fmt.Errorf("exit status %d", status)
		}
		return fmt.Errorf("$ %s\n%v; it printed:\n%s", strings.Join(c.typed, "\n> "), err, indent(out))
	}
	return nil
}

// runTranscript types one command of a transcript (or continues the one
// running), types each «input» once the text before it has appeared, and
// compares what the terminal shows with the transcript. When a later
// example continues this command, only the lines shown must have
// appeared; otherwise the command must return to the prompt, and what it
// printed must be exactly what is shown.
func (p *page) runTranscript(b block, term *terminal, c command, continues bool) error {
	if c.typed != nil {
		if err := term.typeLines(c.typed); err != nil {
			return err
		}
	} else if !term.busy {
		return fmt.Errorf("nothing runs in terminal %s to continue", b.term)
	}
	segs := segments(c.expect)
	for i, s := range segs {
		want := patterns(s.lines)
		if i < len(segs)-1 {
			prompt := promptPattern(s.prompt)
			text, err := p.until(term, b.timeout, func(lines []string, prompted bool) (bool, error) {
				partial, complete := lines[len(lines)-1], nonBlank(lines[:len(lines)-1])
				switch {
				case s.prompt == "" && (matchAll(want, complete) || partial != "" && matchAll(want, append(complete, partial))):
					// An input on a line of its own: typed once the lines
					// shown are there, wherever the cursor is.
					return true, nil
				case s.prompt != "" && prompt.MatchString(partial) && matchAll(want, complete):
					return true, nil
				}
				if prompted {
					return false, fmt.Errorf("the command ended before «%s»", s.input)
				}
				return false, nil
			})
			if err != nil {
				return mismatch(fmt.Sprintf("waiting for %q to type «%s»: %v", s.prompt, s.input, err), append(s.lines, s.prompt), text)
			}
			p.saw(text)
			k, err := keys(s.input, p.named)
			if err != nil {
				return err
			}
			if err := term.typeKeys(k); err != nil {
				return err
			}
			continue
		}
		if continues {
			// The lines shown must have appeared (the last may be a
			// prompt the next example types at); the rest is the next
			// example's.
			var used int
			text, err := p.until(term, b.timeout, func(lines []string, prompted bool) (bool, error) {
				shown, at := nonBlankAt(lines)
				n, ok := matchPrefix(want, shown)
				if ok {
					used = 0
					if n > 0 {
						used = at[n-1] + 1
					}
				}
				return ok, nil
			})
			if err != nil {
				return mismatch(err.Error(), s.lines, text)
			}
			p.saw(text)
			term.consume(lineEnd(text, used))
			return nil
		}
		text, _, err := term.waitPrompt(b.timeout)
		p.saw(text)
		if err != nil {
			return mismatch(err.Error(), s.lines, text)
		}
		if got := nonBlank(normalise(text)); !matchAll(want, got) {
			return mismatch("the output differs", s.lines, text)
		}
	}
	return nil
}

// settle is how long the output must rest, once it is what is expected,
// before the next input is typed: as a reader reads the screen first, so
// that output racing the match (a replay behind a banner) is seen.
const settle = 200 * time.Millisecond

// until polls the terminal's output (after what was matched) until ok
// says it is what is expected and it has settled, or timeout.
func (p *page) until(term *terminal, timeout time.Duration, ok func(lines []string, prompted bool) (bool, error)) (string, error) {
	deadline := time.After(timeout)
	for {
		text, ready, prompted, _, _, grew, eof := term.snapshot()
		if ready {
			done, err := ok(normalise(text), prompted)
			if err != nil {
				return text, err
			}
			if done {
				select {
				case <-grew:
					continue // more came: look again
				case <-time.After(settle):
					return text, nil
				}
			}
		}
		if eof {
			return text, fmt.Errorf("the terminal's shell ended")
		}
		select {
		case <-grew:
		case <-deadline:
			return text, fmt.Errorf("not seen within %v", timeout)
		}
	}
}

// lineEnd is the offset in text just after its first n lines (the n-th
// ending in a newline or at the end of text).
func lineEnd(text string, n int) int {
	off := 0
	for i := 0; i < n; i++ {
		nl := strings.IndexByte(text[off:], '\n')
		if nl < 0 {
			return len(text)
		}
		off += nl + 1
	}
	return off
}

// nonBlankAt is nonBlank, with the index in lines of each line kept.
func nonBlankAt(lines []string) (out []string, at []int) {
	for i, l := range lines {
		if l != "" {
			out, at = append(out, l), append(at, i)
		}
	}
	return out, at
}

// saw remembers the last token in text: "the token" is the last one the
// reader was shown.
func (p *page) saw(text string) {
	text = fingerprintRE.ReplaceAllString(ansiRE.ReplaceAllString(text, ""), "")
	for _, m := range tokenRE.FindAllStringSubmatch(text, -1) {
		if isToken(m[1]) {
			p.token = m[1]
		}
	}
}

// named resolves an input that stands for a value.
func (p *page) named(in string) (string, bool) {
	if in == "the token" {
		return p.token, p.token != ""
	}
	return "", false
}

func mismatch(what string, want []string, got string) error {
	var w strings.Builder
	for _, pt := range patterns(want) {
		w.WriteString("    " + pt.text + "\n")
	}
	return fmt.Errorf("%s\n  the example shows:\n%s  the terminal showed:\n%s", what, w.String(), indent(strings.Join(nonBlank(normalise(got)), "\n")))
}

func indent(s string) string {
	if s == "" {
		return "    (nothing)\n"
	}
	return "    " + strings.ReplaceAll(strings.TrimRight(s, "\n"), "\n", "\n    ") + "\n"
}

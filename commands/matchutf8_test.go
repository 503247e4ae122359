package commands

import (
	"bytes"
	"errors"
	"fmt"
	"testing"
	"time"
)

// found is a match as TestMatcherInvalidUTF8 wants it.
type found struct {
	off  int64
	text string
}

func (f found) String() string { return fmt.Sprintf("%q at %d", f.text, f.off) }

// scanCut feeds out to a fresh matcher cut at cuts (ascending offsets
// into out) and returns every match of p, in order (a match consumes the
// output up to its end, as expect's successive waits do). It searches
// both ways a search can run (in one call to regexp, and in slices
// through a sliceReader) and panics if they differ.
func scanCut(p *pattern, out []byte, cuts []int) []found {
	whole, sliced := scanCutWith(p, out, cuts, 0), scanCutWith(p, out, cuts, 1)
	if fmt.Sprint(whole) != fmt.Sprint(sliced) {
		panic(fmt.Sprintf("pattern %q, output %q cut at %v: %v in one call, %v in slices", p.src, out, cuts, whole, sliced))
	}
	return whole
}

// scanCutWith is scanCut with the meter's direct bound.
func scanCutWith(p *pattern, out []byte, cuts []int, direct int) []found {
	var m matcher
	m.meter.direct = direct
	var got []found
	prev := 0
	for _, c := range append(cuts, len(out)) {
		mt, ok := m.scanT(out[prev:c], time.Now(), p)
		for ok {
			got = append(got, found{mt.Offset, mt.Text})
			mt, ok = m.findT(p)
		}
		prev = c
	}
	return got
}

// TestMatcherInvalidUTF8: RE2 reads an invalid byte as U+FFFD (one byte
// wide); a match's offset counts bytes, and its text is the bytes. A
// character that SOL split between chunks is searched whole, once its
// last byte came: the matches are the same whichever way the output is
// cut (at every byte, and byte by byte), and the same as in the output
// read at once.
func TestMatcherInvalidUTF8(t *testing.T) {
	tests := []struct {
		name, pat, out string
		want           []found
	}{
		{"valid text", `login:`, "boot\r\nnaïve login: é\n", []found{{13, "login:"}}},
		{"invalid bytes before", `login:`, "\xff\xfe\xc3 login:\n", []found{{4, "login:"}}},
		{"invalid byte inside", `a.b`, "xa\xffb é a\xc3b\n", []found{{1, "a\xffb"}, {8, "a\xc3b"}}},
		{"invalid bytes and U+FFFD", `\x{FFFD}`, "é\xffé\uFFFD\xe2\x82x\n",
			[]found{{2, "\xff"}, {5, "\uFFFD"}, {8, "\xe2"}, {9, "\x82"}}},
		{"split characters are no U+FFFD", `\x{FFFD}|[^ -~\n]x`, "é€😀x€\n", []found{{5, "😀x"}}},
		{"any character whole", `x.`, "xé x€ x😀 x\xc3x\n", []found{{0, "xé"}, {4, "x€"}, {9, "x😀"}, {15, "x\xc3"}}},
		{"line start after a character", `^.`, "a😀\n😀b\n\xa9\n", []found{{0, "a"}, {6, "😀"}, {12, "\xa9"}}},
		{"no line start after a match", `^\x{FFFD}|é`, "é\xa9\n\xa9\n", []found{{0, "é"}, {4, "\xa9"}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, out := mustPattern(tc.pat), []byte(tc.out)
			if got := scanCut(p, out, nil); fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Fatalf("in one chunk: got %v, want %v", got, tc.want)
			}
			for c := 1; c < len(out); c++ {
				if got := scanCut(p, out, []int{c}); fmt.Sprint(got) != fmt.Sprint(tc.want) {
					t.Fatalf("cut at byte %d (%q | %q): got %v, want %v", c, out[:c], out[c:], got, tc.want)
				}
			}
			var each []int
			for c := 1; c < len(out); c++ {
				each = append(each, c)
			}
			if got := scanCut(p, out, each); fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Fatalf("byte by byte: got %v, want %v", got, tc.want)
			}
		})
	}
}

// TestMatcherSplitCharacterWaits: the first bytes of a character at the
// end of the output so far are not matched as invalid bytes; they are once
// what follows shows they start no character.
func TestMatcherSplitCharacterWaits(t *testing.T) {
	var m matcher
	p := mustPattern(`x.`)
	if mt, ok := m.scanT([]byte("x\xe2\x82"), time.Now(), p); ok {
		t.Fatalf("matched a character's first bytes: %q", mt.Text)
	}
	if mt, ok := m.scanT([]byte("\xac"), time.Now(), p); !ok || mt.Text != "x€" || mt.Offset != 0 {
		t.Fatalf("the completed character: got %+v, %v, want x€ at 0", mt, ok)
	}
	m = matcher{}
	m.scanT([]byte("ax\xe2"), time.Now(), p)
	if mt, ok := m.scanT([]byte("y"), time.Now(), p); !ok || mt.Text != "x\xe2" || mt.Offset != 1 {
		t.Fatalf("a lead byte that starts no character: got %+v, %v, want x\\xe2 at 1", mt, ok)
	}
}

// TestMatcherWindowCutsCharacter: output the window forgets leaves no
// piece of a character behind to match as an invalid byte.
func TestMatcherWindowCutsCharacter(t *testing.T) {
	for lead := range 3 { // the window cuts €'s bytes after 1, 2 or 3 of them
		var m matcher
		m.feed(append([]byte("€"), bytes.Repeat([]byte("x"), window-3+lead+1)...), time.Now())
		if mt, ok := m.findT(mustPattern(`\x{FFFD}`)); ok {
			t.Errorf("cut after %d bytes: matched %q at %d, a piece of €", lead+1, mt.Text, mt.Offset)
		}
	}
}

// TestPatternInvalidUTF8: a pattern with invalid UTF-8 (RE2 takes none)
// is a usage error.
func TestPatternInvalidUTF8(t *testing.T) {
	var ue *UsageError
	if _, err := compilePattern(CmdWaitFor, "login\xff"); !errors.As(err, &ue) {
		t.Fatalf("got %v, want a usage error", err)
	}
	if _, err := ParseScript("wait a\xc3b 1s\n"); !errors.As(err, &ue) {
		t.Fatalf("script: got %v, want a usage error", err)
	}
}

package printable

import (
	"strings"
	"testing"
	"unicode"
)

func TestClean(t *testing.T) {
	tests := []struct {
		in   string
		max  int
		want string
	}{
		{"node-17", 0, "node-17"},
		{"héllo wörld", 0, "héllo wörld"},
		{"a\x1b[2Jb", 0, `a\x1b[2Jb`},
		{"bell\x07 tab\t", 0, `bell\a tab\t`},
		{"c1 \u009b bidi \u202e", 0, `c1 \u009b bidi \u202e`},
		{"bad \xff byte", 0, `bad \xff byte`},
		{`quotes " and \ stay`, 0, `quotes " and \ stay`},
		{"abcdef", 4, "abcd" + Cut},
		{"abcd", 4, "abcd"},
		{"ééé", 3, "é" + Cut},                 // never half a rune
		{"\x1b\x1b\x1b", 8, `\x1b\x1b` + Cut}, // the bound is on what is printed
	}
	for _, tt := range tests {
		if got := Clean(tt.in, tt.max); got != tt.want {
			t.Errorf("Clean(%q, %d): got %q, want %q", tt.in, tt.max, got, tt.want)
		}
	}
}

func TestQuote(t *testing.T) {
	tests := []struct {
		in   string
		max  int
		want string
	}{
		{"n1", 0, `"n1"`},
		{"a\x1bb\u202e\xff", 0, `"a\x1bb\u202e\xff"`},
		{`say "hi"`, 0, `"say \"hi\""`},
		{strings.Repeat("é", 10), 6, `"ééé"` + Cut},
	}
	for _, tt := range tests {
		if got := Quote(tt.in, tt.max); got != tt.want {
			t.Errorf("Quote(%q, %d): got %s, want %s", tt.in, tt.max, got, tt.want)
		}
	}
}

// FuzzClean: whatever comes in, what comes out is printable, valid UTF-8 and
// bounded, and clean text passes unchanged.
func FuzzClean(f *testing.F) {
	for _, s := range []string{"", "n1", "\x1b]0;x\x07", "\xff\xfe", "\u202eé\u009b", strings.Repeat("\x00", 50)} {
		f.Add(s, 16)
	}
	f.Fuzz(func(t *testing.T, s string, max int) {
		if max < 0 || max > 1<<10 {
			return
		}
		got := Clean(s, max)
		if !IsClean(got) {
			t.Fatalf("Clean(%q, %d) = %q: not clean", s, max, got)
		}
		for _, r := range got {
			if r != ' ' && !unicode.IsPrint(r) {
				t.Fatalf("Clean(%q, %d) = %q holds %U", s, max, got, r)
			}
		}
		if max > 0 && len(got) > max+len(Cut) {
			t.Fatalf("Clean(%q, %d) = %q: %d bytes", s, max, got, len(got))
		}
		if IsClean(s) && (max == 0 || len(s) <= max) && got != s {
			t.Fatalf("Clean(%q, %d) = %q: clean text changed", s, max, got)
		}
	})
}

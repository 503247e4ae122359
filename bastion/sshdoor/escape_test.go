package sshdoor

import (
	"bytes"
	"testing"
)

// flatten renders events as text: data as is, commands as <c>.
func flatten(evs []escapeEvent) string {
	var b bytes.Buffer
	for _, e := range evs {
		if e.Data != nil {
			b.Write(e.Data)
		} else {
			b.WriteString("<" + string(e.Cmd) + ">")
		}
	}
	return b.String()
}

func TestEscapeParser(t *testing.T) {
	tests := []struct {
		name  string
		feeds []string
		want  string
	}{
		{"plain", []string{"hello"}, "hello"},
		{"detach", []string{"ab\x05c.cd"}, "ab<.>cd"},
		{"split prefix", []string{"ab\x05", "c", "f", "x"}, "ab<f>x"},
		{"prefix byte alone is data", []string{"a\x05b"}, "a\x05b"},
		{"prefix twice", []string{"\x05\x05c?"}, "\x05<?>"},
		{"held across feeds then released", []string{"\x05", "z"}, "\x05z"},
		{"literal prefix across feeds", []string{"\x05c", "\x05"}, "\x05c"},
		{"literal prefix", []string{"a\x05c\x05b"}, "a\x05cb"},
		{"literal prefix then an escape", []string{"\x05c\x05\x05c."}, "\x05c<.>"},
		{"literal prefix is not a new prefix", []string{"\x05c\x05c."}, "\x05cc."},
		{"two commands", []string{"\x05cb\x05cr"}, "<b><r>"},
		{"tilde untouched", []string{"\r~.\r~B"}, "\r~.\r~B"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := newEscapeParser([]byte{0x05, 'c'})
			var all []escapeEvent
			for _, f := range tt.feeds {
				all = append(all, p.Feed([]byte(f))...)
			}
			if got := flatten(all); got != tt.want {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}
}

// encodeEscapes is what a user types to get evs: data as is, except that
// the prefix itself is typed as prefix + its first byte; a command as
// prefix + command. With {0x05, 'c'} (no overlap with itself) the prefix
// never appears in data any other way.
func encodeEscapes(evs []escapeEvent, prefix []byte) []byte {
	var b, run []byte // run: data since the last command
	literal := append(bytes.Clone(prefix), prefix[0])
	flush := func() {
		b = append(b, bytes.ReplaceAll(run, prefix, literal)...)
		run = nil
	}
	for _, e := range evs {
		if e.Data != nil {
			run = append(run, e.Data...)
			continue
		}
		flush()
		b = append(append(b, prefix...), e.Cmd)
	}
	flush()
	return b
}

// FuzzEscapeParser checks that no byte is lost or invented: typing the
// output again (encodeEscapes), plus what is still held, gives the input
// back, however the input is split.
func FuzzEscapeParser(f *testing.F) {
	f.Add([]byte("ab\x05c.cd"), uint8(3))
	f.Add([]byte("\x05\x05\x05c"), uint8(1))
	f.Add([]byte("\x05c\x05c\x05\x05c."), uint8(2))
	f.Add([]byte("plain text"), uint8(0))
	f.Fuzz(func(t *testing.T, in []byte, cut uint8) {
		prefix := []byte{0x05, 'c'}
		p := newEscapeParser(prefix)
		k := 0
		if len(in) > 0 {
			k = int(cut) % (len(in) + 1)
		}
		evs := append(p.Feed(in[:k]), p.Feed(in[k:])...)
		if got := append(encodeEscapes(evs, prefix), prefix[:p.held]...); !bytes.Equal(got, in) {
			t.Fatalf("typed again: got %q, want the input %q (events %q, %d held)", got, in, flatten(evs), p.held)
		}
		// One parse and a split parse agree.
		q := newEscapeParser(prefix)
		if a, b := flatten(q.Feed(in)), flatten(evs); a != b {
			t.Fatalf("split changed output: %q vs %q", a, b)
		}
	})
}

func TestCheckEscape(t *testing.T) {
	for _, tt := range []struct {
		prefix string
		ok     bool
	}{{"\x05c", true}, {"\x1dq", true}, {"\x05", false}, {"\x05cc", false}, {".c", false}, {"fx", false}, {"?x", false}} {
		if err := checkEscape(tt.prefix); (err == nil) != tt.ok {
			t.Errorf("checkEscape(%q): got %v, want ok %v", tt.prefix, err, tt.ok)
		}
	}
}

package bastion

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
		{"partial prefix then prefix", []string{"\x05c", "\x05"}, "<\x05>"},
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

// FuzzEscapeParser checks that no byte is lost or invented: with a prefix
// that never completes a command, output data equals input (minus what is
// still held), however the input is split.
func FuzzEscapeParser(f *testing.F) {
	f.Add([]byte("ab\x05c.cd"), uint8(3))
	f.Add([]byte("\x05\x05\x05c"), uint8(1))
	f.Add([]byte("plain text"), uint8(0))
	f.Fuzz(func(t *testing.T, in []byte, cut uint8) {
		p := newEscapeParser([]byte{0x05, 'c'})
		k := 0
		if len(in) > 0 {
			k = int(cut) % (len(in) + 1)
		}
		evs := append(p.Feed(in[:k]), p.Feed(in[k:])...)
		var data []byte
		cmds := 0
		for _, e := range evs {
			if e.Data != nil {
				data = append(data, e.Data...)
			} else {
				cmds++
			}
		}
		// Every command consumed exactly the 3 bytes of prefix+command.
		if got, want := len(data)+3*cmds+p.held, len(in); got != want {
			t.Fatalf("bytes accounted: got %d, want %d (data %q, %d commands, %d held)", got, want, data, cmds, p.held)
		}
		// One parse and a split parse agree.
		q := newEscapeParser([]byte{0x05, 'c'})
		if a, b := flatten(q.Feed(in)), flatten(evs); a != b {
			t.Fatalf("split changed output: %q vs %q", a, b)
		}
	})
}

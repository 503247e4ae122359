package history

import (
	"testing"

	"github.com/obmd/obmd/sol/history/casttest"
)

func TestCastThroughAsciinemaCat(t *testing.T) {
	valid := "boot \x1b[1mbold\x1b[0m\r\n\ttab é 漢字 🙂 \"q\" \\ </x>\r\nprompt# "
	tests := []struct {
		name, out, want string
	}{
		{"valid UTF-8 replays the same bytes", valid, valid},
		{"hostile bytes stay JSON; what is not UTF-8 is U+FFFD", hostile, toValidUTF8([]byte(hostile))},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			writes := fuzzWrites([]byte(tt.out), []byte{3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5}, true)
			cast := encode(t, FormatCast, Options{}, chunksOf(writes, 7))
			if got := casttest.AsciinemaCat(t, []byte(cast)); string(got) != tt.want {
				t.Errorf("asciinema cat printed %q, want %q", got, tt.want)
			}
		})
	}
}

package screen

import (
	"strings"
	"testing"
)

// feed returns a terminal of size s fed in.
func feed(t testing.TB, s Size, in ...string) *Terminal {
	t.Helper()
	term, err := New(s)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range in {
		term.Write([]byte(p))
	}
	return term
}

// rows is the Text of a screen of n rows whose first ones are given.
func rows(n int, first ...string) string {
	out := make([]string, n)
	copy(out, first)
	return strings.Join(out, "\n")
}

func TestTerminal(t *testing.T) {
	small := Size{Cols: 10, Rows: 4}
	tests := []struct {
		name string
		in   []string
		want string
		cur  [2]int // row, col
	}{
		{"text and newlines", []string{"ab\r\ncd"}, rows(4, "ab", "cd"), [2]int{1, 2}},
		{"LF keeps the column", []string{"ab\ncd"}, rows(4, "ab", "  cd"), [2]int{1, 4}},
		{"autowrap", []string{"0123456789ab"}, rows(4, "0123456789", "ab"), [2]int{1, 2}},
		{"pending wrap at the last column", []string{"0123456789"}, rows(4, "0123456789"), [2]int{0, 9}},
		{"CR cancels a pending wrap", []string{"0123456789\rX"}, rows(4, "X123456789"), [2]int{0, 1}},
		{"no autowrap", []string{"\x1b[?7l0123456789abc"}, rows(4, "012345678c"), [2]int{0, 9}},
		{"scroll at the bottom", []string{"1\r\n2\r\n3\r\n4\r\n5"}, rows(4, "2", "3", "4", "5"), [2]int{3, 1}},
		{"CUP", []string{"\x1b[2;5Hx\x1b[Hy"}, rows(4, "y", "    x"), [2]int{0, 1}},
		{"CUP clamps", []string{"\x1b[99;99Hx"}, rows(4, "", "", "", "         x"), [2]int{3, 9}},
		{"CUU CUD CUF CUB", []string{"\x1b[3;3H\x1b[Aa\x1b[2Bb\x1b[3Cc\x1b[9Dd"}, rows(4, "", "  a", "", "d  b   c"), [2]int{3, 1}},
		{"CHA VPA HPA", []string{"\x1b[5Gx\x1b[3dy\x1b[1`z"}, rows(4, "    x", "", "z    y"), [2]int{2, 1}},
		{"CNL CPL", []string{"ab\x1b[2Ec\x1b[Fd"}, rows(4, "ab", "d", "c"), [2]int{1, 1}},
		{"save and restore", []string{"ab\x1b7\x1b[3;1Hcd\x1b8e\x1b[s\x1b[4;4Hf\x1b[ug"}, rows(4, "abeg", "", "cd", "   f"), [2]int{0, 4}},
		{"ED below", []string{"aaaa\r\nbbbb\r\ncccc\x1b[2;3H\x1b[J"}, rows(4, "aaaa", "bb"), [2]int{1, 2}},
		{"ED above", []string{"aaaa\r\nbbbb\r\ncccc\x1b[2;3H\x1b[1J"}, rows(4, "", "   b", "cccc"), [2]int{1, 2}},
		{"ED all", []string{"aaaa\r\nbbbb\x1b[2J"}, rows(4), [2]int{1, 4}},
		{"EL", []string{"abcdef\x1b[1;3H\x1b[K\r\nabcdef\x1b[2;3H\x1b[1K\r\nabcdef\x1b[2K"}, rows(4, "ab", "   def"), [2]int{2, 6}},
		{"ECH", []string{"abcdef\x1b[1;2H\x1b[2X"}, rows(4, "a  def"), [2]int{0, 1}},
		{"ICH", []string{"abcdef\x1b[1;2H\x1b[2@"}, rows(4, "a  bcdef"), [2]int{0, 1}},
		{"ICH pushes off the end", []string{"0123456789\x1b[1;1H\x1b[3@"}, rows(4, "   0123456"), [2]int{0, 0}},
		{"DCH", []string{"abcdef\x1b[1;2H\x1b[2P"}, rows(4, "adef"), [2]int{0, 1}},
		{"insert mode", []string{"abc\x1b[1;2H\x1b[4hXY\x1b[4lZ"}, rows(4, "aXYZc"), [2]int{0, 4}},
		{"IL", []string{"1\r\n2\r\n3\r\n4\x1b[2;1H\x1b[L"}, rows(4, "1", "", "2", "3"), [2]int{1, 0}},
		{"DL", []string{"1\r\n2\r\n3\r\n4\x1b[2;1H\x1b[2M"}, rows(4, "1", "4"), [2]int{1, 0}},
		{"scroll region", []string{"top\x1b[4;1Hbottom\x1b[2;3r\x1b[3;1Ha\nb\nc"}, rows(4, "top", " b", "  c", "bottom"), [2]int{2, 3}},
		{"IND and RI in the region", []string{"1\r\n2\r\n3\r\n4\x1b[2;3r\x1b[2;1H\x1bM\x1b[3;1H\x1bD\x1bDx"}, rows(4, "1", "", "x", "4"), [2]int{2, 1}},
		{"NEL", []string{"ab\x1bEc"}, rows(4, "ab", "c"), [2]int{1, 1}},
		{"SU SD", []string{"1\r\n2\r\n3\r\n4\x1b[S\x1b[2T"}, rows(4, "", "", "2", "3"), [2]int{3, 1}},
		{"origin mode", []string{"\x1b[2;3r\x1b[?6h\x1b[1;1Hx\x1b[9;1Hy"}, rows(4, "", "x", "y"), [2]int{2, 1}},
		{"tabs", []string{"a\tb\x1b[1;3H\x1bH\r\tc\x1b[3g\r\td"}, rows(10, "a c     bd"), [2]int{0, 9}},
		{"CHT CBT", []string{"\x1b[2Ix\x1b[Zy"}, rows(4, "        yx"), [2]int{0, 9}},
		{"BS", []string{"abc\b\bX"}, rows(4, "aXc"), [2]int{0, 2}},
		{"DEC line drawing", []string{"\x1b(0lqqk\r\nx  x\r\nmqqj\x1b(Bq"}, rows(4, "┌──┐", "│  │", "└──┘q"), [2]int{2, 5}},
		{"SO and SI", []string{"\x1b)0a\x0eq\x0fq"}, rows(4, "a─q"), [2]int{0, 3}},
		{"UK set", []string{"\x1b(A#\x1b(B#"}, rows(4, "£#"), [2]int{0, 2}},
		{"UTF-8", []string{"h\u00e9\u2500\u2502x"}, rows(4, "hé─│x"), [2]int{0, 5}},
		{"UTF-8 split across writes", []string{"a\xe2", "\x94", "\x80b"}, rows(4, "a─b"), [2]int{0, 3}},
		{"invalid UTF-8 is code page 437", []string{"\xda\xc4\xc4\xbf\r\n\xb3\xc9\xcd\xbb"}, rows(4, "┌──┐", "│╔═╗"), [2]int{1, 4}},
		{"UTF-8 again after code page 437", []string{"\xda\xc4\xbf\r\n\xe2\x94\x80\xc3\xa9"}, rows(4, "┌─┐", "─é"), [2]int{1, 2}},
		{"a character cut short", []string{"\xe2\x94x"}, rows(4, "Γöx"), [2]int{0, 3}},
		{"wide characters", []string{"a\u4e2d\u6587b"}, rows(4, "a中文b"), [2]int{0, 6}},
		{"a wide character wraps whole", []string{"012345678\u4e2d"}, rows(4, "012345678", "中"), [2]int{1, 2}},
		{"overwriting half of a wide character", []string{"\u4e2d\u6587\x1b[1;2Hx"}, rows(4, " x文"), [2]int{0, 2}},
		{"combining marks are dropped", []string{"e\u0301x"}, rows(4, "ex"), [2]int{0, 2}},
		{"CSI split across writes", []string{"\x1b[", "2;", "5Hx"}, rows(4, "", "    x"), [2]int{1, 5}},
		{"OSC ignored (BEL)", []string{"a\x1b]0;title\x07b"}, rows(4, "ab"), [2]int{0, 2}},
		{"OSC ignored (ST)", []string{"a\x1b]0;ti", "tle\x1b\\b"}, rows(4, "ab"), [2]int{0, 2}},
		{"DCS ignored", []string{"a\x1bP1$r\x07still\x1b\\b"}, rows(4, "ab"), [2]int{0, 2}},
		{"unknown CSI ignored", []string{"a\x1b[>4;1m\x1b[?1$pb\x1b[12;34;56~c"}, rows(4, "abc"), [2]int{0, 3}},
		{"CAN cancels", []string{"a\x1b[2\x18Jb"}, rows(4, "aJb"), [2]int{0, 3}},
		{"controls inside a sequence", []string{"ab\x1b[\r2Jc"}, rows(4, "c"), [2]int{0, 1}},
		{"REP", []string{"ab\x1b[3b"}, rows(4, "abbbb"), [2]int{0, 5}},
		{"REP in insert mode", []string{"xyz\x1b[1;1H\x1b[4ha\x1b[2b"}, rows(4, "aaaxyz"), [2]int{0, 3}},
		{"alternate screen", []string{"main\x1b[?1049halt"}, rows(4, "    alt"), [2]int{0, 7}},
		{"back from the alternate screen", []string{"main\x1b[?1049h\x1b[Halt\x1b[?1049lX"}, rows(4, "mainX"), [2]int{0, 5}},
		{"47 keeps the alternate screen", []string{"m\x1b[?47ha\x1b[?47l\x1b[?47h"}, rows(4, " a"), [2]int{0, 2}},
		{"RIS", []string{"abc\x1b[?1049h\x1b[2;3r\x1bcx"}, rows(4, "x"), [2]int{0, 1}},
		{"DECALN", []string{"\x1b#8"}, rows(4, "EEEEEEEEEE", "EEEEEEEEEE", "EEEEEEEEEE", "EEEEEEEEEE"), [2]int{0, 0}},
		{"DECSTR", []string{"\x1b[2;3r\x1b[?6h\x1b[4h\x1b(0\x1b[!pq\x1b[4;1Hq"}, rows(4, "", "q", "", "q"), [2]int{3, 1}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := small
			if tc.name == "tabs" {
				s = Size{Cols: 10, Rows: 10}
			}
			term := feed(t, s, tc.in...)
			if got := term.Text(); got != tc.want {
				t.Errorf("text:\n%q\nwant\n%q", got, tc.want)
			}
			if c := term.Cursor(); c.Row != tc.cur[0] || c.Col != tc.cur[1] {
				t.Errorf("cursor at %d,%d, want %d,%d", c.Row, c.Col, tc.cur[0], tc.cur[1])
			}
		})
	}
}

func TestSGR(t *testing.T) {
	tests := []struct {
		in   string
		want Style
	}{
		{"\x1b[1;4;5;7mx", Style{Bold: true, Underline: true, Blink: true, Reverse: true}},
		{"\x1b[2;3;8;9mx", Style{Dim: true, Italic: true, Invisible: true, Strike: true}},
		{"\x1b[1m\x1b[22mx\x1b[0m", Style{}},
		{"\x1b[31;42mx", Style{Fg: "1", Bg: "2"}},
		{"\x1b[91;102mx", Style{Fg: "9", Bg: "10"}},
		{"\x1b[38;5;196;48;5;21mx", Style{Fg: "196", Bg: "21"}},
		{"\x1b[38;2;1;2;3;48;2;255;0;128mx", Style{Fg: "#010203", Bg: "#ff0080"}},
		{"\x1b[38:2::1:2:3mx", Style{Fg: "#010203"}},
		{"\x1b[38:2:1:2:3;1mx", Style{Fg: "#010203", Bold: true}},
		{"\x1b[38:5:100mx", Style{Fg: "100"}},
		{"\x1b[4:3mx", Style{Underline: true}},
		{"\x1b[4m\x1b[4:0mx", Style{}},
		{"\x1b[38;5;300;1mx", Style{Bold: true}},
		{"\x1b[58;2;1;2;3;4mx", Style{Underline: true}},
		{"\x1b[31m\x1b[39mx", Style{}},
		{"\x1b[7m\x1b[mx", Style{}},
	}
	for _, tc := range tests {
		term := feed(t, Size{Cols: 10, Rows: 2}, tc.in)
		spans := term.Spans()
		var got Style
		if len(spans) > 0 {
			got = spans[0].Style
		}
		if got != tc.want || len(spans) > 1 {
			t.Errorf("%q: got %+v (%d spans), want %+v", tc.in, got, len(spans), tc.want)
		}
	}
}

// TestEraseKeepsBackground: an erase fills with the pen's background
// (BCE), which a highlighted menu bar is made of.
func TestEraseKeepsBackground(t *testing.T) {
	term := feed(t, Size{Cols: 10, Rows: 3}, "\x1b[2;1H\x1b[44m\x1b[K\x1b[0m")
	want := []Span{{Row: 1, Col: 0, Len: 10, Style: Style{Bg: "4"}}}
	if got := term.Spans(); len(got) != 1 || got[0] != want[0] {
		t.Errorf("spans %+v, want %+v", got, want)
	}
}

func TestParseSize(t *testing.T) {
	for in, want := range map[string]Size{"": {}, "80x25": {80, 25}, "200x100": {200, 100}, "2x1": {2, 1}} {
		if got, err := ParseSize(in); err != nil || got != want {
			t.Errorf("ParseSize(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"201x25", "80x101", "1x1", "0x0", "80", "x25", "80x", "-80x25", "+80x25", "80x25x1", " 80x25", "8e1x25"} {
		if _, err := ParseSize(in); err == nil {
			t.Errorf("ParseSize(%q): no error", in)
		}
	}
	if _, err := New(Size{Cols: 201, Rows: 25}); err == nil {
		t.Error("New(201x25): no error")
	}
}

// TestSnapshotIsACopy: a snapshot does not change as the terminal does.
func TestSnapshotIsACopy(t *testing.T) {
	term := feed(t, Size{Cols: 10, Rows: 2}, "before")
	s := term.Snapshot()
	term.Write([]byte("\x1b[2J\x1b[Hafter"))
	if got := s.Text(); got != "before\n" {
		t.Errorf("snapshot text %q, want %q", got, "before\n")
	}
	var zero Snapshot
	if got := zero.Size(); got != (Size{Cols: 80, Rows: 25}) {
		t.Errorf("zero snapshot size %v", got)
	}
}

func TestSnapshotJSON(t *testing.T) {
	term := feed(t, Size{Cols: 10, Rows: 2}, "ab\x1b[7mcd\x1b[0m\r\n\x1b[?25l")
	js, err := term.Snapshot().MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	want := `{"cols":10,"rows":2,"cursor":{"row":1,"col":0,"visible":false},"alt_screen":false,` +
		`"lines":["abcd",""],"spans":[{"row":0,"col":2,"len":2,"reverse":true}]}`
	if string(js) != want {
		t.Errorf("json\n%s\nwant\n%s", js, want)
	}
}

// TestBlank: a screen is blank while it shows nothing and its cursor is
// home; text, a coloured blank, a moved cursor or the alternate screen
// are something to redraw.
func TestBlank(t *testing.T) {
	for _, c := range []struct {
		in    string
		blank bool
	}{
		{"", true},
		{"\x1b[2J\x1b[H", true},
		{"x\x1b[2J\x1b[H", true},
		{"\x1b[?1h\x1b[1;24r", true}, // modes: the replay sets them
		{"x", false},
		{"\x1b[5;5H", false},
		{"\x1b[44m\x1b[2J\x1b[H", false},
		{"\x1b[?1049h", false},
		{" ", false},
	} {
		term := feed(t, Size{}, c.in)
		if got := term.Blank(); got != c.blank || term.Snapshot().Blank() != c.blank {
			t.Errorf("%q: blank %v, want %v", c.in, got, c.blank)
		}
	}
}

package screen

import (
	"encoding/json"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Cursor is where the cursor is (0-based; Row indexes Lines) and whether
// it is shown.
type Cursor struct {
	Row     int  `json:"row"`
	Col     int  `json:"col"`
	Visible bool `json:"visible"`
}

// Cursor returns the cursor.
func (t *Terminal) Cursor() Cursor {
	return Cursor{Row: t.cur.row, Col: t.cur.col, Visible: !t.mode.hidden}
}

// Lines returns the rows shown, each with its trailing spaces trimmed (a
// wide character is one rune for its two cells).
func (t *Terminal) Lines() []string {
	ls := t.buf().lines
	out := make([]string, len(ls))
	var b strings.Builder
	for i := range ls {
		l := &ls[i]
		if l.blank && l.fill.r == ' ' {
			continue
		}
		b.Reset()
		for j := range l.cells {
			if r := l.at(j).r; r != 0 {
				b.WriteRune(r)
			}
		}
		out[i] = strings.TrimRight(b.String(), " ")
	}
	return out
}

// Blank reports whether the screen shows nothing: the main screen, every
// cell a default blank (no character, no colour), the cursor at home. A
// redraw of it would only clear a viewer's terminal.
func (t *Terminal) Blank() bool {
	if t.onAlt || t.cur.row != 0 || t.cur.col != 0 || t.wrapNext {
		return false
	}
	def := blankCell(attr{})
	for i := range t.main.lines {
		l := &t.main.lines[i]
		if l.blank && l.fill == def {
			continue
		}
		for c := range l.cells {
			if l.at(c) != def {
				return false
			}
		}
	}
	return true
}

// Text returns the screen as text: Lines joined by newlines.
func (t *Terminal) Text() string { return strings.Join(t.Lines(), "\n") }

// Snapshot returns a copy of the terminal's state: what its screen shows,
// and what ANSI needs to redraw it. The copy is the caller's, safe to use
// from any goroutine.
func (t *Terminal) Snapshot() Snapshot {
	c := *t
	c.p = parser{}
	c.main = t.main.clone()
	if t.onAlt {
		c.alt = t.alt.clone()
	} else {
		c.alt = buffer{}
	}
	c.tabs = append([]bool(nil), t.tabs...)
	return Snapshot{t: &c}
}

func (b buffer) clone() buffer {
	if b.lines == nil {
		return b
	}
	cols := len(b.lines[0].cells)
	cells := make([]cell, cols*len(b.lines))
	lines := make([]line, len(b.lines))
	for i, l := range b.lines {
		c := cells[i*cols : (i+1)*cols : (i+1)*cols]
		if !l.blank {
			copy(c, l.cells)
		}
		l.cells = c
		lines[i] = l
	}
	b.lines = lines
	return b
}

// Snapshot is a terminal's state at one instant (Terminal.Snapshot). Its
// JSON form is {"cols", "rows", "cursor": {"row", "col", "visible"},
// "alt_screen", "lines": [...], "spans": [{"row", "col", "len", "fg",
// "bg", "bold", ...}]}: the rows as Lines gives them and the runs of cells
// drawn with attributes (columns in cells). The zero Snapshot is a blank
// 80x25 screen.
type Snapshot struct {
	t *Terminal
}

func (s Snapshot) term() *Terminal {
	if s.t == nil {
		t, _ := New(Size{})
		return t
	}
	return s.t
}

// Size is the screen's size.
func (s Snapshot) Size() Size { return s.term().size }

// Cursor is the cursor (Terminal.Cursor).
func (s Snapshot) Cursor() Cursor { return s.term().Cursor() }

// Lines are the rows shown (Terminal.Lines).
func (s Snapshot) Lines() []string { return s.term().Lines() }

// Text is the screen as text (Terminal.Text).
func (s Snapshot) Text() string { return s.term().Text() }

// ANSI is the redraw of the screen (Terminal.ANSI).
func (s Snapshot) ANSI() []byte { return s.term().ANSI() }

// Spans are the runs of cells drawn with attributes (Terminal.Spans).
func (s Snapshot) Spans() []Span { return s.term().Spans() }

// AltScreen reports whether the alternate screen is shown.
func (s Snapshot) AltScreen() bool { return s.term().onAlt }

// Blank reports whether the screen shows nothing (Terminal.Blank).
func (s Snapshot) Blank() bool { return s.term().Blank() }

// MarshalJSON writes the snapshot's JSON form (see Snapshot).
func (s Snapshot) MarshalJSON() ([]byte, error) {
	t := s.term()
	return json.Marshal(struct {
		Cols      int      `json:"cols"`
		Rows      int      `json:"rows"`
		Cursor    Cursor   `json:"cursor"`
		AltScreen bool     `json:"alt_screen"`
		Lines     []string `json:"lines"`
		Spans     []Span   `json:"spans"`
	}{t.size.Cols, t.size.Rows, t.Cursor(), t.onAlt, t.Lines(), t.Spans()})
}

// Style is how a run of cells is drawn: colours ("" the default, "0" to
// "255" indexed, "#rrggbb") and attributes.
type Style struct {
	Fg        string `json:"fg,omitempty"`
	Bg        string `json:"bg,omitempty"`
	Bold      bool   `json:"bold,omitempty"`
	Dim       bool   `json:"dim,omitempty"`
	Italic    bool   `json:"italic,omitempty"`
	Underline bool   `json:"underline,omitempty"`
	Blink     bool   `json:"blink,omitempty"`
	Reverse   bool   `json:"reverse,omitempty"`
	Invisible bool   `json:"invisible,omitempty"`
	Strike    bool   `json:"strike,omitempty"`
}

func styleOf(a attr) Style {
	return Style{Fg: a.fg.String(), Bg: a.bg.String(), Bold: a.fl&fBold != 0, Dim: a.fl&fDim != 0,
		Italic: a.fl&fItalic != 0, Underline: a.fl&fUnderline != 0, Blink: a.fl&fBlink != 0,
		Reverse: a.fl&fReverse != 0, Invisible: a.fl&fInvisible != 0, Strike: a.fl&fStrike != 0}
}

// Span is a run of Len cells of row Row from column Col drawn in one
// Style other than the default (a highlighted menu line, a red error).
type Span struct {
	Row int `json:"row"`
	Col int `json:"col"`
	Len int `json:"len"`
	Style
}

// Spans returns the runs of cells drawn with attributes, row by row.
func (t *Terminal) Spans() []Span {
	out := []Span{}
	for r := range t.buf().lines {
		l := &t.buf().lines[r]
		start, cur := 0, attr{}
		for c := 0; c <= len(l.cells); c++ {
			a := attr{}
			if c < len(l.cells) {
				a = l.at(c).a.style()
			}
			if a == cur {
				continue
			}
			if cur != (attr{}) {
				out = append(out, Span{Row: r, Col: start, Len: c - start, Style: styleOf(cur)})
			}
			start, cur = c, a
		}
	}
	return out
}

// ANSI returns a redraw of the screen for a viewer's terminal: it clears
// it, draws every cell with its attributes (the main screen first, then
// the alternate one over it if that is shown), and leaves the viewer's
// terminal in the terminal's state (cursor, pen, character sets, scroll
// region, origin, autowrap and insert modes, keypad and cursor-key modes,
// bracketed paste, tab stops, the saved cursor) so that the live output
// that follows draws as it does here. Fed to a blank Terminal of the same
// size, it gives one that shows the same (cells, cursor and state). It is
// written for a UTF-8 terminal.
func (t *Terminal) ANSI() []byte {
	b := make([]byte, 0, t.size.Cols*t.size.Rows+256)
	b = append(b, "\x1b[?25l\x1b[?1049l\x1b[r"...)
	b = appendDrawing(b)
	b = t.appendLines(b, &t.main)
	if t.onAlt {
		b = t.appendSaved(b, t.main.saved)
		b = append(b, "\x1b[?1049h"...)
		b = appendDrawing(b)
		b = t.appendLines(b, &t.alt)
	}
	b = t.appendSaved(b, t.buf().saved)
	b = append(b, "\x1b7"...)
	b = append(b, "\x1b[?6l\x1b(B\x1b)B\x0f"...)
	b = t.appendTabs(b)
	if t.top != 0 || t.bot != t.size.Rows-1 {
		b = appendCSI(b, "", 'r', t.top+1, t.bot+1)
	}
	if t.cur.origin {
		b = append(b, "\x1b[?6h"...)
	}
	b = t.appendCursor(b)
	b = appendMode(b, "?7", t.mode.autowrap)
	b = appendMode(b, "4", t.mode.insert)
	b = appendMode(b, "?1", t.mode.appCursor)
	b = appendMode(b, "?2004", t.mode.paste)
	if t.mode.appKeypad {
		b = append(b, "\x1b="...)
	} else {
		b = append(b, "\x1b>"...)
	}
	b = appendSGR(b, t.cur.pen)
	b = appendCharsets(b, t.cur)
	if !t.mode.hidden {
		b = append(b, "\x1b[?25h"...)
	}
	return b
}

// appendDrawing sets what drawing cells needs, and clears the screen: no
// origin mode, no insert, autowrap, plain pen, ASCII.
func appendDrawing(b []byte) []byte {
	return append(b, "\x1b[?6l\x1b[4l\x1b[?7h\x1b[0m\x1b(B\x1b)B\x0f\x1b[H\x1b[2J"...)
}

// appendLines draws buf's cells on a cleared screen: each row from its
// start to its last cell that is not a default blank, runs of default
// blanks skipped over.
func (t *Terminal) appendLines(b []byte, buf *buffer) []byte {
	pen := attr{}
	def := blankCell(attr{})
	for r := range buf.lines {
		l := &buf.lines[r]
		end := len(l.cells)
		for end > 0 && l.at(end-1) == def {
			end--
		}
		if end == 0 {
			continue
		}
		b = appendCSI(b, "", 'H', r+1)
		for c := 0; c < end; c++ {
			x := l.at(c)
			if x == def {
				k := c + 1
				for k < end && l.at(k) == def {
					k++
				}
				if k-c >= 4 || pen != (attr{}) {
					b = appendCSI(b, "", 'C', k-c)
					c = k - 1
					continue
				}
			}
			if x.r == 0 {
				continue // the right half of a wide character
			}
			if a := x.a.style(); a != pen {
				b = appendSGR(b, a)
				pen = a
			}
			b = utf8.AppendRune(b, x.r)
		}
	}
	return append(b, "\x1b[0m"...)
}

// appendSaved makes s the state DECSC saves (position, pen, character
// sets, origin mode), the scroll region being the whole screen.
func (t *Terminal) appendSaved(b []byte, s cursor) []byte {
	b = appendMode(b, "?6", s.origin)
	b = appendCSI(b, "", 'H', s.row+1, s.col+1)
	b = appendSGR(b, s.pen)
	return appendCharsets(b, s)
}

// appendTabs sets the tab stops, if they are not the default ones.
func (t *Terminal) appendTabs(b []byte) []byte {
	def := true
	for i, on := range t.tabs {
		if on != (i > 0 && i%8 == 0) {
			def = false
			break
		}
	}
	if def {
		return b
	}
	b = append(b, "\x1b[3g"...)
	for i, on := range t.tabs {
		if on {
			b = appendCSI(b, "", 'G', i+1)
			b = append(b, "\x1bH"...)
		}
	}
	return b
}

// appendCursor places the cursor (in origin mode, relative to the scroll
// region). A cursor waiting to wrap is put there by printing the last
// cell of its line again, which leaves it waiting as it was.
func (t *Terminal) appendCursor(b []byte) []byte {
	row := t.cur.row
	if t.cur.origin {
		row -= t.top
	}
	if !t.wrapNext {
		return appendCSI(b, "", 'H', row+1, t.cur.col+1)
	}
	l := t.line(t.cur.row)
	col := t.size.Cols - 1
	if l.at(col).r == 0 {
		col-- // the right half of a wide character: print it whole
	}
	x := l.at(col)
	b = appendCSI(b, "", 'H', row+1, col+1)
	b = appendSGR(b, x.a.style())
	return utf8.AppendRune(b, x.r)
}

// appendSGR sets the pen to a, from scratch.
func appendSGR(b []byte, a attr) []byte {
	b = append(b, "\x1b[0"...)
	for _, f := range [...]struct {
		f flags
		s string
	}{{fBold, ";1"}, {fDim, ";2"}, {fItalic, ";3"}, {fUnderline, ";4"}, {fBlink, ";5"},
		{fReverse, ";7"}, {fInvisible, ";8"}, {fStrike, ";9"}} {
		if a.fl&f.f != 0 {
			b = append(b, f.s...)
		}
	}
	b = appendColor(b, a.fg, 30, 90, 38)
	b = appendColor(b, a.bg, 40, 100, 48)
	return append(b, 'm')
}

func appendColor(b []byte, c Color, base, bright, ext int) []byte {
	switch c & colorKind {
	case colorIndexed:
		i := int(c & 0xff)
		switch {
		case i < 8:
			return appendParam(b, base+i)
		case i < 16:
			return appendParam(b, bright+i-8)
		}
		b = appendParam(b, ext)
		b = appendParam(b, 5)
		return appendParam(b, i)
	case colorRGB:
		b = appendParam(b, ext)
		b = appendParam(b, 2)
		b = appendParam(b, int(c>>16&0xff))
		b = appendParam(b, int(c>>8&0xff))
		return appendParam(b, int(c&0xff))
	}
	return b
}

func appendParam(b []byte, v int) []byte {
	return strconv.AppendInt(append(b, ';'), int64(v), 10)
}

// appendCharsets designates c's G0 and G1 and invokes the one c uses.
func appendCharsets(b []byte, c cursor) []byte {
	b = append(b, 0x1b, '(', c.g[0].final(), 0x1b, ')', c.g[1].final())
	if c.gl == 1 {
		return append(b, 0x0e)
	}
	return append(b, 0x0f)
}

func appendMode(b []byte, mode string, on bool) []byte {
	b = append(b, "\x1b["...)
	b = append(b, mode...)
	if on {
		return append(b, 'h')
	}
	return append(b, 'l')
}

// appendCSI appends CSI prefix params final.
func appendCSI(b []byte, prefix string, final byte, params ...int) []byte {
	b = append(b, "\x1b["...)
	b = append(b, prefix...)
	for i, v := range params {
		if i > 0 {
			b = append(b, ';')
		}
		b = strconv.AppendInt(b, int64(v), 10)
	}
	return append(b, final)
}

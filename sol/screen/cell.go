package screen

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Size is a screen's size in character cells.
type Size struct {
	Cols int `json:"cols"`
	Rows int `json:"rows"`
}

// Bounds of a screen's size: the default (a PC console's 80x25), and the
// largest a node may set (its screen_size), which bounds a screen's memory.
const (
	DefaultCols = 80
	DefaultRows = 25
	MaxCols     = 200
	MaxRows     = 100
	// MinCols leaves room for a wide character.
	MinCols = 2
	MinRows = 1
)

// OrDefault returns s, or the default 80x25 if s is the zero Size.
func (s Size) OrDefault() Size {
	if s == (Size{}) {
		return Size{Cols: DefaultCols, Rows: DefaultRows}
	}
	return s
}

// Check reports whether s is a screen size obmd keeps: from 2x1 to
// 200x100.
func (s Size) Check() error {
	if s.Cols < MinCols || s.Cols > MaxCols || s.Rows < MinRows || s.Rows > MaxRows {
		return fmt.Errorf("screen size %s: want from %dx%d to %dx%d", s, MinCols, MinRows, MaxCols, MaxRows)
	}
	return nil
}

// String is COLSxROWS ("80x25").
func (s Size) String() string { return strconv.Itoa(s.Cols) + "x" + strconv.Itoa(s.Rows) }

// ErrBadSize is wrapped by ParseSize's errors.
var ErrBadSize = errors.New("bad screen size")

// ParseSize parses COLSxROWS ("132x43"), checked (Check); "" is the zero
// Size (the default).
func ParseSize(s string) (Size, error) {
	if s == "" {
		return Size{}, nil
	}
	c, r, ok := strings.Cut(s, "x")
	cols, err1 := strconv.Atoi(c)
	rows, err2 := strconv.Atoi(r)
	if !ok || err1 != nil || err2 != nil || strings.ContainsAny(s, "+- ") {
		return Size{}, fmt.Errorf("%w %q: want COLSxROWS, e.g. 80x25", ErrBadSize, s)
	}
	z := Size{Cols: cols, Rows: rows}
	if err := z.Check(); err != nil {
		return Size{}, fmt.Errorf("%w: %w", ErrBadSize, err)
	}
	return z, nil
}

// Color is a cell's foreground or background colour: the terminal's
// default (the zero Color), one of 256 indexed colours (0-7 the standard
// ones, 8-15 their bright forms), or a 24-bit RGB colour.
type Color uint32

const (
	colorIndexed = 1 << 24
	colorRGB     = 2 << 24
	colorKind    = 0xff << 24
)

func indexed(i int) Color { return Color(colorIndexed | uint32(i&0xff)) }
func rgb(r, g, b int) Color {
	return Color(colorRGB | uint32(r&0xff)<<16 | uint32(g&0xff)<<8 | uint32(b&0xff))
}

// String is "" for the default, the index for an indexed colour ("1",
// "196"), "#rrggbb" for an RGB one.
func (c Color) String() string {
	switch c & colorKind {
	case colorIndexed:
		return strconv.Itoa(int(c & 0xff))
	case colorRGB:
		return fmt.Sprintf("#%06x", uint32(c&0xffffff))
	}
	return ""
}

// flags are a cell's SGR attributes (and whether it holds a wide
// character).
type flags uint16

const (
	fBold flags = 1 << iota
	fDim
	fItalic
	fUnderline
	fBlink
	fReverse
	fInvisible
	fStrike
	// fWide marks the left half of a wide character; its right half is
	// the next cell, whose rune is 0. Not an attribute (attr.style
	// drops it).
	fWide
)

// attr is how a cell is drawn: colours and SGR flags.
type attr struct {
	fg, bg Color
	fl     flags
}

// style is a without fWide: what SGR sets.
func (a attr) style() attr {
	a.fl &^= fWide
	return a
}

// cell is one character cell. r is ' ' for a blank; 0 for the right half
// of the wide character in the cell to its left.
type cell struct {
	r rune
	a attr
}

func (c cell) wide() bool { return c.a.fl&fWide != 0 }

// blankCell is an erased cell: a space with the background of fill (the
// pen's background colour, as xterm erases: BCE).
func blankCell(fill attr) cell { return cell{r: ' ', a: attr{bg: fill.bg}} }

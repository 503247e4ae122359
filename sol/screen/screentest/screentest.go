// Package screentest is full-screen console output for tests: recorded programs and a BIOS setup menu.
//
// Recordings are what real programs (dialog, an ncurses program; whiptail,
// the newt one Debian's installer uses; top) wrote to an 80x25 terminal,
// with the screen tmux, another terminal emulator, showed for the same
// bytes (testdata/record.sh made them). BIOSSetup makes the output of a
// firmware setup screen drawn once with cursor addressing and line drawing
// and then only repainted, with the screen it draws, built cell by cell
// apart from any emulator.
package screentest

import (
	"bytes"
	"embed"
	"fmt"
	"strings"
)

//go:embed testdata/*.out testdata/*.screen testdata/*.cursor
var recorded embed.FS

// Recording is a program's output and the screen tmux showed for it.
type Recording struct {
	Name   string
	Output []byte
	// Screen is the text shown: 25 rows, trailing spaces trimmed, joined
	// by newlines.
	Screen string
	// Row and Col are the cursor's (0-based). Col 80 is tmux's way of
	// saying that the cursor waits to wrap in the last column.
	Row, Col int
}

// Recordings returns every recording, by name.
func Recordings() ([]Recording, error) {
	var out []Recording
	for _, name := range []string{"dialog-menu", "whiptail-partition", "top"} {
		r := Recording{Name: name}
		var err error
		if r.Output, err = recorded.ReadFile("testdata/" + name + ".out"); err != nil {
			return nil, err
		}
		screen, err := recorded.ReadFile("testdata/" + name + ".screen")
		if err != nil {
			return nil, err
		}
		r.Screen = strings.TrimSuffix(string(screen), "\n")
		cur, err := recorded.ReadFile("testdata/" + name + ".cursor")
		if err != nil {
			return nil, err
		}
		if _, err := fmt.Sscan(string(cur), &r.Row, &r.Col); err != nil {
			return nil, fmt.Errorf("%s.cursor: %w", name, err)
		}
		out = append(out, r)
	}
	return out, nil
}

// BIOS is a firmware setup screen's output and what it shows.
type BIOS struct {
	// Output draws the menu once, then repaints the clock in its corner
	// Ticks times and moves the highlighted line now and then.
	Output []byte
	// Screen is the text it leaves: 25 rows of 80, trailing spaces
	// trimmed, joined by newlines.
	Screen string
	// Highlight is the row of the highlighted item (reverse video, from
	// column 2 for HighlightLen cells).
	Highlight, HighlightLen int
	// Menu is text that the screen shows and that only the first drawing
	// printed: the last bytes of a long Output do not hold it.
	Menu []string
}

const (
	cols, rows = 80, 25
	title      = "Aptio Setup Utility - Copyright (C) 2023 American Megatrends, Inc."
	tabs       = " Main  Advanced  Chipset  Security  Boot  Save & Exit"
	keys       = "><: Select Screen  ^v: Select Item  Enter: Select  F10: Save  ESC: Exit"
	version    = "Version 2.22.1286 Copyright (C) 2023 AMI"
	labelWidth = 22
	split      = 52 // the column of the line between the menu and the help
	clockRow   = 12
	clockCol   = 2 + labelWidth + 3 // inside "[hh:mm:ss]"
)

// item is a row of the left pane (from row 4): a label, a value, and
// whether the highlight stops there.
type item struct {
	label, value string
	selectable   bool
}

func items() []item {
	return []item{
		{"BIOS Information", "", false},
		{"BIOS Vendor", "American Megatrends", false},
		{"Core Version", "5.27", false},
		{"Compliancy", "UEFI 2.8; PI 1.7", false},
		{"Project Version", "1AQQW 0.19 x64", false},
		{"Build Date and Time", "03/14/2023 10:12:05", false},
		{"", "", false},
		{"System Date", "[Tue 05/16/2023]", true},
		{"System Time", "[00:00:00]", true},
		{"", "", false},
		{"Boot Mode Select", "[UEFI]", true},
		{"Quiet Boot", "[Enabled]", true},
		{"Network Stack", "[Disabled]", true},
		{"Access Level", "Administrator", false},
	}
}

// grid is a screen built cell by cell: the expected one.
type grid [rows][cols]rune

func (g *grid) put(row, col int, s string) {
	for _, r := range s {
		g[row][col] = r
		col++
	}
}

func (g *grid) text() string {
	lines := make([]string, rows)
	for i := range g {
		lines[i] = strings.TrimRight(string(g[i][:]), " ")
	}
	return strings.Join(lines, "\n")
}

// out is the output being made, with the grid it should draw.
type out struct {
	b     bytes.Buffer
	g     grid
	items []item
}

func (o *out) cup(row, col int) { fmt.Fprintf(&o.b, "\x1b[%d;%dH", row+1, col+1) }

// text prints s at row, col in the current pen.
func (o *out) text(row, col int, s string) {
	o.cup(row, col)
	o.b.WriteString(s)
	o.g.put(row, col, s)
}

// line draws with DEC special graphics: s in the graphics' letters
// (q, x, l, k, m, j, w, v, t, u), drawn as box characters.
func (o *out) line(row, col int, s string) {
	o.cup(row, col)
	o.b.WriteString("\x0e" + s + "\x0f")
	box := strings.NewReplacer("q", "─", "x", "│", "l", "┌", "k", "┐", "m", "└", "j", "┘", "w", "┬", "v", "┴", "t", "├", "u", "┤")
	o.g.put(row, col, box.Replace(s))
}

func (o *out) label(i int, highlight bool) {
	sgr := "\x1b[0m"
	if highlight {
		sgr = "\x1b[0;7m"
	}
	o.cup(4+i, 2)
	fmt.Fprintf(&o.b, "%s%-*s\x1b[0m", sgr, labelWidth, o.items[i].label)
	o.g.put(4+i, 2, fmt.Sprintf("%-*s", labelWidth, o.items[i].label))
}

// BIOSSetup returns a setup screen drawn once and then repainted: its
// clock ticks times (each tick 8 to 25 bytes, written three different
// ways), its highlight moving to the next item every 97 ticks.
func BIOSSetup(ticks int) BIOS {
	o := out{items: items()}
	help := []string{"Set the Date. Use Tab to", "switch between Date", "elements.", "", "Default Ranges:", "Year: 2005-2099", "Months: 1-12"}
	for i := range o.g {
		for j := range o.g[i] {
			o.g[i][j] = ' '
		}
	}
	o.b.WriteString("\x1b[0m\x1b[2J\x1b)0")
	o.cup(0, 0)
	fmt.Fprintf(&o.b, "\x1b[7m%*s%s%*s\x1b[0m", (cols-len(title))/2, "", title, cols-len(title)-(cols-len(title))/2-1, "")
	o.g.put(0, (cols-len(title))/2, title)
	o.cup(1, 0)
	o.b.WriteString("\x1b[37;44m\x1b[K" + tabs + "\x1b[0m")
	o.g.put(1, 0, tabs)
	o.line(2, 0, "l"+strings.Repeat("q", split-1)+"w"+strings.Repeat("q", cols-split-2)+"k")
	for r := 3; r < 22; r++ {
		o.line(r, 0, "x")
		o.line(r, split, "x")
		o.line(r, cols-1, "x")
	}
	o.line(22, 0, "m"+strings.Repeat("q", split-1)+"v"+strings.Repeat("q", cols-split-2)+"j")
	sel := []int{}
	for i, it := range o.items {
		o.label(i, false)
		if it.value != "" {
			o.text(4+i, 2+labelWidth+2, it.value)
		}
		if it.selectable {
			sel = append(sel, i)
		}
	}
	for i, h := range help {
		o.text(4+i, split+2, h)
	}
	o.text(23, 2, keys)
	o.text(24, (cols-len(version))/2, version)
	hi := 0
	o.label(sel[hi], true)
	for tick := 1; tick <= ticks; tick++ {
		clock := fmt.Sprintf("%02d:%02d:%02d", tick/3600%24, tick/60%60, tick%60)
		switch tick % 3 {
		case 0:
			o.cup(clockRow, clockCol)
		case 1:
			o.b.WriteString("\x1b7")
			o.cup(clockRow, clockCol)
		case 2:
			o.cup(clockRow, 0)
			fmt.Fprintf(&o.b, "\x1b[%dC", clockCol)
		}
		o.b.WriteString(clock)
		if tick%3 == 1 {
			o.b.WriteString("\x1b8")
		}
		o.g.put(clockRow, clockCol, clock)
		if tick%97 == 0 {
			o.label(sel[hi], false)
			hi = (hi + 1) % len(sel)
			o.label(sel[hi], true)
		}
	}
	return BIOS{Output: o.b.Bytes(), Screen: o.g.text(), Highlight: 4 + sel[hi], HighlightLen: labelWidth,
		Menu: []string{title, "American Megatrends", "Build Date and Time", "03/14/2023 10:12:05", help[0], keys, version}}
}

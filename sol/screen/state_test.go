package screen

import (
	"fmt"
	"strings"
)

// diffState describes how b's state differs from a's, "" if it does not:
// the size, which buffer is shown, its cells (and the main buffer's under
// the alternate one), the cursor with its pen, character sets and origin
// mode, a pending wrap, the scroll region, the modes, the tab stops and
// the saved cursors. What a redraw does not carry is left out: the hidden
// alternate buffer while the main one is shown (and its saved cursor),
// REP's last character and the parser's state.
func diffState(a, b *Terminal) string {
	var d []string
	add := func(format string, args ...any) {
		if len(d) < 8 {
			d = append(d, fmt.Sprintf(format, args...))
		}
	}
	if a.size != b.size {
		return fmt.Sprintf("size %v, want %v", b.size, a.size)
	}
	if a.onAlt != b.onAlt {
		add("alt screen %v, want %v", b.onAlt, a.onAlt)
	}
	cells := func(name string, x, y *buffer) {
		for r := range x.lines {
			for c := range x.lines[r].cells {
				if p, q := x.lines[r].at(c), y.lines[r].at(c); p != q {
					add("%s cell (%d,%d) %+v, want %+v", name, r, c, q, p)
				}
			}
		}
	}
	if a.onAlt == b.onAlt {
		cells("shown", a.buf(), b.buf())
		if a.onAlt {
			cells("main", &a.main, &b.main)
		}
		if a.buf().saved != b.buf().saved {
			add("saved cursor %+v, want %+v", b.buf().saved, a.buf().saved)
		}
		if a.onAlt && a.main.saved != b.main.saved {
			add("main's saved cursor %+v, want %+v", b.main.saved, a.main.saved)
		}
	}
	if a.cur != b.cur {
		add("cursor %+v, want %+v", b.cur, a.cur)
	}
	if a.wrapNext != b.wrapNext {
		add("pending wrap %v, want %v", b.wrapNext, a.wrapNext)
	}
	if a.top != b.top || a.bot != b.bot {
		add("scroll region %d-%d, want %d-%d", b.top, b.bot, a.top, a.bot)
	}
	if a.mode != b.mode {
		add("modes %+v, want %+v", b.mode, a.mode)
	}
	if fmt.Sprint(a.tabs) != fmt.Sprint(b.tabs) {
		add("tab stops %v, want %v", b.tabs, a.tabs)
	}
	return strings.Join(d, "; ")
}

// cellsHeld is how many cells t has allocated.
func (t *Terminal) cellsHeld() int {
	n := 0
	for _, b := range []buffer{t.main, t.alt} {
		if len(b.lines) > 0 {
			n += cap(b.lines[0].cells) * len(b.lines)
		}
	}
	return n
}

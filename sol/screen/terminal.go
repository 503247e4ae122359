package screen

// Terminal is a screen fed with a console's output: Write parses it and
// updates the cells, the cursor and the modes; Text, ANSI and Snapshot
// render it. It never writes back (a viewer's own terminal answers the
// node's queries: it gets the same bytes).
//
// A Terminal is not safe for concurrent use: one goroutine owns it.
// Its memory is fixed by its size (two buffers of cells, allocated when
// used, about 16 bytes a cell) whatever it is fed: Write keeps no more than
// one escape sequence's parameters and one character's UTF-8 bytes.
type Terminal struct {
	size  Size
	main  buffer
	alt   buffer // lines nil until the alternate screen is first used
	onAlt bool
	cur   cursor
	// wrapNext: a character was written in the last column with autowrap
	// on; the next one goes to the start of the next line.
	wrapNext bool
	top, bot int // scroll region, rows inclusive
	mode     modes
	tabs     []bool
	last     rune // the last character printed, for REP
	p        parser
	// work counts the cells and lines an operation touched: what the fuzz
	// target bounds per byte written.
	work int
}

// cursor is the cursor's position with what DECSC saves along: the pen,
// the character sets and origin mode.
type cursor struct {
	row, col int
	pen      attr
	g        [2]charset // G0, G1
	gl       uint8      // which of them is invoked (SI: 0, SO: 1)
	origin   bool       // DECOM: rows count from the scroll region's top
}

// modes are the terminal's modes that a redraw restores.
type modes struct {
	autowrap  bool // DECAWM
	insert    bool // IRM
	hidden    bool // DECTCEM reset: the cursor is not shown
	appCursor bool // DECCKM: the viewer's cursor keys send ESC O x
	appKeypad bool // DECKPAM
	paste     bool // bracketed paste (?2004)
}

// buffer is a screen's lines (the main or the alternate one) and its saved
// cursor (DECSC, per buffer as xterm keeps it).
type buffer struct {
	lines []line
	saved cursor
}

// line is one row of cells. An erased line is not cleared cell by cell:
// blank says every cell is fill until something is written in it, so
// erasing the screen or scrolling costs a line, not its cells.
type line struct {
	cells []cell
	blank bool
	fill  cell
	wide  bool // it may hold a wide character (fixWide keeps halves paired)
}

// New returns a blank terminal of size s (the zero Size: 80x25), or an
// error if s is out of bounds (Size.Check).
func New(s Size) (*Terminal, error) {
	s = s.OrDefault()
	if err := s.Check(); err != nil {
		return nil, err
	}
	t := &Terminal{size: s}
	t.reset()
	return t, nil
}

// Size is the terminal's size.
func (t *Terminal) Size() Size { return t.size }

// reset is RIS: blank screens, modes and tab stops as at power-on. It
// keeps the buffers it has (erased: a few bytes never cost a screen).
func (t *Terminal) reset() {
	if t.main.lines == nil {
		t.main = newBuffer(t.size)
		t.tabs = make([]bool, t.size.Cols)
	}
	for _, b := range []*buffer{&t.main, &t.alt} {
		for i := range b.lines {
			t.erase(&b.lines[i], attr{})
		}
		b.saved = cursor{}
	}
	t.onAlt = false
	t.cur = cursor{}
	t.wrapNext = false
	t.top, t.bot = 0, t.size.Rows-1
	t.mode = modes{autowrap: true}
	for i := range t.tabs {
		t.tabs[i] = i > 0 && i%8 == 0
	}
	t.work += len(t.tabs)
	t.last = 0
}

func newBuffer(s Size) buffer {
	cells := make([]cell, s.Cols*s.Rows)
	lines := make([]line, s.Rows)
	for i := range lines {
		lines[i] = line{cells: cells[i*s.Cols : (i+1)*s.Cols : (i+1)*s.Cols], blank: true, fill: blankCell(attr{})}
	}
	return buffer{lines: lines}
}

func (t *Terminal) buf() *buffer {
	if t.onAlt {
		return &t.alt
	}
	return &t.main
}

func (t *Terminal) line(row int) *line { return &t.buf().lines[row] }

// at returns the cell at i.
func (l *line) at(i int) cell {
	if l.blank {
		return l.fill
	}
	return l.cells[i]
}

// own makes l's cells real before one is written.
func (t *Terminal) own(l *line) {
	if !l.blank {
		return
	}
	for i := range l.cells {
		l.cells[i] = l.fill
	}
	l.blank = false
	t.work += len(l.cells)
}

// erase blanks the whole line with fill's background.
func (t *Terminal) erase(l *line, fill attr) {
	l.blank, l.fill, l.wide = true, blankCell(fill), false
	t.work++
}

// eraseCells blanks cells [from, to) of l.
func (t *Terminal) eraseCells(l *line, from, to int, fill attr) {
	to = min(to, len(l.cells))
	if from <= 0 && to >= len(l.cells) {
		t.erase(l, fill)
		return
	}
	if from >= to {
		return
	}
	t.own(l)
	b := blankCell(fill)
	for i := from; i < to; i++ {
		l.cells[i] = b
	}
	t.work += to - from
	t.fixWide(l)
}

// fixWide repairs l after cells moved or were erased: a wide character
// that lost a half is blanked, so every right half follows its left.
func (t *Terminal) fixWide(l *line) {
	if !l.wide || l.blank {
		return
	}
	c := l.cells
	for i := range c {
		switch {
		case c[i].r == 0 && (i == 0 || !c[i-1].wide()):
			c[i] = cell{r: ' ', a: c[i].a.style()}
		case c[i].wide() && (i == len(c)-1 || c[i+1].r != 0):
			c[i] = cell{r: ' ', a: c[i].a.style()}
		}
	}
	t.work += len(c)
}

// print writes r (already translated) at the cursor.
func (t *Terminal) print(r rune) {
	w := width(r)
	if w == 0 {
		return
	}
	cols := t.size.Cols
	if t.wrapNext && t.mode.autowrap {
		t.cur.col = 0
		t.index()
	}
	t.wrapNext = false
	if w == 2 && t.cur.col == cols-1 {
		if t.mode.autowrap {
			t.cur.col = 0
			t.index()
		} else {
			t.cur.col = cols - 2
		}
	}
	l := t.line(t.cur.row)
	t.own(l)
	if t.mode.insert {
		t.shiftRight(l, t.cur.col, w)
	}
	col, c := t.cur.col, l.cells
	if l.wide || w == 2 {
		// Overwriting half of a wide character blanks its other half.
		if c[col].r == 0 && col > 0 {
			c[col-1] = cell{r: ' ', a: c[col-1].a.style()}
		}
		if end := col + w - 1; c[end].wide() && end+1 < cols {
			c[end+1] = cell{r: ' ', a: c[end+1].a.style()}
		}
	}
	pen := t.cur.pen.style()
	if w == 2 {
		l.wide = true
		c[col] = cell{r: r, a: attr{fg: pen.fg, bg: pen.bg, fl: pen.fl | fWide}}
		c[col+1] = cell{r: 0, a: pen}
	} else {
		c[col] = cell{r: r, a: pen}
	}
	t.work++
	t.last = r
	if col+w >= cols {
		t.cur.col = cols - 1
		t.wrapNext = t.mode.autowrap
	} else {
		t.cur.col = col + w
	}
}

// printASCII prints a run of printable ASCII (0x20 to 0x7e) drawn as
// itself (the ASCII set in GL, insert mode off): print's work a line at a
// time rather than a character at a time.
func (t *Terminal) printASCII(p []byte) {
	cols := t.size.Cols
	for len(p) > 0 {
		if t.wrapNext && t.mode.autowrap {
			t.cur.col = 0
			t.index()
		}
		t.wrapNext = false
		l := t.line(t.cur.row)
		if l.wide { // halves to mind: one at a time
			t.print(rune(p[0]))
			p = p[1:]
			continue
		}
		t.own(l)
		col, pen := t.cur.col, t.cur.pen.style()
		n := min(len(p), cols-col)
		for i, b := range p[:n] {
			l.cells[col+i] = cell{r: rune(b), a: pen}
		}
		t.work += n
		if !t.mode.autowrap && len(p) > n {
			// Without autowrap, what does not fit overwrites the last
			// column: its last character stays there.
			l.cells[cols-1] = cell{r: rune(p[len(p)-1]), a: pen}
			n = len(p)
		}
		t.last = rune(p[n-1])
		p = p[n:]
		if col+n < cols {
			t.cur.col = col + n
		} else {
			t.cur.col = cols - 1
			t.wrapNext = t.mode.autowrap
		}
	}
}

// shiftRight moves l's cells from col right by n (ICH, insert mode),
// blanking the gap.
func (t *Terminal) shiftRight(l *line, col, n int) {
	n = min(n, t.size.Cols-col)
	t.own(l)
	copy(l.cells[col+n:], l.cells[col:len(l.cells)-n])
	b := blankCell(t.cur.pen)
	for i := col; i < col+n; i++ {
		l.cells[i] = b
	}
	t.work += len(l.cells) - col
	t.fixWide(l)
}

// shiftLeft deletes n cells at col (DCH), blanking the end of the line.
func (t *Terminal) shiftLeft(l *line, col, n int) {
	n = min(n, t.size.Cols-col)
	t.own(l)
	copy(l.cells[col:], l.cells[col+n:])
	b := blankCell(t.cur.pen)
	for i := len(l.cells) - n; i < len(l.cells); i++ {
		l.cells[i] = b
	}
	t.work += len(l.cells) - col
	t.fixWide(l)
}

// index moves the cursor down a line, scrolling the region up at its
// bottom (LF, IND).
func (t *Terminal) index() {
	switch {
	case t.cur.row == t.bot:
		t.scrollUp(t.top, t.bot, 1)
	case t.cur.row < t.size.Rows-1:
		t.cur.row++
	}
}

// reverseIndex moves the cursor up a line, scrolling the region down at
// its top (RI).
func (t *Terminal) reverseIndex() {
	switch {
	case t.cur.row == t.top:
		t.scrollDown(t.top, t.bot, 1)
	case t.cur.row > 0:
		t.cur.row--
	}
}

// scrollUp moves rows top..bot up by n, blank lines coming in at bot.
func (t *Terminal) scrollUp(top, bot, n int) {
	n = min(n, bot-top+1)
	if n <= 0 {
		return
	}
	ls := t.buf().lines[top : bot+1]
	rotate(ls, n)
	for i := len(ls) - n; i < len(ls); i++ {
		t.erase(&ls[i], t.cur.pen)
	}
	t.work += len(ls)
}

// scrollDown moves rows top..bot down by n, blank lines coming in at top.
func (t *Terminal) scrollDown(top, bot, n int) {
	n = min(n, bot-top+1)
	if n <= 0 {
		return
	}
	ls := t.buf().lines[top : bot+1]
	rotate(ls, len(ls)-n)
	for i := range n {
		t.erase(&ls[i], t.cur.pen)
	}
	t.work += len(ls)
}

// rotate moves ls left by k: ls[k] becomes ls[0].
func rotate(ls []line, k int) {
	switch k {
	case 0, len(ls):
		return
	case 1: // a line feed at the bottom: the common case
		first := ls[0]
		copy(ls, ls[1:])
		ls[len(ls)-1] = first
		return
	case len(ls) - 1:
		last := ls[len(ls)-1]
		copy(ls[1:], ls)
		ls[0] = last
		return
	}
	reverse := func(s []line) {
		for i, j := 0, len(s)-1; i < j; i, j = i+1, j-1 {
			s[i], s[j] = s[j], s[i]
		}
	}
	reverse(ls[:k])
	reverse(ls[k:])
	reverse(ls)
}

// moveTo puts the cursor at row, col (0-based; rows relative to the scroll
// region in origin mode), clamped.
func (t *Terminal) moveTo(row, col int) {
	lo, hi := 0, t.size.Rows-1
	if t.cur.origin {
		row += t.top
		lo, hi = t.top, t.bot
	}
	t.cur.row = max(lo, min(row, hi))
	t.cur.col = max(0, min(col, t.size.Cols-1))
	t.wrapNext = false
}

// up moves the cursor up n rows, stopping at the region's top if it is in
// the region (CUU).
func (t *Terminal) up(n int) {
	lim := 0
	if t.cur.row >= t.top {
		lim = t.top
	}
	t.cur.row = max(t.cur.row-n, lim)
	t.wrapNext = false
}

// down moves the cursor down n rows, stopping at the region's bottom if it
// is in the region (CUD).
func (t *Terminal) down(n int) {
	lim := t.size.Rows - 1
	if t.cur.row <= t.bot {
		lim = t.bot
	}
	t.cur.row = min(t.cur.row+n, lim)
	t.wrapNext = false
}

// tab moves the cursor to the n-th next tab stop (n < 0: previous), or
// to the line's end (start).
func (t *Terminal) tab(n int) {
	col, last := t.cur.col, t.size.Cols-1
	for ; n > 0 && col < last; n-- {
		col++
		for col < last && !t.tabs[col] {
			col++
		}
	}
	for ; n < 0 && col > 0; n++ {
		col--
		for col > 0 && !t.tabs[col] {
			col--
		}
	}
	t.work += 1 + max(col-t.cur.col, t.cur.col-col)
	t.cur.col = col
	t.wrapNext = false
}

// repeat is REP: the last character printed, n times, at most a line's
// worth (a few bytes never cost more than a line).
func (t *Terminal) repeat(n int) {
	r := t.last
	if r == 0 {
		return
	}
	n = min(n, t.size.Cols)
	if !t.mode.insert {
		for range n {
			t.print(r)
		}
		return
	}
	if t.wrapNext || width(r) != 1 {
		t.print(r)
		return
	}
	// Inserting k characters one by one is opening k cells, then writing
	// them: done so, it costs a line, not k.
	k := min(n, t.size.Cols-t.cur.col)
	t.shiftRight(t.line(t.cur.row), t.cur.col, k)
	t.mode.insert = false
	for range k {
		t.print(r)
	}
	t.mode.insert = true
}

// saveCursor is DECSC: into the shown buffer's slot.
func (t *Terminal) saveCursor() { t.buf().saved = t.cur }

// restoreCursor is DECRC (the power-on state if nothing was saved).
func (t *Terminal) restoreCursor() {
	t.cur = t.buf().saved
	lo, hi := 0, t.size.Rows-1
	if t.cur.origin { // origin mode keeps the cursor in the region
		lo, hi = t.top, t.bot
	}
	t.cur.row = max(lo, min(t.cur.row, hi))
	t.cur.col = min(t.cur.col, t.size.Cols-1)
	t.wrapNext = false
}

// toAlt shows the alternate buffer (cleared first if clear); nothing if it
// is shown.
func (t *Terminal) toAlt(clear bool) {
	if t.onAlt {
		return
	}
	if t.alt.lines == nil {
		t.alt = newBuffer(t.size)
		t.work += len(t.alt.lines)
	}
	t.onAlt = true
	if clear {
		t.eraseRows(0, t.size.Rows)
	}
}

// toMain shows the main buffer, clearing the alternate one first if clear.
func (t *Terminal) toMain(clear bool) {
	if !t.onAlt {
		return
	}
	if clear {
		t.eraseRows(0, t.size.Rows)
	}
	t.onAlt = false
}

// eraseRows blanks rows [from, to).
func (t *Terminal) eraseRows(from, to int) {
	ls := t.buf().lines
	for i := from; i < to; i++ {
		t.erase(&ls[i], t.cur.pen)
	}
}

// home puts the cursor at the top left (of the region in origin mode).
func (t *Terminal) home() { t.moveTo(0, 0) }

// softReset is DECSTR.
func (t *Terminal) softReset() {
	t.mode = modes{autowrap: true}
	t.top, t.bot = 0, t.size.Rows-1
	t.cur.pen, t.cur.g, t.cur.gl, t.cur.origin = attr{}, [2]charset{}, 0, false
	t.buf().saved = cursor{}
	t.wrapNext = false
}

// alignment is DECALN: the screen filled with E, margins reset, cursor home.
func (t *Terminal) alignment() {
	t.top, t.bot = 0, t.size.Rows-1
	for i := range t.buf().lines {
		l := t.line(i)
		l.blank, l.fill, l.wide = true, cell{r: 'E'}, false
		t.work++
	}
	t.cur.origin = false
	t.home()
}

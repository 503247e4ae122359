package screen

// control executes a C0 control character.
func (t *Terminal) control(b byte) {
	switch b {
	case '\b':
		t.wrapNext = false
		if t.cur.col > 0 {
			t.cur.col--
		}
	case '\t':
		t.tab(1)
	case '\n', '\v', '\f':
		t.index()
		t.wrapNext = false
	case '\r':
		t.cur.col = 0
		t.wrapNext = false
	case 0x0e: // SO
		t.cur.gl = 1
	case 0x0f: // SI
		t.cur.gl = 0
	}
}

// escDispatch runs ESC final (no intermediate).
func (t *Terminal) escDispatch(b byte) {
	switch b {
	case '7':
		t.saveCursor()
	case '8':
		t.restoreCursor()
	case 'D':
		t.index()
		t.wrapNext = false
	case 'E':
		t.cur.col = 0
		t.index()
		t.wrapNext = false
	case 'H':
		t.tabs[t.cur.col] = true
	case 'M':
		t.reverseIndex()
		t.wrapNext = false
	case 'c':
		t.reset()
	case '=':
		t.mode.appKeypad = true
	case '>':
		t.mode.appKeypad = false
	}
}

// escInterDispatch runs ESC inter final: character set designations and
// DECALN.
func (t *Terminal) escInterDispatch(inter, b byte) {
	switch inter {
	case '(':
		t.cur.g[0] = charsetOf(b)
	case ')':
		t.cur.g[1] = charsetOf(b)
	case '#':
		if b == '8' {
			t.alignment()
		}
	}
}

// csiDispatch runs CSI ... final. What it does not implement it ignores.
func (t *Terminal) csiDispatch(b byte) {
	p := &t.p
	switch {
	case p.inter == '!' && b == 'p' && p.prefix == 0:
		t.softReset()
		return
	case p.inter != 0:
		return
	case p.prefix == '?':
		switch b {
		case 'h', 'l':
			for i := range p.nparams() {
				t.decMode(p.params[i], b == 'h')
			}
		case 'J':
			t.eraseDisplay(p.param(0, 0))
		case 'K':
			t.eraseLine(p.param(0, 0))
		}
		return
	case p.prefix != 0:
		return
	}
	n := p.param(0, 1)
	switch b {
	case '@':
		t.wrapNext = false
		t.shiftRight(t.line(t.cur.row), t.cur.col, n)
	case 'A':
		t.up(n)
	case 'B', 'e':
		t.down(n)
	case 'C', 'a':
		t.cur.col = min(t.cur.col+n, t.size.Cols-1)
		t.wrapNext = false
	case 'D':
		t.cur.col = max(t.cur.col-n, 0)
		t.wrapNext = false
	case 'E':
		t.down(n)
		t.cur.col = 0
	case 'F':
		t.up(n)
		t.cur.col = 0
	case 'G', '`':
		t.cur.col = min(n-1, t.size.Cols-1)
		t.wrapNext = false
	case 'H', 'f':
		t.moveTo(n-1, p.param(1, 1)-1)
	case 'I':
		t.tab(n)
	case 'J':
		t.eraseDisplay(p.param(0, 0))
	case 'K':
		t.eraseLine(p.param(0, 0))
	case 'L':
		t.insertLines(n)
	case 'M':
		t.deleteLines(n)
	case 'P':
		t.wrapNext = false
		t.shiftLeft(t.line(t.cur.row), t.cur.col, n)
	case 'S':
		t.scrollUp(t.top, t.bot, n)
	case 'T':
		if p.nparams() <= 1 { // with more, it is mouse tracking
			t.scrollDown(t.top, t.bot, n)
		}
	case 'X':
		t.wrapNext = false
		t.eraseCells(t.line(t.cur.row), t.cur.col, t.cur.col+min(n, t.size.Cols), t.cur.pen)
	case 'Z':
		t.tab(-n)
	case 'b':
		t.repeat(n)
	case 'd':
		col := t.cur.col
		t.moveTo(n-1, col)
	case 'g':
		switch p.param(0, 0) {
		case 0:
			t.tabs[t.cur.col] = false
		case 3:
			clear(t.tabs)
			t.work += len(t.tabs)
		}
	case 'h', 'l':
		for i := range p.nparams() {
			if p.params[i] == 4 {
				t.mode.insert = b == 'h'
			}
		}
	case 'm':
		t.sgr()
	case 'r':
		top, bot := n-1, p.param(1, t.size.Rows)-1
		bot = min(bot, t.size.Rows-1)
		if top < bot {
			t.top, t.bot = top, bot
			t.home()
		}
	case 's':
		if p.nparams() == 0 {
			t.saveCursor()
		}
	case 'u':
		if p.nparams() == 0 {
			t.restoreCursor()
		}
	}
}

// eraseDisplay is ED: 0 below the cursor, 1 above, 2 all (3, the
// scrollback, is nothing here).
func (t *Terminal) eraseDisplay(how int) {
	t.wrapNext = false
	switch how {
	case 0:
		t.eraseLine(0)
		t.eraseRows(t.cur.row+1, t.size.Rows)
	case 1:
		t.eraseRows(0, t.cur.row)
		t.eraseLine(1)
	case 2:
		t.eraseRows(0, t.size.Rows)
	}
}

// eraseLine is EL: 0 from the cursor, 1 up to it, 2 the whole line.
func (t *Terminal) eraseLine(how int) {
	t.wrapNext = false
	l := t.line(t.cur.row)
	switch how {
	case 0:
		t.eraseCells(l, t.cur.col, t.size.Cols, t.cur.pen)
	case 1:
		t.eraseCells(l, 0, t.cur.col+1, t.cur.pen)
	case 2:
		t.erase(l, t.cur.pen)
	}
}

// insertLines is IL: n blank lines at the cursor's, in the scroll region.
func (t *Terminal) insertLines(n int) {
	if t.cur.row < t.top || t.cur.row > t.bot {
		return
	}
	t.scrollDown(t.cur.row, t.bot, n)
	t.cur.col = 0
	t.wrapNext = false
}

// deleteLines is DL: n lines from the cursor's up, in the scroll region.
func (t *Terminal) deleteLines(n int) {
	if t.cur.row < t.top || t.cur.row > t.bot {
		return
	}
	t.scrollUp(t.cur.row, t.bot, n)
	t.cur.col = 0
	t.wrapNext = false
}

// decMode sets or resets a DEC private mode (CSI ? n h / l).
func (t *Terminal) decMode(n int, on bool) {
	switch n {
	case 1:
		t.mode.appCursor = on
	case 6:
		t.cur.origin = on
		t.home()
	case 7:
		t.mode.autowrap = on
		if !on {
			t.wrapNext = false
		}
	case 25:
		t.mode.hidden = !on
	case 47:
		if on {
			t.toAlt(false)
		} else {
			t.toMain(false)
		}
	case 66:
		t.mode.appKeypad = on
	case 1047:
		if on {
			t.toAlt(false)
		} else {
			t.toMain(true)
		}
	case 1048:
		if on {
			t.saveCursor()
		} else {
			t.restoreCursor()
		}
	case 1049:
		if on {
			t.saveCursor()
			t.toAlt(true)
		} else {
			t.toMain(false)
			t.restoreCursor()
		}
	case 2004:
		t.mode.paste = on
	}
}

// sgr applies SGR parameters to the pen.
func (t *Terminal) sgr() {
	p := &t.p
	pen := &t.cur.pen
	np := p.nparams()
	if np == 0 {
		*pen = attr{}
		return
	}
	for i := 0; i < np; i++ {
		v := p.params[i]
		switch {
		case v == 0:
			*pen = attr{}
		case v == 1:
			pen.fl |= fBold
		case v == 2:
			pen.fl |= fDim
		case v == 3:
			pen.fl |= fItalic
		case v == 4:
			// 4:0 is "no underline"; 4:1 to 4:5 are underline styles.
			if i+1 < np && p.isSub(i+1) {
				i++
				if p.params[i] == 0 {
					pen.fl &^= fUnderline
					continue
				}
			}
			pen.fl |= fUnderline
		case v == 5 || v == 6:
			pen.fl |= fBlink
		case v == 7:
			pen.fl |= fReverse
		case v == 8:
			pen.fl |= fInvisible
		case v == 9:
			pen.fl |= fStrike
		case v == 21:
			pen.fl |= fUnderline
		case v == 22:
			pen.fl &^= fBold | fDim
		case v == 23:
			pen.fl &^= fItalic
		case v == 24:
			pen.fl &^= fUnderline
		case v == 25:
			pen.fl &^= fBlink
		case v == 27:
			pen.fl &^= fReverse
		case v == 28:
			pen.fl &^= fInvisible
		case v == 29:
			pen.fl &^= fStrike
		case v >= 30 && v <= 37:
			pen.fg = indexed(v - 30)
		case v == 38, v == 48, v == 58:
			c, ok, next := p.extColor(i)
			i = next
			switch {
			case !ok:
			case v == 38:
				pen.fg = c
			case v == 48:
				pen.bg = c
			}
		case v == 39:
			pen.fg = 0
		case v >= 40 && v <= 47:
			pen.bg = indexed(v - 40)
		case v == 49:
			pen.bg = 0
		case v >= 90 && v <= 97:
			pen.fg = indexed(v - 90 + 8)
		case v >= 100 && v <= 107:
			pen.bg = indexed(v - 100 + 8)
		}
	}
}

// extColor reads the colour of SGR 38/48/58 at parameter i, in either form:
// 38;5;N and 38;2;R;G;B, or 38:5:N and 38:2[:CS]:R:G:B. It returns the
// index of the last parameter it used; ok is false for a malformed or out
// of range colour (then ignored, as xterm does).
func (p *parser) extColor(i int) (c Color, ok bool, last int) {
	np := p.nparams()
	if p.isSub(i + 1) { // colon form: the sub-parameters that follow
		j := i + 1
		for j+1 < np && p.isSub(j+1) {
			j++
		}
		sub := p.params[i+1 : j+1]
		switch {
		case len(sub) == 2 && sub[0] == 5 && sub[1] <= 255:
			return indexed(sub[1]), true, j
		case sub[0] == 2 && (len(sub) == 4 || len(sub) == 5):
			v := sub[len(sub)-3:]
			if v[0] <= 255 && v[1] <= 255 && v[2] <= 255 {
				return rgb(v[0], v[1], v[2]), true, j
			}
		}
		return 0, false, j
	}
	if i+1 >= np {
		return 0, false, i
	}
	switch p.params[i+1] {
	case 5:
		if i+2 < np && p.params[i+2] <= 255 {
			return indexed(p.params[i+2]), true, i + 2
		}
		return 0, false, min(i+2, np-1)
	case 2:
		if i+4 < np && p.params[i+2] <= 255 && p.params[i+3] <= 255 && p.params[i+4] <= 255 {
			return rgb(p.params[i+2], p.params[i+3], p.params[i+4]), true, i + 4
		}
		return 0, false, min(i+4, np-1)
	}
	return 0, false, i + 1
}

package screen

import "unicode/utf8"

// Parser states, after the DEC VT500 parser (vt100.net/emu/dec_ansi_parser),
// with the DCS states folded into one ignored string: nothing this package
// implements comes in a DCS, an OSC, an SOS, a PM or an APC, so their
// content is skipped as it arrives and never buffered.
type pstate uint8

const (
	sGround pstate = iota
	sEscape
	sEscInter
	sCSIEntry
	sCSIParam
	sCSIInter
	sCSIIgnore
	sString // OSC, DCS, SOS, PM, APC up to ST (ESC \), or BEL for an OSC
)

const (
	maxParams = 16
	maxParam  = 65535
)

// parser is the state between bytes: at most one escape sequence's
// parameters and one character's UTF-8 bytes, so a sequence or a character
// split across writes continues where it stopped.
type parser struct {
	state  pstate
	osc    bool // the string is an OSC (BEL ends it)
	prefix byte // CSI private marker: '?', '>', '<', '=' or 0
	inter  byte // the first intermediate byte, or 0
	ninter int
	params [maxParams]int
	sub    uint32 // bit i: params[i] follows a ':' (a sub-parameter)
	n      int    // parameters begun; maxParams+1: some were dropped
	u      [utf8.UTFMax]byte
	un     int // UTF-8 bytes held
	uwant  int // bytes in the character begun
	// legacy: invalid UTF-8 came; bytes below 0xe0 are code page 437
	// until a valid character of three or four bytes (utf8Byte).
	legacy bool
}

// Write feeds p to the terminal. It never fails and never blocks; it does
// at most O(len(p) * (cols + rows)) work and allocates nothing (but the
// alternate buffer, once).
func (t *Terminal) Write(p []byte) (int, error) {
	for i := 0; i < len(p); i++ {
		b := p[i]
		if t.p.state == sGround && t.p.un == 0 && b >= 0x20 && b < 0x7f {
			// The common case: a run of printable ASCII.
			j := i + 1
			for j < len(p) && p[j] >= 0x20 && p[j] < 0x7f {
				j++
			}
			if g := t.cur.g[t.cur.gl]; g == csASCII && !t.mode.insert {
				t.printASCII(p[i:j])
			} else {
				for _, c := range p[i:j] {
					t.print(translate(g, rune(c)))
				}
			}
			i = j - 1
			continue
		}
		t.advance(b)
	}
	return len(p), nil
}

// advance feeds one byte.
func (t *Terminal) advance(b byte) {
	p := &t.p
	if p.un > 0 && (b < 0x80 || b >= 0xc0) {
		t.flushInvalid() // a character cut short
	}
	switch {
	case b == 0x1b:
		if p.state == sGround || p.state == sString || p.state >= sEscape {
			p.state, p.inter, p.ninter = sEscape, 0, 0
		}
		return
	case b == 0x18 || b == 0x1a: // CAN, SUB: cancel the sequence
		p.state = sGround
		return
	case b == 0x7f:
		return
	}
	switch p.state {
	case sGround:
		if b < 0x20 {
			t.control(b)
			return
		}
		if b < 0x7f {
			t.print(translate(t.cur.g[t.cur.gl], rune(b)))
			return
		}
		t.utf8Byte(b)
	case sString:
		if b == 0x07 && p.osc {
			p.state = sGround
		}
	default:
		if b < 0x20 {
			t.control(b) // C0 controls act inside a sequence
			return
		}
		if b >= 0x80 { // not part of any sequence: abort it, print the byte
			p.state = sGround
			t.advance(b)
			return
		}
		t.sequence(b)
	}
}

// sequence advances an escape or control sequence by b (0x20 to 0x7e).
func (t *Terminal) sequence(b byte) {
	p := &t.p
	switch p.state {
	case sEscape:
		switch {
		case b < 0x30:
			p.state, p.inter, p.ninter = sEscInter, b, 1
		case b == '[':
			p.state, p.prefix, p.inter, p.ninter, p.n, p.sub = sCSIEntry, 0, 0, 0, 0, 0
		case b == ']':
			p.state, p.osc = sString, true
		case b == 'P' || b == 'X' || b == '^' || b == '_':
			p.state, p.osc = sString, false
		default:
			p.state = sGround
			t.escDispatch(b)
		}
	case sEscInter:
		if b < 0x30 {
			p.ninter++
			return
		}
		p.state = sGround
		if p.ninter == 1 {
			t.escInterDispatch(p.inter, b)
		}
	case sCSIEntry, sCSIParam:
		switch {
		case b >= '0' && b <= '9':
			if p.n == 0 {
				p.n, p.params[0] = 1, 0
			}
			if i := p.n - 1; i < maxParams {
				p.params[i] = min(p.params[i]*10+int(b-'0'), maxParam)
			}
			p.state = sCSIParam
		case b == ';' || b == ':':
			if p.n == 0 {
				p.n, p.params[0] = 1, 0
			}
			if p.n < maxParams {
				p.params[p.n] = 0
				if b == ':' {
					p.sub |= 1 << p.n
				}
				p.n++
			} else {
				p.n = maxParams + 1
			}
			p.state = sCSIParam
		case b >= '<' && b <= '?':
			if p.state == sCSIEntry {
				p.prefix = b
				p.state = sCSIParam
			} else {
				p.state = sCSIIgnore
			}
		case b < 0x30:
			p.state, p.inter, p.ninter = sCSIInter, b, 1
		default: // 0x40 to 0x7e
			p.state = sGround
			t.csiDispatch(b)
		}
	case sCSIInter:
		switch {
		case b < 0x30:
			p.ninter++
		case b < 0x40:
			p.state = sCSIIgnore
		default:
			p.state = sGround
			if p.ninter == 1 {
				t.csiDispatch(b)
			}
		}
	case sCSIIgnore:
		if b >= 0x40 {
			p.state = sGround
		}
	}
}

// utf8Byte takes a byte of a multi-byte character (b >= 0x80) in ground
// state. A byte that cannot begin or continue valid UTF-8 is shown as its
// code page 437 character, and so is every byte >= 0x80 after it (legacy)
// until a valid character of three or four bytes comes: firmware set to
// the PC-ANSI terminal type draws boxes in code page 437, where a line
// and its corner ("─┐", C4 BF) also read as UTF-8 ("Ŀ").
func (t *Terminal) utf8Byte(b byte) {
	p := &t.p
	if p.legacy && p.un == 0 && b < 0xe0 {
		t.print(cp437[b-0x80])
		return
	}
	if p.un == 0 {
		switch {
		case b >= 0xc2 && b <= 0xdf:
			p.uwant = 2
		case b >= 0xe0 && b <= 0xef:
			p.uwant = 3
		case b >= 0xf0 && b <= 0xf4:
			p.uwant = 4
		default:
			p.legacy = true
			t.print(cp437[b-0x80])
			return
		}
		p.u[0], p.un = b, 1
		return
	}
	p.u[p.un] = b
	p.un++
	if p.un < p.uwant {
		return
	}
	r, size := utf8.DecodeRune(p.u[:p.un])
	if r == utf8.RuneError && size <= 1 {
		t.flushInvalid()
		return
	}
	p.un = 0
	if size > 2 {
		p.legacy = false
	}
	t.print(r)
}

// flushInvalid shows the bytes of a character that is not valid UTF-8 (cut
// short, overlong, a surrogate) as code page 437 characters.
func (t *Terminal) flushInvalid() {
	p := &t.p
	k := p.un
	p.un, p.legacy = 0, true
	for _, b := range p.u[:k] {
		t.print(cp437[b-0x80])
	}
}

// param returns parameter i, or def if it is absent or 0.
func (p *parser) param(i, def int) int {
	if i >= min(p.n, maxParams) || p.params[i] == 0 {
		return def
	}
	return p.params[i]
}

// nparams is how many parameters the sequence has (0 for none).
func (p *parser) nparams() int { return min(p.n, maxParams) }

// isSub reports whether parameter i follows a ':'.
func (p *parser) isSub(i int) bool { return i < maxParams && p.sub&(1<<i) != 0 }

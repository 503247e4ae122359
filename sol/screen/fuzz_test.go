package screen

import (
	"bytes"
	"reflect"
	"testing"

	"github.com/obmd/obmd/sol/screen/screentest"
)

// fuzzSize picks a screen size from a byte: small ones, where the edges
// (a 2-column screen, a 1-row one) are near, and now and then 80x25 or the
// largest.
func fuzzSize(b byte) Size {
	switch b % 16 {
	case 14:
		return Size{Cols: DefaultCols, Rows: DefaultRows}
	case 15:
		return Size{Cols: MaxCols, Rows: MaxRows}
	}
	return Size{Cols: MinCols + int(b>>4)%9, Rows: MinRows + int(b%16)%7}
}

// workPerByte bounds the work (cells and lines touched) a Write of n bytes
// does: workPerByte * (n + utf8.UTFMax) * (cols + rows). Each byte does at
// most one operation, and none touches more than a few lines and columns
// (erasing the screen and scrolling cost lines, not cells; REP repeats at
// most a line); a byte that ends a character cut short prints its bytes,
// which came before.
const workPerByte = 8

var fuzzSeeds = []string{
	"plain text\r\nand more\r\n",
	"\x1b[2J\x1b[1;1H\x1b[7m Setup \x1b[0m\x1b[10;20HBoot order\x1b[24;70H12:00:01",
	"\x1b(0lqqqk\x1b(B\x0e\x1b)0xq\x0f",
	"\x1b[?1049h\x1b[2;24r\x1b[?6h\x1b[5;5Hx\x1b7\x1b[?1049l\x1b8",
	"\x1b[38;2;1;2;3m\x1b[48:5:200m\x1b[1;4:3;5;7;9mX\x1b[m",
	"\u4e2d\u6587\x1b[1;2H\x1b[4hx\x1b[2@\x1b[P\x1b[3X",
	"\x1b]0;title\x07\x1bP1$r\x1b\\\x1b[>1c\x1b[6n\x1b[c",
	"0123456789abcdefghijklmnopqrstuvwxyz\x1b[5b\x1b[?7l\x1b[99C\x1b[b",
	"\x1b[3g\x1b[1;3H\x1bH\t\t\x1b[2Z\x1b[4I",
	"\xe2\x94", "\x80\xda\xc4\xbf\xff\xc0\xaf",
	"\x1b[?47h\x1b[?1047l\x1b[?1048h\x1b[?1048l\x1b#8\x1bc\x1b[!p",
	"\x1b[L\x1b[M\x1b[S\x1b[T\x1b[1;1;1;1;1T\x1bD\x1bM\x1bE",
}

// addRecordings adds the recorded programs' output to f's corpus.
func addRecordings(f *testing.F, add func(i int, p []byte)) {
	recs, err := screentest.Recordings()
	if err != nil {
		f.Fatal(err)
	}
	for i, r := range recs {
		add(i, r.Output)
	}
}

func FuzzWrite(f *testing.F) {
	for i, s := range fuzzSeeds {
		f.Add(byte(i*37), uint16(i*7), []byte(s))
	}
	addRecordings(f, func(i int, p []byte) { f.Add(byte(14), uint16(i*1000), p) })
	f.Fuzz(func(t *testing.T, sz byte, split uint16, in []byte) {
		s := fuzzSize(sz)
		whole, err := New(s)
		if err != nil {
			t.Fatal(err)
		}
		parts, _ := New(s)
		whole.Write(in)
		k := int(split) % (len(in) + 1)
		for _, p := range [][]byte{in[:k], in[k:]} {
			w0 := parts.work
			parts.Write(p)
			if work, limit := parts.work-w0, workPerByte*(len(p)+4)*(s.Cols+s.Rows); work > limit {
				t.Fatalf("a write of %d bytes did %d work on %v, above %d", len(p), work, s, limit)
			}
		}
		if held, limit := parts.cellsHeld(), 2*s.Cols*s.Rows; held > limit || len(parts.tabs) != s.Cols {
			t.Fatalf("%d cells held on %v, above %d (or tabs %d)", held, s, limit, len(parts.tabs))
		}
		// Split anywhere, the same bytes give the same terminal; and fed a
		// byte at a time past Write's run of printable ASCII, too.
		slow, _ := New(s)
		for _, b := range in {
			slow.advance(b)
		}
		whole.work, parts.work, slow.work = 0, 0, 0
		if !reflect.DeepEqual(whole, parts) {
			t.Fatalf("written whole and split at %d differ: %s", k, diffState(whole, parts))
		}
		if !reflect.DeepEqual(whole, slow) {
			t.Fatalf("written whole and a byte at a time differ: %s", diffState(slow, whole))
		}
		checkInvariants(t, parts)
	})
}

// FuzzRedraw: the redraw of any screen, fed to a blank terminal of its
// size, gives the same screen and state (diffState); its size is bounded.
func FuzzRedraw(f *testing.F) {
	for i, s := range fuzzSeeds {
		f.Add(byte(i*37), []byte(s))
	}
	addRecordings(f, func(i int, p []byte) { f.Add(byte(14), p) })
	f.Fuzz(func(t *testing.T, sz byte, in []byte) {
		s := fuzzSize(sz)
		term, _ := New(s)
		term.Write(in)
		redraw := term.ANSI()
		if limit := 2*s.Cols*s.Rows*maxCellBytes + 512; len(redraw) > limit {
			t.Fatalf("redraw of %d bytes on %v, above %d", len(redraw), s, limit)
		}
		again, _ := New(s)
		again.Write(redraw)
		if d := diffState(term, again); d != "" {
			t.Fatalf("redraw %q\ndiffers: %s", redraw, d)
		}
		snap := term.Snapshot()
		if !bytes.Equal(snap.ANSI(), redraw) || snap.Text() != term.Text() || snap.Blank() != term.Blank() {
			t.Fatal("the snapshot differs from its terminal")
		}
		// A blank screen (the door then skips the redraw) shows nothing:
		// no text, no colour, the cursor home, as a new terminal.
		fresh, _ := New(s)
		if c := term.Cursor(); term.Blank() && (term.Text() != fresh.Text() || len(term.Spans()) != 0 || c.Row != 0 || c.Col != 0) {
			t.Fatalf("blank, but shows %q, spans %v, cursor %+v", term.Text(), term.Spans(), term.Cursor())
		}
	})
}

// maxCellBytes bounds a cell's share of a redraw: its SGR from scratch
// (every flag, two RGB colours) and its character.
const maxCellBytes = len("\x1b[0;1;2;3;4;5;7;8;9;38;2;255;255;255;48;2;255;255;255m") + 4

// checkInvariants checks what the redraw relies on: a pending wrap only in
// the last column with autowrap on, a cursor in the region in origin mode,
// wide characters whole.
func checkInvariants(t *testing.T, term *Terminal) {
	t.Helper()
	if term.wrapNext && (term.cur.col != term.size.Cols-1 || !term.mode.autowrap) {
		t.Fatalf("pending wrap at column %d (autowrap %v)", term.cur.col, term.mode.autowrap)
	}
	if term.cur.origin && (term.cur.row < term.top || term.cur.row > term.bot) {
		t.Fatalf("origin mode with the cursor at row %d out of %d-%d", term.cur.row, term.top, term.bot)
	}
	if term.top < 0 || term.bot >= term.size.Rows || term.top > term.bot || term.cur.row >= term.size.Rows || term.cur.col >= term.size.Cols {
		t.Fatalf("region %d-%d, cursor %+v on %v", term.top, term.bot, term.cur, term.size)
	}
	for _, b := range []*buffer{&term.main, &term.alt} {
		for r := range b.lines {
			l := &b.lines[r]
			for c := range l.cells {
				x := l.at(c)
				if x.r == 0 && (c == 0 || !l.at(c-1).wide()) || x.wide() && (c+1 == len(l.cells) || l.at(c+1).r != 0) {
					t.Fatalf("row %d: a wide character split at column %d", r, c)
				}
			}
		}
	}
}

// TestWriteAllocatesNothing: feeding a terminal allocates nothing, once
// its alternate screen exists.
func TestWriteAllocatesNothing(t *testing.T) {
	term, _ := New(Size{})
	term.Write([]byte("\x1b[?1049h\x1b[?1049l"))
	inputs := [][]byte{[]byte(fuzzSeeds[1]), []byte(fuzzSeeds[3]), screentest.BIOSSetup(100).Output}
	recs, err := screentest.Recordings()
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range recs {
		inputs = append(inputs, r.Output)
	}
	for i, in := range inputs {
		if n := testing.AllocsPerRun(10, func() { term.Write(in) }); n != 0 {
			t.Errorf("input %d: %v allocations per Write", i, n)
		}
	}
}

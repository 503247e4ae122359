package screen_test

import (
	"bytes"
	"strings"
	"testing"

	"github.com/obmd/obmd/sol/screen"
	"github.com/obmd/obmd/sol/screen/screentest"
)

// TestRecordedScreens: what real full-screen programs wrote shows cell for
// cell as tmux showed it, cursor included, and survives a redraw.
func TestRecordedScreens(t *testing.T) {
	recs, err := screentest.Recordings()
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range recs {
		t.Run(r.Name, func(t *testing.T) {
			term, _ := screen.New(screen.Size{})
			// In small writes, as a console link delivers it.
			for p := r.Output; len(p) > 0; p = p[min(len(p), 61):] {
				term.Write(p[:min(len(p), 61)])
			}
			if got := term.Text(); got != r.Screen {
				t.Errorf("screen:\n%s\nwant (tmux):\n%s", got, r.Screen)
			}
			c := term.Cursor()
			if want := min(r.Col, 79); c.Row != r.Row || c.Col != want {
				t.Errorf("cursor at %d,%d, want %d,%d", c.Row, c.Col, r.Row, want)
			}
			checkRedraw(t, term)
		})
	}
}

// checkRedraw checks that term's redraw, fed to a blank terminal, shows
// the same text, cursor and attributes.
func checkRedraw(t *testing.T, term *screen.Terminal) {
	t.Helper()
	again, _ := screen.New(term.Size())
	again.Write(term.ANSI())
	a, b := term.Snapshot(), again.Snapshot()
	ja, _ := a.MarshalJSON()
	jb, _ := b.MarshalJSON()
	if !bytes.Equal(ja, jb) {
		t.Errorf("redrawn:\n%s\nwant\n%s", jb, ja)
	}
}

// TestBIOSSetup: a setup menu drawn once and then only repainted (a clock
// ticking 10,000 times, a highlight moving) shows whole, cell for cell,
// though the last 16 KiB of its output no longer hold the menu; the
// highlighted line is a reverse-video span.
func TestBIOSSetup(t *testing.T) {
	bios := screentest.BIOSSetup(10000)
	tail := bios.Output[len(bios.Output)-16<<10:]
	for _, s := range bios.Menu {
		if bytes.Contains(tail, []byte(s)) {
			t.Fatalf("the fixture's last 16 KiB hold %q", s)
		}
	}
	term, _ := screen.New(screen.Size{})
	for p := bios.Output; len(p) > 0; p = p[min(len(p), 4096):] {
		term.Write(p[:min(len(p), 4096)])
	}
	if got := term.Text(); got != bios.Screen {
		t.Errorf("screen:\n%s\nwant:\n%s", got, bios.Screen)
	}
	for _, s := range bios.Menu {
		if !strings.Contains(term.Text(), s) {
			t.Errorf("the screen lacks %q", s)
		}
	}
	found := false
	for _, sp := range term.Spans() {
		if sp.Row == bios.Highlight && sp.Col == 2 && sp.Len == bios.HighlightLen && sp.Reverse {
			found = true
		}
		if sp.Reverse && sp.Row > 2 && sp.Row != bios.Highlight {
			t.Errorf("a second highlight: %+v", sp)
		}
	}
	if !found {
		t.Errorf("no highlight at row %d in %+v", bios.Highlight, term.Spans())
	}
	checkRedraw(t, term)
}

package sshdoor

import (
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// TestKeystrokesSettle: a break request waits for the input reader to hand
// over what it has (to sit idle in Read), within a bound.
func TestKeystrokesSettle(t *testing.T) {
	const long = 10 * time.Second // never reached when the test passes
	t.Run("reader ended", func(t *testing.T) {
		k := newKeystrokes()
		k.done()
		start := time.Now()
		k.settle(long, long)
		if d := time.Since(start); d > long/2 {
			t.Errorf("settle took %v, want it to return at once", d)
		}
	})
	t.Run("reader idle in Read", func(t *testing.T) {
		k := newKeystrokes()
		k.reading(true)
		start := time.Now()
		k.settle(time.Millisecond, long)
		if d := time.Since(start); d > long/2 {
			t.Errorf("settle took %v, want about the idle time", d)
		}
	})
	t.Run("reader busy, then back in Read", func(t *testing.T) {
		k := newKeystrokes()
		k.reading(true)
		k.reading(false) // it got data and is handing it over
		var back atomic.Bool
		done := make(chan struct{})
		go func() {
			defer close(done)
			time.Sleep(20 * time.Millisecond)
			back.Store(true)
			k.reading(true)
		}()
		k.settle(time.Millisecond, long)
		if !back.Load() {
			t.Errorf("settle returned while the reader was still handing over data")
		}
		<-done
	})
	t.Run("bounded", func(t *testing.T) {
		k := newKeystrokes() // never in Read: busy for ever
		start := time.Now()
		k.settle(time.Millisecond, 20*time.Millisecond)
		if d := time.Since(start); d < 20*time.Millisecond || d > long/2 {
			t.Errorf("settle took %v, want its bound of 20ms", d)
		}
	})
}

func TestEscapeName(t *testing.T) {
	tests := []struct{ prefix, want string }{
		{"\x05c", "Ctrl-E c"},
		{"\x1dq", "Ctrl-] q"},
		{"\x00\x1f", "Ctrl-@ Ctrl-_"},
		{"~.", "~ ."},
		{" \x7f", "Space Ctrl-?"},
		{"\xffa", "0xFF a"},
	}
	for _, tt := range tests {
		if got := escapeName(tt.prefix); got != tt.want {
			t.Errorf("escapeName(%q): got %q, want %q", tt.prefix, got, tt.want)
		}
	}
}

// TestEscapeTexts: every console message that tells the user what to type
// names the configured prefix, not the default one.
func TestEscapeTexts(t *testing.T) {
	e := newEscapeTexts("\x1dq")
	for name, msg := range map[string]string{"help": e.help, "watchHelp": e.watchHelp, "hint": e.hint, "toWrite": e.toWrite,
		"readOnly": e.readOnly, "unknown": e.unknown} {
		if !strings.Contains(msg, "Ctrl-] q") || strings.Contains(msg, "Ctrl-E") {
			t.Errorf("%s: got %q, want it to name Ctrl-] q (and not Ctrl-E)", name, msg)
		}
	}
	// One escape a line, as conserver lists them (a PTY's line ends).
	want := "\r\n[obmd escapes: Ctrl-E c, then]\r\n" +
		"  .       detach\r\n" +
		"  f       take over writing\r\n" +
		"  s       become read-only\r\n" +
		"  b       send a serial break\r\n" +
		"  r       redraw the screen\r\n" +
		"  p       play back the scrollback\r\n" +
		"  Ctrl-E  send Ctrl-E c itself\r\n" +
		"  ?       this help\r\n"
	if got := newEscapeTexts("\x05c").help; got != want {
		t.Errorf("default help: got %q, want %q", got, want)
	}
}

// TestKeystrokesReadingFree: the input reader's bookkeeping (twice per
// Read) allocates nothing while no break request waits.
func TestKeystrokesReadingFree(t *testing.T) {
	k := newKeystrokes()
	if n := testing.AllocsPerRun(100, func() { k.reading(true); k.reading(false) }); n != 0 {
		t.Errorf("reading: got %v allocations per Read, want 0", n)
	}
}

package bastion

import (
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

package screen_test

import (
	"bytes"
	"fmt"
	"runtime"
	"testing"

	"github.com/obmd/obmd/sol/screen"
	"github.com/obmd/obmd/sol/screen/screentest"
)

// bootText is typical boot output: kernel lines, some in colour, each
// ending in CR LF, scrolling the screen.
func bootText(size int) []byte {
	var b bytes.Buffer
	for i := 0; b.Len() < size; i++ {
		switch i % 8 {
		case 0:
			fmt.Fprintf(&b, "[  OK  ] Started \x1b[0;1;39mSystem Logging Service %d\x1b[0m.\r\n", i)
		case 1:
			fmt.Fprintf(&b, "[%5d.%06d] usb 1-1: new high-speed USB device number %d using xhci_hcd\r\n", i/100, i, i%128)
		default:
			fmt.Fprintf(&b, "[%5d.%06d] EXT4-fs (sda1): mounted filesystem with ordered data mode. Quota mode: none.\r\n", i/100, i)
		}
	}
	return b.Bytes()[:size]
}

// denseEscapes is the worst case per byte: nothing but short escape
// sequences that each touch a whole line or the screen (erase, scroll,
// insert, delete, SGR), a tenant's hostile output.
func denseEscapes(size int) []byte {
	seqs := []string{"\x1b[2J", "\x1b[L", "\x1b[M", "\x1b[@", "\x1b[P", "\x1b[K", "\x1b[S", "\x1b[T", "\x1bM", "\x1bD",
		"\x1b[7;44m", "\x1b[38;2;1;2;3m", "\x1b[H", "\x1b[99;99H", "\x1b[?1049h", "\x1b[?1049l", "\x1b[4h", "\x1b[b", "x", "\x1b#8"}
	var b bytes.Buffer
	for i := 0; b.Len() < size; i++ {
		b.WriteString(seqs[i%len(seqs)])
	}
	return b.Bytes()[:size]
}

// BenchmarkTerminalWrite is the emulator's cost per byte of console
// output (MB/s), at the default size and the largest.
func BenchmarkTerminalWrite(b *testing.B) {
	inputs := []struct {
		name string
		p    []byte
	}{
		{"boot", bootText(1 << 20)},
		{"bios", screentest.BIOSSetup(50000).Output[:1<<20]},
		{"dense", denseEscapes(1 << 20)},
	}
	for _, size := range []screen.Size{{Cols: 80, Rows: 25}, {Cols: 200, Rows: 100}} {
		for _, in := range inputs {
			b.Run(fmt.Sprintf("%s/%v", in.name, size), func(b *testing.B) {
				term, _ := screen.New(size)
				b.SetBytes(int64(len(in.p)))
				b.ReportAllocs()
				for b.Loop() {
					for p := in.p; len(p) > 0; p = p[min(len(p), 4096):] {
						term.Write(p[:min(len(p), 4096)])
					}
				}
			})
		}
	}
}

// BenchmarkTerminalMemory is a terminal's heap (bytes/screen), once it has
// shown both screens.
func BenchmarkTerminalMemory(b *testing.B) {
	for _, size := range []screen.Size{{Cols: 80, Rows: 25}, {Cols: 200, Rows: 100}} {
		b.Run(size.String(), func(b *testing.B) {
			const n = 100
			terms := make([]*screen.Terminal, n)
			var before, after runtime.MemStats
			for b.Loop() {
				clear(terms)
				runtime.GC()
				runtime.ReadMemStats(&before)
				for i := range terms {
					terms[i], _ = screen.New(size)
					terms[i].Write([]byte("boot\r\n\x1b[?1049hmenu\x1b[?1049l"))
				}
				runtime.GC()
				runtime.ReadMemStats(&after)
			}
			b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/n, "bytes/screen")
			runtime.KeepAlive(terms)
		})
	}
}

// BenchmarkRedraw is the cost of a redraw (ANSI) and its size.
func BenchmarkRedraw(b *testing.B) {
	term, _ := screen.New(screen.Size{})
	term.Write(screentest.BIOSSetup(100).Output)
	var n int
	b.ReportAllocs()
	for b.Loop() {
		n = len(term.Snapshot().ANSI())
	}
	b.ReportMetric(float64(n), "bytes/redraw")
}

package sol_test

import (
	"bytes"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/obmd/obmd/db"
	"github.com/obmd/obmd/sol"
	"github.com/obmd/obmd/sol/screen/screentest"
	"github.com/obmd/obmd/sol/sim"
)

// consoleOutput is 1 MiB of one kind of console output: typical boot text
// (kernel lines, some coloured, scrolling), a BIOS menu being repainted, or
// the worst case per byte, nothing but short escape sequences that each
// touch a line or the whole screen.
func consoleOutput(kind string) []byte {
	var b bytes.Buffer
	switch kind {
	case "boot":
		for i := 0; b.Len() < 1<<20; i++ {
			fmt.Fprintf(&b, "[%5d.%06d] \x1b[0;1;32mOK\x1b[0m EXT4-fs (sda1): mounted filesystem with ordered data mode %d.\r\n", i/100, i, i)
		}
	case "bios":
		b.Write(screentest.BIOSSetup(60000).Output)
	case "dense":
		seqs := []string{"\x1b[2J", "\x1b[L", "\x1b[M", "\x1b[@", "\x1b[P", "\x1b[K", "\x1b[S", "\x1b[T", "\x1bM",
			"\x1b[7;44m", "\x1b[38;2;1;2;3m", "\x1b[H", "\x1b[99;99H", "\x1b[?1049h", "\x1b[?1049l", "\x1b[b", "x"}
		for i := 0; b.Len() < 1<<20; i++ {
			b.WriteString(seqs[i%len(seqs)])
		}
	}
	return b.Bytes()[:1<<20]
}

// BenchmarkScreenCost is the hub's CPU per MB of console output from one
// captured node (held, recorded in a SQLite history) to one viewer, with
// the node's screen and without it (screens=false, the hub as it was): the
// emulator's cost is the difference, cpu-ms/MB. The output goes in blocks
// of 64 KiB, each delivered (and, with screens, drawn) before the next:
// far faster than a serial console, never so fast that the screen falls
// behind and is rebuilt (rebuilds counts those).
func BenchmarkScreenCost(b *testing.B) {
	for _, kind := range []string{"boot", "bios", "dense"} {
		out := consoleOutput(kind)
		for _, screens := range []bool{false, true} {
			b.Run(fmt.Sprintf("%s/screens=%v", kind, screens), func(b *testing.B) {
				h := newHistRig(b)
				lab := sim.NewLab()
				bmc := lab.BMC("n1", sim.ModeNormal)
				m := h.manager(b, lab)
				if !screens {
					sol.DisableScreens(m)
				}
				if err := m.Hold("n1"); err != nil {
					b.Fatal(err)
				}
				v := attach(b, m, "n1", "viewer", sol.AttachOptions{})
				waitConsole(b, bmc, true)
				const block = 64 << 10
				got := make(chan struct{})
				go func() { // ends when v does
					n := 0
					for c := range v.Output() {
						n += len(c.Data) + c.Skipped
						for ; n >= block; n -= block {
							got <- struct{}{}
						}
					}
				}()
				b.SetBytes(int64(len(out)))
				cpu := cpuTime(b)
				b.ResetTimer()
				for range b.N {
					for blk := out; len(blk) > 0; blk = blk[block:] {
						for p := blk[:block]; len(p) > 0; p = p[4<<10:] {
							bmc.Inject(p[:4<<10])
						}
						<-got
						if screens { // the screen has drawn it all
							if _, err := m.Screen(testCtx(b), "n1"); err != nil {
								b.Fatal(err)
							}
						}
					}
				}
				b.StopTimer()
				b.ReportMetric(float64(cpuTime(b)-cpu)/float64(time.Millisecond)/float64(b.N), "cpu-ms/MB")
				b.ReportMetric(float64(m.Stats().ScreenRebuilds), "rebuilds")
			})
		}
	}
}

// BenchmarkScreensFleet holds 1,000 nodes captured always (SQLite history)
// and has every one print 16 KiB of boot text and a BIOS menu at once, with
// screens and without: the process's CPU for it all, and its heap and
// resident memory per node once the nodes are idle again.
func BenchmarkScreensFleet(b *testing.B) {
	const nodes = 1000
	out := append(consoleOutput("boot")[:16<<10:16<<10], screentest.BIOSSetup(300).Output...)
	for _, screens := range []bool{false, true} {
		b.Run(fmt.Sprintf("screens=%v", screens), func(b *testing.B) {
			for range b.N {
				fleet(b, nodes, out, screens)
			}
		})
	}
}

func fleet(b *testing.B, nodes int, out []byte, screens bool) {
	b.StopTimer()
	h := newHistRig(b)
	ctx := testCtx(b)
	lab := sim.NewLab()
	bmcs := make([]*sim.BMC, nodes)
	for i := range nodes {
		label := fmt.Sprintf("n%d", i+1)
		if i > 0 {
			if _, err := h.store.CreateNode(ctx, db.Node{Label: label, Type: "sim", InfoSealed: []byte("x")}); err != nil {
				b.Fatal(err)
			}
		}
		bmcs[i] = lab.BMC(label, sim.ModeNormal)
	}
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	rss0 := rss(b)
	m := h.manager(b, lab)
	if !screens {
		sol.DisableScreens(m)
	}
	for i := range nodes {
		if err := m.Hold(fmt.Sprintf("n%d", i+1)); err != nil {
			b.Fatal(err)
		}
	}
	waitFor(b, "every held link up", func() bool { return m.Stats().CapturedUp == int64(nodes) })
	b.StartTimer()
	cpu, wall := cpuTime(b), time.Now()
	done := make(chan struct{})
	for _, bmc := range bmcs {
		go func() { // ends when its node has printed
			defer func() { done <- struct{}{} }()
			for p := out; len(p) > 0; p = p[min(len(p), 4<<10):] {
				bmc.Inject(p[:min(len(p), 4<<10)])
			}
		}()
	}
	for range bmcs {
		<-done
	}
	total := uint64(nodes * len(out))
	waitFor(b, "every byte read", func() bool { return m.Stats().BytesOut >= total })
	if screens {
		for i := range nodes {
			s, err := m.Screen(ctx, fmt.Sprintf("n%d", i+1))
			if err != nil || !strings.Contains(s.Text(), "Aptio Setup Utility") {
				b.Fatalf("n%d's screen (%v):\n%s", i+1, err, s.Text())
			}
		}
	}
	b.StopTimer()
	cpuUsed, wallUsed := cpuTime(b)-cpu, time.Since(wall)
	runtime.GC()
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	b.ReportMetric(cpuUsed.Seconds(), "cpu-s")
	b.ReportMetric(wallUsed.Seconds(), "wall-s")
	b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/float64(nodes)/1024, "heapKiB/node")
	b.ReportMetric(float64(rss(b)-rss0)/float64(nodes)/1024, "rssKiB/node")
	b.ReportMetric(float64(m.Stats().ScreenRebuilds), "rebuilds")
	m.Close(ctx)
}

// rss is the process's resident set (VmRSS), in bytes.
func rss(b *testing.B) int64 {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		b.Fatal(err)
	}
	for _, l := range strings.Split(string(data), "\n") {
		if f := strings.Fields(l); len(f) == 3 && f[0] == "VmRSS:" {
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			return kb << 10
		}
	}
	b.Fatal("no VmRSS")
	return 0
}

package history

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/obmd/obmd/bastion/e2e/obmdtest"

	gossh "golang.org/x/crypto/ssh"

	"github.com/obmd/obmd/bastion/daemon"
	"github.com/obmd/obmd/db/dbtest"
	"github.com/obmd/obmd/sol/sim"
)

// ttfbWriter counts what it is given and notes when its first byte came.
type ttfbWriter struct {
	first time.Time
	n     int
}

func (w *ttfbWriter) Write(p []byte) (int, error) {
	if w.first.IsZero() && len(p) > 0 {
		w.first = time.Now()
	}
	w.n += len(p)
	return len(p), nil
}

// BenchmarkConsoleLog1MiB is `console-log` over SSH (x/crypto, token) of a
// full 1 MiB history (the default history_bytes), captured from a sim node
// with nobody attached, on SQLite and MariaDB: ttfb-ms is the time from
// the exec request to the first byte of stdout, ttlb-ms to the last; the
// SSH connection is made before the clock starts.
func BenchmarkConsoleLog1MiB(b *testing.B) {
	for _, e := range dbtest.Engines() {
		b.Run(e.Name, func(b *testing.B) {
			o := obmdtest.Start(b, func(c *daemon.Config) { c.DB.DSN = e.DSN(b); c.Console.Capture = "always" })
			tok := o.AddSimNode("big")
			bmc := o.Lab().BMC("big", sim.ModeNormal)
			line := append(bytes.Repeat([]byte("x"), 1018), '\r', '\n')
			obmdtest.PrintUntilSeen(b, obmdtest.Inject(bmc), "captured", o.LogShows("big", tok))
			var last string
			for i := range 1200 { // past the 1 MiB bound, paced: the sim drops what a link has not read
				bmc.Inject(append([]byte(fmt.Sprintf("%04d ", i)), line[5:]...))
				if i%64 == 63 {
					last = obmdtest.PrintUntilSeen(b, obmdtest.Inject(bmc), "filled", o.LogShows("big", tok))
				}
			}
			out := 0
			var first, whole time.Duration
			for b.Loop() {
				c, err := obmdtest.DialSSH(o.SSHAddr(), "big", gossh.Password(tok))
				if err != nil {
					b.Fatal(err)
				}
				s, err := c.NewSession()
				if err != nil {
					b.Fatal(err)
				}
				w := &ttfbWriter{}
				s.Stdout = w
				start := time.Now()
				if err := s.Run("console-log"); err != nil {
					b.Fatal(err)
				}
				whole += time.Since(start)
				first += w.first.Sub(start)
				out = w.n
				c.Close()
			}
			if out < 1<<20-64<<10 {
				b.Fatalf("console-log printed %d bytes, want about 1 MiB (ending %s)", out, last)
			}
			n := float64(b.N)
			b.ReportMetric(float64(first.Microseconds())/1000/n, "ttfb-ms")
			b.ReportMetric(float64(whole.Microseconds())/1000/n, "ttlb-ms")
			b.ReportMetric(float64(out), "out-bytes")
		})
	}
}

// BenchmarkHistoryWrites100Nodes is one second of 100 always-captured sim
// nodes each printing 1 KiB/s (a 103-byte line every 100 ms), on SQLite
// and MariaDB, with the default flush interval: tx/s is the database's
// history transactions per second (obmd_history_flushes_total), rows/s
// the chunks they stored, KiB/s the bytes recorded.
func BenchmarkHistoryWrites100Nodes(b *testing.B) {
	const nodes = 100
	for _, e := range dbtest.Engines() {
		b.Run(e.Name, func(b *testing.B) {
			o := obmdtest.Start(b, func(c *daemon.Config) { c.DB.DSN = e.DSN(b); c.Console.Capture = "always" })
			bmcs := make([]*sim.BMC, nodes)
			for i := range bmcs {
				label := fmt.Sprintf("w-%03d", i)
				o.AddSimNode(label)
				bmcs[i] = o.Lab().BMC(label, sim.ModeNormal)
			}
			obmdtest.WaitUntil(b, "every node's link held", func() bool {
				return metricOf(b, o, `obmd_console_captured_links{state="up"}`) == nodes
			})
			line := append(bytes.Repeat([]byte("y"), 101), '\r', '\n')
			tick := time.NewTicker(100 * time.Millisecond)
			defer tick.Stop()
			time.Sleep(1500 * time.Millisecond) // past the first flush of the opening output
			flushes, chunks := metricOf(b, o, "obmd_history_flushes_total"), metricOf(b, o, "obmd_history_chunks_stored_total")
			written := metricOf(b, o, "obmd_history_written_bytes_total")
			start := time.Now()
			for b.Loop() {
				for range 10 {
					<-tick.C
					for _, bmc := range bmcs {
						bmc.Inject(line)
					}
				}
			}
			secs := time.Since(start).Seconds()
			b.ReportMetric((metricOf(b, o, "obmd_history_flushes_total")-flushes)/secs, "tx/s")
			b.ReportMetric((metricOf(b, o, "obmd_history_chunks_stored_total")-chunks)/secs, "rows/s")
			b.ReportMetric((metricOf(b, o, "obmd_history_written_bytes_total")-written)/secs/1024, "KiB/s")
		})
	}
}

// metricOf reads one sample of o's /metrics, or fails b.
func metricOf(b testing.TB, o *obmdtest.Daemon, series string) float64 {
	b.Helper()
	for _, l := range strings.Split(string(o.MustAPI(200, "GET", "/metrics", nil)), "\n") {
		if v, ok := strings.CutPrefix(l, series+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				b.Fatalf("%s: %v", l, err)
			}
			return f
		}
	}
	b.Fatalf("no %s in /metrics", series)
	return 0
}

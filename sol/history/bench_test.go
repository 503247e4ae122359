package history_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/obmd/obmd/db"
	"github.com/obmd/obmd/db/dbtest"
	"github.com/obmd/obmd/sol/history"
)

// cpu is this process's CPU time, and the database server's when it is a
// local mariadbd we may read (/proc), so a store's cost counts wherever it
// is spent.
type cpu struct{ self, server time.Duration }

func cpuNow() cpu {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	self := time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	return cpu{self: self, server: serverCPU()}
}

// serverCPU sums utime and stime of the mariadbd processes (0 if none).
func serverCPU() time.Duration {
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	var total time.Duration
	for _, d := range dirs {
		comm, err := os.ReadFile(d + "/comm")
		if err != nil || strings.TrimSpace(string(comm)) != "mariadbd" {
			continue
		}
		stat, err := os.ReadFile(d + "/stat")
		if err != nil {
			continue
		}
		// Fields after the command's closing parenthesis; utime and stime
		// are the 14th and 15th of the whole line, in clock ticks (100/s).
		f := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
		if len(f) < 13 {
			continue
		}
		u, _ := strconv.ParseInt(f[11], 10, 64)
		s, _ := strconv.ParseInt(f[12], 10, 64)
		total += time.Duration(u+s) * 10 * time.Millisecond
	}
	return total
}

// benchNodes creates n nodes with a tenancy each.
func benchNodes(b *testing.B, s *db.Store, n int) []int64 {
	epochs := make([]int64, n)
	for i := range n {
		epochs[i] = newNode(b, s, fmt.Sprintf("node-%03d", i))
	}
	return epochs
}

// BenchmarkAppend100Nodes is one second of 100 nodes each printing 1 KiB
// (in 8 writes of 128 bytes, 100 ms apart) through the Recorder, then the
// flush that stores it: one transaction. ns/op is the cost of a second of
// that load; "below_bound" never reaches the bound (64 MiB), "at_bound"
// runs with every tenancy full (64 KiB), so each flush also evicts each
// node's oldest chunk.
func BenchmarkAppend100Nodes(b *testing.B) {
	for _, e := range dbtest.Engines() {
		for _, full := range []bool{false, true} {
			name := e.Name + "/below_bound"
			if full {
				name = e.Name + "/at_bound"
			}
			b.Run(name, func(b *testing.B) { benchAppend(b, e, full) })
		}
	}
}

func benchAppend(b *testing.B, e dbtest.Engine, full bool) {
	const nodes, writes, size = 100, 8, 128
	s := openDB(b, e)
	epochs := benchNodes(b, s, nodes)
	clock := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	now := func() time.Time { return clock }
	bound := int64(64 << 20)
	if full {
		bound = history.MinHistoryBytes
	}
	r := newRecorder(b, s, history.Config{FlushInterval: time.Hour, HistoryBytes: bound, Now: now})
	recs := make([]*history.Recording, nodes)
	for i := range nodes {
		recs[i] = mustOpen(b, r, fmt.Sprintf("node-%03d", i), epochs[i])
	}
	line := append(bytes.Repeat([]byte("x"), size-1), '\n')
	second := func() {
		for range writes {
			clock = clock.Add(100 * time.Millisecond)
			for _, rec := range recs {
				rec.Write(line)
			}
		}
		clock = clock.Add(200 * time.Millisecond)
		if err := r.Flush(context.Background()); err != nil {
			b.Fatal(err)
		}
	}
	if full { // fill every tenancy to its bound first
		for range history.MinHistoryBytes/(writes*size) + 2 {
			second()
		}
	}
	before, flushes := cpuNow(), r.Stats().Flushes
	b.ResetTimer()
	for b.Loop() {
		second()
	}
	b.StopTimer()
	after := cpuNow()
	n := float64(b.N)
	b.ReportMetric(float64(r.Stats().Flushes-flushes)/n, "tx/op")
	b.ReportMetric(nodes, "chunks/op")
	b.ReportMetric(float64(nodes*writes*size), "bytes/op")
	b.ReportMetric(float64((after.self-before.self).Microseconds())/1000/n, "cpu-ms/op")
	if e.Name == "mysql" {
		b.ReportMetric(float64((after.server-before.server).Microseconds())/1000/n, "server-cpu-ms/op")
	}
}

// firstByte is a writer that notes when its first byte came.
type firstByte struct {
	start, first time.Time
	n            int
}

func (w *firstByte) Write(p []byte) (int, error) {
	if w.first.IsZero() && len(p) > 0 {
		w.first = time.Now()
	}
	w.n += len(p)
	return len(p), nil
}

// BenchmarkRead1MiB reads a full 1 MiB history (1 KiB chunks, each of 8
// writes) from another replica's Recorder (the store alone) and encodes
// it: ttfb is the time to the first byte out, ttlb to the last.
func BenchmarkRead1MiB(b *testing.B) {
	for _, e := range dbtest.Engines() {
		b.Run(e.Name, func(b *testing.B) {
			s := openDB(b, e)
			ep := newNode(b, s, "n")
			fillMiB(b, s, ep)
			r := newRecorder(b, s, history.Config{})
			for _, f := range []struct {
				name string
				f    history.Format
				o    history.Options
			}{{"raw", history.FormatRaw, history.Options{}}, {"text_timestamps", history.FormatText,
				history.Options{Timestamps: true}}, {"cast", history.FormatCast, history.Options{}}} {
				b.Run(f.name, func(b *testing.B) { benchRead(b, r, ep, f.f, f.o) })
			}
		})
	}
}

// fillMiB stores 1 MiB of output in n's tenancy ep.
func fillMiB(b *testing.B, s *db.Store, ep int64) {
	at := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	var batch []history.Chunk
	for i := range 1024 {
		c := history.Chunk{Node: "n", Epoch: ep, At: at, Kind: history.KindOutput,
			Data: append(bytes.Repeat([]byte(fmt.Sprintf("%04d ", i)), 1023/5), '\n')[:1024]}
		for w := 1; w < 8; w++ {
			c.Stamps = append(c.Stamps, history.Stamp{Off: w * 128, At: at.Add(time.Duration(w) * 100 * time.Millisecond)})
		}
		at = at.Add(time.Second)
		batch = append(batch, c)
		if len(batch) == 128 {
			if err := s.AppendHistory(context.Background(), batch, 1<<20); err != nil {
				b.Fatal(err)
			}
			batch = nil
		}
	}
}

func benchRead(b *testing.B, r *history.Recorder, ep int64, f history.Format, o history.Options) {
	var first, last time.Duration
	out := 0
	for b.Loop() {
		w := &firstByte{start: time.Now()}
		chunks, err := r.Read(context.Background(), history.Query{Node: "n", Epoch: ep})
		if err != nil {
			b.Fatal(err)
		}
		enc, err := history.NewEncoder(w, f, o)
		if err != nil {
			b.Fatal(err)
		}
		for _, c := range chunks {
			if err := enc.Encode(c); err != nil {
				b.Fatal(err)
			}
		}
		if err := enc.Close(); err != nil {
			b.Fatal(err)
		}
		first += w.first.Sub(w.start)
		last += time.Since(w.start)
		out = w.n
	}
	n := float64(b.N)
	b.ReportMetric(float64(first.Microseconds())/1000/n, "ttfb-ms")
	b.ReportMetric(float64(last.Microseconds())/1000/n, "ttlb-ms")
	b.ReportMetric(float64(out), "out-bytes")
}

// BenchmarkWrite is the cost of one 128-byte Write into a recording (the
// hub's publish path), with a store that takes everything.
func BenchmarkWrite(b *testing.B) {
	st := newMemStore()
	st.discard = true
	r := newRecorder(b, st, history.Config{})
	rec := mustOpen(b, r, "n", 1)
	line := append(bytes.Repeat([]byte("x"), 127), '\n')
	b.SetBytes(int64(len(line)))
	b.ReportAllocs()
	for b.Loop() {
		rec.Write(line)
	}
}

package sol_test

import (
	"context"
	"fmt"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/obmd/obmd/db"
	"github.com/obmd/obmd/sol"
	"github.com/obmd/obmd/sol/sim"
)

// BenchmarkFanoutCaptured is BenchmarkFanout with 10 viewers of a node
// captured always (held, recorded in a SQLite history) against capture
// off, in one run: compare skipped/byte (the bytes viewers lost) and the
// rate.
func BenchmarkFanoutCaptured(b *testing.B) {
	for _, captured := range []bool{false, true} {
		b.Run(fmt.Sprintf("captured=%v", captured), func(b *testing.B) {
			lab := sim.NewLab()
			m := newManager(b, sol.Config{}, lab)
			if captured {
				h := newHistRig(b)
				m = h.manager(b, lab)
				if err := m.Hold("n1"); err != nil {
					b.Fatal(err)
				}
			}
			fanout(b, m, lab, 10)
		})
	}
}

// BenchmarkHeldIdle holds 500 idle simulated nodes captured always
// (recorded in a SQLite history) and reports what one costs: heap bytes
// and goroutines per node, and the CPU the hub and recorder use while the
// nodes print nothing (per cent of one core, all nodes together).
func BenchmarkHeldIdle(b *testing.B) {
	const nodes = 500
	h := newHistRig(b)
	ctx := testCtx(b)
	for i := 1; i < nodes; i++ { // n1 is the rig's
		if _, err := h.store.CreateNode(ctx, db.Node{Label: fmt.Sprintf("n%d", i+1), Type: "sim", InfoSealed: []byte("x")}); err != nil {
			b.Fatal(err)
		}
	}
	lab := sim.NewLab()
	for i := range nodes {
		lab.BMC(fmt.Sprintf("n%d", i+1), sim.ModeNormal)
	}
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	goroutines := runtime.NumGoroutine()
	m := h.manager(b, lab)
	for i := range nodes {
		if err := m.Hold(fmt.Sprintf("n%d", i+1)); err != nil {
			b.Fatal(err)
		}
	}
	waitFor(b, "every held link up", func() bool { return m.Stats().CapturedUp == nodes })
	runtime.GC()
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	held := runtime.NumGoroutine() - goroutines
	b.ResetTimer() // (it also drops the metrics reported so far)
	var cpu, wall time.Duration
	for range b.N {
		cpu0, wall0 := cpuTime(b), time.Now()
		time.Sleep(time.Second)
		cpu, wall = cpu+cpuTime(b)-cpu0, wall+time.Since(wall0)
	}
	b.StopTimer()
	b.ReportMetric(100*float64(cpu)/float64(wall), "%core")
	b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/nodes, "heapB/node")
	b.ReportMetric(float64(held)/nodes, "goroutines/node")
	m.Close(context.Background())
}

// cpuTime is the CPU time this process has used.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

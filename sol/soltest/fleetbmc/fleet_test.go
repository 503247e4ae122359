package fleetbmc_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"runtime"
	"testing"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/obmd/obmd/sol"
	"github.com/obmd/obmd/sol/ipmi"
	"github.com/obmd/obmd/sol/soltest"
	"github.com/obmd/obmd/sol/soltest/fleetbmc"
)

// TestFleetConsoles: forty BMCs of one fleet, each on its own port,
// each with a console open through obmd's native driver at once, each
// node printing 8 KiB at 115200 baud: every console gets exactly its
// node's bytes, no line loses any, and every BMC's power is its own. (The
// UART buffers hold the whole output: a loaded machine running this with
// -race may starve a BMC's pump for longer than a 4 KiB buffer lasts at
// 115200 baud, and timing is not what this checks. Forty, not more, so that
// the test ends well within go-ipmi's 30 s client keepalive even with -race
// on a loaded machine: go-ipmi v0.9.1's client can crash when a session is
// closed while that keepalive is in flight.)
func TestFleetConsoles(t *testing.T) {
	const n, size = 40, 8 << 10
	f, err := fleetbmc.Start(fleetbmc.Options{BMCs: n, UARTBuffer: 2 * size})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.Close)
	log := logrus.New()
	log.SetOutput(io.Discard)
	ports := map[int]bool{}
	readers := make([]*soltest.Reader, n)
	outs := make([][]byte, n)
	for i := range n {
		b := f.BMC(i)
		if ports[b.Port] {
			t.Fatalf("BMC %d shares port %d", i, b.Port)
		}
		ports[b.Port] = true
		d, err := ipmi.New(fmt.Sprintf("n%d", i), soltest.Pinned(b.Info(), 3), ipmi.Config{}, log)
		if err != nil {
			t.Fatal(err)
		}
		readers[i] = soltest.Open(t, d)
		outs[i] = append([]byte(fmt.Sprintf("node %d\r\n", i)), soltest.Paste(size, uint64(i))...)
	}
	for i := range n {
		f.BMC(i).Print(outs[i])
	}
	deadline := time.Now().Add(2 * time.Minute)
	for i := range n {
		for len(readers[i].Output()) < len(outs[i]) && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
		}
	}
	for i := range n {
		if got := readers[i].Output(); !bytes.Equal(got, outs[i]) {
			t.Errorf("BMC %d: console got %d bytes, want exactly the %d printed", i, len(got), len(outs[i]))
		}
		if s := f.BMC(i).Line(); s.Lost != 0 || s.Read != int64(len(outs[i])) {
			t.Errorf("BMC %d: line %+v, want all read, none lost", i, s)
		}
	}
	d, err := ipmi.New("n7", soltest.Pinned(f.BMC(7).Info(), 17), ipmi.Config{}, log)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := d.PowerOff(ctx, false); err != nil {
		t.Fatalf("PowerOff on suite 17: %v", err)
	}
	for i := range n {
		if on := f.BMC(i).PowerOn(); on != (i != 7) {
			t.Errorf("BMC %d power on: got %v, want %v", i, on, i != 7)
		}
	}
	if st, err := d.PowerStatus(ctx); err != nil || st != sol.PowerOff {
		t.Errorf("PowerStatus: got (%q, %v), want off", st, err)
	}
}

// TestFleetMemory: an idle BMC costs a bounded amount of heap (generous:
// it catches a per-BMC buffer of megabytes, not a few KiB).
func TestFleetMemory(t *testing.T) {
	const n = 500
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	f, err := fleetbmc.Start(fleetbmc.Options{BMCs: n})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	runtime.GC()
	runtime.ReadMemStats(&after)
	per := (int64(after.HeapAlloc) - int64(before.HeapAlloc)) / n
	t.Logf("heap per idle BMC: %d bytes", per)
	if per > 64<<10 {
		t.Errorf("heap per idle BMC: got %d bytes, want under 64 KiB", per)
	}
}

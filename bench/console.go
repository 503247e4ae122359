package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	gossh "golang.org/x/crypto/ssh"

	"github.com/obmd/obmd/bench/bare"
	"github.com/obmd/obmd/sol/sim"
)

// consoleBench is section 3.
func consoleBench(cfg benchConfig) *section {
	s := &section{Title: "3. Console: keystroke echo and output throughput (obmd in-process, sim nodes)"}
	p, err := startInproc(cfg, "console")
	if err != nil {
		s.skip("console", err)
		return s
	}
	defer p.Stop()
	pass, _ := randomHex(16)
	bareAddr, stopBare, bareErr := startBareInproc(pass)
	if bareErr == nil {
		defer stopBare()
	}
	bareAuth := gossh.Password(pass)

	// Keystroke to echo.
	samples := 500
	if cfg.quick {
		samples = 100
	}
	cfg.logf("console: keystroke latency, %d samples each", samples)
	direct, derr := directLatency(samples)
	viaObmd, oerr := obmdLatency(p, samples)
	var viaBare []time.Duration
	berr := bareErr
	if berr == nil {
		viaBare, berr = bareLatency(bareAddr, bareAuth, samples)
	}
	switch {
	case oerr != nil:
		s.skip("keystroke to echo through obmd", oerr)
	default:
		for _, q := range []struct {
			name string
			p    float64
		}{{"p50", 0.50}, {"p99", 0.99}} {
			o := pct(viaObmd, q.p)
			if derr == nil {
				d := pct(direct, q.p)
				s.add(row{Measure: "keystroke to echo " + q.name + ", through obmd vs on the sim link directly", Figure: us(o),
					Ref: "sim link: " + us(d), Ratio: ratio(float64(o), float64(d)), Status: statusNone})
			} else {
				s.skip("keystroke to echo "+q.name+" on the sim link directly", derr)
			}
			if berr == nil {
				b := pct(viaBare, q.p)
				s.add(row{Measure: "keystroke to echo " + q.name + ", through obmd vs a bare SSH echo server", Figure: us(o),
					Ref: "bare SSH echo: " + us(b), Ratio: ratio(float64(o), float64(b)), Status: statusNone})
			}
		}
	}
	s.note("Keystroke to echo: one byte typed into an SSH console session (x/crypto client, pty) of a sim node, timed until the simulated host's echo comes back, %d times (each followed by a backspace so the line stays short). \"Sim link directly\" types into sol/sim's console in-process (no SSH, no hub): the floor; \"bare SSH echo\" is an in-process bench/bare server echoing the byte (SSH without obmd; obmd runs in-process too).", samples)

	// Throughput.
	phase := cfg.scale(1500 * time.Millisecond)
	const tries = 3
	var one float64
	for _, n := range []int{1, 10, 100} {
		cfg.logf("console: throughput to %d viewer(s)", n)
		r, err := best(tries, func(i int) (tpResult, error) { return throughput(p, fmt.Sprintf("tp-%d-%d", n, i), n, false, phase) })
		measure := fmt.Sprintf("output throughput per viewer, %d viewer(s) of one node", n)
		if err != nil {
			s.skip(measure, err)
			continue
		}
		switch {
		case n == 1:
			one = r.perViewer
			if bareErr != nil {
				s.add(row{Measure: measure, Figure: num(r.perViewer, "MB/s"), Ref: "-", Ratio: "-", Status: statusNone})
				break
			}
			var ref float64
			for range tries {
				mbps, berr := bareThroughput(bareAddr, bareAuth, r.bytes)
				if err = berr; err != nil {
					break
				}
				ref = max(ref, mbps)
			}
			if err != nil {
				s.skip(measure+" (bare SSH reference)", err)
				break
			}
			s.add(row{Measure: measure + " vs bare SSH stream", Figure: num(r.perViewer, "MB/s"),
				Ref: "bare SSH: " + num(ref, "MB/s"), Ratio: ratio(r.perViewer, ref), Status: statusNone})
		case one == 0:
			s.add(row{Measure: measure, Figure: fmt.Sprintf("%s (total %s)", num(r.perViewer, "MB/s"), num(r.total, "MB/s")),
				Ref: "-", Ratio: "-", Status: statusNone})
		default:
			s.add(row{Measure: measure + " vs 1 viewer", Figure: fmt.Sprintf("%s (total %s)", num(r.perViewer, "MB/s"), num(r.total, "MB/s")),
				Ref: "1 viewer: " + num(one, "MB/s"), Ratio: ratio(r.perViewer, one), Status: statusNone})
		}
	}
	cfg.logf("console: stalled viewer")
	// Interleaved, so drift on the machine hits both alike.
	var healthy, stalled tpResult
	var herr, serr error
	for i := range tries {
		h, err := throughput(p, fmt.Sprintf("stall-ref-%d", i), 10, false, phase)
		if err != nil {
			herr = err
			break
		}
		st, err := throughput(p, fmt.Sprintf("stall-%d", i), 10, true, phase)
		if err != nil {
			serr = err
			break
		}
		if h.perViewer > healthy.perViewer {
			healthy = h
		}
		if st.perViewer > stalled.perViewer {
			stalled = st
		}
	}
	measure := "10 viewers' throughput with an 11th that never reads vs without it"
	switch {
	case herr != nil:
		s.skip(measure, herr)
	case serr != nil:
		s.skip(measure, serr)
	default:
		s.add(row{Measure: measure, Figure: num(stalled.perViewer, "MB/s"), Ref: "without: " + num(healthy.perViewer, "MB/s"),
			Ratio: ratio(stalled.perViewer, healthy.perViewer), Goal: ">= 0.8x, readers lose nothing",
			Status: verdict(stalled.perViewer >= 0.8*healthy.perViewer)})
		s.note("Stalled viewer: its SSH client does not read during the run, so its SSH channel window (2 MiB in x/crypto) and then its obmd queue (256 KiB) fill and obmd skips it ahead; the 10 readers lost %d bytes; read at last, the stalled one had %s of the %s printed.", stalled.lost, num(float64(stalled.stalledGot)/1e6, "MB"), num(float64(stalled.bytes)/1e6, "MB"))
	}
	s.note("Throughput: the sim host prints 80-byte lines (Inject, 16 KiB at a time) for %v; at most 128 KiB may be ahead of the slowest reading viewer (half its obmd queue: a BMC cannot be slowed down, so a burst lands in that queue whole, and beyond it viewers skip ahead by design), so these are the rates a viewer gets without losing a byte, and the 1-viewer rate is bounded by 128 KiB per round trip (the bare server has no such bound: SSH flow control slows its writer down); MB/s = bytes / time until that viewer had them all, averaged over viewers (total = sum over viewers); best of %d runs each (the stalled-viewer runs interleaved with their reference). Clients and obmd share the 2 cores. The bare SSH stream moves the same volume from an in-process bench/bare server (no pty).", phase, tries)
	return s
}

// best runs f tries times and keeps the run with the highest per-viewer
// rate (the least disturbed by the rest of the machine).
func best(tries int, f func(i int) (tpResult, error)) (tpResult, error) {
	var b tpResult
	for i := range tries {
		r, err := f(i)
		if err != nil {
			return r, err
		}
		if r.perViewer > b.perViewer {
			b = r
		}
	}
	return b, nil
}

func us(d time.Duration) string { return num(float64(d)/float64(time.Microsecond), "µs") }

// pct is the q-quantile of ds (nearest rank).
func pct(ds []time.Duration, q float64) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(q*float64(len(s))+0.5) - 1
	return s[max(0, min(i, len(s)-1))]
}

// echoLoop types "x", waits for its echo, then types DEL and waits for
// delReply bytes, n times; it returns the "x" round trips. recv delivers
// what the other side printed.
func echoLoop(write func([]byte) error, recv <-chan []byte, n, delReply int) ([]time.Duration, error) {
	wait := func(pred func([]byte) bool, got *[]byte) error {
		timeout := time.After(10 * time.Second)
		for !pred(*got) {
			select {
			case b, ok := <-recv:
				if !ok {
					return fmt.Errorf("output ended")
				}
				*got = append(*got, b...)
			case <-timeout:
				return fmt.Errorf("no echo within 10 s (got %q)", *got)
			}
		}
		return nil
	}
	var out []time.Duration
	for i := range n + 20 { // 20 warm-up rounds
		var got []byte
		t := time.Now()
		if err := write([]byte("x")); err != nil {
			return nil, err
		}
		if err := wait(func(b []byte) bool { return bytes.IndexByte(b, 'x') >= 0 }, &got); err != nil {
			return nil, err
		}
		if i >= 20 {
			out = append(out, time.Since(t))
		}
		got = got[bytes.IndexByte(got, 'x')+1:]
		if err := write([]byte{0x7f}); err != nil {
			return nil, err
		}
		if err := wait(func(b []byte) bool { return len(b) >= delReply }, &got); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// chanReader feeds r's reads into a channel, closed at EOF.
func chanReader(r io.Reader) <-chan []byte {
	ch := make(chan []byte, 64)
	go func() { // ends at EOF or error
		defer close(ch)
		for {
			buf := make([]byte, 4096)
			n, err := r.Read(buf)
			if n > 0 {
				ch <- buf[:n]
			}
			if err != nil {
				return
			}
		}
	}()
	return ch
}

// directLatency types into sol/sim's console in this process.
func directLatency(n int) ([]time.Duration, error) {
	lab := sim.NewLab()
	con, err := lab.BMC("direct", sim.ModeNormal).OpenConsole(context.Background())
	if err != nil {
		return nil, err
	}
	defer con.Close()
	return echoLoop(func(p []byte) error { _, err := con.Write(p); return err }, chanReader(con), n, 3)
}

// obmdLatency types through an SSH console session of a sim node.
func obmdLatency(p *inproc, n int) ([]time.Duration, error) {
	token, err := p.admin().addNode("lat", "sim", simInfo)
	if err != nil {
		return nil, err
	}
	v, err := openViewer(p.SSHAddr(), "lat", gossh.Password(token))
	if err != nil {
		return nil, err
	}
	defer v.Close()
	if err := v.waitStderr("console of", 10*time.Second); err != nil {
		return nil, err
	}
	return echoLoop(func(b []byte) error { _, err := v.in.Write(b); return err }, chanReader(v.out), n, 3)
}

// bareLatency types into bench/baressh's echo shell.
func bareLatency(addr string, auth gossh.AuthMethod, n int) ([]time.Duration, error) {
	v, err := openViewer(addr, "node", auth)
	if err != nil {
		return nil, err
	}
	defer v.Close()
	return echoLoop(func(b []byte) error { _, err := v.in.Write(b); return err }, chanReader(v.out), n, 1)
}

// tpResult is one throughput run.
type tpResult struct {
	bytes      int64   // injected
	perViewer  float64 // mean over reading viewers, MB/s
	total      float64 // sum over reading viewers, MB/s
	lost       int64   // bytes reading viewers never got
	stalledGot int64   // bytes the stalled viewer got once it read at last
}

// throughput attaches n reading viewers (plus one that never reads, if
// stall) to a new sim node and has its host print for phase, keeping at
// most 128 KiB ahead of the slowest reader. A BMC cannot be slowed down,
// so everything printed lands in each viewer's obmd queue (256 KiB) first,
// however much room there is further on; half of it keeps any burst from
// overflowing it, so nothing is skipped.
func throughput(p *inproc, label string, n int, stall bool, phase time.Duration) (tpResult, error) {
	var res tpResult
	token, err := p.admin().addNode(label, "sim", simInfo)
	if err != nil {
		return res, err
	}
	auth := gossh.Password(token)
	var readers sync.WaitGroup
	defer readers.Wait() // after the sessions are closed
	vs, err := openViewers(n, 8, p.SSHAddr(), func(int) string { return label }, func(int) gossh.AuthMethod { return auth }, time.Minute)
	if err != nil {
		return res, err
	}
	defer closeViewers(vs)
	var staller *viewer
	if stall {
		if staller, err = openViewer(p.SSHAddr(), label, auth); err != nil {
			return res, err
		}
		defer staller.Close()
		if err := staller.waitStderr("console of", 10*time.Second); err != nil {
			return res, err
		}
	}
	bmc := p.Lab().BMC(label, sim.ModeNormal)

	counts := make([]atomic.Int64, n)
	targets := make([]atomic.Int64, n) // a viewer is done at this count
	doneAt := make([]atomic.Int64, n)  // UnixNano
	progress := make(chan struct{}, 1)
	markDone := func(i int) {
		if counts[i].Load() >= targets[i].Load() {
			doneAt[i].CompareAndSwap(0, time.Now().UnixNano())
		}
	}
	for i, v := range vs {
		targets[i].Store(1 << 62)
		r := v.out
		v.out = nil
		readers.Add(1)
		go func() { // ends when the session ends (closeViewers)
			defer readers.Done()
			buf := make([]byte, 32<<10)
			for {
				k, err := r.Read(buf)
				counts[i].Add(int64(k))
				markDone(i)
				select {
				case progress <- struct{}{}:
				default:
				}
				if err != nil {
					return
				}
			}
		}()
	}
	minCount := func(base []int64) int64 {
		m := int64(1 << 62)
		for i := range counts {
			m = min(m, counts[i].Load()-base[i])
		}
		return m
	}

	// The link is up once text reaches every viewer; counting starts there.
	zero := make([]int64, n)
	deadline := time.Now().Add(10 * time.Second)
	for minCount(zero) == 0 {
		if time.Now().After(deadline) {
			return res, fmt.Errorf("console link of %s not up", label)
		}
		bmc.Inject([]byte("ready\r\n"))
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(100 * time.Millisecond)
	base := make([]int64, n)
	for i := range counts {
		base[i] = counts[i].Load()
	}

	const window, chunkSize = 128 << 10, 16 << 10
	line := strings.Repeat("x", 78) + "\r\n"
	chunk := []byte(strings.Repeat(line, chunkSize/len(line)+1)[:chunkSize])
	start := time.Now()
	end := start.Add(phase)
	var injected int64
	for time.Now().Before(end) && injected < 1<<30 {
		if injected-minCount(base) > window {
			select {
			case <-progress:
			case <-time.After(100 * time.Millisecond):
			}
			continue
		}
		bmc.Inject(chunk)
		injected += chunkSize
	}
	for i := range targets {
		targets[i].Store(base[i] + injected)
		markDone(i)
	}
	finish := time.Now().Add(10 * time.Second)
	for minCount(base) < injected && time.Now().Before(finish) {
		select {
		case <-progress:
		case <-time.After(100 * time.Millisecond):
		}
	}
	res.bytes = injected
	for i := range counts {
		if got := counts[i].Load() - base[i]; got < injected {
			res.lost += injected - got
			continue
		}
		mbps := float64(injected) / 1e6 / time.Duration(doneAt[i].Load()-start.UnixNano()).Seconds()
		res.perViewer += mbps / float64(n)
		res.total += mbps
	}
	if staller != nil {
		res.stalledGot = drain(staller.out, time.Second)
	}
	if res.lost > 0 {
		var got []int64
		for i := range counts {
			got = append(got, counts[i].Load()-base[i])
		}
		return res, fmt.Errorf("%d bytes never reached the reading viewers (injected %d, got %v)", res.lost, injected, got)
	}
	return res, nil
}

// drain reads r until it has been idle for idle, and returns the bytes read.
func drain(r io.Reader, idle time.Duration) int64 {
	var n atomic.Int64
	go func() { // ends when the session is closed
		buf := make([]byte, 32<<10)
		for {
			k, err := r.Read(buf)
			n.Add(int64(k))
			if err != nil {
				return
			}
		}
	}()
	last := int64(-1)
	for n.Load() != last {
		last = n.Load()
		time.Sleep(idle)
	}
	return last
}

// bareThroughput streams volume bytes from bench/baressh and returns MB/s.
func bareThroughput(addr string, auth gossh.AuthMethod, volume int64) (float64, error) {
	c, err := dial(addr, "node", auth)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	s, err := c.NewSession()
	if err != nil {
		return 0, err
	}
	defer s.Close()
	out, err := s.StdoutPipe()
	if err != nil {
		return 0, err
	}
	start := time.Now()
	if err := s.Start(fmt.Sprintf("stream %d", volume)); err != nil {
		return 0, err
	}
	n, err := io.Copy(io.Discard, out)
	took := time.Since(start)
	if err != nil {
		return 0, err
	}
	if n != volume {
		return 0, fmt.Errorf("bare stream: got %d bytes, want %d", n, volume)
	}
	return float64(n) / 1e6 / took.Seconds(), nil
}

// startBareInproc serves bench/bare in this process on 127.0.0.1:0.
func startBareInproc(pass string) (addr string, stop func(), err error) {
	srv, err := bare.New(pass)
	if err != nil {
		return "", nil, err
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	done := make(chan struct{})
	go func() { // owned by stop
		srv.Serve(l)
		close(done)
	}()
	return l.Addr().String(), func() { srv.Close(); <-done }, nil
}

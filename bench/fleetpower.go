package main

import (
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	gossh "golang.org/x/crypto/ssh"
)

// fleetBurst is how many power operations section 7 starts at once.
func fleetBurst(cfg benchConfig) int {
	if cfg.quick {
		return 50
	}
	return 500
}

const (
	burstRounds = 3 // bursts per operation (the median is shown)
	burstAlone  = 5 // operations alone per operation (the median)
)

// burstFrom is the source address of client i: 127.0.1.1, 127.0.1.2, ...,
// a distinct one for each, none of them 127.0.0.1.
func burstFrom(i int) net.IP { return net.IPv4(127, 0, byte(1+i/250), byte(1+i%250)) }

// burstOp is one power operation of section 7 and what it answers.
type burstOp struct{ cmd, want string }

// burstResult is one operation's figures on one database.
type burstResult struct {
	alone, burst, serial time.Duration // medians; serial: one after another, the mean of before and after the bursts
	serialCPU            time.Duration // obmd's CPU per operation one after another
	drops                int           // SYNs dropped at full listen queues during the bursts (machine-wide)
	p50, p99             time.Duration // per-operation latency in the median burst
	serverCPU            time.Duration // obmd's CPU per operation, over the bursts
	clientCPU            time.Duration // the bench's, the same way
	ok, failed           int           // operations over every burst
	firstErr             error
}

// fleetPower adds the rows of n concurrent power operations on n sim nodes,
// each from its own address, on a fresh obmd at its default limits.
func fleetPower(cfg benchConfig, s *section, d fleetDB, n int) {
	measure := fmt.Sprintf("%d concurrent power operations on %s", n, d.name)
	dsn, drop, err := d.dsn()
	if err != nil {
		s.skip(measure, err)
		return
	}
	defer drop()
	dir, err := os.MkdirTemp(cfg.tmp, "burst-obmd-")
	if err != nil {
		s.skip(measure, err)
		return
	}
	o, err := startObmdProc(cfg.obmdBin, dir, dsn, obmdDefaults())
	if err != nil {
		s.skip(measure, err)
		return
	}
	defer o.Stop()
	label := func(i int) string { return fmt.Sprintf("burst-%03d", i) }
	tokens, err := registerSimNodes(fleetAdmin(o), label, n, n)
	if err != nil {
		s.skip(measure, err)
		return
	}
	op := func(i int, b burstOp) error {
		return execFrom(burstFrom(i), o.SSHAddr, label(i), gossh.Password(tokens[i]), b.cmd, b.want)
	}
	failed := false
	for _, b := range []burstOp{{"power-status", "power on"}, {"power-cycle", "power cycled"}} {
		cfg.logf("fleet: %d concurrent %s on %s", n, b.cmd, d.name)
		r, err := measureBurst(o.Pid(), n, func(i int) error { return op(i, b) })
		if err != nil {
			failed = true
			s.skip(fmt.Sprintf("%d concurrent %s on %s", n, b.cmd, d.name), err)
			continue
		}
		failed = failed || r.failed > 0
		addBurstRows(s, d.name, n, b.cmd, r)
	}
	refused, err := refusedLogins(o)
	if err != nil {
		s.note("%s: obmd's refusal counters could not be read: %v", d.name, err)
		return
	}
	s.add(row{Measure: fmt.Sprintf("connections obmd closed or refused before login, or logins it failed, over every burst (%s)", d.name),
		Figure: fmt.Sprint(refused.total), Ref: "-", Ratio: "-", Goal: "0", Status: verdict(refused.total == 0)})
	if refused.total > 0 {
		s.note("%s: obmd counted %s.", d.name, refused.detail)
	}
	if failed || refused.total > 0 {
		o.Stop() // its log complete
		s.note("%s: what obmd logged of the failures (first 3): %s", d.name, strings.Join(logLines(filepath.Join(dir, "obmd.log"),
			[]string{"epoch_check_failed", `"result":"error"`, `"result":"busy"`, "auth_denied", "auth_lookup_failed"}, 3), "; "))
	}
}

// addBurstRows writes one operation's rows.
func addBurstRows(s *section, dbName string, n int, cmd string, r burstResult) {
	s.add(row{Measure: fmt.Sprintf("%d concurrent `%s` from %d addresses on %d sim nodes, total time vs one alone (%s)", n, cmd, n, n, dbName),
		Figure: ms(r.burst), Ref: "one alone: " + ms(r.alone), Ratio: ratio(float64(r.burst), float64(r.alone)), Status: statusNone})
	s.add(row{Measure: fmt.Sprintf("the same %d `%s` at once vs one after another (%s)", n, cmd, dbName),
		Figure: ms(r.burst), Ref: "one after another: " + ms(r.serial), Ratio: ratio(float64(r.burst), float64(r.serial)),
		Goal: "< 1x", Status: verdict(r.burst < r.serial)})
	s.add(row{Measure: fmt.Sprintf("one `%s`'s latency inside the burst, p50 / p99, vs alone (%s)", cmd, dbName),
		Figure: ms(r.p50) + " / " + ms(r.p99), Ref: "alone: " + ms(r.alone), Ratio: ratio(float64(r.p99), float64(r.alone)), Status: statusNone})
	s.add(row{Measure: fmt.Sprintf("failed `%s` operations over %d bursts (%s)", cmd, burstRounds, dbName),
		Figure: fmt.Sprintf("%d of %d", r.failed, r.failed+r.ok), Ref: "-", Ratio: "-", Goal: "0", Status: verdict(r.failed == 0)})
	if r.failed > 0 {
		s.note("%s, `%s`: first failure: %v", dbName, cmd, r.firstErr)
	}
	s.add(row{Measure: fmt.Sprintf("obmd's CPU per `%s`, %d at once vs one after another (%s)", cmd, n, dbName),
		Figure: ms(r.serverCPU), Ref: "one after another: " + ms(r.serialCPU), Ratio: ratio(float64(r.serverCPU), float64(r.serialCPU)),
		Status: statusNone})
	s.note("%s, `%s`: the clients' CPU per operation in the bursts (this process, on the same 2 cores) %s: %d operations need about %s of CPU, %s on 2 cores, the floor of a burst on an idle machine. SYNs dropped at a full listen queue during the bursts (the machine's TcpExt ListenDrops): %d.",
		dbName, cmd, ms(r.clientCPU), n, ms(time.Duration(n)*(r.serverCPU+r.clientCPU)),
		ms(time.Duration(n)*(r.serverCPU+r.clientCPU)/2), r.drops)
}

// measureBurst times op(0) alone, op(0..n-1) one after another, then all
// at once (each goroutine dials when the burst starts), then one after
// another again (the reference is the mean of the two, so that the
// machine's drift weighs on both sides); pid's CPU is read around each.
func measureBurst(pid, n int, op func(int) error) (burstResult, error) {
	var r burstResult
	var alone []time.Duration
	for range burstAlone {
		t := time.Now()
		if err := op(0); err != nil {
			return r, fmt.Errorf("one alone: %w", err)
		}
		alone = append(alone, time.Since(t))
	}
	r.alone = median(alone)
	before, cpuBefore, err := serially(pid, n, op)
	if err != nil {
		return r, err
	}
	drops0 := listenDrops()
	var totals []time.Duration
	var lats [][]time.Duration
	cpu0, err := procCPU(pid)
	if err != nil {
		return r, err
	}
	self0, _ := procCPU(os.Getpid())
	for range burstRounds {
		total, lat, errs := burst(n, op)
		totals, lats = append(totals, total), append(lats, lat)
		for _, err := range errs {
			if err == nil {
				r.ok++
				continue
			}
			if r.failed++; r.firstErr == nil {
				r.firstErr = err
			}
		}
		time.Sleep(300 * time.Millisecond) // the burst's connections close
	}
	cpu1, err := procCPU(pid)
	if err != nil {
		return r, err
	}
	self1, _ := procCPU(os.Getpid())
	ops := time.Duration(burstRounds * n)
	r.serverCPU, r.clientCPU = (cpu1-cpu0)/ops, (self1-self0)/ops
	mid := slices.Index(totals, median(totals))
	r.burst = totals[mid]
	sorted := slices.Clone(lats[mid])
	slices.Sort(sorted)
	r.p50, r.p99 = sorted[len(sorted)/2], sorted[len(sorted)*99/100]
	r.drops = listenDrops() - drops0
	after, cpuAfter, err := serially(pid, n, op)
	if err != nil {
		return r, err
	}
	r.serial, r.serialCPU = (before+after)/2, (cpuBefore+cpuAfter)/2
	return r, nil
}

// serially runs op(0..n-1) one after another and returns the time they
// took and pid's CPU per operation.
func serially(pid, n int, op func(int) error) (time.Duration, time.Duration, error) {
	cpu0, err := procCPU(pid)
	if err != nil {
		return 0, 0, err
	}
	t := time.Now()
	for i := range n {
		if err := op(i); err != nil {
			return 0, 0, fmt.Errorf("one after another, operation %d: %w", i, err)
		}
	}
	took := time.Since(t)
	cpu1, err := procCPU(pid)
	return took, (cpu1 - cpu0) / time.Duration(n), err
}

// listenDrops is the machine's count of SYNs dropped because a listen
// queue was full (TcpExt ListenDrops in /proc/net/netstat; -1 unknown).
func listenDrops() int {
	data, err := os.ReadFile("/proc/net/netstat")
	if err != nil {
		return -1
	}
	var keys []string
	for _, l := range strings.Split(string(data), "\n") {
		f := strings.Fields(l)
		if len(f) == 0 || f[0] != "TcpExt:" {
			continue
		}
		if keys == nil {
			keys = f
			continue
		}
		for i, k := range keys {
			if k == "ListenDrops" && i < len(f) {
				var v int
				fmt.Sscan(f[i], &v)
				return v
			}
		}
	}
	return -1
}

// burst runs op(0..n-1) in n goroutines released together and returns the
// time until the last ended, each one's latency and error.
func burst(n int, op func(int) error) (time.Duration, []time.Duration, []error) {
	lat := make([]time.Duration, n)
	errs := make([]error, n)
	start := make(chan struct{})
	var ready, done sync.WaitGroup
	for i := range n {
		ready.Add(1)
		done.Add(1)
		go func() { // owned by burst
			defer done.Done()
			ready.Done()
			<-start
			t := time.Now()
			errs[i] = op(i)
			lat[i] = time.Since(t)
		}()
	}
	ready.Wait()
	t := time.Now()
	close(start)
	done.Wait()
	return time.Since(t), lat, errs
}

// refusals is what obmd counted against logins.
type refusals struct {
	total  int
	detail string
}

// refusedLogins reads o's counters of connections closed before login
// (displaced, refused, out of time) and of failed logins.
func refusedLogins(o *obmdProc) (refusals, error) {
	var r refusals
	res, err := o.http.Get("http://" + o.AdminAddr + "/metrics")
	if err != nil {
		return r, err
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	if err != nil {
		return r, err
	}
	var parts []string
	for _, line := range strings.Split(string(body), "\n") {
		name, v, ok := strings.Cut(line, " ")
		if !ok || strings.HasPrefix(line, "#") {
			continue
		}
		counted := strings.HasPrefix(name, "obmd_ssh_unauthenticated_closed_total") ||
			strings.HasPrefix(name, "obmd_auth_attempts_total") && !strings.Contains(name, `result="ok"`) &&
				!strings.Contains(name, "http-admin")
		var k int
		if _, err := fmt.Sscan(v, &k); !counted || err != nil || k == 0 {
			continue
		}
		r.total += k
		parts = append(parts, fmt.Sprintf("%s %d", name, k))
	}
	r.detail = strings.Join(parts, ", ")
	return r, nil
}

// logLines returns the first max lines of the file at path that contain
// one of subs.
func logLines(path string, subs []string, max int) []string {
	data, _ := os.ReadFile(path)
	var out []string
	for _, l := range strings.Split(string(data), "\n") {
		for _, sub := range subs {
			if strings.Contains(l, sub) && len(out) < max {
				out = append(out, "`"+strings.TrimSpace(l)+"`")
				break
			}
		}
	}
	return out
}

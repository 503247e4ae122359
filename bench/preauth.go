package main

import (
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	gossh "golang.org/x/crypto/ssh"
)

// preauthHeld is how many unauthenticated connections section 6 holds,
// preauthPerAddr how many from each attacker address (the default
// max_unauthenticated_per_source).
const preauthHeld, preauthPerAddr = 2000, 32

// preauthBench is section 6: the connection-rate load of section 1 on one
// obmd process, first alone, then while an attacker holds preauthHeld
// unauthenticated connections open from 127.0.0.2 onwards.
func preauthBench(cfg benchConfig) *section {
	s := &section{Title: fmt.Sprintf("6. Logins while %s unauthenticated connections are held open", "2,000")}
	measure := "logins/s (connect + auth + power-status + close, 8 clients) with 2,000 unauthenticated connections held vs none"
	if err := raiseNoFile(2*preauthHeld + 1000); err != nil {
		s.skip(measure, err)
		return s
	}
	dir, err := os.MkdirTemp(cfg.tmp, "preauth-obmd-")
	if err != nil {
		s.skip(measure, err)
		return s
	}
	// The global cap must hold them all: its default (1024) would have the
	// newest displace the oldest, which is what happens past it.
	o, err := startObmdProc(cfg.obmdBin, dir, "", map[string]any{"ssh.max_unauthenticated": 2 * preauthHeld})
	if err != nil {
		s.skip(measure, err)
		return s
	}
	defer o.Stop()
	const workers = 8
	tokens, err := o.admin().addSimNodes("pre", workers)
	if err != nil {
		s.skip(measure, err)
		return s
	}
	t := rateTarget{name: "obmd", pid: o.Pid(), addr: o.SSHAddr, workers: workers, warm: cfg.scale(time.Second),
		dur: cfg.scale(8 * time.Second), maxPerWork: 20000, cmd: "power-status", want: "power on",
		user: func(w int) string { return fmt.Sprintf("pre-%03d", w) },
		auth: func(w int) gossh.AuthMethod { return gossh.Password(tokens[w]) }}
	cfg.logf("pre-auth flood: logins alone")
	alone, err := measureRate(t)
	if err != nil {
		s.skip(measure, err)
		return s
	}
	cfg.logf("pre-auth flood: opening %d unauthenticated connections", preauthHeld)
	conns, err := holdUnauthenticated(o.SSHAddr, preauthHeld)
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	if err != nil {
		s.skip(measure, err)
		return s
	}
	if err := waitGauge(o, "obmd_ssh_unauthenticated", preauthHeld, 30*time.Second); err != nil {
		s.skip(measure, err)
		return s
	}
	cfg.logf("pre-auth flood: logins with %d held", preauthHeld)
	flooded, err := measureRate(t)
	if err != nil {
		s.skip(measure, err)
		return s
	}
	stillHeld, _ := gauge(o, "obmd_ssh_unauthenticated")
	for _, c := range conns {
		c.Close()
	}
	conns = nil
	cfg.logf("pre-auth flood: logins alone again")
	again, err := measureRate(t)
	if err != nil {
		s.skip(measure, err)
		return s
	}
	if flooded.errs > 0 {
		s.note("With the connections held, %d of %d logins failed; first error: %v", flooded.errs, flooded.errs+flooded.conns, flooded.firstErr)
	}
	ref := (alone.perSec + again.perSec) / 2
	refCPU := (alone.cpuPerConn + again.cpuPerConn) / 2
	s.add(row{Measure: measure, Figure: num(flooded.perSec, "logins/s"),
		Ref:   fmt.Sprintf("none held: %s (before %s, after %s)", num(ref, "logins/s"), num(alone.perSec, ""), num(again.perSec, "")),
		Ratio: ratio(flooded.perSec, ref), Goal: ">= 0.8x", Status: verdict(flooded.perSec >= 0.8*ref)})
	s.add(row{Measure: "server CPU per login, 2,000 held vs none", Figure: ms(flooded.cpuPerConn), Ref: "none held: " + ms(refCPU),
		Ratio: ratio(float64(flooded.cpuPerConn), float64(refCPU)), Status: statusNone})
	if kib, err := preauthRSS(cfg); err != nil {
		s.skip("RSS per held unauthenticated connection", err)
	} else {
		s.add(row{Measure: "RSS per held unauthenticated connection (fresh process)", Figure: num(kib, "KiB"),
			Ref: "-", Ratio: "-", Status: statusNone})
	}
	s.note("One obmd process on SQLite with the defaults but ssh.max_unauthenticated raised to %d (the default, 1024, would have each new connection displace the oldest: at the cap the flood only replaces itself). The attacker's %d connections come %d per address (the default ssh.max_unauthenticated_per_source) from 127.0.0.2 to 127.0.0.%d; each sends nothing after connecting, so it sits in the version exchange until ssh.login_grace_time (30 s). obmd counted %.0f unauthenticated connections after the loaded phase.",
		2*preauthHeld, preauthHeld, preauthPerAddr, 1+(preauthHeld+preauthPerAddr-1)/preauthPerAddr, stillHeld)
	s.note("The logins are section 1's loop (8 x/crypto clients from 127.0.0.1, %v each phase, after %v of warm-up) on the same process: alone, with the connections held, and alone again once they are closed; the reference is the mean of the two phases alone, so drift of the shared machine weighs on both sides. The gap between those two shows how much the machine drifted during the run; the server's CPU per login is the steadier comparison.", t.dur, t.warm)
	return s
}

// preauthRSS is (VmRSS with preauthHeld unauthenticated connections -
// VmRSS before) / preauthHeld of a fresh obmd process, in KiB: after a
// load, freed memory the runtime keeps would hide the growth.
func preauthRSS(cfg benchConfig) (float64, error) {
	dir, err := os.MkdirTemp(cfg.tmp, "preauth-rss-")
	if err != nil {
		return 0, err
	}
	o, err := startObmdProc(cfg.obmdBin, dir, "", map[string]any{"ssh.max_unauthenticated": 2 * preauthHeld})
	if err != nil {
		return 0, err
	}
	defer o.Stop()
	before, err := settledRSS(o.Pid(), 5*time.Second)
	if err != nil {
		return 0, err
	}
	conns, err := holdUnauthenticated(o.SSHAddr, preauthHeld)
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	if err != nil {
		return 0, err
	}
	if err := waitGauge(o, "obmd_ssh_unauthenticated", preauthHeld, 30*time.Second); err != nil {
		return 0, err
	}
	after, err := settledRSS(o.Pid(), 5*time.Second)
	if err != nil {
		return 0, err
	}
	return float64(after-before) / preauthHeld, nil
}

// holdUnauthenticated opens n connections to addr, preauthPerAddr from
// each of 127.0.0.2, 127.0.0.3, ..., and reads nothing from them.
func holdUnauthenticated(addr string, n int) ([]net.Conn, error) {
	var conns []net.Conn
	for i := range n {
		ip := net.IPv4(127, 0, byte((2+i/preauthPerAddr)/256), byte((2+i/preauthPerAddr)%256))
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: ip}, Timeout: 10 * time.Second}
		c, err := d.Dial("tcp", addr)
		if err != nil {
			return conns, fmt.Errorf("connection %d from %s: %w", i, ip, err)
		}
		conns = append(conns, c)
	}
	return conns, nil
}

// raiseNoFile raises this process's soft limit on open files to at least
// n (its children, obmd, inherit it), or says why it cannot.
func raiseNoFile(n uint64) error {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return err
	}
	if lim.Cur >= n {
		return nil
	}
	if lim.Max < n {
		return notMeasured("the open-file limit is %d, below the %d this needs (ulimit -Hn)", lim.Max, n)
	}
	lim.Cur = lim.Max
	return syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim)
}

// gauge reads one sample of o's /metrics.
func gauge(o *obmdProc, series string) (float64, error) {
	res, err := o.http.Get("http://" + o.AdminAddr + "/metrics")
	if err != nil {
		return 0, err
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(body), "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			return strconv.ParseFloat(v, 64)
		}
	}
	return 0, fmt.Errorf("no %s in /metrics", series)
}

// waitGauge waits until o's gauge reaches want.
func waitGauge(o *obmdProc, series string, want float64, max time.Duration) error {
	deadline := time.Now().Add(max)
	for {
		v, err := gauge(o, series)
		if err == nil && v >= want {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: %v after %v, want %v (%v)", series, v, max, want, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

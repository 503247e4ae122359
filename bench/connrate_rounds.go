package main

import (
	"fmt"
	"os"

	gossh "golang.org/x/crypto/ssh"
)

// rateRounds is how many slices section 1 cuts each target's measured
// phase into. The targets take turns, slice by slice, so that a load that
// drifts during the run (a shared machine) falls on all of them alike and
// their ratios hold; one after the other, a ratio showed mostly which
// target met the quieter minutes.
const rateRounds = 4

// rateSetup is one target of section 1: start brings its server up (and
// returns what stops it).
type rateSetup struct {
	name  string
	start func() (rateTarget, func(), error)
}

// rateSetups lists section 1's targets: the bare server, obmd on SQLite,
// on MariaDB and on PostgreSQL (and the -baseline binary on the first two),
// and sshd.
func rateSetups(cfg benchConfig, base rateTarget) []rateSetup {
	// scratch: a database of its own (nil: SQLite), and the server's
	// processes.
	obmdOn := func(bin string, scratch func() (string, func(), error), server func() *dbServer) func() (rateTarget, func(), error) {
		return func() (rateTarget, func(), error) {
			dsn, drop := "", func() {}
			if scratch != nil {
				var err error
				if dsn, drop, err = scratch(); err != nil {
					return rateTarget{}, nil, err
				}
			}
			t, stop, err := startRateObmd(cfg, base, bin, dsn)
			if err != nil {
				drop()
				return rateTarget{}, nil, err
			}
			if server != nil {
				t.db = server()
			}
			return t, func() { stop(); drop() }, nil
		}
	}
	setups := []rateSetup{{"bare", func() (rateTarget, func(), error) {
		pass, _ := randomHex(16)
		c, addr, err := startBare(cfg, pass)
		if err != nil {
			return rateTarget{}, nil, err
		}
		t := base
		t.name, t.pid, t.addr = "bare gliderlabs/ssh", c.Pid(), addr
		t.user = func(int) string { return "node" }
		t.auth = func(int) gossh.AuthMethod { return gossh.Password(pass) }
		return t, func() { c.Stop() }, nil
	}}, {"obmd-sqlite", obmdOn(cfg.obmdBin, nil, nil)}}
	if cfg.baseline != "" {
		setups = append(setups, rateSetup{"baseline-sqlite", obmdOn(cfg.baseline, nil, nil)})
	}
	setups = append(setups, rateSetup{"obmd-mysql", obmdOn(cfg.obmdBin, scratchMySQL, localMariaDB)})
	if cfg.baseline != "" {
		setups = append(setups, rateSetup{"baseline-mysql", obmdOn(cfg.baseline, scratchMySQL, localMariaDB)})
	}
	setups = append(setups, rateSetup{"obmd-postgres", obmdOn(cfg.obmdBin, scratchPostgres, localPostgres)})
	return append(setups, rateSetup{"sshd", func() (rateTarget, func(), error) {
		dir, err := os.MkdirTemp(cfg.tmp, "sshd-")
		if err != nil {
			return rateTarget{}, nil, err
		}
		d, err := startSSHD(dir)
		if err != nil {
			return rateTarget{}, nil, err
		}
		t := base
		t.name, t.pid, t.addr = "OpenSSH sshd + ForceCommand", d.Pid(), d.Addr
		t.user = func(int) string { return d.User }
		t.auth = func(int) gossh.AuthMethod { return gossh.PublicKeys(d.Signer) }
		return t, func() { d.Stop() }, nil
	}})
}

// startRateObmd starts obmd binary bin at its defaults on dsn ("":
// SQLite) with one sim node per worker.
func startRateObmd(cfg benchConfig, base rateTarget, bin, dsn string) (rateTarget, func(), error) {
	dir, err := os.MkdirTemp(cfg.tmp, "rate-obmd-")
	if err != nil {
		return rateTarget{}, nil, err
	}
	o, err := startObmdProc(bin, dir, dsn, obmdDefaults())
	if err != nil {
		return rateTarget{}, nil, err
	}
	tokens, err := o.admin().addSimNodes("rate", base.workers)
	if err != nil {
		o.Stop()
		return rateTarget{}, nil, err
	}
	t := base
	t.name, t.pid, t.addr = "obmd", o.Pid(), o.SSHAddr
	t.user = func(w int) string { return fmt.Sprintf("rate-%03d", w) }
	t.auth = func(w int) gossh.AuthMethod { return gossh.Password(tokens[w]) }
	return t, func() { o.Stop() }, nil
}

// measureRates starts every target, then measures them in turn (each
// round in an order rotated by one), rateRounds slices of
// base.dur/rateRounds each (the first after base.warm of warm-up, the
// others after a quarter of it), and stops them. It returns each target's
// sums over its slices, and the targets that could not be measured, with
// why.
func measureRates(cfg benchConfig, s *section, setups []rateSetup) (map[string]rateResult, map[string]error) {
	results, errs := map[string]rateResult{}, map[string]error{}
	var live []rateSetup
	targets := map[string]rateTarget{}
	for _, st := range setups {
		cfg.logf("connection rate: starting %s", st.name)
		t, stop, err := st.start()
		if err != nil {
			errs[st.name] = err
			cfg.logf("connection rate: %s: %v", st.name, err)
			continue
		}
		defer stop()
		live = append(live, st)
		targets[st.name] = t
	}
	for round := range rateRounds {
		// Each round starts one server further along, so that none is
		// always measured right after the same other (the socket churn of
		// a fast one before it weighs on it).
		for k := range live {
			st := live[(k+round)%len(live)]
			if _, failed := errs[st.name]; failed {
				continue
			}
			t := targets[st.name]
			t.dur = t.dur / rateRounds
			if round > 0 {
				t.warm /= 4
			}
			r, err := measureRate(t)
			if err != nil {
				errs[st.name] = err
				delete(results, st.name)
				cfg.logf("connection rate: %s: %v", st.name, err)
				continue
			}
			sum := results[st.name]
			sum.merge(r)
			results[st.name] = sum
		}
	}
	for _, st := range live {
		name := st.name
		r, ok := results[name]
		if !ok {
			continue
		}
		if r.errs > 0 {
			s.note("%s: %d of %d connections failed; first error: %v", name, r.errs, r.errs+r.conns, r.firstErr)
		}
		cfg.logf("connection rate: %s: %.0f conn/s, server %v, clients %v CPU/conn", name, r.perSec, r.cpuPerConn, r.clientCPU)
	}
	return results, errs
}

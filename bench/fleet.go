package main

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"time"

	"github.com/sirupsen/logrus"
	gossh "golang.org/x/crypto/ssh"

	"github.com/obmd/obmd/db"
)

// fleetDB is a database section 7 runs on: dsn makes a fresh one (""
// for SQLite in the state directory) and a func that drops it.
type fleetDB struct {
	name string
	dsn  func() (string, func(), error)
}

// fleetDBs are SQLite, MariaDB when OBMD_TEST_MYSQL_DSN is set, and
// PostgreSQL when OBMD_TEST_POSTGRES_DSN is.
func fleetDBs() []fleetDB {
	return []fleetDB{
		{"SQLite", func() (string, func(), error) { return "", func() {}, nil }},
		{"MariaDB", scratchMySQL},
		{"PostgreSQL", scratchPostgres},
	}
}

// fleetBench is section 7: one obmd replica with a large fleet registered
// against the same with a small one, then many concurrent power operations
// from as many addresses.
func fleetBench(cfg benchConfig) *section {
	small, large := fleetSizes(cfg)
	burst := fleetBurst(cfg)
	s := &section{Title: fmt.Sprintf("7. Fleet scale: %s registered nodes vs %d, and %d concurrent power operations from %d addresses",
		thousands(large), small, burst, burst)}
	if err := raiseNoFile(4*uint64(burst) + 1000); err != nil {
		s.skip("fleet scale", err)
		return s
	}
	for _, d := range fleetDBs() {
		fleetScale(cfg, s, d, small, large)
		fleetPower(cfg, s, d, burst)
	}
	s.note("Nodes are registered through the admin API (`PUT /node/{label}` with a sim node's info, %d requests at a time over kept-alive connections, one token rotated for the login below), then obmd is stopped and started again %d times on that database; every figure but the registration is of a restarted process. `sim` nodes are captured only while someone is attached (the default for that type), so none holds a console link; `ipmi` and `ipmitool` nodes are captured always by default and would each hold one (section 2: RSS per captured node).", fleetWorkers, fleetStarts)
	s.note("Start-up: from the exec of `obmd serve` until it logs obmd_listening (database opened and migrated, every part built, right before it serves), and until the first SSH login (x/crypto, token, `power-status` on one node, dialed once obmd_listening is seen) has its answer; median of %d starts. `GET /v1/nodes`: the whole JSON answer read by the client, median of %d. HIL's own driver has no node-listing route in obmd's API (it keeps its list itself), so there is no second listing to time.", fleetStarts, fleetLists)
	s.note("Idle: obmd restarted with the fleet, after %v of rest: server CPU (utime+stime from /proc) over %v with no client, per second; it is the work obmd does every `access.poll` (1 s): the access-change poll (`ChangesSince`, an index range read of changes newer than the last seen) and the capture poll (`Captures`, which nodes to hold open), plus timers. The two queries are also timed one by one (median of %d) from the bench process through db.Store on the same database once obmd has stopped (SQLite's unix-excl VFS lets one process open the file). RSS: VmRSS at rest after the start, settled.", fleetRest, fleetIdle(cfg), fleetQueries)
	s.note("Power bursts: a fresh obmd at its defaults (auth_limits, ssh.max_conns_per_source 64, ssh.max_unauthenticated from the open-file limit, session limits) with %d sim nodes, each with a token; every operation is a whole x/crypto connection (connect, token auth, the command, close) from its own address (127.0.1.1 to 127.0.%d.%d: %d hosts, as obmd sees them), %d bursts released at once (the median shown; latencies of that burst), against one alone (median of %d) and the %d one after another before and after the bursts (their mean). The clients run in this process on the same 2 cores, so a burst's floor is its CPU (obmd's and the clients') over 2 cores.",
		burst, 1+(burst-1)/250, 1+(burst-1)%250, burst, burstRounds, burstAlone, burst)
	s.note("Ratios are the %s-node figure over the %d-node one, measured one after the other in this run: %dx is linear growth; a start-up, poll or RSS ratio near 1x means the cost does not depend on the fleet's size.", thousands(large), small, large/small)
	return s
}

const (
	fleetWorkers = 16 // concurrent registrations
	fleetStarts  = 3  // restarts timed
	fleetLists   = 5  // listings timed
	fleetQueries = 20 // per-tick queries timed
	fleetRest    = 2 * time.Second
)

func fleetSizes(cfg benchConfig) (small, large int) {
	if cfg.quick {
		return 100, 1000
	}
	return 100, 10000
}

func fleetIdle(cfg benchConfig) time.Duration { return cfg.scale(16 * time.Second) }

// fleetFigures is what one fleet size cost.
type fleetFigures struct {
	n          int
	register   time.Duration // registering all n
	listening  time.Duration // exec until obmd_listening (median)
	firstLogin time.Duration // exec until the first login's answer (median)
	list       time.Duration // GET /v1/nodes (median)
	listBytes  int
	idleCPU    time.Duration // server CPU per second at rest
	rss        int64         // KiB at rest
	changesQ   time.Duration // ChangesSince (median)
	capturesQ  time.Duration // Captures at the defaults (median)
	everyQ     time.Duration // Captures of every node (median)
}

// fleetScale adds the rows of the large fleet against the small one on d.
func fleetScale(cfg benchConfig, s *section, d fleetDB, small, large int) {
	measure := fmt.Sprintf("%s nodes vs %d on %s", thousands(large), small, d.name)
	var figs [2]fleetFigures
	for i, n := range []int{small, large} {
		dsn, drop, err := d.dsn()
		if err != nil {
			s.skip(measure, err)
			return
		}
		cfg.logf("fleet: %d nodes on %s", n, d.name)
		figs[i], err = measureFleet(cfg, dsn, n)
		drop()
		if err != nil {
			s.skip(measure, err)
			return
		}
	}
	sm, lg := figs[0], figs[1]
	linear := fmt.Sprintf("<= %dx (linear)", large/small)
	grow := func(what string, big, ref float64, fig, refFig string) {
		s.add(row{Measure: fmt.Sprintf("%s, %s nodes vs %d (%s)", what, thousands(large), small, d.name),
			Figure: fig, Ref: fmt.Sprintf("%d nodes: %s", small, refFig), Ratio: ratio(big, ref),
			Goal: linear, Status: verdict(big <= ref*float64(large/small))})
	}
	dur := func(what string, big, ref time.Duration) { grow(what, float64(big), float64(ref), ms(big), ms(ref)) }
	dur("registering every node (admin API, 16 at a time)", lg.register, sm.register)
	dur("start-up: exec until obmd_listening", lg.listening, sm.listening)
	dur("start-up: exec until the first login's power-status answered", lg.firstLogin, sm.firstLogin)
	grow("`GET /v1/nodes`, the whole listing", float64(lg.list), float64(sm.list),
		fmt.Sprintf("%s (%s)", ms(lg.list), num(float64(lg.listBytes)/1024, "KiB")),
		fmt.Sprintf("%s (%s)", ms(sm.list), num(float64(sm.listBytes)/1024, "KiB")))
	grow("idle server CPU per second (access-change and capture polls)", float64(lg.idleCPU), float64(sm.idleCPU),
		ms(lg.idleCPU)+"/s", ms(sm.idleCPU)+"/s")
	dur("access-change poll query (`ChangesSince`, nothing new)", lg.changesQ, sm.changesQ)
	dur("capture poll query (`Captures`) at the defaults: no sim node read", lg.capturesQ, sm.capturesQ)
	dur("the same query reading every node (obmd's before 31cb27a; under `console_capture: always`)", lg.everyQ, sm.everyQ)
	grow("RSS at rest after start", float64(lg.rss), float64(sm.rss),
		num(float64(lg.rss)/1024, "MiB"), num(float64(sm.rss)/1024, "MiB"))
}

// measureFleet registers n sim nodes on a fresh obmd with database dsn,
// then restarts obmd on it and takes the figures of fleetFigures.
func measureFleet(cfg benchConfig, dsn string, n int) (fleetFigures, error) {
	f := fleetFigures{n: n}
	dir, err := os.MkdirTemp(cfg.tmp, "fleet-obmd-")
	if err != nil {
		return f, err
	}
	o, err := startObmdProc(cfg.obmdBin, dir, dsn, nil)
	if err != nil {
		return f, err
	}
	t := time.Now()
	tokens, err := registerSimNodes(fleetAdmin(o), fleetLabel, n, 1)
	f.register = time.Since(t)
	o.Stop()
	if err != nil {
		return f, err
	}
	var listening, login []time.Duration
	for i := range fleetStarts {
		t := time.Now()
		if o, err = startObmdProc(cfg.obmdBin, dir, dsn, nil); err != nil {
			return f, err
		}
		listening = append(listening, time.Since(t))
		err = execOnce(o.SSHAddr, fleetLabel(0), gossh.Password(tokens[0]), "power-status", "power on")
		login = append(login, time.Since(t))
		if err == nil && i == fleetStarts-1 {
			err = fleetRestFigures(cfg, o, &f)
		}
		o.Stop()
		if err != nil {
			return f, err
		}
	}
	f.listening, f.firstLogin = median(listening), median(login)
	if dsn == "" {
		dsn = filepath.Join(dir, "state", "obmd.db")
	}
	f.changesQ, f.capturesQ, f.everyQ, err = pollQueries(dsn, n)
	return f, err
}

// fleetLabel is node i's label in section 7.
func fleetLabel(i int) string { return fmt.Sprintf("fleet-%05d", i) }

// fleetAdmin is an admin client of o that keeps fleetWorkers connections.
func fleetAdmin(o *obmdProc) admin {
	tr := &http.Transport{MaxIdleConnsPerHost: fleetWorkers}
	return admin{o.AdminAddr, o.AdminToken, &http.Client{Timeout: 60 * time.Second, Transport: tr}}
}

// fleetRestFigures takes the idle CPU and RSS of a freshly started o, then
// times its node listing.
func fleetRestFigures(cfg benchConfig, o *obmdProc, f *fleetFigures) error {
	time.Sleep(fleetRest)
	rss, err := settledRSS(o.Pid(), 5*time.Second)
	if err != nil {
		return err
	}
	f.rss = rss
	idle := fleetIdle(cfg)
	cpu0, err := procCPU(o.Pid())
	if err != nil {
		return err
	}
	time.Sleep(idle)
	cpu1, err := procCPU(o.Pid())
	if err != nil {
		return err
	}
	f.idleCPU = time.Duration(float64(cpu1-cpu0) / idle.Seconds())
	a := fleetAdmin(o)
	var lists []time.Duration
	for range fleetLists {
		var out struct {
			Nodes []struct{ Label string }
		}
		t := time.Now()
		size, err := a.callSized("GET", "/v1/nodes", nil, &out)
		lists = append(lists, time.Since(t))
		if err != nil {
			return err
		}
		if len(out.Nodes) != f.n {
			return fmt.Errorf("GET /v1/nodes listed %d nodes, want %d", len(out.Nodes), f.n)
		}
		f.listBytes = size
	}
	f.list = median(lists)
	return nil
}

// pollQueries times the two queries obmd runs every access.poll, through
// db.Store on dsn (obmd stopped): ChangesSince with nothing newer, and
// Captures as obmd asks at its defaults (captured always: set so, or
// unset of type ipmi or ipmitool, as bastion/daemon's captureCandidates),
// which must list none of the n sim nodes, and Captures of every node that
// sets none (what obmd read before issue 18, and what it reads with
// console_capture: always).
func pollQueries(dsn string, n int) (changes, captures, every time.Duration, err error) {
	log := logrus.New()
	log.SetOutput(os.Stderr)
	log.SetLevel(logrus.WarnLevel)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	st, err := db.Open(ctx, dsn, log)
	if err != nil {
		return 0, 0, 0, err
	}
	defer st.Close()
	latest, err := st.LatestChange(ctx)
	if err != nil {
		return 0, 0, 0, err
	}
	timed := func(f func() (int, error)) ([]time.Duration, error) {
		var ds []time.Duration
		for range fleetQueries {
			t := time.Now()
			if _, err := f(); err != nil {
				return nil, err
			}
			ds = append(ds, time.Since(t))
		}
		return ds, nil
	}
	listed := func(c db.CaptureCandidates, want int) func() (int, error) {
		return func() (int, error) {
			caps, err := st.Captures(ctx, c)
			if err == nil && len(caps) != want {
				err = fmt.Errorf("Captures(%+v) listed %d nodes, want %d", c, len(caps), want)
			}
			return len(caps), err
		}
	}
	ch, err := timed(func() (int, error) {
		c, err := st.ChangesSince(ctx, latest, db.MaxLimit)
		return len(c), err
	})
	if err != nil {
		return 0, 0, 0, err
	}
	ca, err := timed(listed(db.CaptureCandidates{UnsetTypes: []string{"ipmi", "ipmitool"}}, 0))
	if err != nil {
		return 0, 0, 0, err
	}
	all, err := timed(listed(db.CaptureCandidates{Unset: true}, n))
	if err != nil {
		return 0, 0, 0, err
	}
	return median(ch), median(ca), median(all), nil
}

// registerSimNodes registers n sim nodes labelled label(0..n-1) through
// a, fleetWorkers at a time, and rotates a token for the first withToken
// of them (returned in order).
func registerSimNodes(a admin, label func(int) string, n, withToken int) ([]string, error) {
	tokens := make([]string, withToken)
	err := forEach(n, fleetWorkers, time.Time{}, func(i int) error {
		var err error
		if i < withToken {
			tokens[i], err = a.addNode(label(i), "sim", simInfo)
		} else {
			err = a.call("PUT", "/node/"+url.PathEscape(label(i)), map[string]any{"type": "sim", "info": simInfo}, nil)
		}
		if err != nil {
			return fmt.Errorf("register node %d: %w", i, err)
		}
		return nil
	})
	return tokens, err
}

// thousands writes n with a comma every three digits.
func thousands(n int) string {
	s := fmt.Sprint(n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

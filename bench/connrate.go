package main

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-sql-driver/mysql"
	gossh "golang.org/x/crypto/ssh"
)

// rateTarget is one server under the connection-rate load.
type rateTarget struct {
	name       string
	pid        int       // the server process whose CPU is counted
	db         *dbServer // a database server whose CPU is reported apart (nil: none)
	addr       string
	user       func(worker int) string
	auth       func(worker int) gossh.AuthMethod
	cmd, want  string
	workers    int
	warm, dur  time.Duration
	maxPerWork int // bound on connections per worker in the measured phase
}

// rateResult is what one target sustained.
type rateResult struct {
	conns, errs int
	perSec      float64
	cpuPerConn  time.Duration
	clientCPU   time.Duration // the bench's own CPU per connection (all clients)
	dbCPU       time.Duration // the database server's CPU per connection, if db was set
	dbName      string        // its process name (mariadbd, postgres)
	firstErr    error
	// The sums the figures above are made of (merge adds them up).
	took, server, self, db time.Duration
}

// merge adds o, another slice of the same target's load, to r.
func (r *rateResult) merge(o rateResult) {
	r.conns += o.conns
	r.errs += o.errs
	r.took += o.took
	r.server += o.server
	r.self += o.self
	r.db += o.db
	if r.dbName == "" {
		r.dbName = o.dbName
	}
	if r.firstErr == nil {
		r.firstErr = o.firstErr
	}
	if r.conns > 0 {
		n := time.Duration(r.conns)
		r.perSec = float64(r.conns) / r.took.Seconds()
		r.cpuPerConn, r.clientCPU, r.dbCPU = r.server/n, r.self/n, r.db/n
	}
}

// measureRate runs t.workers clients, each connecting, authenticating,
// running t.cmd and closing in a loop: first for t.warm (not counted), then
// for t.dur (bounded by maxPerWork too). Server CPU is read before and after
// the measured phase.
func measureRate(t rateTarget) (rateResult, error) {
	var res rateResult
	loop := func(phase time.Duration, max int, count bool) time.Duration {
		var ok, bad atomic.Int64
		var errOnce sync.Once
		var wg sync.WaitGroup
		start := time.Now()
		deadline := start.Add(phase)
		for w := range t.workers {
			wg.Add(1)
			go func() { // owned by loop
				defer wg.Done()
				for i := 0; i < max && time.Now().Before(deadline); i++ {
					if err := execOnce(t.addr, t.user(w), t.auth(w), t.cmd, t.want); err != nil {
						bad.Add(1)
						errOnce.Do(func() { res.firstErr = err })
						continue
					}
					ok.Add(1)
				}
			}()
		}
		wg.Wait()
		if count {
			res.conns, res.errs = int(ok.Load()), int(bad.Load())
		}
		return time.Since(start)
	}
	loop(t.warm, 1<<30, false)
	res.firstErr = nil
	time.Sleep(300 * time.Millisecond) // let the warm-up's connections close
	cpu0, err := procCPU(t.pid)
	if err != nil {
		return res, err
	}
	self0, _ := procCPU(os.Getpid())
	var db0, db1 time.Duration
	if t.db != nil {
		db0, _ = t.db.cpu()
	}
	took := loop(t.dur, t.maxPerWork, true)
	self1, _ := procCPU(os.Getpid())
	if t.db != nil {
		db1, _ = t.db.cpu()
	}
	time.Sleep(500 * time.Millisecond) // sshd: connection processes exit and are reaped
	cpu1, err := procCPU(t.pid)
	if err != nil {
		return res, err
	}
	if res.conns == 0 {
		return res, fmt.Errorf("%s: no connection succeeded: %v", t.name, res.firstErr)
	}
	sum := rateResult{dbName: t.db.String()}
	sum.merge(rateResult{conns: res.conns, errs: res.errs, firstErr: res.firstErr,
		took: took, server: cpu1 - cpu0, self: self1 - self0, db: db1 - db0})
	return sum, nil
}

// obmdDefaults puts back the limits startObmdProc raises: section 1 runs
// obmd as it is configured out of the box.
func obmdDefaults() map[string]any {
	return map[string]any{"auth_limits": map[string]any{}, "ssh.max_conns_per_source": 0,
		"sessions.max_per_node": 0, "sessions.max_per_source": 0}
}

// connRate is section 1.
func connRate(cfg benchConfig) *section {
	s := &section{Title: "1. Connection rate: connect + auth + power-status + close, 8 concurrent clients"}
	const workers = 8
	base := rateTarget{workers: workers, warm: cfg.scale(time.Second), dur: cfg.scale(8 * time.Second), maxPerWork: 20000,
		cmd: "power-status", want: "power on"}

	results, errs := measureRates(cfg, s, rateSetups(cfg, base))
	bare, haveBare := results["bare"]
	sshd, haveSSHD := results["sshd"]
	// Issue 18's goals: 0.8x the bare server on SQLite, 0.7x on MariaDB
	// and PostgreSQL (whose servers share the cores).
	for _, e := range []struct {
		key, label string
		goal       float64
	}{{"obmd-sqlite", "SQLite", 0.8}, {"obmd-mysql", "MariaDB", 0.7}, {"obmd-postgres", "PostgreSQL", 0.7},
		{"baseline-sqlite", "SQLite, -baseline binary,", 0.8}, {"baseline-mysql", "MariaDB, -baseline binary,", 0.7}} {
		if _, ok := errs[e.key]; !ok && strings.HasPrefix(e.key, "baseline") && cfg.baseline == "" {
			continue
		}
		r, ok := results[e.key]
		rateName := fmt.Sprintf("conn/s, token auth on %s", e.label)
		cpuName := fmt.Sprintf("server CPU per connection, %s", e.label)
		if !ok {
			s.skip(rateName, errs[e.key])
			continue
		}
		if haveBare {
			s.add(row{Measure: rateName + " vs bare gliderlabs/ssh", Figure: num(r.perSec, "conn/s"),
				Ref: "bare: " + num(bare.perSec, "conn/s"), Ratio: ratio(r.perSec, bare.perSec),
				Goal: fmt.Sprintf(">= %.1fx", e.goal), Status: verdict(r.perSec >= e.goal*bare.perSec)})
		} else {
			s.skip(rateName+" vs bare gliderlabs/ssh", errs["bare"])
		}
		if haveSSHD {
			s.add(row{Measure: rateName + " vs OpenSSH + ForceCommand", Figure: num(r.perSec, "conn/s"),
				Ref: "sshd: " + num(sshd.perSec, "conn/s"), Ratio: ratio(r.perSec, sshd.perSec),
				Goal: ">= 20x", Status: verdict(r.perSec >= 20*sshd.perSec)})
		} else {
			s.skip(rateName+" vs OpenSSH + ForceCommand", errs["sshd"])
		}
		fig := ms(r.cpuPerConn)
		if r.dbCPU > 0 {
			fig += fmt.Sprintf(" (+ %s in %s)", ms(r.dbCPU), r.dbName)
		}
		if haveBare {
			s.add(row{Measure: cpuName + " vs bare", Figure: fig, Ref: "bare: " + ms(bare.cpuPerConn),
				Ratio: ratio(float64(r.cpuPerConn), float64(bare.cpuPerConn)), Status: statusNone})
		}
		if haveSSHD {
			s.add(row{Measure: cpuName + " vs sshd", Figure: fig, Ref: "sshd: " + ms(sshd.cpuPerConn),
				Ratio: ratio(float64(r.cpuPerConn), float64(sshd.cpuPerConn)), Status: statusNone})
		}
	}
	if r, ok := results["obmd-sqlite"]; ok && haveBare && r.perSec < 0.8*bare.perSec {
		s.note("Why obmd is below 0.8x the bare server: both do the same SSH handshake (%s vs %s of client CPU per connection; the clients, on the same 2 cores, cap conn/s), but obmd's server CPU per connection is %s to the bare server's %s. The difference is what a bastion does and a bare server does not: per connection obmd reads the node's token hash and access epoch (one prepared query; the epoch is read again before the session starts only if this obmd cut a session since the login's read, and the node's driver info is kept per access epoch), registers and admits the session, and queues four audit rows (auth, session.start, power.status, session.end) that one goroutine group-commits within 50 ms in a few multi-row INSERTs; it also sets TCP_QUICKACK after every read (OpenSSH's handshake stalls on delayed ACKs). See \"Connection rate: where the time goes\" above for the profile.",
			ms(r.clientCPU), ms(bare.clientCPU), ms(r.cpuPerConn), ms(bare.cpuPerConn))
	}
	s.note("obmd runs at its defaults here (auth_limits: 5 token tries per source, tries in flight counted; ssh.max_conns_per_source 64; session limits), and every client comes from 127.0.0.1: parallel automation behind one address. A refused login would show as a failed connection above.")
	s.note("Each client is golang.org/x/crypto/ssh in the bench process; every server is a separate process whose CPU (utime+stime, plus reaped children for sshd) is read from /proc before and after each of its slices (every server is up for the whole section; they take turns in 4 slices of 2 s, so that load drifting on a shared machine falls on all alike). Clients share the 2 cores with the server, so conn/s is bounded by client+server CPU; CPU per connection is the server's own cost.")
	s.note("Every client offers only the curve25519-sha256 key exchange (what OpenSSH 9.2 and x/crypto share), so every server does the same handshake work. The database server's own CPU (mariadbd, found in /proc; PostgreSQL's postmaster and every process it forked, a backend per connection; shared with anything else using that server) is shown apart.")
	s.note("obmd and the bare server use password auth (obmd: the node token, checked against the database); sshd uses an ed25519 key (it has no token store), runs as the current user with UsePAM no, and its ForceCommand script prints a fixed power status (a real wrapper would also run ipmitool, ~70 ms more).")
	return s
}

func ms(d time.Duration) string { return num(float64(d)/float64(time.Millisecond), "ms") }

// startBare runs bench/baressh with password pass (in its environment).
func startBare(cfg benchConfig, pass string) (*child, string, error) {
	dir, err := os.MkdirTemp(cfg.tmp, "bare-")
	if err != nil {
		return nil, "", err
	}
	var addr string
	cmd := exec.Command(cfg.bareBin)
	cmd.Env = append(os.Environ(), "BARESSH_PASSWORD="+pass)
	c, err := startChild(cmd, filepath.Join(dir, "baressh.log"), 30*time.Second, func(line string) bool {
		a, ok := strings.CutPrefix(line, "listening ")
		if ok {
			addr = a
		}
		return ok
	})
	if err != nil {
		return nil, "", err
	}
	return c, addr, nil
}

// scratchMySQL creates a database on the server of OBMD_TEST_MYSQL_DSN and
// returns its DSN and a func that drops it.
func scratchMySQL() (dsn string, drop func(), err error) {
	raw := os.Getenv("OBMD_TEST_MYSQL_DSN")
	if raw == "" {
		return "", nil, notMeasured("OBMD_TEST_MYSQL_DSN is not set (mysql://user:pass@tcp(host:port)/db of a user who may create databases)")
	}
	cfg, err := mysql.ParseDSN(strings.TrimPrefix(raw, "mysql://"))
	if err != nil {
		return "", nil, fmt.Errorf("parse OBMD_TEST_MYSQL_DSN: %w", err)
	}
	suffix, err := randomHex(6)
	if err != nil {
		return "", nil, err
	}
	name := "obmd_bench_" + suffix
	server := cfg.Clone()
	server.DBName = ""
	server.Timeout = 5 * time.Second
	conn, err := mysql.NewConnector(server)
	if err != nil {
		return "", nil, fmt.Errorf("configure MariaDB: %w", err)
	}
	db := sql.OpenDB(conn)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := db.ExecContext(ctx, "CREATE DATABASE "+name+" CHARACTER SET utf8mb4 COLLATE utf8mb4_bin"); err != nil {
		db.Close()
		return "", nil, notMeasured("MariaDB at %s unusable: %v", cfg.Addr, err)
	}
	drop = func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		db.ExecContext(ctx, "DROP DATABASE IF EXISTS "+name)
		db.Close()
	}
	cfg.DBName = name
	return "mysql://" + cfg.FormatDSN(), drop, nil
}

// dbServer is a database server on this machine whose CPU section 1
// reports apart.
type dbServer struct {
	name string                        // its process name
	cpu  func() (time.Duration, error) // its CPU time so far
}

// String is its name ("" for none).
func (d *dbServer) String() string {
	if d == nil {
		return ""
	}
	return d.name
}

// localMariaDB is the local mariadbd or mysqld process (nil if none or
// several).
func localMariaDB() *dbServer {
	var found []int
	for _, pid := range pids() {
		if c := comm(pid); c == "mariadbd" || c == "mysqld" {
			found = append(found, pid)
		}
	}
	if len(found) != 1 {
		return nil
	}
	return &dbServer{name: comm(found[0]), cpu: func() (time.Duration, error) { return procCPU(found[0]) }}
}

// localPostgres is the local PostgreSQL postmaster with every process it
// forked, a backend per connection among them (nil if no postmaster, or
// several). Its CPU is the postmaster's own, with the exited processes it
// reaped, plus each live child's.
func localPostgres() *dbServer {
	var postmasters []int
	for _, pid := range pids() {
		if comm(pid) == "postgres" && comm(parent(pid)) != "postgres" {
			postmasters = append(postmasters, pid)
		}
	}
	if len(postmasters) != 1 {
		return nil
	}
	pm := postmasters[0]
	return &dbServer{name: "postgres", cpu: func() (time.Duration, error) {
		total, err := procCPU(pm)
		if err != nil {
			return 0, err
		}
		for _, pid := range pids() {
			if parent(pid) == pm {
				if c, err := procCPU(pid); err == nil { // else it exited meanwhile: counted as reaped
					total += c
				}
			}
		}
		return total, nil
	}}
}

// pids lists the processes of this machine.
func pids() []int {
	ents, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range ents {
		if n, err := strconv.Atoi(e.Name()); err == nil {
			out = append(out, n)
		}
	}
	return out
}

// comm is pid's command name ("" if it is gone).
func comm(pid int) string {
	b, _ := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "comm"))
	return strings.TrimSpace(string(b))
}

// parent is pid's parent (0 if it is gone).
func parent(pid int) int {
	b, _ := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 2 {
		return 0
	}
	n, _ := strconv.Atoi(f[1])
	return n
}

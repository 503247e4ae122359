package main

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/obmd/obmd/db"
	"github.com/obmd/obmd/sol/history"
	"github.com/obmd/obmd/sol/soltest"
	"github.com/obmd/obmd/sol/soltest/fleetbmc"
)

// Section 12: a boot storm. Every node of a fleet of simulated BMCs
// (sol/soltest/fleetbmc: real RMCP+ SOL, one UDP port per BMC) prints
// stormBytes at 115200 baud at the same moment; one obmd replica captures
// them all (ipmi nodes are captured always) into its history, against as
// many `ipmitool sol activate` processes writing the same output of
// another fleet into files, in alternating rounds.

const (
	stormBytes   = 64 << 10
	stormBaud    = 115200
	stormWorkers = 16 // concurrent registrations and ipmitool starts
	stormSuite   = 17 // what obmd negotiates first; ipmitool is pinned to it
	// stormMaxTools bounds the ipmitool processes of the reference: at
	// 1,000 on 2 cores most fail their session setup (ipmitool gives each
	// RMCP+ message 1 s), so the reference runs on the first 200 BMCs.
	stormMaxTools = 200
)

func stormSize(cfg benchConfig) (nodes, rounds int) {
	if cfg.quick {
		return 100, 2
	}
	return 1000, 3
}

// stormBench is section 12.
func stormBench(cfg benchConfig) *section {
	n, rounds := stormSize(cfg)
	s := &section{Title: fmt.Sprintf("12. Boot storm: %s captured `ipmi` nodes printing %d KiB each at %d baud at once, vs %s `ipmitool sol activate` writing files",
		thousands(n), stormBytes>>10, stormBaud, thousands(min(n, stormMaxTools)))}
	if _, err := exec.LookPath("ipmitool"); err != nil {
		s.skip("boot storm", notMeasured("ipmitool missing (apt-get install ipmitool)"))
		return s
	}
	if err := raiseNoFile(uint64(12*n) + 1000); err != nil {
		s.skip("boot storm", err)
		return s
	}
	for _, d := range fleetDBs() {
		if err := stormOn(cfg, s, d, n, rounds); err != nil {
			s.skip(fmt.Sprintf("boot storm on %s", d.name), err)
		}
	}
	s.note("Each node prints a line naming it and the round, then %d KiB of pseudo-random printable text in lines of up to 80 characters (sol/soltest.Paste), all %s at the same moment, at %d baud (%d bytes/s) into its BMC's UART (%d bytes; what arrives while it is full is lost and counted). The BMCs are go-ipmi's, %s of them in the bench process (sol/soltest/fleetbmc, checked by the driver conformance tables beside ipmi_sim), each on its own UDP port on 127.0.0.1, SOL retries %d x %v; obmd negotiates cipher suite %d with them, ipmitool is pinned to it (`-I lanplus -C %d`).",
		stormBytes>>10, thousands(n), stormBaud, stormBaud/10, fleetbmc.DefaultUARTBuffer, thousands(n), fleetbmc.DefaultSOLRetries, fleetbmc.DefaultSOLRetryInterval, stormSuite, stormSuite)
	s.note("obmd: the binary at its defaults (`ipmi` nodes captured always, history flushed every second), one replica; the %s nodes registered through the admin API, their links up (`obmd_console_captured_links{state=\"up\"}`). Reference: %s `ipmitool sol activate` processes (at most %d: at 1,000 most of them fail their session setup on 2 shared cores, ipmitool giving each RMCP+ message 1 s; CPU is compared per MiB), one per BMC of a second fleet, stdin a pty, stdout a file each, started before the rounds (one whose session setup fails, as ipmitool's 1 s RMCP+ timeouts do on a loaded machine, is started again; those whose session never carried a marker within 3 minutes are left out, and the reference column says how many took part). Rounds alternate, obmd's storm then ipmitool's, %d of each; medians, and the spread (min-max) in brackets.",
		thousands(n), thousands(min(n, stormMaxTools)), stormMaxTools, rounds)
	s.note("CPU per MiB: the process's utime+stime (obmd; the sum over the ipmitool processes still running) from the first byte printed until every byte is stored (obmd_history_stored_bytes_total) or written to the files (or the count stood still for 15 s), over the MiB stored or written. Time to the last byte stored: from when the last byte left the last node (its UART transmission end) until obmd's count of committed output (polled every 50 ms) or the files' size last rose. Lost: bytes printed less the output bytes stored in the database (read back after the rounds) or written to the files during the rounds; byte-exact: nodes whose history (file) holds every round's output whole. RSS per captured link: (VmRSS with the links up - VmRSS of the fresh process) / nodes, against the mean VmRSS of an ipmitool process (its anonymous part in brackets). Database growth: the database's size after the rounds minus before (obmd stopped both times: SQLite's file; MariaDB's tablespace files; PostgreSQL's pg_database_size) over the output bytes stored.")
	return s
}

// stormRound is one round's figures for one side.
type stormRound struct {
	cpu     time.Duration
	lag     time.Duration // last byte printed -> last byte stored / written
	printed int64
	got     int64 // bytes stored (obmd) or written (ipmitool) by the end of the round
}

// stormOn runs the storm on one database: obmd's rounds and ipmitool's,
// alternating.
func stormOn(cfg benchConfig, s *section, d fleetDB, n, rounds int) error {
	dsn, drop, err := d.dsn()
	if err != nil {
		return err
	}
	defer drop()
	fo, err := fleetbmc.Start(fleetbmc.Options{BMCs: n})
	if err != nil {
		return err
	}
	defer fo.Close()
	fi, err := fleetbmc.Start(fleetbmc.Options{BMCs: min(n, stormMaxTools)})
	if err != nil {
		return err
	}
	defer fi.Close()
	dir, err := os.MkdirTemp(cfg.tmp, "storm-obmd-")
	if err != nil {
		return err
	}
	o, err := startObmdProc(cfg.obmdBin, dir, dsn, nil)
	if err != nil {
		return err
	}
	defer func() { o.Stop() }()
	fresh, err := settledRSS(o.Pid(), 5*time.Second)
	if err != nil {
		return err
	}
	cfg.logf("storm on %s: registering %d ipmi nodes", d.name, n)
	a := o.admin()
	err = forEach(n, stormWorkers, time.Now().Add(5*time.Minute), func(i int) error {
		return a.call("PUT", "/node/"+url.PathEscape(stormLabel(i)), map[string]any{"type": "ipmi", "info": fo.BMC(i).Info()}, nil)
	})
	if err != nil {
		return err
	}
	const up = `obmd_console_captured_links{state="up"}`
	if err := waitGauge(o, up, float64(n), 5*time.Minute); err != nil {
		return err
	}
	held, err := settledRSS(o.Pid(), 10*time.Second)
	if err != nil {
		return err
	}
	o.Stop()
	sizeBefore, err := dbSize(dsn, dir)
	if err != nil {
		return err
	}
	if o, err = startObmdProc(cfg.obmdBin, dir, dsn, nil); err != nil {
		return err
	}
	if err := waitGauge(o, up, float64(n), 5*time.Minute); err != nil {
		return err
	}
	cfg.logf("storm on %s: starting %d ipmitool sol activate", d.name, min(n, stormMaxTools))
	tools, err := startIPMITools(cfg, fi, min(n, stormMaxTools))
	defer tools.stop()
	if err != nil {
		return err
	}
	var obmdRounds, toolRounds []stormRound
	var printed [][]byte // every round's output of node 0.. (the body is shared, the first line is not)
	body := soltest.Paste(stormBytes, 29)
	for r := range rounds {
		outs := stormOutputs(n, r, body)
		printed = append(printed, outs...)
		cfg.logf("storm on %s: round %d, obmd", d.name, r+1)
		or, err := stormObmd(o, fo, outs)
		if err != nil {
			return err
		}
		obmdRounds = append(obmdRounds, or)
		cfg.logf("storm on %s: round %d, ipmitool", d.name, r+1)
		tr, err := tools.storm(fi, outs)
		if err != nil {
			return err
		}
		toolRounds = append(toolRounds, tr)
	}
	toolRSS, toolAnon := tools.rss()
	toolExact := tools.exact(printed, n)
	var toolPrinted, toolGot int64
	for _, r := range toolRounds {
		toolPrinted, toolGot = toolPrinted+r.printed, toolGot+r.got
	}
	tools.stop()
	uartLost := int64(0)
	for i := range n {
		uartLost += fo.BMC(i).Line().Lost
	}
	o.Stop()
	sizeAfter, err := dbSize(dsn, dir)
	if err != nil {
		return err
	}
	obmdExact, stored, err := historyExact(dsn, dir, printed, n)
	if err != nil {
		return err
	}
	var obmdPrinted int64
	for _, r := range obmdRounds {
		obmdPrinted += r.printed
	}
	addStormRows(s, d.name, n, len(tools.up), obmdRounds, toolRounds)
	perLink := float64(held-fresh) / float64(n)
	s.add(row{Measure: fmt.Sprintf("RSS per captured link (%s links, %s)", thousands(n), d.name), Figure: num(perLink, "KiB"),
		Ref: fmt.Sprintf("one ipmitool: %s (%s anon)", num(toolRSS, "KiB"), num(toolAnon, "KiB")), Ratio: ratio(perLink, toolRSS),
		Goal: "-", Status: statusNone})
	s.add(row{Measure: fmt.Sprintf("bytes lost of %s printed (%s)", num(float64(obmdPrinted)/(1<<20), "MiB"), d.name),
		Figure: fmt.Sprintf("%s (%.1f%%; %s in the BMCs' UARTs); %d of %d nodes byte-exact", num(float64(obmdPrinted-stored)/(1<<20), "MiB"),
			100*float64(obmdPrinted-stored)/float64(obmdPrinted), num(float64(uartLost)/(1<<20), "MiB"), obmdExact, n),
		Ref: fmt.Sprintf("%s ipmitool: %s of %s (%.2f%%); %d of %d byte-exact", thousands(len(tools.up)), num(float64(toolPrinted-toolGot)/(1<<20), "MiB"),
			num(float64(toolPrinted)/(1<<20), "MiB"), 100*float64(toolPrinted-toolGot)/float64(max(toolPrinted, 1)), toolExact, len(tools.up)),
		Ratio: "-", Goal: "0", Status: verdict(obmdPrinted == stored)})
	growth := float64(sizeAfter-sizeBefore) / float64(stored)
	s.add(row{Measure: fmt.Sprintf("database growth per byte of output stored (%s)", d.name),
		Figure: fmt.Sprintf("%.2fx (%s for %s)", growth, num(float64(sizeAfter-sizeBefore)/(1<<20), "MiB"), num(float64(stored)/(1<<20), "MiB")),
		Ref:    "the output itself: 1x", Ratio: fmt.Sprintf("%.2fx", growth), Goal: "<= 1.2x", Status: verdict(growth <= 1.2)})
	return nil
}

func stormLabel(i int) string { return fmt.Sprintf("storm-%04d", i) }

// stormOutputs is what each node prints in round r: a line naming it and
// the round, then the shared body (not copied: the lines only read it).
func stormOutputs(n, r int, body []byte) [][]byte {
	outs := make([][]byte, n)
	for i := range n {
		outs[i] = append([]byte(fmt.Sprintf("\r\n%s round %d\r\n", stormLabel(i), r)), body...)
	}
	return outs
}

// printAll prints outs[i] on BMC i of f at once and returns the total.
func printAll(f *fleetbmc.Fleet, outs [][]byte) int64 {
	var total int64
	for i, p := range outs {
		f.BMC(i).Print(p)
		total += int64(len(p))
	}
	return total
}

// lastPrinted is when the last byte of the storm left its node.
func lastPrinted(f *fleetbmc.Fleet) time.Time {
	var last time.Time
	for i := range f.Len() {
		if t := f.BMC(i).Line().LastAt; t.After(last) {
			last = t
		}
	}
	return last
}

// stormObmd prints outs on obmd's fleet and waits until obmd has stored
// it all.
func stormObmd(o *obmdProc, f *fleetbmc.Fleet, outs [][]byte) (stormRound, error) {
	const stored = "obmd_history_stored_bytes_total"
	base, err := gauge(o, stored)
	if err != nil {
		return stormRound{}, err
	}
	cpu0, err := procCPU(o.Pid())
	if err != nil {
		return stormRound{}, err
	}
	total := printAll(f, outs)
	last := lastPrinted(f)
	got := func() int64 {
		v, err := gauge(o, stored)
		if err != nil {
			return -1
		}
		return int64(v - base)
	}
	rose, err := settle(got, total, last)
	if err != nil {
		return stormRound{}, fmt.Errorf("obmd: %w", err)
	}
	cpu1, err := procCPU(o.Pid())
	return stormRound{cpu: cpu1 - cpu0, lag: rose.Sub(last), printed: total, got: got()}, err
}

// stormQuiet is how long a count may stand still, once the last byte was
// printed, before what it lacks counts as lost.
const stormQuiet = 15 * time.Second

// settle polls got every 50 ms until it reaches total, or stands still for
// stormQuiet after last (what it lacks is then lost, and counted later),
// and returns when it last rose.
func settle(got func() int64, total int64, last time.Time) (time.Time, error) {
	deadline := last.Add(5 * time.Minute)
	prev, rose := int64(-1), time.Now()
	for {
		v := got()
		now := time.Now()
		if v > prev {
			prev, rose = v, now
		}
		switch {
		case v >= total:
			return rose, nil
		case now.After(last) && now.Sub(rose) > stormQuiet:
			return rose, nil
		case now.After(deadline):
			return rose, fmt.Errorf("%d of %d bytes within 5 minutes of the last printed", v, total)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// addStormRows adds the CPU and time rows of obmd against ipmitool.
func addStormRows(s *section, dbName string, n, refN int, ob, it []stormRound) {
	perMiB := func(rs []stormRound) []float64 {
		var v []float64
		for _, r := range rs {
			v = append(v, float64(r.cpu)/float64(time.Millisecond)/(float64(max(r.got, 1))/(1<<20)))
		}
		return v
	}
	lags := func(rs []stormRound) []float64 {
		var v []float64
		for _, r := range rs {
			v = append(v, float64(r.lag)/float64(time.Millisecond))
		}
		return v
	}
	oc, ic := perMiB(ob), perMiB(it)
	s.add(row{Measure: fmt.Sprintf("CPU per MiB captured, %s nodes at once (%s)", thousands(n), dbName),
		Figure: spread(oc, "ms"), Ref: fmt.Sprintf("%s ipmitool: %s", thousands(refN), spread(ic, "ms")), Ratio: ratio(medianF(oc), medianF(ic)),
		Goal: "<= 0.5x", Status: verdict(medianF(oc) <= 0.5*medianF(ic))})
	ol, il := lags(ob), lags(it)
	s.add(row{Measure: fmt.Sprintf("last byte printed to last byte stored (%s)", dbName),
		Figure: spread(ol, "ms"), Ref: fmt.Sprintf("%s ipmitool to files: %s", thousands(refN), spread(il, "ms")), Ratio: ratio(medianF(ol), medianF(il)),
		Goal: "-", Status: statusNone})
}

// spread is "median [min-max] unit".
func spread(v []float64, unit string) string {
	if len(v) == 0 {
		return "-"
	}
	w := slices.Clone(v)
	slices.Sort(w)
	return fmt.Sprintf("%s [%s-%s]", num(medianF(v), unit), trimNum(w[0]), trimNum(w[len(w)-1]))
}

func trimNum(v float64) string { return strings.TrimSpace(num(v, "")) }

func medianF(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	w := slices.Clone(v)
	slices.Sort(w)
	if len(w)%2 == 1 {
		return w[len(w)/2]
	}
	return (w[len(w)/2-1] + w[len(w)/2]) / 2
}

// dbSize is the database's size in bytes with obmd stopped: SQLite's
// files in dir's state directory, MariaDB's tablespace files of the
// scratch database, PostgreSQL's pg_database_size.
func dbSize(dsn, dir string) (int64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	switch {
	case dsn == "":
		files, _ := filepath.Glob(filepath.Join(dir, "state", "obmd.db*"))
		var sum int64
		for _, f := range files {
			if fi, err := os.Stat(f); err == nil {
				sum += fi.Size()
			}
		}
		if sum == 0 {
			return 0, fmt.Errorf("no SQLite database in %s", dir)
		}
		return sum, nil
	case strings.HasPrefix(dsn, "mysql://"):
		return mysqlSize(ctx, dsn)
	default:
		return postgresSize(ctx, dsn)
	}
}

// historyExact reads every node's history back from the database (obmd
// stopped) and counts the nodes whose history holds every round's output
// whole; it also returns the output bytes stored.
func historyExact(dsn, dir string, printed [][]byte, n int) (exact int, stored int64, err error) {
	if dsn == "" {
		dsn = filepath.Join(dir, "state", "obmd.db")
	}
	log := logrus.New()
	log.SetLevel(logrus.WarnLevel)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	st, err := db.Open(ctx, dsn, log)
	if err != nil {
		return 0, 0, err
	}
	defer st.Close()
	for i := range n {
		epoch, err := st.Epoch(ctx, stormLabel(i))
		if err != nil {
			return 0, 0, err
		}
		chunks, err := st.ReadHistory(ctx, history.Query{Node: stormLabel(i), Epoch: epoch, Admin: true})
		if err != nil {
			return 0, 0, err
		}
		var out []byte
		for _, c := range chunks {
			if c.Kind == history.KindOutput {
				out = append(out, c.Data...)
			}
		}
		stored += int64(len(out))
		if missing(out, printed, i, n) == 0 {
			exact++
		}
	}
	return exact, stored, nil
}

// mysqlSize is the bytes the scratch database's InnoDB tablespace files
// take (their allocated size), or, without the PROCESS privilege that
// information_schema.INNODB_SYS_TABLESPACES needs, its tables' data,
// index and free space after ANALYZE TABLE.
func mysqlSize(ctx context.Context, dsn string) (int64, error) {
	conn, err := sql.Open("mysql", strings.TrimPrefix(dsn, "mysql://"))
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	var size sql.NullInt64
	err = conn.QueryRowContext(ctx, `SELECT SUM(ALLOCATED_SIZE) FROM information_schema.INNODB_SYS_TABLESPACES
		WHERE NAME LIKE CONCAT(DATABASE(), '/%')`).Scan(&size)
	if err == nil && size.Valid && size.Int64 > 0 {
		return size.Int64, nil
	}
	rows, err := conn.QueryContext(ctx, `SELECT table_name FROM information_schema.TABLES WHERE table_schema = DATABASE()`)
	if err != nil {
		return 0, fmt.Errorf("MariaDB size: %w", err)
	}
	var tables []string
	for rows.Next() {
		var t string
		if err := rows.Scan(&t); err != nil {
			rows.Close()
			return 0, err
		}
		tables = append(tables, t)
	}
	rows.Close()
	for _, t := range tables {
		if _, err := conn.ExecContext(ctx, "ANALYZE TABLE `"+t+"`"); err != nil {
			return 0, fmt.Errorf("MariaDB size: %w", err)
		}
	}
	err = conn.QueryRowContext(ctx, `SELECT SUM(data_length + index_length + data_free) FROM information_schema.TABLES
		WHERE table_schema = DATABASE()`).Scan(&size)
	if err != nil {
		return 0, fmt.Errorf("MariaDB size: %w", err)
	}
	return size.Int64, nil
}

// postgresSize is pg_database_size of the scratch database.
func postgresSize(ctx context.Context, dsn string) (int64, error) {
	conn, err := sql.Open("pgx", dsn)
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	var size int64
	if err := conn.QueryRowContext(ctx, `SELECT pg_database_size(current_database())`).Scan(&size); err != nil {
		return 0, fmt.Errorf("PostgreSQL size: %w", err)
	}
	return size, nil
}

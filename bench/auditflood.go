package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// auditFloodConns is how many keep-alive connections the tenant floods
// power_status over.
const auditFloodConns = 8

// auditFloodBench is section 10: the audit rows one tenant writes by
// polling power_status as fast as obmd answers, on SQLite and on MariaDB;
// with -baseline, the same for that binary (before/after).
func auditFloodBench(cfg benchConfig) *section {
	flood := cfg.scale(8 * time.Second)
	s := &section{Title: "10. Audit rows under a power_status flood"}
	for _, d := range fleetDBs() {
		measure := fmt.Sprintf("audit rows per second, one tenant flooding `GET /node/{label}/power_status?token=` over %d keep-alive connections for %v (%s)",
			auditFloodConns, flood, d.name)
		cfg.logf("audit flood: obmd on %s", d.name)
		got, err := measureAuditFlood(cfg, cfg.obmdBin, d, flood)
		if err != nil {
			s.skip(measure, err)
			continue
		}
		ref := fmt.Sprintf("a row per request: %s", num(got.requestsPerSec(), "rows/s"))
		refRate := got.requestsPerSec()
		if cfg.baseline != "" {
			cfg.logf("audit flood: baseline on %s", d.name)
			base, err := measureAuditFlood(cfg, cfg.baseline, d, flood)
			if err != nil {
				s.skip(measure+", baseline", err)
				continue
			}
			ref = fmt.Sprintf("baseline: %s (%s requests/s)", num(base.rowsPerSec(), "rows/s"), num(base.requestsPerSec(), ""))
			refRate = base.rowsPerSec()
		}
		s.add(row{Measure: measure,
			Figure: fmt.Sprintf("%s (%s requests/s, %d rows counting %d events)", num(got.rowsPerSec(), "rows/s"),
				num(got.requestsPerSec(), ""), got.rows, got.events),
			Ref: ref, Ratio: ratio(got.rowsPerSec(), refRate), Goal: "<= 2 rows/s",
			Status: verdict(got.rowsPerSec() <= 2 && got.events == got.requests)})
	}
	s.note("A fresh obmd (the binary, configuration as in section 1) with one sim node and its token; %d goroutines share one Go HTTP client of %d kept-alive connections and send `GET /node/af/power_status?token=...` as fast as it answers, for %v; obmd is then stopped (SIGTERM: it commits what it queued and counted) and the `power.status` rows are counted in its database: rows/s is their number over the flood's length, and every request must be in them (`count` adds up to the requests answered 200). Repeats from one credential and address are counted into a row per `audit.aggregate_window` (1 s) after the first, so the goal is the window's rate: 1 row/s, plus the first. The reference is one row per request, as before aggregation (with `-baseline BIN`: that binary, measured the same way).",
		auditFloodConns, auditFloodConns, flood)
	return s
}

// auditFlood is what one flood wrote.
type auditFlood struct {
	took         time.Duration
	requests     int64 // answered 200
	rows, events int64 // power.status rows, and the events they count
}

func (f auditFlood) rowsPerSec() float64     { return float64(f.rows) / f.took.Seconds() }
func (f auditFlood) requestsPerSec() float64 { return float64(f.requests) / f.took.Seconds() }

// measureAuditFlood floods power_status on a fresh obmd (bin) on a fresh
// database of d, stops it and counts the rows.
func measureAuditFlood(cfg benchConfig, bin string, d fleetDB, flood time.Duration) (auditFlood, error) {
	var f auditFlood
	dsn, drop, err := d.dsn()
	if err != nil {
		return f, err
	}
	defer drop()
	dir, err := os.MkdirTemp(cfg.tmp, "auditflood-")
	if err != nil {
		return f, err
	}
	o, err := startObmdProc(bin, dir, dsn, nil)
	if err != nil {
		return f, err
	}
	stopped := false
	defer func() {
		if !stopped {
			o.Stop()
		}
	}()
	tok, err := o.admin().addNode("af", "sim", simInfo)
	if err != nil {
		return f, err
	}
	target := "http://" + o.AdminAddr + "/node/af/power_status?token=" + url.QueryEscape(tok)
	client := &http.Client{Timeout: 10 * time.Second,
		Transport: &http.Transport{MaxConnsPerHost: auditFloodConns, MaxIdleConnsPerHost: auditFloodConns}}
	defer client.CloseIdleConnections()
	var (
		ok      atomic.Int64
		failure atomic.Value
		wg      sync.WaitGroup
	)
	start := time.Now()
	for range auditFloodConns {
		wg.Go(func() {
			for time.Since(start) < flood {
				resp, err := client.Get(target)
				if err == nil {
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if resp.StatusCode != http.StatusOK {
						err = fmt.Errorf("power_status: %s", resp.Status)
					}
				}
				if err != nil {
					failure.CompareAndSwap(nil, err)
					return
				}
				ok.Add(1)
			}
		})
	}
	wg.Wait()
	f.took, f.requests = time.Since(start), ok.Load()
	if err, _ := failure.Load().(error); err != nil {
		return f, err
	}
	o.Stop()
	stopped = true
	f.rows, f.events, err = countStatusRows(dir, dsn)
	return f, err
}

// countStatusRows counts the power.status audit rows in the database of
// an obmd that has stopped (dsn, or the SQLite file of its state
// directory under dir), and the events they count (a row each where the
// schema has no count column: a binary from before aggregation).
func countStatusRows(dir, dsn string) (rows, events int64, err error) {
	driver, source := "sqlite", filepath.Join(dir, "state", "obmd.db")
	if dsn != "" {
		driver, source = "mysql", strings.TrimPrefix(dsn, "mysql://")
	}
	conn, err := sql.Open(driver, source)
	if err != nil {
		return 0, 0, err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const where = ` FROM audit_events WHERE action = 'power.status'`
	var sum sql.NullInt64
	err = conn.QueryRowContext(ctx, `SELECT COUNT(*), SUM(count)`+where).Scan(&rows, &sum)
	if err != nil && !errors.Is(err, context.DeadlineExceeded) {
		if err = conn.QueryRowContext(ctx, `SELECT COUNT(*)`+where).Scan(&rows); err != nil {
			return 0, 0, fmt.Errorf("count audit rows: %w", err)
		}
		return rows, rows, nil
	}
	return rows, sum.Int64, err
}

package main

import (
	"fmt"
	"os"
	"time"
)

// capturedIdle measures (RSS with n always-captured idle sim nodes - RSS
// before) / n on a fresh obmd process (SQLite history): each node's link
// held open with nobody attached, its recorder and flusher included.
func capturedIdle(cfg benchConfig, s *section, n int) error {
	dir, err := os.MkdirTemp(cfg.tmp, "capture-obmd-")
	if err != nil {
		return err
	}
	o, err := startObmdProc(cfg.obmdBin, dir, "", map[string]any{"console.capture": "always"})
	if err != nil {
		return err
	}
	defer o.Stop()
	before, err := settledRSS(o.Pid(), 5*time.Second)
	if err != nil {
		return err
	}
	cfg.logf("memory: %d always-captured sim nodes", n)
	if _, err := o.admin().addSimNodes("cap", n); err != nil {
		return err
	}
	const up = `obmd_console_captured_links{state="up"}`
	if err := waitGauge(o, up, float64(n), cfg.scale(2*time.Minute)); err != nil {
		return err
	}
	after, err := settledRSS(o.Pid(), 10*time.Second)
	if err != nil {
		return err
	}
	per := float64(after-before) / float64(n)
	s.add(row{Measure: fmt.Sprintf("RSS per always-captured idle sim node (%d nodes, nobody attached)", n),
		Figure: num(per, "KiB"), Ref: "goal: 100 KiB", Ratio: ratio(per, 100),
		Goal: "< 100 KiB", Status: verdict(per < 100)})
	s.note("Captured idle nodes: `console_capture: always`, %d sim nodes registered on a fresh obmd process (SQLite), RSS read once %s reached %d; (after - before) / %d, node registration included; before %s, after %s.",
		n, up, n, n, num(float64(before)/1024, "MiB"), num(float64(after)/1024, "MiB"))
	return nil
}

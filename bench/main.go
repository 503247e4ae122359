// Command bench measures obmd beside what it replaces and against its own
// limits, and writes the table into BENCHMARKS.md.
//
// It runs as:
//
//	go run ./bench -out BENCHMARKS.md      (make bench)
//
// Every figure is paired with a reference measured in the same run, because
// these machines are shared and noisy: absolute numbers drift, ratios hold.
// Everything runs on 127.0.0.1, every loop is bounded in count and time,
// and the whole run takes a few minutes on 2 cores. A reference that needs
// something missing (sshd, ipmi_sim, a MariaDB or PostgreSQL DSN) is reported as "not
// measured" with what is missing; nothing is installed. See bench/README.md.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"time"
)

// benchConfig is what every section gets.
type benchConfig struct {
	tmp     string // scratch directory, removed at the end
	obmdBin string // the obmd binary, built for this run
	bareBin string // bench/baressh, built for this run
	quick   bool   // shorter phases (a smoke run; figures are noisier)
	// baseline is another obmd binary (-baseline) that sections 1 and 9
	// also measure, for a before/after ratio in one run; "" for none.
	baseline string
	log      io.Writer
}

// scale shortens d in quick mode.
func (c benchConfig) scale(d time.Duration) time.Duration {
	if c.quick {
		return d / 4
	}
	return d
}

func (c benchConfig) logf(format string, a ...any) {
	fmt.Fprintf(c.log, "bench: "+format+"\n", a...)
}

func main() {
	out := flag.String("out", "BENCHMARKS.md", "file to write the table into (between the bench markers)")
	only := flag.String("only", "", "comma-separated sections to run (1-12); default all")
	quick := flag.Bool("quick", false, "shorter phases, for trying the bench itself (noisier figures)")
	baseline := flag.String("baseline", "", "another obmd binary (an older build) that sections 1 and 9 measure too")
	flag.Parse()
	if err := run(*out, *only, *quick, *baseline); err != nil {
		fmt.Fprintf(os.Stderr, "bench: %v\n", err)
		os.Exit(1)
	}
}

func run(out, only string, quick bool, baseline string) error {
	began, load := time.Now(), loadAverage()
	tmp, err := os.MkdirTemp("", "obmd-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	cfg := benchConfig{tmp: tmp, quick: quick, log: os.Stderr, baseline: baseline}
	cfg.logf("building obmd and baressh")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	cfg.obmdBin, cfg.bareBin, err = buildBinaries(ctx, tmp)
	cancel()
	if err != nil {
		return err
	}
	all := []struct {
		id  string
		run func(benchConfig) *section
	}{{"1", connRate}, {"2", memory}, {"3", consoleBench}, {"4", isolation}, {"5", revocation}, {"6", preauthBench},
		{"7", fleetBench}, {"8", powerStatusBench}, {"9", automationBench}, {"10", auditFloodBench}, {"11", rebalanceBench},
		{"12", stormBench}}
	var sections []*section
	for _, s := range all {
		if only != "" && !strings.Contains(","+only+",", ","+s.id+",") {
			continue
		}
		t := time.Now()
		sec := s.run(cfg)
		cfg.logf("section %s took %v", s.id, time.Since(t).Round(time.Second))
		sections = append(sections, sec)
	}
	header := runHeader(out, only, quick, baseline, time.Since(began), load)
	gen := render(header, sections)
	os.Stdout.Write(gen)
	if only != "" {
		// The other sections' figures stay as their run left them.
		what := "Section " + only
		if strings.Contains(only, ",") {
			what = "Sections " + only
		}
		run := strings.Replace(strings.TrimPrefix(header[0], "Produced by "), " (`make bench`)", "", 1)
		note := []string{what + " from " + run, header[1]}
		return mergeReport(out, note, sections)
	}
	return writeReport(out, gen)
}

// loadAverage is the machine's load average over the last minute, as
// /proc/loadavg says ("?" if it cannot be read): on a shared machine, what
// else ran beside the bench.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if f := strings.Fields(string(b)); err == nil && len(f) > 0 {
		return f[0]
	}
	return "?"
}

// runHeader says how the table was produced and on what (load: the load
// average when the run began).
func runHeader(out, only string, quick bool, baseline string, took time.Duration, load string) []string {
	args := "-out " + out
	if only != "" {
		args += " -only " + only
	}
	if quick {
		args += " -quick"
	}
	if baseline != "" {
		args += " -baseline " + baseline
	}
	set := func(env string) string {
		if os.Getenv(env) == "" {
			return env + " not set"
		}
		return env + " set"
	}
	return []string{
		fmt.Sprintf("Produced by `go run ./bench %s` (`make bench`) on %s in %v.", args,
			time.Now().UTC().Format("2006-01-02 15:04 UTC"), took.Round(time.Second)),
		fmt.Sprintf("Machine: %s, %d CPUs, %s, %s; obmd %s; %s; %s; load average %s at the start.",
			cpuModel(), runtime.NumCPU(), kernel(), runtime.Version(), gitVersion(),
			set("OBMD_TEST_MYSQL_DSN"), set("OBMD_TEST_POSTGRES_DSN"), load),
		"",
		"Each row pairs obmd's figure with a reference measured in the same run; the ratio is what to read " +
			"(absolute figures drift on shared machines). Everything runs on 127.0.0.1.",
	}
}

func cpuModel() string {
	data, _ := os.ReadFile("/proc/cpuinfo")
	for _, l := range strings.Split(string(data), "\n") {
		if k, v, ok := strings.Cut(l, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return runtime.GOARCH
}

func kernel() string {
	data, err := os.ReadFile("/proc/sys/kernel/osrelease")
	if err != nil {
		return runtime.GOOS
	}
	return "Linux " + strings.TrimSpace(string(data))
}

func gitVersion() string {
	out, err := exec.Command("git", "describe", "--tags", "--always", "--dirty").Output()
	if err != nil {
		return "(unknown version)"
	}
	return strings.TrimSpace(string(out))
}

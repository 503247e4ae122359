package main

import (
	"bytes"
	"fmt"
	"os"
	"runtime/pprof"
	"strings"
	"sync"
	"time"

	gossh "golang.org/x/crypto/ssh"

	"github.com/obmd/obmd/commands"
	"github.com/obmd/obmd/sol/sim"
)

// The worst automation the budgets allow: autoSessions wait-for sessions
// (the automation caps: at most 8 per node and per source) on one node,
// each with the costliest pattern within commands.MaxProgram (a large
// case-folded class, every instruction alive on every byte of a line of
// letters), over such a line without newline printed at autoRate.
const (
	autoSessions = 8
	autoClass    = `(?i)[\p{L}\p{M}\p{N}\p{P}\p{S}]`
	autoPattern  = autoClass + `{1000}` + autoClass + `{1000}\n`
	autoChunk    = 1 << 10
	autoEvery    = 88 * time.Millisecond // 11.6 KB/s: a 115200-baud serial console's rate
)

// automationBench is section 9.
func automationBench(cfg benchConfig) *section {
	s := &section{Title: "9. Automation budgets: another tenant and HIL while one tenant runs the worst automation allowed"}
	statusMeasure := "another tenant's `power-status` p50 (whole x/crypto connection, another node)"
	rotateMeasure := "HIL's rotation p50 (`POST /node/rot/token`, the admin call)"
	p, err := startInproc(cfg, "automation")
	if err != nil {
		s.skip(statusMeasure, err)
		return s
	}
	defer p.Stop()
	a := p.admin()
	tokens := map[string]string{}
	for _, label := range []string{"atk", "vic", "rot"} {
		if tokens[label], err = a.addNode(label, "sim", simInfo); err != nil {
			s.skip(statusMeasure, err)
			return s
		}
	}
	rounds, slices := 20, 4
	if cfg.quick {
		rounds, slices = 10, 2
	}
	cfg.logf("automation: %d rounds idle, then %d slices of %d rounds with atk printing, without and with %d worst "+
		"automation sessions", rounds, slices, rounds, autoSessions)
	idle, alone, under, err := measureAutomation(cfg, p, tokens, rounds, slices)
	if err != nil {
		s.skip(statusMeasure, err)
		return s
	}
	for _, r := range []struct {
		measure      string
		under, alone time.Duration
	}{
		{statusMeasure, median(under.status), median(alone.status)},
		{rotateMeasure, median(under.rotate), median(alone.rotate)},
	} {
		s.add(row{Measure: r.measure, Figure: ms(r.under), Ref: "no automation: " + ms(r.alone),
			Ratio: ratio(float64(r.under), float64(r.alone)), Goal: "<= 1.5x",
			Status: verdict(float64(r.under) <= 1.5*float64(r.alone))})
	}
	s.add(row{Measure: "CPU of the process (obmd and the bench's clients), per second of wall time",
		Figure: ms(under.cpuPerSec()), Ref: "no automation: " + ms(alone.cpuPerSec()),
		Ratio: ratio(float64(under.cpuPerSec()), float64(alone.cpuPerSec())), Status: statusNone})
	s.note("The automation: %d sessions on node atk, each `wait-for` of the costliest pattern the budget allows "+
		"(`%s{1000}` twice and `\\n`: about 4,000 of the %d instructions, with its mid-line form), over a line of `a` "+
		"without newline printed at a 115200-baud console's rate (1 KiB every %v); all %d were searching during the measure. "+
		"Budgets: each command searches at most %v per second (`SearchCPU`), in slices of at most 65,536 steps, "+
		"and at most half the CPUs search at once.", autoSessions, autoClass, commands.MaxProgram, autoEvery, autoSessions,
		commands.SearchCPU)
	s.note("obmd in-process on SQLite at its defaults but for the session caps. A phase is %d rounds of a "+
		"`power-status` on node vic and a rotation of node rot (no sessions); %d slices each run a phase without the "+
		"automation, then one with it (started 2 s before, past the budgets' burst), so that drift falls on both alike. "+
		"Without the automation atk prints the same line to one console session (its history records it); with atk "+
		"idle, no output: `power-status` %s, rotation %s, CPU %s per second.", rounds, slices,
		ms(median(idle.status)), ms(median(idle.rotate)), ms(idle.cpuPerSec()))
	return s
}

// measureAutomation measures a phase with atk idle, then slices of a phase
// with atk printing (alone) and one with the automation too (under).
func measureAutomation(cfg benchConfig, p *inproc, tokens map[string]string, rounds, slices int) (idle, alone, under autoPhase, err error) {
	a := p.admin()
	phase := func() (autoPhase, error) { return measureAutoPhase(p.SSHAddr(), tokens["vic"], a, rounds) }
	if idle, err = phase(); err != nil {
		return
	}
	// atk prints the long line all along, a console holding its link (its
	// history records it): the two phases differ only by the automation.
	out, err := startPrinting(p.SSHAddr(), tokens["atk"], p.Lab().BMC("atk", sim.ModeNormal))
	if err != nil {
		return
	}
	defer out.stop()
	time.Sleep(cfg.scale(2 * time.Second))
	for range slices {
		ph, err := phase()
		if err != nil {
			return idle, alone, under, err
		}
		alone = alone.merge(ph)
		atk, err := startAutomation(p.SSHAddr(), tokens["atk"])
		if err != nil {
			return idle, alone, under, err
		}
		time.Sleep(2 * time.Second) // past the budgets' burst: the steady state
		ph, err = phase()
		searching := goroutinesIn("commands.(*meter).find")
		if aerr := atk.stop(); err == nil {
			err = aerr
		}
		if err == nil && searching < autoSessions {
			err = fmt.Errorf("only %d of %d automation sessions were searching", searching, autoSessions)
		}
		if err != nil {
			return idle, alone, under, err
		}
		under = under.merge(ph)
	}
	return idle, alone, under, nil
}

// autoPhase is one phase's timings.
type autoPhase struct {
	status, rotate []time.Duration
	cpu, wall      time.Duration
}

func (a autoPhase) merge(b autoPhase) autoPhase {
	return autoPhase{status: append(a.status, b.status...), rotate: append(a.rotate, b.rotate...),
		cpu: a.cpu + b.cpu, wall: a.wall + b.wall}
}

func (a autoPhase) cpuPerSec() time.Duration {
	if a.wall <= 0 {
		return 0
	}
	return time.Duration(float64(a.cpu) / a.wall.Seconds())
}

// measureAutoPhase times rounds of a power-status on vic and a rotation
// of rot, and the process's CPU meanwhile.
func measureAutoPhase(addr, vicToken string, a admin, rounds int) (autoPhase, error) {
	var ph autoPhase
	cpu0, err := procCPU(os.Getpid())
	if err != nil {
		return ph, err
	}
	t0 := time.Now()
	for range rounds {
		t := time.Now()
		if err := execOnce(addr, "vic", gossh.Password(vicToken), "power-status", "power"); err != nil {
			return ph, err
		}
		ph.status = append(ph.status, time.Since(t))
		t = time.Now()
		if _, err := a.rotate("rot"); err != nil {
			return ph, err
		}
		ph.rotate = append(ph.rotate, time.Since(t))
		time.Sleep(50 * time.Millisecond)
	}
	ph.wall = time.Since(t0)
	cpu1, err := procCPU(os.Getpid())
	ph.cpu = cpu1 - cpu0
	return ph, err
}

// printing is a node printing the long line, a console holding its link.
type printing struct {
	console *viewer
	quit    chan struct{}
	wg      sync.WaitGroup // the printer
}

// startPrinting attaches a console to label atk and prints the long line
// into it every autoEvery.
func startPrinting(addr, token string, bmc *sim.BMC) (*printing, error) {
	v, err := openViewer(addr, "atk", gossh.Password(token))
	if err != nil {
		return nil, err
	}
	v.discard()
	pr := &printing{console: v, quit: make(chan struct{})}
	line := bytes.Repeat([]byte("a"), autoChunk)
	pr.wg.Add(1)
	go func() { // owned by pr: ends at stop
		defer pr.wg.Done()
		t := time.NewTicker(autoEvery)
		defer t.Stop()
		for {
			select {
			case <-pr.quit:
				return
			case <-t.C:
				bmc.Inject(line)
			}
		}
	}()
	return pr, nil
}

func (pr *printing) stop() {
	close(pr.quit)
	pr.wg.Wait()
	pr.console.Close()
}

// automation is the automation sessions.
type automation struct {
	clients []*gossh.Client
	ended   chan error     // one per session that ended (none should, until stop)
	wg      sync.WaitGroup // the sessions' waiters
}

// startAutomation opens the automation sessions on label atk.
func startAutomation(addr, token string) (*automation, error) {
	at := &automation{ended: make(chan error, autoSessions)}
	for range autoSessions {
		c, err := dial(addr, "atk", gossh.Password(token))
		if err != nil {
			at.stop()
			return nil, err
		}
		at.clients = append(at.clients, c)
		var stderr syncBuf
		sess, err := c.NewSession()
		if err == nil {
			sess.Stderr = &stderr
			err = sess.Start("wait-for " + autoPattern + " --timeout 1h")
		}
		if err != nil {
			at.stop()
			return nil, err
		}
		at.wg.Add(1)
		go func() { // owned by at: ends when the session does (stop closes its client)
			defer at.wg.Done()
			err := sess.Wait()
			at.ended <- fmt.Errorf("an automation session ended: %v %s", err, strings.TrimSpace(stderr.String()))
		}()
	}
	return at, nil
}

// stop ends the sessions; its error is one that ended before it.
func (at *automation) stop() error {
	var err error
	select {
	case err = <-at.ended:
	default:
	}
	for _, c := range at.clients {
		c.Close()
	}
	at.wg.Wait()
	return err
}

// goroutinesIn counts this process's goroutines whose stack holds fn.
func goroutinesIn(fn string) int {
	var b bytes.Buffer
	if err := pprof.Lookup("goroutine").WriteTo(&b, 2); err != nil {
		return -1
	}
	return strings.Count(b.String(), fn+"(")
}

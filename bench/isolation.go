package main

import (
	"fmt"
	"slices"
	"sync"
	"time"

	gossh "golang.org/x/crypto/ssh"

	"github.com/obmd/obmd/sol/sim"
)

// bmcDelay is how long each simulated BMC takes per operation.
const bmcDelay = 500 * time.Millisecond

// isolation is section 4.
func isolation(cfg benchConfig) *section {
	s := &section{Title: "4. Isolation: power operations on nodes whose BMCs take 0.5 s each"}
	const nodes = 10
	measure := fmt.Sprintf("%d concurrent power-cycles on %d nodes, total time vs one alone", nodes, nodes)
	p, err := startInproc(cfg, "isolation")
	if err != nil {
		s.skip(measure, err)
		return s
	}
	defer p.Stop()
	tokens, err := p.admin().addSimNodes("iso", nodes)
	if err != nil {
		s.skip(measure, err)
		return s
	}
	for i := range nodes {
		p.Lab().BMC(fmt.Sprintf("iso-%03d", i), sim.ModeNormal).SetDelay(bmcDelay)
	}
	op := func(i int) error {
		return execOnce(p.SSHAddr(), fmt.Sprintf("iso-%03d", i), gossh.Password(tokens[i]), "power-cycle", "power cycled")
	}
	const rounds = 3
	cfg.logf("isolation: %d rounds of 1 and of %d operations", rounds, nodes)
	var single, all []time.Duration
	for range rounds {
		t := time.Now()
		if err := op(0); err != nil {
			s.skip(measure, err)
			return s
		}
		single = append(single, time.Since(t))

		var wg sync.WaitGroup
		errs := make([]error, nodes)
		t = time.Now()
		for i := range nodes {
			wg.Add(1)
			go func() { // owned by this round
				defer wg.Done()
				errs[i] = op(i)
			}()
		}
		wg.Wait()
		all = append(all, time.Since(t))
		for _, err := range errs {
			if err != nil {
				s.skip(measure, err)
				return s
			}
		}
	}
	one, ten := median(single), median(all)
	s.add(row{Measure: measure, Figure: ms(ten), Ref: "one alone: " + ms(one), Ratio: ratio(float64(ten), float64(one)),
		Goal: "< 1.5x", Status: verdict(float64(ten) < 1.5*float64(one))})
	s.note("Each operation is a whole SSH connection (connect, token auth, `power-cycle`, close) to a sim node whose BMC waits %v per call (sim SetDelay); the median of %d rounds. Ideal: 1x (no daemon-wide lock around BMC calls); a design that serialises BMC calls takes ~%dx.", bmcDelay, rounds, nodes)
	return s
}

func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}

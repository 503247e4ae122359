package daemon

import (
	"math/rand/v2"
	"testing"
	"time"
)

// TestSharePlanFleet: rep-b joins rep-a, which holds 10,000 captured
// links; each polls once a round (a second, access.poll's default) with a
// budget of 100 hand-offs (cluster.handoff_rate's default). rep-b has its
// share within 2 minutes of rounds (one hand-off a poll took 5,000), no
// round hands off more than the budget, and a link with a viewer is never
// handed off.
func TestSharePlanFleet(t *testing.T) {
	const n, rate = 10000, 100
	rng := rand.New(rand.NewPCG(5, 6))
	s := newShareSim(n, "rep-a")
	s.budget = rate
	s.settle(t, rng, false, 3)
	busy := map[string]bool{}
	for i := 0; i < n; i += 97 {
		busy[s.nodes[i]] = true
	}
	s.busy = busy
	s.join("rep-b")
	rounds := 0
	for ; !s.balanced(); rounds++ {
		if rounds == 120 {
			t.Fatalf("not balanced after 120 rounds: %v, %d hand-offs", s.counts(), s.handoffs)
		}
		before := s.handoffs
		s.round(rng, true)
		if got := s.handoffs - before; got > rate {
			t.Fatalf("round %d: %d hand-offs, over the budget of %d", rounds, got, rate)
		}
		for node := range busy {
			if s.lease[node] != "rep-a" {
				t.Fatalf("%s, with a viewer, moved to %q", node, s.lease[node])
			}
		}
	}
	if c := s.counts(); c["rep-a"] != n/2 || c["rep-b"] != n/2 {
		t.Errorf("balanced at %v", c)
	}
	t.Logf("balanced after %d rounds, %d hand-offs", rounds, s.handoffs)
}

// TestHandOffBudget: the budget refills at rate a second up to one
// second's worth, and what is spent is gone.
func TestHandOffBudget(t *testing.T) {
	b := handOffBudget{rate: 50}
	now := time.Unix(1000, 0)
	if got := b.take(now); got != 50 {
		t.Fatalf("first take: %d, want 50", got)
	}
	b.spend(50)
	for _, c := range []struct {
		after time.Duration
		want  int
	}{{0, 0}, {100 * time.Millisecond, 5}, {10 * time.Second, 50}} {
		now = now.Add(c.after)
		if got := b.take(now); got != c.want {
			t.Errorf("after %v: %d, want %d", c.after, got, c.want)
		}
		b.spend(c.want)
	}
}

// TestDeferTakes: a poll keeps the links it has open and opens at most
// its budget of new ones, the first by label, leaving the rest pending
// for later polls.
func TestDeferTakes(t *testing.T) {
	p := sharePlan{mine: map[string]bool{"a": true, "b": true, "c": true, "d": true, "e": true}}
	if got := p.deferTakes(map[string]bool{"b": true, "e": true}, 2); got != 2 || !p.pending ||
		len(p.mine) != 4 || !p.mine["a"] || !p.mine["b"] || !p.mine["c"] || !p.mine["e"] {
		t.Errorf("budget 2 with b and e open: took %d, kept %v (pending %v), want a and c taken, d pending", got, p.mine, p.pending)
	}
	p = sharePlan{mine: map[string]bool{"a": true, "b": true}}
	if got := p.deferTakes(nil, 5); got != 2 || p.pending || len(p.mine) != 2 {
		t.Errorf("budget 5 for 2: took %d, kept %v (pending %v), want both, none pending", got, p.mine, p.pending)
	}
	p = sharePlan{mine: map[string]bool{"a": true}}
	if got := p.deferTakes(map[string]bool{"a": true}, 0); got != 0 || p.pending || !p.mine["a"] {
		t.Errorf("budget 0, a open: took %d, kept %v (pending %v), want a kept", got, p.mine, p.pending)
	}
}

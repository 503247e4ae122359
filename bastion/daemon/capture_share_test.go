package daemon

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"
)

// shareSim is a cluster of replicas sharing captured links as the capture
// poll does (shareView.plan), with the SOL leases as the database holds
// them: a hold takes a node's lease unless another replica holds it, a
// hand-off's lease is released when its link has closed (at the end of
// the round it was handed off in, or of a later one), busy nodes have
// a viewer attached (no hand-off), and dead nodes' BMCs do not answer:
// a hold of one keeps retrying, its lease held only for each attempt
// (never when a poll reads it).
type shareSim struct {
	nodes    []string
	live     []string
	holds    map[string]map[string]bool // replica -> its hub's holds
	leaving  map[string]map[string]bool // replica -> handed off, lease still its
	lease    map[string]string          // node -> owner
	busy     map[string]bool
	dead     map[string]bool
	handoffs int
	moves    map[string]int      // node -> times its lease changed owner
	budget   int                 // hand-offs a replica may make a round (0: 1)
	zone     map[string]string   // node -> its zone (absent: none)
	zones    map[string][]string // replica -> the zones it reaches (absent: every one)
}

func newShareSim(n int, replicas ...string) *shareSim {
	s := &shareSim{live: replicas, holds: map[string]map[string]bool{}, leaving: map[string]map[string]bool{},
		lease: map[string]string{}, busy: map[string]bool{}, dead: map[string]bool{}, moves: map[string]int{}}
	for i := range n {
		s.nodes = append(s.nodes, fmt.Sprintf("node-%02d", i))
	}
	for _, r := range replicas {
		s.join(r)
	}
	return s
}

func (s *shareSim) join(r string) {
	if !slices.Contains(s.live, r) {
		s.live = append(s.live, r)
	}
	s.holds[r], s.leaving[r] = map[string]bool{}, map[string]bool{}
}

// stop is a clean stop (SIGTERM): r's leases are released at once.
func (s *shareSim) stop(r string) {
	s.live = slices.DeleteFunc(s.live, func(x string) bool { return x == r })
	for node, owner := range s.lease {
		if owner == r {
			delete(s.lease, node)
		}
	}
	delete(s.holds, r)
	delete(s.leaving, r)
}

// view is r's view of the cluster at a poll.
func (s *shareSim) view(r string) shareView {
	v := shareView{me: r, want: map[string]bool{}, holder: map[string]string{}, live: slices.Clone(s.live),
		leaving: map[string]bool{}, zone: s.zone, zones: s.zones}
	for _, n := range s.nodes {
		v.want[n] = true
	}
	for n, o := range s.lease {
		v.holder[n] = o
	}
	for n := range s.leaving[r] {
		if s.lease[n] == r {
			v.leaving[n] = true
		}
	}
	return v
}

// apply carries out r's plan: the nodes it gives up that are not busy are
// handed off (within the budget), the others are held (taking their
// leases if free).
func (s *shareSim) apply(r string, p sharePlan) {
	p.handOff(max(s.budget, 1), func(n string) bool {
		if s.busy[n] || !s.holds[r][n] {
			return false
		}
		delete(s.holds[r], n)
		s.leaving[r][n] = true
		s.handoffs++
		return true
	})
	for n := range s.holds[r] {
		if !p.mine[n] {
			delete(s.holds[r], n)
			if s.lease[n] == r {
				delete(s.lease, n)
			}
		}
	}
	for n := range p.mine {
		switch s.lease[n] {
		case "":
			if !s.dead[n] {
				s.lease[n] = r
				s.moves[n]++
			}
			s.holds[r][n] = true
		case r:
			s.holds[r][n] = true
		default:
			delete(s.holds[r], n) // held elsewhere: the hub lets go
		}
	}
}

// round is one access.poll of every replica, in a random order; at once:
// every replica plans from the same snapshot (polls that overlap). Then
// the links handed off close and release their leases, some a round
// later.
func (s *shareSim) round(rng *rand.Rand, atOnce bool) {
	order := slices.Clone(s.live)
	rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
	plans := map[string]sharePlan{}
	for _, r := range order {
		if atOnce {
			plans[r] = s.view(r).plan()
		} else {
			s.apply(r, s.view(r).plan())
		}
	}
	for _, r := range order {
		if atOnce {
			s.apply(r, plans[r])
		}
	}
	for r, ns := range s.leaving {
		for n := range ns {
			if rng.IntN(2) == 0 {
				continue // still closing (deactivating SOL): next round
			}
			if s.lease[n] == r {
				delete(s.lease, n)
			}
			delete(ns, n)
		}
	}
}

// randomReplicas names 1 to most replicas.
func randomReplicas(rng *rand.Rand, most int) []string {
	var reps []string
	for i := range 1 + rng.IntN(most) {
		reps = append(reps, fmt.Sprintf("rep-%d", i))
	}
	return reps
}

func (s *shareSim) counts() map[string]int {
	c := map[string]int{}
	for _, r := range s.live {
		c[r] = 0
	}
	for _, o := range s.lease {
		c[o]++
	}
	return c
}

// balanced reports whether every node is held, none is being handed off
// and every live replica holds floor or ceil of nodes / replicas.
func (s *shareSim) balanced() bool {
	if len(s.lease) != len(s.nodes) {
		return false
	}
	for _, ns := range s.leaving {
		if len(ns) > 0 {
			return false
		}
	}
	lo := len(s.nodes) / len(s.live)
	hi := (len(s.nodes) + len(s.live) - 1) / len(s.live)
	for _, c := range s.counts() {
		if c < lo || c > hi {
			return false
		}
	}
	return true
}

// settle runs rounds until the cluster is balanced (within limit rounds),
// then checks that nothing moves for a few more.
func (s *shareSim) settle(t *testing.T, rng *rand.Rand, atOnce bool, limit int) {
	t.Helper()
	rounds := 0
	for ; !s.balanced(); rounds++ {
		if rounds == limit {
			t.Fatalf("not balanced after %d rounds: %v, %d of %d nodes held", limit, s.counts(), len(s.lease), len(s.nodes))
		}
		s.round(rng, atOnce)
	}
	before := maps.Clone(s.lease)
	handoffs := s.handoffs
	for range 10 {
		s.round(rng, atOnce)
		for _, r := range s.live {
			if s.view(r).plan().awaiting {
				t.Fatalf("balanced at %v, %s still awaits a hand-off", s.counts(), r)
			}
		}
	}
	if !maps.Equal(before, s.lease) || s.handoffs != handoffs {
		t.Fatalf("balanced at %v, then links moved: %v -> %v (%d hand-offs)", s.counts(), before, s.lease, s.handoffs-handoffs)
	}
}

// TestSharePlanJoin: a replica that joins a cluster whose links another
// holds gets its share, the links moving one a poll, none twice, and
// nothing moves once balanced: 4 nodes held by A, B joins: 2 and 2, after
// exactly 2 hand-offs (before rebalancing B held none).
func TestSharePlanJoin(t *testing.T) {
	for _, atOnce := range []bool{false, true} {
		rng := rand.New(rand.NewPCG(1, 2))
		s := newShareSim(4, "rep-a")
		s.settle(t, rng, atOnce, 5)
		s.join("rep-b")
		if p := s.view("rep-b").plan(); !p.awaiting || p.target != 2 || len(p.mine) != 0 {
			t.Errorf("rep-b joining: plan %+v, want a share of 2, none held and a hand-off awaited", p)
		}
		s.settle(t, rng, atOnce, 20)
		if c := s.counts(); c["rep-a"] != 2 || c["rep-b"] != 2 || s.handoffs != 2 {
			t.Errorf("at once %v: after B joined: %v with %d hand-offs, want 2 and 2 after 2", atOnce, c, s.handoffs)
		}
		for n, k := range s.moves {
			if k > 2 {
				t.Errorf("at once %v: %s changed holder %d times (taken, handed off once at most)", atOnce, n, k)
			}
		}
	}
}

// TestSharePlanRollingRestart: three replicas, 7 nodes; each replica in
// turn stops (its leases released) and starts again. After each restart
// the cluster is balanced again (the restarted replica gets its share,
// where before rebalancing the last one restarted held none), with no
// more hand-offs than the restarted replica's share.
func TestSharePlanRollingRestart(t *testing.T) {
	for _, atOnce := range []bool{false, true} {
		rng := rand.New(rand.NewPCG(3, 4))
		s := newShareSim(7, "rep-a", "rep-b", "rep-c")
		s.settle(t, rng, atOnce, 10)
		for _, r := range []string{"rep-a", "rep-b", "rep-c"} {
			s.stop(r)
			s.settle(t, rng, atOnce, 10)
			s.join(r)
			before := s.handoffs
			s.settle(t, rng, atOnce, 20)
			if got := s.counts()[r]; got < 2 || s.handoffs-before > 3 {
				t.Errorf("at once %v: %s restarted holds %d (want 2 or 3) after %d hand-offs: %v", atOnce, r, got, s.handoffs-before, s.counts())
			}
		}
	}
}

// TestSharePlanRandom: random clusters (nodes, replicas, who holds what,
// some nodes unheld) always end balanced and stay so, with hardly more
// hand-offs than the excess over the shares at the start: a hand-off
// whose lease is still held at the next poll ranks its replica as if it
// held it, which can cost one more move (in 20,000 runs: 1 more in 0.4%,
// 2 more in 0.01%).
func TestSharePlanRandom(t *testing.T) {
	for seed := range uint64(1000) {
		rng := rand.New(rand.NewPCG(seed, 7))
		atOnce := seed%2 == 1
		reps := randomReplicas(rng, 5)
		s := newShareSim(rng.IntN(25), reps...)
		skew := rng.IntN(len(reps)) // how many replicas the nodes start on
		for _, n := range s.nodes {
			if rng.IntN(5) > 0 {
				r := reps[rng.IntN(skew+1)]
				s.lease[n] = r
				s.holds[r][n] = true
			}
		}
		live := map[string]bool{}
		for _, r := range reps {
			live[r] = true
		}
		excess := 0
		counts := s.counts()
		for r, share := range shareTargets(live, counts, len(s.nodes)) {
			excess += max(counts[r]-share, 0)
		}
		t.Run(fmt.Sprintf("seed%d", seed), func(t *testing.T) {
			s.settle(t, rng, atOnce, 4*len(s.nodes)+10)
			if s.handoffs > excess+2 {
				t.Errorf("%d nodes on %d replicas, start %v (at once %v): %d hand-offs, want at most %d (the excess, and two more when leases are slow to go)",
					len(s.nodes), len(reps), counts, atOnce, s.handoffs, excess)
			}
		})
	}
}

// TestSharePlanBusyStays: links with a viewer attached are never handed
// off: a replica holding only busy links keeps them, the other stays short
// of its share, and nothing flaps meanwhile; once the viewers leave, the
// links move.
func TestSharePlanBusyStays(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	s := newShareSim(4, "rep-a")
	s.settle(t, rng, false, 5)
	for _, n := range s.nodes {
		s.busy[n] = true
	}
	s.join("rep-b")
	for range 10 {
		s.round(rng, false)
	}
	if c := s.counts(); c["rep-a"] != 4 || s.handoffs != 0 {
		t.Fatalf("busy links: %v after %d hand-offs, want all on rep-a and none", c, s.handoffs)
	}
	if !s.view("rep-b").plan().awaiting { // for a few polls (runCapture's budget)
		t.Error("rep-b, short of its share, does not await the hand-off")
	}
	clear(s.busy)
	s.settle(t, rng, false, 20)
	if c := s.counts(); c["rep-a"] != 2 || c["rep-b"] != 2 {
		t.Errorf("after the viewers left: %v, want 2 and 2", c)
	}
}

// TestSharePlanBalancedStays: a cluster whose replicas each hold floor or
// ceil of the captured nodes, whichever replicas hold the ceil, moves
// nothing (the ceil shares go to the replicas holding the most, not by
// ID: after a rolling restart no link moves for the order of the IDs).
func TestSharePlanBalancedStays(t *testing.T) {
	for seed := range uint64(200) {
		rng := rand.New(rand.NewPCG(seed, 9))
		reps := randomReplicas(rng, 5)
		s := newShareSim(rng.IntN(25), reps...)
		order := slices.Clone(reps)
		rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
		for i, n := range s.nodes { // round robin from a random replica order
			r := order[i%len(order)]
			s.lease[n] = r
			s.holds[r][n] = true
		}
		before := maps.Clone(s.lease)
		s.settle(t, rng, seed%2 == 1, 1)
		if s.handoffs != 0 || !maps.Equal(before, s.lease) {
			t.Errorf("seed %d: a balanced cluster moved links: %d hand-offs, %v -> %v", seed, s.handoffs, before, s.lease)
		}
	}
}

// healthyHeld reports whether every node whose BMC answers is held (its
// lease taken by a live replica), every dead one is held by exactly one
// replica's hub (which retries it, and captures it once it answers), and
// no replica has more to give up.
func (s *shareSim) healthyHeld() bool {
	for _, r := range s.live {
		if len(s.leaving[r]) > 0 || len(s.view(r).plan().giveUp) > 0 {
			return false
		}
	}
	for _, n := range s.nodes {
		hubs := 0
		for _, r := range s.live {
			if s.holds[r][n] {
				hubs++
			}
		}
		if s.dead[n] && hubs != 1 || !s.dead[n] && !slices.Contains(s.live, s.lease[n]) {
			return false
		}
	}
	return true
}

// TestSharePlanDeadBMC: nodes whose BMC does not answer hold no lease
// between attempts, so every replica reads them as unheld. A replica
// whose hub retries one must not count it as its own link: with two hubs
// retrying the same dead node, each counted it, and a healthy node was
// handed off to nobody (both replicas at their share by their own
// counts), uncaptured for good. Every healthy node ends held, each dead
// one retried by one replica, and nothing moves after; also in random
// clusters.
func TestSharePlanDeadBMC(t *testing.T) {
	t.Run("two hubs retrying one dead node", func(t *testing.T) {
		for _, atOnce := range []bool{false, true} {
			rng := rand.New(rand.NewPCG(11, 12))
			s := newShareSim(4, "rep-a", "rep-b")
			s.dead["node-00"] = true
			s.holds["rep-a"]["node-00"], s.holds["rep-b"]["node-00"] = true, true
			s.holds["rep-a"]["node-01"], s.lease["node-01"] = true, "rep-a"
			for _, n := range []string{"node-02", "node-03"} {
				s.holds["rep-b"][n], s.lease[n] = true, "rep-b"
			}
			s.settleDead(t, rng, atOnce, 10)
		}
	})
	for seed := range uint64(500) {
		rng := rand.New(rand.NewPCG(seed, 13))
		atOnce := seed%2 == 1
		reps := randomReplicas(rng, 4)
		s := newShareSim(1+rng.IntN(20), reps...)
		for _, n := range s.nodes {
			if rng.IntN(4) == 0 {
				s.dead[n] = true
			}
			for _, r := range reps { // some nodes in several hubs at the start
				if rng.IntN(len(reps)+1) == 0 {
					s.holds[r][n] = true
					if !s.dead[n] && s.lease[n] == "" {
						s.lease[n] = r
					}
				}
			}
		}
		t.Run(fmt.Sprintf("seed%d", seed), func(t *testing.T) {
			s.settleDead(t, rng, atOnce, 4*len(s.nodes)+10)
		})
	}
}

// settleDead runs rounds until every healthy node is held and each dead
// one retried by one hub (within limit rounds), then checks that nothing
// moves for ten more.
func (s *shareSim) settleDead(t *testing.T, rng *rand.Rand, atOnce bool, limit int) {
	t.Helper()
	for rounds := 0; !s.healthyHeld(); rounds++ {
		if rounds == limit {
			t.Fatalf("at once %v: after %d rounds: leases %v, hubs %v (dead %v)", atOnce, limit, s.lease, s.holds, s.dead)
		}
		s.round(rng, atOnce)
	}
	before, handoffs := maps.Clone(s.lease), s.handoffs
	for range 10 {
		s.round(rng, atOnce)
		if !s.healthyHeld() {
			t.Fatalf("at once %v: settled, then leases %v, hubs %v (dead %v)", atOnce, s.lease, s.holds, s.dead)
		}
	}
	if !maps.Equal(before, s.lease) || s.handoffs != handoffs {
		t.Fatalf("at once %v: settled, then links moved: %v -> %v (%d hand-offs)", atOnce, before, s.lease, s.handoffs-handoffs)
	}
}

// BenchmarkSharePlan: one capture poll's plan at fleet scale, 10,000
// nodes captured on 4 replicas, one of them just joined (holding none):
// the plan of the replica over its share, and of the one awaiting.
func BenchmarkSharePlan(b *testing.B) {
	s := newShareSim(10000, "rep-a", "rep-b", "rep-c", "rep-d")
	for i, n := range s.nodes {
		r := []string{"rep-a", "rep-b", "rep-c"}[i%3]
		s.lease[n] = r
		s.holds[r][n] = true
	}
	for _, r := range []string{"rep-a", "rep-d"} {
		v := s.view(r)
		b.Run(r, func(b *testing.B) {
			for b.Loop() {
				v.plan()
			}
		})
	}
}

// TestSharePlanDeadBMCAttempts: a hub retrying a dead node holds its
// lease during each attempt, so a poll sometimes reads it held and counts
// it for that replica: no healthy link moves for that, once settled.
func TestSharePlanDeadBMCAttempts(t *testing.T) {
	for seed := range uint64(500) {
		rng := rand.New(rand.NewPCG(seed, 17))
		s := newShareSim(1+rng.IntN(20), randomReplicas(rng, 4)...)
		for _, n := range s.nodes {
			s.dead[n] = rng.IntN(4) == 0
		}
		t.Run(fmt.Sprintf("seed%d", seed), func(t *testing.T) {
			s.settleDead(t, rng, seed%2 == 1, 4*len(s.nodes)+10)
			healthy := map[string]string{}
			for n, o := range s.lease {
				if !s.dead[n] {
					healthy[n] = o
				}
			}
			handoffs := s.handoffs
			for range 50 {
				for _, n := range s.nodes { // attempts in progress at the polls, or not
					if !s.dead[n] {
						continue
					}
					delete(s.lease, n)
					for _, r := range s.live {
						if s.holds[r][n] && rng.IntN(2) == 0 {
							s.lease[n] = r
						}
					}
				}
				s.round(rng, seed%2 == 1)
			}
			for n, o := range healthy {
				if s.lease[n] != o {
					t.Errorf("%s moved from %s to %q with dead nodes' attempts (%d hand-offs)", n, o, s.lease[n], s.handoffs-handoffs)
				}
			}
		})
	}
}

package daemon

import (
	"math/rand/v2"
	"testing"

	"github.com/obmd/obmd/db"
)

// zoneBalanced reports whether every node is held by a replica that
// reaches its zone, none is being handed off, and each zone's nodes are
// spread evenly (floor or ceil) over the live replicas that reach it when
// those reach that zone only.
func (s *shareSim) zoneBalanced() bool {
	for _, ns := range s.leaving {
		if len(ns) > 0 {
			return false
		}
	}
	perZone := map[string]map[string]int{} // zone -> holder -> count
	total := map[string]int{}
	for _, n := range s.nodes {
		o := s.lease[n]
		if o == "" || !db.Reaches(s.zones[o], s.zone[n]) {
			return false
		}
		z := s.zone[n]
		if perZone[z] == nil {
			perZone[z] = map[string]int{}
		}
		perZone[z][o]++
		total[z]++
	}
	for z, holders := range perZone {
		var in []string
		for _, r := range s.live {
			if db.Reaches(s.zones[r], z) {
				in = append(in, r)
			}
		}
		lo, hi := total[z]/len(in), (total[z]+len(in)-1)/len(in)
		for _, r := range in {
			if c := holders[r]; c < lo || c > hi {
				return false
			}
		}
	}
	return true
}

// TestSharePlanZones: captured links are shared zone by zone among the
// replicas that reach each zone: rep-a reaches zone a, rep-b zone b, rep-c
// both (and nodes without a zone are everyone's); no node is ever held by
// a replica that does not reach its zone, each zone is balanced among its
// replicas, and a zone whose replicas are all gone is held by no one
// rather than by a replica that cannot reach it.
func TestSharePlanZones(t *testing.T) {
	for _, atOnce := range []bool{false, true} {
		rng := rand.New(rand.NewPCG(7, 8))
		s := newShareSim(24, "rep-a", "rep-b", "rep-c")
		s.zone = map[string]string{}
		s.zones = map[string][]string{"rep-a": {"a"}, "rep-b": {"b"}, "rep-c": {"a", "b"}}
		for i, n := range s.nodes {
			switch i % 3 {
			case 0:
				s.zone[n] = "a"
			case 1:
				s.zone[n] = "b"
			}
		}
		check := func(when string) {
			t.Helper()
			for n, o := range s.lease {
				if !db.Reaches(s.zones[o], s.zone[n]) {
					t.Fatalf("at once %v, %s: %s (zone %q) held by %s, which reaches %v", atOnce, when, n, s.zone[n], o, s.zones[o])
				}
			}
		}
		rounds := 0
		for ; !s.zoneBalanced(); rounds++ {
			if rounds == 40 {
				t.Fatalf("at once %v: not balanced by zone after 40 rounds: %v", atOnce, s.lease)
			}
			s.round(rng, atOnce)
			check("settling")
		}
		// Zone a's replicas stop: its nodes are held by no one; zone b's
		// and the zone-less ones stay held.
		s.stop("rep-a")
		s.stop("rep-c")
		for range 10 {
			s.round(rng, atOnce)
			check("after zone a lost its replicas")
		}
		for _, n := range s.nodes {
			switch o := s.lease[n]; {
			case s.zone[n] == "a" && o != "":
				t.Errorf("at once %v: %s of zone a held by %s", atOnce, n, o)
			case s.zone[n] != "a" && o != "rep-b":
				t.Errorf("at once %v: %s (zone %q) held by %q, want rep-b", atOnce, n, s.zone[n], o)
			}
		}
	}
}

// TestSharePlanZonesBudget: two replicas that both reach zones a and b
// share each zone evenly, with a budget of many hand-offs a poll (the
// default rate), whether one held everything or each held all of one
// zone: a replica over its share in one zone and under it in another,
// even in total, still hands off the excess of the first (else neither
// would ever move), and gives up no more than that excess.
func TestSharePlanZonesBudget(t *testing.T) {
	for _, start := range []string{"one holds all", "one zone each"} {
		for _, atOnce := range []bool{false, true} {
			rng := rand.New(rand.NewPCG(9, 10))
			s := newShareSim(20, "rep-a", "rep-b")
			s.budget = 50
			s.zone = map[string]string{}
			s.zones = map[string][]string{"rep-a": {"a", "b"}, "rep-b": {"a", "b"}}
			for i, n := range s.nodes {
				s.zone[n] = []string{"a", "b"}[i%2]
				owner := "rep-a"
				if start == "one zone each" && i%2 == 1 {
					owner = "rep-b"
				}
				s.lease[n] = owner
				s.holds[owner][n] = true
			}
			rounds := 0
			for ; !s.zoneBalanced(); rounds++ {
				if rounds == 20 {
					t.Fatalf("%s, at once %v: not balanced by zone after 20 rounds: %v", start, atOnce, s.lease)
				}
				s.round(rng, atOnce)
			}
			if s.handoffs > 10+2 {
				t.Errorf("%s, at once %v: %d hand-offs, want about 10 (the excess)", start, atOnce, s.handoffs)
			}
		}
	}
}

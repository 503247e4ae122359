package daemon

import (
	"cmp"
	"maps"
	"slices"

	"github.com/obmd/obmd/db"
)

// shareView is what one capture poll knows of the captured links in the
// cluster: the input of its plan. It is what every replica reads in the
// database (SOL leases, live replicas), and this replica's own hand-offs:
// never what the replicas' hubs hold, which the others cannot see (a hub
// retrying a BMC that does not answer holds no lease between attempts).
type shareView struct {
	me     string
	want   map[string]bool   // the nodes captured always
	holder map[string]string // each node's SOL lease owner; absent: no live lease
	live   []string          // the live replicas (their announcements)
	// leaving are the nodes this replica handed off (HandOff) whose SOL
	// lease it still held at this poll: their links are closing, for
	// another replica to take; they are no longer this replica's.
	leaving map[string]bool
	// zone is each wanted node's zone (absent: none), zones each live
	// replica's (absent: every zone; v.me's included): the links of a
	// zone are shared among the live replicas that reach it (plan).
	zone  map[string]string
	zones map[string][]string
}

// sharePlan is a capture poll's decision: the nodes to hold, and the ones
// it may give up to a replica under its share, zone by zone (those that
// can be handed off, with nobody attached, go, down to the zone's share
// and within the hand-off budget: handOff).
type sharePlan struct {
	mine   map[string]bool
	giveUp []excess
	target int // this replica's share
	// awaiting: this replica is short of its share with no node left to
	// take, and another holds more than its own: a hand-off is coming.
	awaiting bool
	// pending: nodes left to take at a later poll, over the budget of
	// takes (syncCapture).
	pending bool
}

// excess is what a replica holds over its share of one zone's links: the
// nodes to try handing off, in order, and how many of them are to go.
type excess struct {
	labels []string
	over   int
}

// plan shares the captured links among the live replicas. Each replica's
// share is floor or ceil of captured / live: the ceil shares go to the
// replicas holding the most leases (ties by ID), so that links already
// held where they may stay never move, and every replica computes the
// same shares from the same leases. The nodes no live lease holds are
// dealt out to the replicas under their share, in the order of their IDs,
// each taking as many as it is short from the sorted list (claim): every
// replica computes the same deal, so replicas polling at once pick
// different nodes, and a node whose BMC does not answer (no lease between
// its hub's attempts) is retried by one replica, not counted by several
// (each would think it held its share, and a node handed off would be
// taken by none). A replica over its share gives up its excess, at the
// hand-off rate (handOff, handOffBudget): the shares add up to the
// captured nodes, so what one holds over its share others are short of.
// Giving up only lowers a replica's count, which never raises its share
// (the ceil shares go to the replicas holding the most), so it never
// takes back what it gave up: no link flaps, and once every replica
// holds its share nothing moves. The nodes it is handing off (leaving)
// are no longer its own, so that it gives up no more for them; they still
// rank it, as they do in every other replica's view, until their leases
// are released.
//
// With zones, each zone's nodes are shared so among the live replicas that
// reach it (planZone), and a replica holds none of a zone it does not
// reach.
func (v shareView) plan() sharePlan {
	byZone := map[string]map[string]bool{}
	for label := range v.want {
		z := v.zone[label]
		if byZone[z] == nil {
			byZone[z] = map[string]bool{}
		}
		byZone[z][label] = true
	}
	p := sharePlan{mine: map[string]bool{}}
	for _, z := range slices.Sorted(maps.Keys(byZone)) {
		if !db.Reaches(v.zones[v.me], z) {
			continue
		}
		sub := v
		sub.want, sub.live = byZone[z], nil
		for _, id := range v.live {
			if db.Reaches(v.zones[id], z) {
				sub.live = append(sub.live, id)
			}
		}
		q := sub.planZone()
		maps.Copy(p.mine, q.mine)
		p.giveUp = append(p.giveUp, q.giveUp...)
		p.target += q.target
		p.awaiting = p.awaiting || q.awaiting
	}
	return p
}

// planZone is plan for nodes of one zone, shared among v.live.
func (v shareView) planZone() sharePlan {
	mine := map[string]bool{}
	counts := map[string]int{}
	live := map[string]bool{v.me: true}
	for _, id := range v.live {
		live[id] = true
	}
	var unheld []string
	for label := range v.want {
		switch h := v.holder[label]; {
		case h == "":
			unheld = append(unheld, label)
		case !live[h]:
		case h == v.me && !v.leaving[label]:
			mine[label] = true
			fallthrough
		default:
			counts[h]++
		}
	}
	shares := shareTargets(live, counts, len(v.want))
	p := sharePlan{mine: mine, target: shares[v.me]}
	for _, label := range claim(v.me, unheld, counts, shares) {
		mine[label] = true
	}
	if len(mine) < p.target {
		for id := range live {
			p.awaiting = p.awaiting || id != v.me && counts[id] > shares[id]
		}
	}
	if len(mine) <= p.target {
		return p
	}
	labels := slices.Sorted(maps.Keys(mine))
	slices.Reverse(labels) // a stable order: the last first
	p.giveUp = []excess{{labels: labels, over: len(mine) - p.target}}
	return p
}

// handOff hands off, through off (false: it has a viewer, or is no longer
// held), the nodes p gives up, zone by zone in its order, until this
// replica holds its share of each zone or budget of them have gone; those
// are no longer p's. It returns how many went. The share is each zone's,
// not the total's: a replica over its share of one zone and under it of
// another gives up the first's excess, which the other replicas of that
// zone are short of.
func (p *sharePlan) handOff(budget int, off func(label string) bool) int {
	n := 0
	for _, e := range p.giveUp {
		gone := 0
		for _, label := range e.labels {
			if n >= budget || gone >= e.over {
				break
			}
			if p.mine[label] && off(label) {
				delete(p.mine, label)
				n++
				gone++
			}
		}
	}
	return n
}

// deferTakes leaves to later polls (pending) the nodes p holds that are
// not in holding (the links this replica has open) past the first budget
// of them by label: a poll opens at most budget new links. It returns how
// many it kept.
func (p *sharePlan) deferTakes(holding map[string]bool, budget int) int {
	taken := 0
	for _, label := range slices.Sorted(maps.Keys(p.mine)) {
		switch {
		case holding[label]:
		case taken < budget:
			taken++
		default:
			delete(p.mine, label)
			p.pending = true
		}
	}
	return taken
}

// claim is me's part of the unheld nodes: sorted, they go to the replicas
// short of their share (shares less counts) in the order of their IDs,
// each as many as it is short.
func claim(me string, unheld []string, counts, shares map[string]int) []string {
	slices.Sort(unheld)
	ids := slices.Sorted(maps.Keys(shares))
	off := 0
	for _, id := range ids {
		k := max(shares[id]-counts[id], 0)
		if id == me {
			return unheld[min(off, len(unheld)):min(off+k, len(unheld))]
		}
		off += k
	}
	return nil
}

// shareTargets is each live replica's share of n captured links: n / R
// each, and one more for the n % R replicas holding the most (counts),
// ties broken by ID.
func shareTargets(live map[string]bool, counts map[string]int, n int) map[string]int {
	ids := slices.Collect(maps.Keys(live))
	slices.SortFunc(ids, func(a, b string) int {
		return cmp.Or(cmp.Compare(counts[b], counts[a]), cmp.Compare(a, b))
	})
	shares := make(map[string]int, len(ids))
	for i, id := range ids {
		shares[id] = n / len(ids)
		if i < n%len(ids) {
			shares[id]++
		}
	}
	return shares
}

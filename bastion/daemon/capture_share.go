package daemon

import (
	"cmp"
	"hash/crc32"
	"slices"
	"sort"
)

// shareView is what one capture poll knows of the captured links in the
// cluster: the input of its plan.
type shareView struct {
	me      string
	want    map[string]bool   // the nodes captured always
	holder  map[string]string // each node's SOL lease owner; absent: no live lease
	live    []string          // the live replicas (their announcements)
	holding []string          // the nodes this replica's hub holds
	// leaving are the nodes this replica handed off (HandOff) whose SOL
	// lease it still held at this poll: their links are closing, for
	// another replica to take; they are no longer this replica's.
	leaving map[string]bool
}

// sharePlan is a capture poll's decision: the nodes to hold, and the ones
// it may give up to a replica under its share, in the order to try (the
// first that can be handed off, with nobody attached, goes; one a poll).
type sharePlan struct {
	mine   map[string]bool
	giveUp []string
	target int // this replica's share
	// awaiting: this replica is short of its share with no node left to
	// take, and another holds more than its own: a hand-off is coming.
	awaiting bool
}

// plan shares the captured links among the live replicas. Each replica's
// share is floor or ceil of captured / live: the ceil shares go to the
// replicas holding the most (ties by ID), so that links already held
// where they may stay never move, and every replica computes the same
// shares from the same leases. A replica under its share takes unheld
// nodes (from a point of the sorted list that depends on its ID, so that
// replicas polling at once mostly pick different nodes; a lease decides
// a race). A replica over its share gives up its excess, one node a
// poll: the shares add up to the captured nodes, so what one holds over
// its share others are short of, once the unheld nodes are taken. Giving
// up only lowers a replica's count, which never raises its share (the
// ceil shares go to the replicas holding the most), so it never takes
// back what it gave up: no link flaps, and once every replica holds its
// share nothing moves. The nodes it is handing off (leaving) are no
// longer its own, so that it gives up no more for them, nor unheld, as
// their leases are still its own; they still rank it, as they do in every
// other replica's view, until their leases are released.
func (v shareView) plan() sharePlan {
	mine := map[string]bool{}
	for _, label := range v.holding {
		if h := v.holder[label]; v.want[label] && (h == "" || h == v.me) {
			mine[label] = true
		}
	}
	counts := map[string]int{}
	live := map[string]bool{v.me: true}
	for _, id := range v.live {
		live[id] = true
	}
	var unheld []string
	for label := range v.want {
		switch h := v.holder[label]; {
		case h == v.me:
			mine[label] = true
		case h == "" && !mine[label]:
			unheld = append(unheld, label)
		case h != "" && live[h]:
			counts[h]++
		}
	}
	for label := range v.leaving {
		delete(mine, label)
	}
	// Shares are ranked by the leases, as every replica reads them: the
	// nodes leaving still count as this replica's there.
	counts[v.me] = len(mine) + len(v.leaving)
	shares := shareTargets(live, counts, len(v.want))
	p := sharePlan{mine: mine, target: shares[v.me]}
	sort.Strings(unheld)
	start := 0
	if len(unheld) > 0 {
		start = int(crc32.ChecksumIEEE([]byte(v.me)) % uint32(len(unheld)))
	}
	for i := 0; i < len(unheld) && len(mine) < p.target; i++ {
		mine[unheld[(start+i)%len(unheld)]] = true
	}
	if len(mine) < p.target {
		for id := range live {
			p.awaiting = p.awaiting || id != v.me && counts[id] > shares[id]
		}
	}
	if len(mine) <= p.target {
		return p
	}
	for label := range mine {
		p.giveUp = append(p.giveUp, label)
	}
	sort.Sort(sort.Reverse(sort.StringSlice(p.giveUp))) // a stable order: the last first
	return p
}

// shareTargets is each live replica's share of n captured links: n / R
// each, and one more for the n % R replicas holding the most (counts),
// ties broken by ID.
func shareTargets(live map[string]bool, counts map[string]int, n int) map[string]int {
	ids := make([]string, 0, len(live))
	for id := range live {
		ids = append(ids, id)
	}
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

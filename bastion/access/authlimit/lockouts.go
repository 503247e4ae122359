package authlimit

import (
	"cmp"
	"slices"
	"time"
)

// What the operator sees and clears of the limiter (the admin API's
// /v1/lockouts): the sources locked out, the nodes under attack, and the
// lockout of one source lifted.

// SourceLockout is a source address locked out of every node.
type SourceLockout struct {
	// Source is the address as the limiter counts it: an IPv4 address, or
	// an IPv6 /64 ("2001:db8::/64").
	Source string
	// Until is when the lockout ends by itself.
	Until time.Time
	// Failures is the failures counted in the window that locked it;
	// Refused is the tries refused since.
	Failures, Refused int
}

// NodeLockout is a node under attack: until Until, it refuses the sources
// that failed on it (Sources), whatever secret they present.
type NodeLockout struct {
	// Node is the node's label; "" with Unknown for the one entry every
	// name that is no node shares.
	Node    string
	Unknown bool
	Until   time.Time
	// Failures is the failures on the node, from any source, in the
	// window that put it under attack; Refused is the tries refused since.
	Failures, Refused int
	// Sources are the addresses the node refuses (those that failed on it
	// within the window and the lockout before now).
	Sources []string
}

// Lockouts is what the limiter refuses now.
type Lockouts struct {
	Sources []SourceLockout
	Nodes   []NodeLockout
	// More: the list was cut at the number of entries asked for.
	More bool
}

// Limits is the limiter's configuration, with its defaults filled in.
func (l *Limiter) Limits() Config { return l.cfg }

// Lockouts lists the sources locked out and the nodes under attack now,
// sources first, each list ordered by name; at most max entries in all (a
// node's sources each count as one), More telling of the rest.
func (l *Limiter) Lockouts(max int) Lockouts {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	var out Lockouts
	for src, c := range l.src {
		if now.Before(c.locked) {
			out.Sources = append(out.Sources, SourceLockout{Source: src, Until: c.locked, Failures: c.n, Refused: c.refused})
		}
	}
	slices.SortFunc(out.Sources, func(a, b SourceLockout) int { return cmp.Compare(a.Source, b.Source) })
	if len(out.Sources) > max {
		out.Sources, out.More = out.Sources[:max], true
		return out
	}
	left := max - len(out.Sources)
	attacked := map[uint64]int{} // node key -> index in out.Nodes
	for k, c := range l.node {
		if now.Before(c.locked) {
			attacked[k] = len(out.Nodes)
			out.Nodes = append(out.Nodes, NodeLockout{Node: c.name, Unknown: k == unknownNode, Until: c.locked,
				Failures: c.n, Refused: c.refused})
		}
	}
	horizon := l.cfg.Window + l.cfg.Lockout
	for p, last := range l.pairs {
		if i, ok := attacked[p.node]; ok && now.Sub(last) < horizon {
			out.Nodes[i].Sources = append(out.Nodes[i].Sources, p.src)
		}
	}
	// The entry of unknown names has no name: it comes first.
	slices.SortFunc(out.Nodes, func(a, b NodeLockout) int { return cmp.Compare(a.Node, b.Node) })
	for i := range out.Nodes {
		if left == 0 {
			out.Nodes, out.More = out.Nodes[:i], true
			break
		}
		left--
		n := &out.Nodes[i]
		slices.Sort(n.Sources)
		if len(n.Sources) > left {
			n.Sources, out.More = n.Sources[:left], true
		}
		left -= len(n.Sources)
	}
	return out
}

// Unlock lifts source's lockout: its failures are forgotten, and the
// nodes under attack no longer refuse it. It returns the source as the
// limiter counts it (an IPv6 address as its /64) and whether anything
// refused it. Tries of the source waiting for a slot (Begin) try again at
// once. Unlocking a source that is not locked out changes nothing but its
// count of failures.
func (l *Limiter) Unlock(source string) (key string, wasLocked bool) {
	key = sourceKey(source)
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	if c := l.src[key]; c != nil {
		wasLocked = now.Before(c.locked)
		if c.pending > 0 { // its tries in flight still End through it
			c.start, c.n, c.locked, c.refused = now, 0, time.Time{}, 0
			if c.settled != nil { // tries waiting for a slot may have one now
				close(c.settled)
				c.settled = nil
			}
		} else {
			delete(l.src, key)
		}
	}
	horizon := l.cfg.Window + l.cfg.Lockout
	for p, last := range l.pairs {
		if p.src != key {
			continue
		}
		if nc := l.node[p.node]; nc != nil && now.Before(nc.locked) && now.Sub(last) < horizon {
			wasLocked = true
		}
		delete(l.pairs, p)
	}
	return key, wasLocked
}

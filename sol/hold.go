package sol

import (
	"context"
	"errors"
	"sort"

	"github.com/obmd/obmd/sol/history"
)

// Hold keeps label's console link open with nobody attached, until
// Release: what capture "always" does, so that the node's history records
// what it prints when no one watches. The link opens now if it is not open
// yet, reconnects with the usual backoff while the BMC does not answer,
// and comes back after a Cut (an access change ends the tenancy, not the
// capture). A link held with nobody attached never relays: if another
// replica holds the node's link (OwnConsoler, ErrHeldElsewhere), that one
// captures it and the hold is dropped here, as it is once a held link has
// become a relay and its last viewer leaves. A held node whose BMC has no
// console at all (ErrNotSupported) stays held and closed, counted down in
// Stats, until an access change of it (Cut) or Release. Holding a held
// label does nothing; after Close it returns ErrShutdown (wrapped).
func (m *Manager) Hold(label string) error {
	if label == "" {
		return errors.New("hold: empty node label")
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return errors.Join(errors.New("hold "+label), ErrShutdown)
	}
	if m.holds[label] {
		return nil
	}
	m.holds[label] = true
	if n := m.nodes[label]; n != nil {
		n.mu.Lock()
		n.held = true
		n.mu.Unlock()
		signal(n.wake) // no linger now
		return nil
	}
	_, start := m.newNodeLocked(label)
	start()
	return nil
}

// Release ends label's hold: its link closes Linger after its last viewer
// has left, as any other. Releasing a label not held does nothing.
func (m *Manager) Release(label string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.dropHoldLocked(label)
}

// dropHoldLocked ends label's hold. m.mu is held.
func (m *Manager) dropHoldLocked(label string) {
	if !m.holds[label] {
		return
	}
	delete(m.holds, label)
	if n := m.nodes[label]; n != nil {
		n.mu.Lock()
		n.held = false
		n.mu.Unlock()
		signal(n.wake) // linger, if nobody is attached
	}
}

// ErrHandedOff closes a held link given up with HandOff: another replica
// captures the node.
var ErrHandedOff = errors.New("console link handed to another obmd replica")

// HandOff ends label's hold and closes its link at once, without linger,
// so that another replica captures the node: the cluster's rebalancing of
// captured links. As at a clean stop (Close), the history gets a "console
// link lost" marker if the link was up, and the link's SOL lease is
// released once it has closed. A node with anyone attached (a viewer of
// this hub or a relay carrying another replica's) is not handed off:
// they would see the link move. It reports whether it did; if not, the
// hold stays.
func (m *Manager) HandOff(label string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.holds[label] || m.closed {
		return false
	}
	if n := m.nodes[label]; n != nil {
		n.mu.Lock()
		defer n.mu.Unlock()
		if len(n.viewers) > 0 {
			return false
		}
		n.held = false
		m.retireLocked(n, ErrHandedOff)
	}
	delete(m.holds, label)
	m.st.handoffs.Add(1)
	return true
}

// Holding lists the labels held, sorted.
func (m *Manager) Holding() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]string, 0, len(m.holds))
	for label := range m.holds {
		out = append(out, label)
	}
	sort.Strings(out)
	return out
}

// captured counts the held links whose console is up, and the others.
func (m *Manager) captured() (up, down int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for label := range m.holds {
		n := m.nodes[label]
		if n == nil {
			down++
			continue
		}
		n.mu.Lock()
		if n.up {
			up++
		} else {
			down++
		}
		n.mu.Unlock()
	}
	return up, down
}

// letGo ends the hold of n, a node held with nobody attached, and retires
// it with ErrDetached: another replica holds its link (ErrHeldElsewhere),
// or it has become a relay and its last viewer left. It reports whether it
// did (not if a viewer attached meanwhile). Owner only.
func (n *node) letGo() bool {
	m := n.m
	m.mu.Lock()
	defer m.mu.Unlock()
	n.mu.Lock()
	defer n.mu.Unlock()
	if len(n.viewers) > 0 || n.retired {
		return n.retired
	}
	if m.nodes[n.label] == n {
		delete(m.holds, n.label)
	}
	n.held = false
	m.retireLocked(n, ErrDetached)
	return true
}

// closed runs when an established console is closed on purpose, right
// before it is (serve): a node held for capture that stops because obmd
// does, or handed off to another replica (HandOff), marks the gap in its
// history (until another replica, or this one restarted, captures it). The
// node has retired, so no output comes after the marker.
func (n *node) closed(ctx context.Context) {
	n.mu.Lock()
	held := n.held
	n.mu.Unlock()
	cause := context.Cause(ctx)
	if errors.Is(cause, ErrHandedOff) || held && errors.Is(cause, ErrShutdown) {
		n.mark(history.LinkLost())
	}
	if errors.Is(cause, ErrHandedOff) && n.m.hist != nil {
		// The next holder takes the link at its next poll and stores its
		// first output a flush interval later: this replica's last output
		// goes first.
		fctx, cancel := context.WithTimeout(context.Background(), n.m.cfg.OpenTimeout)
		defer cancel()
		if err := n.m.hist.Flush(fctx); err != nil {
			n.log.WithError(err).Warn("console history flush after hand-off failed")
		}
	}
}

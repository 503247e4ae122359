package cluster

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/sirupsen/logrus"
)

// Self-fencing. A replica that cannot be told of an access change (Notify)
// is counted as stopped once its announcement in the database has expired,
// and its SOL leases are taken over once they have: from then on the
// others act without it. So a replica must have stopped serving before
// either can happen, whatever it is cut off from (the database, the other
// replicas) and whether or not its own calls return:
//
//   - its announcement: FenceMargin before it expires, measured on this
//     replica's monotonic clock from before the write that last renewed it
//     (the row's expiry is stamped when the write runs, which is no earlier
//     than it began), Guard fences the replica: it closes every SOL link it
//     holds and cuts every session (the caller's fence), and the replica
//     refuses logins, consoles and relays (Fenced) until an announcement
//     succeeds again;
//   - a SOL lease: FenceMargin before it expires, measured the same way
//     from before its last acquisition or renewal, its link is closed
//     (heldConsole.renew);
//   - and another replica counts this one as stopped only once its
//     announcement expired FenceMargin ago (Notify).
//
// The margins, twice FenceMargin between the fence and the moment another
// replica acts, cover the time a fence takes, the clocks' rates (a few
// parts per million) and the difference between the clock that stamps an
// expiry and the one that reads it (the replicas' clocks, kept in sync by
// NTP, or the database's). A replica that never announced (starting) is
// fenced too: no one would wait for it.

// fence is a replica's fence deadline.
type fence struct {
	mu sync.Mutex
	at time.Time // monotonic; zero: never announced
	// moved has a value when at moved: it wakes Guard.
	moved chan struct{}
}

func newFence() fence { return fence{moved: make(chan struct{}, 1)} }

// move sets the deadline to at, if that is later.
func (f *fence) move(at time.Time) {
	f.mu.Lock()
	if at.After(f.at) {
		f.at = at
	}
	f.mu.Unlock()
	select {
	case f.moved <- struct{}{}:
	default:
	}
}

func (f *fence) deadline() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.at
}

// errFenced is why a link is closed when its replica fences itself.
var errFenced = errors.New("this replica could not renew its announcement in time (database or network lost): it stops serving consoles")

// fenceAfter is how long after an announcement (or a SOL lease's
// renewal) begins this replica fences itself, unless it is renewed.
func (c *Cluster) fenceAfter() time.Duration { return c.cfg.LeaseTTL - c.cfg.FenceMargin }

// FenceAfter is how long after its last announcement began this replica
// stops serving (Guard): sessions cannot outlast the loss of the database
// by more.
func (c *Cluster) FenceAfter() time.Duration { return c.fenceAfter() }

// Fenced reports whether this replica must not serve: it has not announced
// itself yet, or its last announcement is about to expire for the others.
// The daemon refuses logins, sessions, consoles and relays meanwhile.
func (c *Cluster) Fenced() bool {
	at := c.fence.deadline()
	return at.IsZero() || !time.Now().Before(at)
}

// Guard fences this replica each time its fence deadline passes: it closes
// every SOL link it holds, then calls cut (the daemon cuts every session),
// and waits for an announcement to move the deadline again. It returns nil
// when ctx ends; its caller owns it (the daemon's run group).
func (c *Cluster) Guard(ctx context.Context, cut func()) error {
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	fenced := true // until the first announcement: nothing to cut yet
	for {
		at := c.fence.deadline()
		switch {
		case !at.IsZero() && !fenced && !time.Now().Before(at):
			fenced = true
			c.log.WithField("late", time.Since(at).Round(time.Millisecond).String()).Warn("replica_fenced")
			c.closeLinks(errFenced)
			cut()
			continue
		case !at.IsZero() && fenced && time.Now().Before(at):
			fenced = false
			c.log.Info("replica_serving")
		}
		wait := time.Hour
		if !fenced {
			wait = time.Until(at)
		}
		t.Reset(wait)
		select {
		case <-ctx.Done():
			return nil
		case <-c.fence.moved:
		case <-t.C:
		}
	}
}

// track records h, a link this replica holds, until untrack.
func (c *Cluster) track(h *heldConsole) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.links[h] = struct{}{}
}

func (c *Cluster) untrack(h *heldConsole) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.links, h)
}

// closeLinks closes every SOL link this replica holds, under their hubs
// (which see them lost and reconnect through the cluster).
func (c *Cluster) closeLinks(why error) {
	c.mu.Lock()
	links := make([]*heldConsole, 0, len(c.links))
	for h := range c.links {
		links = append(links, h)
	}
	c.mu.Unlock()
	for _, h := range links {
		h.lose(why)
	}
	if len(links) > 0 {
		c.log.WithFields(logrus.Fields{"links": len(links)}).Warn("sol_links_fenced")
	}
}

package cluster

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/obmd/obmd/db"
	"github.com/obmd/obmd/sol"
)

// OpenConsole returns the node's console through the cluster: with the SOL
// lease, the real console (renewing the lease while it is open); without
// it, a relay through the holder. A holder that cannot be reached (dead,
// or not serving the node) is waited out: the attempt polls until its lease
// expires and takes it over, bounded by ctx.
//
// Either way this replica first makes sure it has applied the node's
// current access epoch (Access.Current; after taking the lease, so that a
// change committed before this replica became the holder is seen, and one
// committed after reaches it as the holder), and a relay carries that
// epoch: the holder serves it only at the node's current epoch. If the
// epoch moved, this replica applies the change, which cuts the console
// being opened: the open fails.
func (b *bmc) OpenConsole(ctx context.Context) (sol.Console, error) {
	return b.open(ctx, false)
}

// open is OpenConsole; own (OpenOwnConsole) never relays: a lease held by
// another replica is sol.ErrHeldElsewhere.
func (b *bmc) open(ctx context.Context, own bool) (sol.Console, error) {
	c := b.c
	b.mu.Lock()
	token := b.pending
	b.mu.Unlock()
	if token == "" {
		token = newToken()
	}
	log := c.log.WithField("node", b.label)
	zone, reach, err := c.reachNode(ctx, b.label)
	if err != nil {
		return nil, fmt.Errorf("open console of %s: %w: %w", b.label, sol.ErrUnverified, err)
	}
	var lastErr error
	caughtUp := false
	for {
		if !reach { // another replica holds or opens it (zones.go)
			if own {
				return nil, fmt.Errorf("open console of %s: %w", b.label, sol.ErrHeldElsewhere)
			}
			con, err := c.openThroughZone(ctx, b.label, zone, log)
			switch {
			case err == nil:
				return con, nil
			case errors.Is(err, ErrNoZoneReplica):
				return nil, fmt.Errorf("open console of %s: %w", b.label, err)
			}
			if errors.Is(err, errStale) && !caughtUp {
				caughtUp = true
				continue
			}
			if c.pause(ctx, time.Time{}) != nil {
				return nil, fmt.Errorf("open console of %s: %w", b.label, err)
			}
			continue
		}
		start := time.Now() // the lease expires no sooner than LeaseTTL after this
		held, err := c.store.AcquireLease(ctx, c.lease(b.label, db.LeaseSOL, token), c.cfg.LeaseTTL)
		if err == nil {
			if _, err := c.access.Current(ctx, b.label); err != nil {
				b.drop(token)
				return nil, fmt.Errorf("open console of %s: %w", b.label, err)
			}
			return b.openHeld(ctx, token, start.Add(c.fenceAfter()), log)
		}
		// A lease this attempt held (it met an active payload) is lost.
		b.mu.Lock()
		pending := b.pending == token
		b.mu.Unlock()
		if pending {
			b.drop(token)
		}
		if !errors.Is(err, db.ErrLeaseHeld) {
			return nil, fmt.Errorf("open console of %s: %w: %w", b.label, sol.ErrUnverified, err)
		}
		switch {
		case held.Owner == c.cfg.ReplicaID:
			// A previous run of this replica (same ID) held it: wait.
			lastErr = fmt.Errorf("SOL lease held by an earlier run of this replica until %s", held.ExpiresAt.Format(time.RFC3339))
		case own:
			return nil, fmt.Errorf("open console of %s: replica %s holds it: %w", b.label, held.Owner, sol.ErrHeldElsewhere)
		case held.Addr == "":
			lastErr = fmt.Errorf("SOL lease held by replica %s, which has no peer address", held.Owner)
		default:
			epoch, err := c.access.Current(ctx, b.label)
			if err != nil {
				return nil, fmt.Errorf("open console of %s: %w", b.label, err)
			}
			con, err := c.dialRelay(ctx, held, b.label, epoch, false)
			if err == nil {
				log.WithFields(logrus.Fields{"holder": held.Owner, "epoch": epoch}).Info("sol_relay_opened")
				return con, nil
			}
			lastErr = err
			log.WithError(err).WithField("holder", held.Owner).Debug("sol_relay_failed")
			if errors.Is(err, errStale) && !caughtUp {
				caughtUp = true
				continue // behind the node's epoch: Current catches up at once
			}
		}
		if c.pause(ctx, held.ExpiresAt) != nil {
			// Not the context's error: the hub would read a deadline as
			// "the BMC did not answer".
			return nil, fmt.Errorf("open console of %s: gave up waiting for replica %s, which holds its SOL link: %w",
				b.label, held.Owner, lastErr)
		}
	}
}

// pause waits before the next attempt: a short while, or until the
// holder's lease expires if that is sooner.
func (c *Cluster) pause(ctx context.Context, expires time.Time) error {
	d := min(max(c.cfg.LeaseTTL/10, 100*time.Millisecond), time.Second)
	if until := time.Until(expires) + 10*time.Millisecond; until > 0 && until < d {
		d = until
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// openHeld activates SOL under the lease token holds, which this replica
// must give up by deadline unless it renews it (fence.go). An active
// payload keeps the lease for the hub's deactivate-and-retry; any other
// failure gives it up.
func (b *bmc) openHeld(ctx context.Context, token string, deadline time.Time, log logrus.FieldLogger) (sol.Console, error) {
	c := b.c
	c.hold(b.label, token)
	b.mu.Lock()
	fresh := b.pending == ""
	b.pending = token
	b.mu.Unlock()
	if fresh {
		log.Info("sol_lease_acquired")
	}
	con, err := b.inner.OpenConsole(ctx)
	if errors.Is(err, sol.ErrPayloadActive) {
		return nil, err
	}
	if err != nil {
		b.drop(token)
		return nil, err
	}
	b.mu.Lock()
	b.pending = ""
	b.mu.Unlock()
	h := &heldConsole{Console: con, c: c, label: b.label, token: token, deadline: deadline, log: log,
		stop: make(chan struct{}), done: make(chan struct{}), fenced: make(chan struct{})}
	c.track(h)
	// The fence closes the link at the deadline whatever the renewer is
	// doing (a renewal stuck in the database). Owned by h: Close stops it,
	// or waits for it if it has fired.
	h.fence = time.AfterFunc(time.Until(deadline), h.expire)
	go h.renew() // owned by h: Close stops it and waits
	return h, nil
}

// heldConsole is the real console of a node whose SOL lease this replica
// holds. A goroutine renews the lease while it is open; if the lease is
// lost (taken by another replica, or not renewed FenceMargin before it
// would expire, or this replica fenced itself) the console is closed under
// the hub, whose Read then fails, so the hub reconnects through the
// cluster again.
type heldConsole struct {
	sol.Console
	c     *Cluster
	label string
	token string
	log   logrus.FieldLogger

	stop      chan struct{} // closed by Close: the renewer stops
	done      chan struct{} // closed by the renewer when it returns
	fence     *time.Timer   // runs expire at the deadline; moved by the renewer
	fenced    chan struct{} // closed by expire when it has run
	closeOnce sync.Once
	closeErr  error
	// deadline is when the link must be closed unless the lease is
	// renewed: FenceMargin before the lease runs out as last renewed,
	// measured from before the renewal (fence.go). Set before the renewer
	// starts, then read and written by the renewer alone.
	deadline time.Time

	mu   sync.Mutex
	lost error // why the lease was lost; nil while held. Set by the renewer, read by Read
}

// Read returns the driver's bytes; after the lease was lost its error says
// so.
func (h *heldConsole) Read(p []byte) (int, error) {
	n, err := h.Console.Read(p)
	if err != nil {
		h.mu.Lock()
		lost := h.lost
		h.mu.Unlock()
		if lost != nil {
			return n, lost
		}
	}
	return n, err
}

// Close stops renewing, deactivates SOL and releases the lease.
func (h *heldConsole) Close() error {
	close(h.stop)
	<-h.done
	if !h.fence.Stop() {
		<-h.fenced
	}
	h.c.untrack(h)
	err := h.closeInner()
	h.c.releaseSOL(h.label, h.token)
	h.log.Info("sol_lease_released")
	return err
}

// lose closes the console under the hub because the lease is lost (why);
// the hub's Read then reports why. The first reason stays.
func (h *heldConsole) lose(why error) {
	h.mu.Lock()
	first := h.lost == nil
	if first {
		h.lost = why
	}
	h.mu.Unlock()
	if first {
		h.log.WithError(why).Warn("sol_lease_lost")
	}
	h.closeInner() // unblocks the hub's Read, which then reports lost
}

func (h *heldConsole) closeInner() error {
	h.closeOnce.Do(func() { h.closeErr = h.Console.Close() })
	return h.closeErr
}

// expire closes the link at its deadline: the lease was not renewed in
// time, and another replica may take it over soon after.
func (h *heldConsole) expire() {
	defer close(h.fenced)
	h.lose(fmt.Errorf("SOL lease of %s not renewed in time: its link is closed before the lease expires", h.label))
}

// renew keeps the lease while the console is open, moving the fence after
// each renewal. A renewal the database refuses (the token no longer holds
// it) loses the lease at once; failed or slow renewals (database
// unreachable) lose it at the deadline (expire). A renewal is bounded by
// the deadline too, and the first one comes at once if less than two
// renewal intervals are left (a console slow to open).
func (h *heldConsole) renew() {
	defer close(h.done)
	next := h.c.cfg.Renew
	if time.Until(h.deadline) < 2*next {
		next = 0
	}
	tick := time.NewTimer(next)
	defer tick.Stop()
	for {
		select {
		case <-h.stop:
			return
		case <-h.fenced:
			return
		case <-tick.C:
		}
		tick.Reset(h.c.cfg.Renew)
		start := time.Now()
		bound := start.Add(h.c.cfg.Renew)
		if h.deadline.Before(bound) {
			bound = h.deadline
		}
		ctx, cancel := context.WithDeadline(context.Background(), bound)
		_, err := h.c.store.RenewLease(ctx, h.label, db.LeaseSOL, h.token, h.c.cfg.LeaseTTL)
		cancel()
		switch {
		case err == nil:
			if !h.fence.Stop() {
				return // fenced meanwhile
			}
			h.deadline = start.Add(h.c.fenceAfter())
			h.fence.Reset(time.Until(h.deadline))
		case errors.Is(err, db.ErrNotFound):
			h.lose(fmt.Errorf("SOL lease of %s lost: another replica took it", h.label))
			return
		default:
			h.log.WithError(err).Warn("sol_lease_renew_failed")
		}
	}
}

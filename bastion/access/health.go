package access

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/obmd/obmd/db"
)

// ErrDBDown is what the Gate's lookups fail with while this replica cannot
// use its database: at once, rather than wait for it.
var ErrDBDown = errors.New("the database is not answering (or not completing writes)")

// readySlack is how much longer than the stall bound Ready waits for the
// write probe, so that a probe held by a frozen disk counts as stuck in
// that very check.
const readySlack = 250 * time.Millisecond

// HealthStore is what Health reads of the database (*db.Store).
type HealthStore interface {
	Ping(ctx context.Context) error
	CheckWrites(ctx context.Context, bound time.Duration) error
	OldestWrite() time.Duration
	Committed() uint64
	StallBound() time.Duration
}

// Fence tells whether this replica has fenced itself (cluster mode:
// *cluster.Cluster): its announcement may lapse for the other replicas,
// which then act without it, so it must not serve as if it could use the
// database.
type Fence interface {
	Fenced() bool
}

// Health is this replica's judgement of its database: whether the last look
// at it (the Watcher's poll) failed with no write committed since, whether
// a write has been held past the store's stall bound (seen at once,
// without waiting for the next poll), and, in cluster mode, whether it is
// fenced. The stall bound is the store's (db.Store.StallBound): 2 s, or on
// a Galera node as long as the cluster may hold every write while it
// evicts a dead member, and then a little more, so that the death of one
// database node takes no replica on the others out of service. Safe for
// concurrent use.
type Health struct {
	store HealthStore
	fence Fence // nil: single-replica mode
	stall time.Duration
	// down is 0 while the last look was good; after a failed one, 1 + the
	// store's Committed count then, so that a write committed since shows
	// the database answers again. Written by the Watcher.
	down atomic.Uint64
}

// NewHealth returns the Health of store, which counts as answering until
// the Watcher's first look says otherwise. fence is nil in single-replica
// mode.
func NewHealth(store HealthStore, fence Fence) *Health {
	return &Health{store: store, fence: fence, stall: store.StallBound()}
}

// Usable reports whether this replica can use its database now: it
// answers, completes writes, and (cluster mode) this replica is not fenced.
func (h *Health) Usable() bool {
	return !h.lookFailed() && h.store.OldestWrite() <= h.stall && !h.fenced()
}

func (h *Health) fenced() bool { return h.fence != nil && h.fence.Fenced() }

// lookFailed says whether the last look failed and no write has committed
// since.
func (h *Health) lookFailed() bool {
	d := h.down.Load()
	return d != 0 && h.store.Committed() == d-1
}

// state is Usable's judgement as an error (nil: usable).
func (h *Health) state() error {
	switch {
	case h.fenced():
		return errors.New("this replica could not renew its announcement in time: it is fenced")
	case h.lookFailed():
		return errors.New("the last poll of the database failed")
	}
	if age := h.store.OldestWrite(); age > h.stall {
		return fmt.Errorf("%w: a write has been in progress for %v", db.ErrWriteStuck, age.Round(time.Millisecond))
	}
	return nil
}

// Ready is /readyz's check: this replica's database is usable (Usable),
// answers a read, and completes the write probe, each within the stall
// bound (waited for a little longer, so that a probe held by a frozen disk
// counts as stuck in this very check). A database that answers with an
// error is not ready at once (a dead Galera node's replica: its
// connections are refused). If ctx ends first, while the database holds
// the read or the probe for less than the stall bound (a Galera cluster
// evicting a dead member), the check passes: every replica on the
// surviving nodes is held alike, and the cluster goes on by itself; one
// held longer fails a later check, the probe then being stuck.
func (h *Health) Ready(ctx context.Context) error {
	if err := h.state(); err != nil {
		return err
	}
	wait, cancel := context.WithTimeout(ctx, h.stall+readySlack)
	defer cancel()
	readErr := h.store.Ping(wait)
	held := wait.Err() != nil // the wait ended before the read answered
	if readErr != nil && !held {
		return readErr
	}
	// The write probe, started even when the read is held, so that a
	// database held past the stall bound shows as a stuck write.
	if err := h.store.CheckWrites(wait, h.stall); err != nil {
		return err
	}
	switch {
	case !held && wait.Err() == nil:
		return nil
	case ctx.Err() == nil: // the stall bound passed
		return fmt.Errorf("the database did not answer within %v", h.stall)
	}
	return h.state() // ctx ended first: held, within the stall bound
}

// look is one look at the database's health, by the Watcher at each poll:
// a read (the poll itself, done by the caller: readErr), and writes: none
// held past the stall bound, and the write probe, which it starts without
// waiting for it (a probe stuck in a frozen disk shows up as a stuck write
// at a later poll). It records and returns the outcome.
func (h *Health) look(readErr error) error {
	err := readErr
	if err == nil {
		ctx, cancel := context.WithCancel(context.Background())
		cancel() // look, do not wait
		err = h.store.CheckWrites(ctx, h.stall)
	}
	if err != nil {
		h.down.Store(h.store.Committed() + 1)
	} else {
		h.down.Store(0)
	}
	return err
}

// GateStore is the database as the Gate passes it on (*db.Store).
type GateStore interface {
	Access(ctx context.Context, label string) (db.Access, error)
	HasKey(ctx context.Context, label, fingerprint string) (epoch int64, ok bool, err error)
	CertAccess(ctx context.Context, label, ca string, serial uint64, keyID string) (db.CertAccess, error)
	Epoch(ctx context.Context, label string) (int64, error)
	Settle(ctx context.Context, label string) (int64, error)
	Audit(ctx context.Context, e db.AuditEvent) error
}

// Gate is the database as logins and session admission see it: while this
// replica cannot use its database (Health.Usable), lookups and audit writes
// fail at once with ErrDBDown, so that a login is refused cleanly (the SSH
// door's banner says why) instead of waiting on a stuck database;
// otherwise each lookup is bounded. Settle, which decides a change whose
// outcome is unknown, is never gated: it must wait for the database.
type Gate struct {
	store  GateStore
	health *Health
	bound  time.Duration
	kept   *keptAccess // nil unless exclusive: see AccessAt
}

// NewGate returns the Gate of store; bound limits each lookup (the change
// bound, default 5 s, and on Galera the time an eviction may hold the
// lookup: the daemon's dbBound). exclusive says that no other process writes the
// database (db.Store.Exclusive), which lets AccessAt answer from memory.
func NewGate(store GateStore, health *Health, bound time.Duration, exclusive bool) *Gate {
	if bound <= 0 {
		bound = DefaultChangeTimeout
	}
	g := &Gate{store: store, health: health, bound: bound}
	if exclusive {
		g.kept = &keptAccess{}
	}
	return g
}

func (g *Gate) bounded(ctx context.Context) (context.Context, context.CancelFunc, error) {
	if !g.health.Usable() {
		return nil, nil, ErrDBDown
	}
	ctx, cancel := context.WithTimeout(ctx, g.bound)
	return ctx, cancel, nil
}

// Access reads a node's token and epoch (db.Store.Access), gated.
func (g *Gate) Access(ctx context.Context, label string) (db.Access, error) {
	ctx, cancel, err := g.bounded(ctx)
	if err != nil {
		return db.Access{}, err
	}
	defer cancel()
	return g.store.Access(ctx, label)
}

// HasKey looks a node's key up (db.Store.HasKey), gated.
func (g *Gate) HasKey(ctx context.Context, label, fingerprint string) (int64, bool, error) {
	ctx, cancel, err := g.bounded(ctx)
	if err != nil {
		return 0, false, err
	}
	defer cancel()
	return g.store.HasKey(ctx, label, fingerprint)
}

// CertAccess reads what a certificate login needs (db.Store.CertAccess),
// gated.
func (g *Gate) CertAccess(ctx context.Context, label, ca string, serial uint64, keyID string) (db.CertAccess, error) {
	ctx, cancel, err := g.bounded(ctx)
	if err != nil {
		return db.CertAccess{}, err
	}
	defer cancel()
	return g.store.CertAccess(ctx, label, ca, serial, keyID)
}

// Epoch reads a node's access epoch (db.Store.Epoch), gated.
func (g *Gate) Epoch(ctx context.Context, label string) (int64, error) {
	ctx, cancel, err := g.bounded(ctx)
	if err != nil {
		return 0, err
	}
	defer cancel()
	return g.store.Epoch(ctx, label)
}

// Settle is db.Store.Settle, not gated.
func (g *Gate) Settle(ctx context.Context, label string) (int64, error) {
	return g.store.Settle(ctx, label)
}

// Audit fails at once while the database is down: the event is in the log
// (every caller logs a failed audit), which is all a stuck database allows.
func (g *Gate) Audit(ctx context.Context, e db.AuditEvent) error {
	if !g.health.Usable() {
		return ErrDBDown
	}
	return g.store.Audit(ctx, e)
}

package access

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/obmd/obmd/db"
)

// WriteStall is how long a database write may take before this replica
// counts the database as not taking writes (a frozen disk, a stopped
// server): /readyz fails and logins are refused until writes complete
// again. A healthy write takes milliseconds.
const WriteStall = 2 * time.Second

// ErrDBDown is what the Gate's lookups fail with while this replica cannot
// use its database: at once, rather than wait for it.
var ErrDBDown = errors.New("the database is not answering (or not completing writes)")

// HealthStore is what Health reads of the database (*db.Store).
type HealthStore interface {
	Ping(ctx context.Context) error
	CheckWrites(ctx context.Context, bound time.Duration) error
	OldestWrite() time.Duration
}

// Fence tells whether this replica has fenced itself (cluster mode:
// *cluster.Cluster): its announcement may lapse for the other replicas,
// which then act without it, so it must not serve as if it could use the
// database.
type Fence interface {
	Fenced() bool
}

// Health is this replica's judgement of its database: whether the last look
// at it (the Watcher's poll) failed, whether a write has been stuck past
// WriteStall (seen at once, without waiting for the next poll), and, in
// cluster mode, whether it is fenced. Safe for concurrent use.
type Health struct {
	store HealthStore
	fence Fence // nil: single-replica mode
	// down is set while the last look failed; written by the Watcher.
	down atomic.Bool
}

// NewHealth returns the Health of store, which counts as answering until
// the Watcher's first look says otherwise. fence is nil in single-replica
// mode.
func NewHealth(store HealthStore, fence Fence) *Health { return &Health{store: store, fence: fence} }

// Usable reports whether this replica can use its database now: it
// answers, completes writes, and (cluster mode) this replica is not fenced.
func (h *Health) Usable() bool {
	return !h.down.Load() && h.store.OldestWrite() <= WriteStall && !h.fenced()
}

func (h *Health) fenced() bool { return h.fence != nil && h.fence.Fenced() }

// Ready is /readyz's check: the database answers a read, completes the
// write probe (waited for a little longer than WriteStall, so that a probe
// held by a frozen disk counts as stuck in this very check), this
// replica's last look at it was good, and it is not fenced.
func (h *Health) Ready(ctx context.Context) error {
	if err := h.store.Ping(ctx); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, WriteStall+250*time.Millisecond)
	defer cancel()
	if err := h.store.CheckWrites(ctx, WriteStall); err != nil {
		return err
	}
	if h.down.Load() {
		return errors.New("the last poll of the database failed")
	}
	if h.fenced() {
		return errors.New("this replica could not renew its announcement in time: it is fenced")
	}
	return nil
}

// look is one look at the database's health, by the Watcher at each poll:
// a read (the poll itself, done by the caller: readErr), and writes: none
// stuck past WriteStall, and the write probe, which it starts without
// waiting for it (a probe stuck in a frozen disk shows up as a stuck write
// at a later poll). It records and returns the outcome.
func (h *Health) look(readErr error) error {
	err := readErr
	if err == nil {
		ctx, cancel := context.WithCancel(context.Background())
		cancel() // look, do not wait
		err = h.store.CheckWrites(ctx, WriteStall)
	}
	h.down.Store(err != nil)
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
// bound: default 5 s). exclusive says that no other process writes the
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

package daemon

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/obmd/obmd/bastion"
	"github.com/obmd/obmd/bastion/cluster"
	"github.com/obmd/obmd/db"
)

// writeStall is how long a database write may take before this replica
// counts the database as not taking writes (a frozen disk, a stopped
// server): /readyz fails and logins are refused until writes complete
// again. A healthy write takes milliseconds.
const writeStall = 2 * time.Second

// errDBDown is what the front door's lookups fail with while this replica
// cannot use its database: at once, rather than wait for it.
var errDBDown = errors.New("the database is not answering (or not completing writes)")

// checkDB is one look at the database's health, by the change watcher at
// each poll: a read (the poll itself, done by the caller: readErr), and
// writes: none stuck past writeStall, and the write probe, which it starts
// without waiting for it (a probe stuck in a frozen disk shows up as a
// stuck write at a later poll).
func (d *Daemon) checkDB(readErr error) error {
	if readErr != nil {
		return readErr
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // look, do not wait
	return d.store.CheckWrites(ctx, writeStall)
}

// ready is /readyz's check: the database answers a read, completes the
// write probe (waited for a little longer than writeStall, so that a probe
// held by a frozen disk counts as stuck in this very check), and this
// replica's last look at it was good.
func (d *Daemon) ready(ctx context.Context) error {
	if err := d.store.Ping(ctx); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, writeStall+250*time.Millisecond)
	defer cancel()
	if err := d.store.CheckWrites(ctx, writeStall); err != nil {
		return err
	}
	if d.rep.dbDown.Load() {
		return errors.New("the last poll of the database failed")
	}
	if d.fenced() {
		return errors.New("this replica could not renew its announcement in time: it is fenced")
	}
	return nil
}

// dbUnusable reports whether this replica cannot use its database now:
// its last look failed (dbDown), a write has been stuck past writeStall
// (seen at once, without waiting for the next poll), or, in cluster mode,
// it is fenced (its announcement lapses for the others, so they may act
// without it).
func (d *Daemon) dbUnusable() bool {
	return d.rep.dbDown.Load() || d.store.OldestWrite() > writeStall || d.fenced()
}

// gatedStore is the database as logins and session admission see it:
// while this replica cannot use its database (dbUnusable), lookups and
// audit writes fail at once with errDBDown, so that a login is refused cleanly,
// with the login banner saying why, instead of waiting on a stuck
// database; otherwise each lookup is bounded by ChangeTimeout.
type gatedStore struct {
	*db.Store
	d *Daemon
}

func (g gatedStore) bounded(ctx context.Context) (context.Context, context.CancelFunc, error) {
	if g.d.dbUnusable() {
		return nil, nil, errDBDown
	}
	ctx, cancel := context.WithTimeout(ctx, g.d.cfg.ChangeTimeout)
	return ctx, cancel, nil
}

func (g gatedStore) Access(ctx context.Context, label string) (db.Access, error) {
	ctx, cancel, err := g.bounded(ctx)
	if err != nil {
		return db.Access{}, err
	}
	defer cancel()
	return g.Store.Access(ctx, label)
}

func (g gatedStore) HasKey(ctx context.Context, label, fingerprint string) (int64, bool, error) {
	ctx, cancel, err := g.bounded(ctx)
	if err != nil {
		return 0, false, err
	}
	defer cancel()
	return g.Store.HasKey(ctx, label, fingerprint)
}

func (g gatedStore) Epoch(ctx context.Context, label string) (int64, error) {
	ctx, cancel, err := g.bounded(ctx)
	if err != nil {
		return 0, err
	}
	defer cancel()
	return g.Store.Epoch(ctx, label)
}

// Audit fails at once while the database is down: the event is in the
// log (every caller logs a failed audit), which is all a stuck database
// allows.
func (g gatedStore) Audit(ctx context.Context, e db.AuditEvent) error {
	if g.d.dbUnusable() {
		return errDBDown
	}
	return g.Store.Audit(ctx, e)
}

// clusterAccess is the cluster's view of the Revoker (cluster.Access). It
// exists because the cluster is built before the Revoker (which needs the
// console hub, which needs the cluster): d.revoker is set before anything
// opens a console.
type clusterAccess struct{ d *Daemon }

func (a clusterAccess) Current(ctx context.Context, label string) (int64, error) {
	return a.d.revoker.Current(ctx, label)
}

func (a clusterAccess) Serve(ctx context.Context, label string, epoch int64, attach func() error) error {
	err := a.d.revoker.Serve(ctx, label, epoch, attach)
	if errors.Is(err, bastion.ErrStaleEpoch) {
		return fmt.Errorf("%w: %w", cluster.ErrStale, err)
	}
	return err
}

func (a clusterAccess) Apply(label string, epoch int64, why string) {
	a.d.revoker.Apply(label, epoch, why)
}

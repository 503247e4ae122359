package access

import (
	"context"
	"errors"
	"fmt"

	"github.com/obmd/obmd/bastion/access/sessions"
	"github.com/obmd/obmd/db"
)

// The console fence across replicas. A node's console output and input
// pass through one SOL link, held by one replica; the others relay through
// it. So the holder decides who gets the node's bytes: it serves a relay
// only to a replica that has applied the node's current access epoch
// (Serve), and every replica makes sure it has applied that epoch before
// it opens a link or a relay (Current). Together with a change made on one
// replica being applied by the holder before it is acknowledged (Change,
// Peers), no session older than an acknowledged change gets a byte of
// output or sends a keystroke after it, whichever replica it is on.

// ErrStaleEpoch is returned by Serve when the relaying replica has not
// applied the node's current access epoch: it must (Current) before it is
// served.
var ErrStaleEpoch = errors.New("the relaying replica has not applied the node's current access epoch")

// Current makes sure this replica has applied label's current access epoch
// and returns it: what a console link or relay of the node opened now may
// serve. If the epoch moved and the change has not been applied here yet,
// it is applied now (this replica's older sessions are cut and the node's
// console, the one being opened included, is wiped) and Current returns an
// error: the caller's link belongs to the previous tenancy. A node with a
// change pending here, or a database that does not answer, is an error
// too: no console without verified access.
func (r *Revoker) Current(ctx context.Context, label string) (int64, error) {
	n := r.use(label)
	defer r.done(label, n)
	if err := n.unsettled(label); err != nil {
		return 0, err
	}
	cur, err := r.epochs.Epoch(ctx, label)
	switch {
	case errors.Is(err, db.ErrNotFound):
		return 0, &sessions.RevokedError{Node: label, Why: whyDeleted}
	case err != nil:
		return 0, fmt.Errorf("verify access to %s: %w: %w", safe(label), ErrUnverified, err)
	case cur <= n.applied.Load() || cur <= r.watched.Load():
		return cur, nil
	}
	select {
	case n.lock <- struct{}{}:
	case <-ctx.Done():
		return 0, context.Cause(ctx)
	}
	r.applyLocked(n, label, cur, whyChanged, false)
	n.unlock()
	return 0, &sessions.RevokedError{Node: label, Why: whyChanged}
}

// Serve runs attach, which attaches a relay viewer for another replica that
// has applied label's access epoch epoch (Current there), if that is still
// the node's current epoch; otherwise it returns ErrStaleEpoch (wrapped)
// and attaches nothing. If this replica has not applied epoch yet, it does
// first, so the relay never meets the previous tenancy's sessions or
// console. attach runs under the node's revocation lock, after the
// database was read: a change applied here from then on cuts what it
// attached, and one applied before was seen.
func (r *Revoker) Serve(ctx context.Context, label string, epoch int64, attach func() error) error {
	n := r.use(label)
	defer r.done(label, n)
	select {
	case n.lock <- struct{}{}:
	case <-ctx.Done():
		return context.Cause(ctx)
	}
	defer n.unlock()
	if err := n.unsettled(label); err != nil {
		return err
	}
	if applied := n.applied.Load(); epoch < applied {
		// Known here to be stale, whatever a lagging database replica
		// would answer.
		return fmt.Errorf("%w: %s is at epoch %d here, the relay at %d", ErrStaleEpoch, safe(label), applied, epoch)
	}
	cur, err := r.epochs.Epoch(ctx, label)
	switch {
	case errors.Is(err, db.ErrNotFound):
		return fmt.Errorf("%w: %s was deleted", ErrStaleEpoch, safe(label))
	case err != nil:
		return fmt.Errorf("verify access to %s: %w", safe(label), err)
	case epoch < cur:
		return fmt.Errorf("%w: %s is at epoch %d, the relay at %d", ErrStaleEpoch, safe(label), cur, epoch)
	case epoch > cur:
		// The relaying replica read a newer epoch than this one reads:
		// a database replica lagging behind. Not served until it agrees.
		return fmt.Errorf("verify access to %s: the database shows epoch %d here, %d to the relaying replica", safe(label), cur, epoch)
	}
	r.applyLocked(n, label, cur, whyChanged, true)
	return attach()
}

package access

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/obmd/obmd/bastion/access/sessions"
	"github.com/obmd/obmd/db"
)

// ErrIncomplete is wrapped by the errors of a change that could not be
// completed because the database or another replica did not answer
// (within RevokerConfig.ChangeTimeout), through one of the three below,
// which say how far it got. Their texts are safe to show the admin.
var ErrIncomplete = errors.New("access change not completed")

// How far a change that was not completed got.
var (
	// ErrNotStored: it never reached the database; nothing changed.
	ErrNotStored = fmt.Errorf("%w: not stored", ErrIncomplete)
	// ErrOutcomeUnknown: the database did not answer in time; the node
	// is refused until its outcome is known (see Change).
	ErrOutcomeUnknown = fmt.Errorf("%w: outcome unknown", ErrIncomplete)
	// ErrNotConfirmed: stored and applied here, but not confirmed by every
	// other replica in time.
	ErrNotConfirmed = fmt.Errorf("%w: not confirmed by every replica", ErrIncomplete)
)

// Why a node's sessions end when a change of it is not confirmed in time.
const whyUnconfirmed = "a change of its access is not confirmed yet"

// RevokerConfig configures a Revoker. Zero values take the defaults noted.
type RevokerConfig struct {
	// ChangeTimeout bounds an access change made here (Change): the
	// database's part and the other replicas' acknowledgements together
	// (default 5 s).
	ChangeTimeout time.Duration
	// Peers, in cluster mode, passes changes made here to the other
	// replicas; nil in single-replica mode.
	Peers Peers
	// OnApply, if set, is told of every access change applied here, once
	// its sessions and console are cut, under the node's revocation lock:
	// the console history moves to the new tenancy there. It must not
	// block.
	OnApply func(label string, epoch int64)
	// Usable, if set, says whether this replica may use its database now
	// (Health.Usable): while it says no, a session's start always reads
	// the epoch (through the Gate, which refuses it), even if nothing was
	// cut since its login (admit).
	Usable func() bool
}

// DefaultChangeTimeout is RevokerConfig.ChangeTimeout's default.
const DefaultChangeTimeout = 5 * time.Second

func (c *RevokerConfig) setDefaults() {
	if c.ChangeTimeout <= 0 {
		c.ChangeTimeout = DefaultChangeTimeout
	}
}

// Peers passes an access change made on this replica to the others
// (cluster.Cluster): Notify returns nil once every live replica has
// applied it (cut its sessions older than epoch and wiped the node's
// console), or, when ctx ends first, an error naming those that have not.
// NotifyCred does the same for a credential change (RevokeCred there).
type Peers interface {
	Notify(ctx context.Context, label string, epoch int64, why string) error
	NotifyCred(ctx context.Context, epoch int64, c db.CredChange, why string) error
}

// Change is one access change made through this replica.
type Change struct {
	// Node is the node changed.
	Node string
	// Why is shown to the users whose sessions the change ends ("token
	// rotated"); "" for a change that ends none (a node created).
	Why string
	// Do makes the change in the database and returns the node's new
	// epoch (0: the change moved none, e.g. a grant).
	Do func(ctx context.Context) (int64, error)
	// Undo, for a grant (a key added), takes it back, reporting whether
	// there was anything to take back and the epoch that moved; it runs
	// if Do did not finish in time and the grant turns out stored: the
	// admin was told it failed. Nil for changes that only take access
	// away, which stand if they turn out stored.
	Undo func(ctx context.Context) (undone bool, epoch int64, err error)
	// Settled, if set, is told the outcome of a change that did not
	// finish in time, once the database has decided it: stored (and, for
	// a grant, undone).
	Settled func(stored bool)
}

// Change makes an access change: under the node's revocation lock, c.Do
// moves the node's epoch in the database; this replica's sessions of the
// node older than the new epoch are then cut and its console wiped, and
// the other replicas are told (Peers) and waited for. It returns nil only
// once all of that is done, so the caller may answer that access has
// changed everywhere. c.Do's own error (db.ErrNotFound included) is
// returned as it is, with nothing cut.
//
// All of it is bounded by ChangeTimeout; the error then wraps
// ErrIncomplete and says how far it got (so does one for a node that
// cannot be read at all). The hard case is a database
// call that outlives its bound (a commit blocked on a frozen disk, or cut
// off mid-commit from a stopped server): it may still commit later, after
// the caller was told it failed. Change fails closed: the node's sessions
// are cut at once, new ones refused (admit) and its console served to no
// one (Current, Serve) until the database has decided the outcome
// (Epochs.Settle, retried in the background). Then a change that only takes
// access away stands if stored (it is applied as above); a grant that got
// stored is undone (c.Undo); c.Settled is told, for the audit.
func (r *Revoker) Change(ctx context.Context, c Change) error {
	bound := r.cfg.ChangeTimeout
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), bound)
	defer cancel()
	n := r.use(c.Node)
	defer r.done(c.Node, n)
	select {
	case n.lock <- struct{}{}:
	case <-ctx.Done():
		return fmt.Errorf("%w: another change of %s has been in progress for %v; nothing was changed",
			ErrNotStored, safe(c.Node), bound)
	}
	locked := true
	unlock := func() {
		if locked {
			locked = false
			n.unlock()
		}
	}
	defer unlock()
	run := r.start(ctx, c)
	select {
	case out := <-run.res:
		switch {
		case out.skipped && ctx.Err() != nil:
			return fmt.Errorf("%w: the database did not answer within %v; nothing was changed", ErrNotStored, bound)
		case out.skipped:
			// The node could not be read (a database this replica
			// cannot use): nothing was attempted.
			r.log.WithError(out.err).WithField("node", safe(c.Node)).Warn("access_change_not_started")
			return fmt.Errorf("%w: the database could not be read (see obmd's log); nothing was changed", ErrNotStored)
		case out.err == nil && c.Why == "":
			return nil
		case out.err == nil:
			r.applyLocked(n, c.Node, out.epoch, c.Why, false)
			unlock() // the others need not wait for the peers: Serve applies the change first
			return r.confirm(ctx, c.Node, out.epoch, c.Why)
		case ctx.Err() == nil:
			return out.err // failed before its bound: a definite failure
		}
		run.res <- out // cut off by its bound: the outcome is unknown
	case <-ctx.Done():
		if run.phase.CompareAndSwap(phaseReading, phaseAbandoned) {
			return fmt.Errorf("%w: the database did not answer within %v; nothing was changed", ErrNotStored, bound)
		}
	}
	r.failClosed(n, c, run.res)
	return fmt.Errorf("%w: the database did not confirm the change of %s within %v; "+
		"%s's sessions were cut and its logins are refused until the database answers (a change that was stored "+
		"after all then takes effect; a key added is removed again)", ErrOutcomeUnknown, safe(c.Node), bound, safe(c.Node))
}

// A change's run goes through these phases: reading the node, then (unless
// abandoned first, at the bound) making the change.
const (
	phaseReading int32 = iota
	phaseDoing
	phaseAbandoned
)

// changeRun is a change's database work in progress (start).
type changeRun struct {
	phase atomic.Int32
	res   chan changeResult // buffered 1: the one result
}

type changeResult struct {
	before  int64 // the node's epoch before the change; 0: it did not exist
	epoch   int64 // c.Do's
	err     error
	skipped bool // c.Do did not run (the read failed, or the change was abandoned)
}

// start reads the node's epoch and then runs c.Do, in a goroutine: a
// database call stuck in the kernel must not hold the caller past its
// bound. c.Do does not start once the caller has abandoned the change.
func (r *Revoker) start(ctx context.Context, c Change) *changeRun {
	run := &changeRun{res: make(chan changeResult, 1)}
	r.wg.Add(1)
	go func() { // owned by r.wg; ends when the database calls do, perhaps long after ctx
		defer r.wg.Done()
		before, err := r.epochs.Epoch(ctx, c.Node)
		if errors.Is(err, db.ErrNotFound) {
			before, err = 0, nil // a creation; or c.Do finds it gone and says so
		}
		if err != nil || !run.phase.CompareAndSwap(phaseReading, phaseDoing) {
			run.res <- changeResult{err: err, skipped: true}
			return
		}
		epoch, err := c.Do(ctx)
		run.res <- changeResult{before: before, epoch: epoch, err: err}
	}()
	return run
}

// confirm passes a change stored and applied here to the other replicas,
// within ctx.
func (r *Revoker) confirm(ctx context.Context, label string, epoch int64, why string) error {
	if r.cfg.Peers == nil || epoch == 0 {
		return nil
	}
	if err := r.cfg.Peers.Notify(ctx, label, epoch, why); err != nil {
		return fmt.Errorf("%w: the change of %s was stored and applied here, but not confirmed within %v "+
			"(each replica applies it at its next poll of the database): %w", ErrNotConfirmed, safe(label), r.cfg.ChangeTimeout, err)
	}
	return nil
}

// failClosed marks the node pending, cuts its sessions and console, and
// starts the settlement of the change's outcome. n.lock held; the caller
// releases it.
func (r *Revoker) failClosed(n *nodeAccess, c Change, res <-chan changeResult) {
	n.pending.Add(1)
	r.use(c.Node) // until settled: the state must not be dropped
	cause := &sessions.RevokedError{Node: c.Node, Why: whyUnconfirmed}
	r.cutting()
	cut, _ := r.reg.Cut(c.Node, 0, cause)
	r.consoles.Cut(c.Node, cause)
	r.log.WithFields(logrus.Fields{"node": safe(c.Node), "cut": cut, "timeout": r.cfg.ChangeTimeout}).Error("access_change_unconfirmed")
	r.wg.Add(1)
	go func() { // owned by r.wg; ends once the outcome is known and applied, or at Close
		defer r.wg.Done()
		defer r.done(c.Node, n)
		r.settle(n, c, res)
	}()
}

// settle waits for the database call of an unconfirmed change to return,
// then for the database to decide its outcome, applies it, and lifts the
// node's fail-closed state.
func (r *Revoker) settle(n *nodeAccess, c Change, res <-chan changeResult) {
	log := r.log.WithField("node", safe(c.Node))
	var before int64
	select {
	case out := <-res: // proves nothing (a commit cut off may have landed): Settle decides
		before = out.before
	case <-r.stop:
		return
	}
	var (
		epoch  int64
		absent bool
	)
	err := r.retry(func(ctx context.Context) error {
		var err error
		epoch, err = r.epochs.Settle(ctx, c.Node)
		absent = errors.Is(err, db.ErrNotFound) // epoch: then the latest of all, a deletion's or later
		if absent {
			return nil
		}
		return err
	})
	if err != nil {
		return // stopping: the node stays refused
	}
	// before is 0 for a node that did not exist; epochs start at 1.
	stored := absent != (before == 0) || !absent && epoch != before
	if c.Undo != nil {
		err = r.retry(func(ctx context.Context) error {
			undone, moved, err := c.Undo(ctx)
			if undone {
				stored, epoch = true, moved
			}
			return err
		})
		if err != nil {
			return
		}
	}
	apply := stored && epoch > 0 && c.Why != ""
	n.lock <- struct{}{}
	if apply {
		r.applyLocked(n, c.Node, epoch, c.Why, false)
	}
	n.pending.Add(-1)
	n.unlock()
	log.WithFields(logrus.Fields{"stored": stored, "epoch": epoch}).Warn("access_change_settled")
	if apply {
		ctx, cancel := context.WithTimeout(context.Background(), r.cfg.ChangeTimeout)
		if err := r.confirm(ctx, c.Node, epoch, c.Why); err != nil {
			log.WithError(err).Warn("access_change_settled_unconfirmed")
		}
		cancel()
	}
	if c.Settled != nil {
		c.Settled(stored)
	}
}

// retry runs op with a bounded context until it succeeds or Close; it
// returns nil, or an error at Close.
func (r *Revoker) retry(op func(context.Context) error) error {
	for pause := 100 * time.Millisecond; ; pause = min(2*pause, 2*time.Second) {
		ctx, cancel := context.WithTimeout(context.Background(), r.cfg.ChangeTimeout)
		err := op(ctx)
		cancel()
		if err == nil {
			return nil
		}
		r.log.WithError(err).Debug("access_settle_retry")
		select {
		case <-r.stop:
			return errors.New("revoker closed")
		case <-time.After(pause):
		}
	}
}

// unsettled is the error of a node with a change pending: its access
// cannot be verified until the database has decided the change.
func (n *nodeAccess) unsettled(label string) error {
	if n.pending.Load() == 0 {
		return nil
	}
	return fmt.Errorf("verify access to %s: %s, and the database has not decided it", safe(label), whyUnconfirmed)
}

// Close stops the settlements still retrying and waits for the changes'
// goroutines, or until ctx ends (a database call stuck in the kernel
// cannot be called back).
func (r *Revoker) Close(ctx context.Context) error {
	select {
	case <-r.stop:
	default:
		close(r.stop)
	}
	done := make(chan struct{})
	go func() { // ends when the changes' goroutines have
		r.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("access changes still in progress: %w", context.Cause(ctx))
	}
}

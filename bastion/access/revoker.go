// Package access owns who may use a node right now: revocation, access
// changes, the console fence and the lost-database policy.
//
// On this replica, it holds the Revoker, through which every access change
// (token rotation or revocation, key removal, node change or deletion, an
// admin kick, and changes made on other replicas) cuts the sessions it ends
// and wipes the node's console; credential changes (a CA removed, a
// certificate revoked: cred.go), which end only the certificate sessions
// they name; the bounded, fail-closed making of a change (Change,
// ChangeCred); the console fence across replicas (Current, Serve); the
// Watcher, which picks up changes made through other replicas and judges the
// database's health; and the policy for a database that stops answering
// (Health, Gate: logins refused at once, sessions cut after a grace).
//
// It knows nothing of SSH or HTTP: the front doors (bastion, admin) call
// it, and the registry of live sessions (bastion/access/sessions) is how it
// reaches them.
package access

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/sirupsen/logrus"

	"github.com/obmd/obmd/bastion/access/sessions"
	"github.com/obmd/obmd/db"
	"github.com/obmd/obmd/sol/printable"
)

// Cutter ends every console viewer of a node and wipes its scrollback.
type Cutter interface {
	Cut(label string, cause error)
}

// Epochs reads a node's current access epoch from the database
// (db.ErrNotFound: no such node). Settle does too, after every access
// change begun before it has committed or rolled back (db.Store.Settle):
// it decides a change whose outcome its caller did not learn.
type Epochs interface {
	Epoch(ctx context.Context, label string) (int64, error)
	Settle(ctx context.Context, label string) (int64, error)
}

// Reasons the Revoker gives sessions it refuses at admit.
const (
	whyChanged = "access changed"
	whyDeleted = "node deleted"
)

// Revoker is the one mechanism behind every access change (token rotation
// or revocation, key removal, node change or deletion, an admin kick, and
// changes seen on other replicas): after the database has moved the node's
// epoch, Revoke ends this replica's sessions that authenticated before it
// and wipes the node's scrollback. Open (admit) decides whether a session
// may start: its epoch must still be the node's, and if this replica has
// not applied it yet (the change was made on another replica and the change
// watcher has not seen it), it is applied first.
//
// A node's revocations run one at a time, and a call for an epoch already
// applied returns only once that revocation has finished: so a session
// admitted at epoch E never starts while sessions from before E, or their
// console output, are still there, and a slow cut for an older epoch never
// ends the viewers of a newer tenancy.
//
// Memory: a node's state is kept while it is in use and while it knows of
// an epoch the change watcher has not passed yet (Watched); then it is
// dropped. Epochs are global and the watcher applies them in order, so an
// epoch at or below the watcher's mark needs no per-node memory to be
// recognised as applied: the Revoker holds state for the nodes being
// changed or admitted right now, not for every node it ever saw.
type Revoker struct {
	cfg      RevokerConfig
	consoles Cutter
	reg      *sessions.Registry
	epochs   Epochs
	log      logrus.FieldLogger

	// wg tracks the goroutines of changes (change.go): a database call
	// that outlives its bound, and the settlement of its outcome. stop,
	// closed by Close, ends the settlements' retries.
	wg   sync.WaitGroup
	stop chan struct{}

	// watched is the change watcher's mark: every access change with an
	// epoch at or below it has been applied on this replica. Written under
	// mu.
	watched atomic.Int64
	// cuts counts the times this replica has cut sessions (cutting): every
	// access change it applied, every CutAll, credential change and
	// change failed closed. It starts at 1; logins take it (Mark), and
	// admit reads the epoch again only if it moved since.
	cuts atomic.Uint64

	mu    sync.Mutex
	nodes map[string]*nodeAccess // see pruneLocked
	// creds are the credential changes made here whose outcome is not
	// known yet (cred.go): the certificate sessions they name are refused.
	creds []*db.CredChange
}

// nodeAccess is a node's revocation state.
type nodeAccess struct {
	// lock is held (a value in it) while a change or revocation of the node
	// runs; a channel, so that admit can give up waiting when its session
	// is cut by the revocation it waits for.
	lock chan struct{}
	// applied is the newest epoch applied: written with lock held, read
	// without it by admit (an epoch below it is stale whatever runs now).
	applied atomic.Int64
	// users counts the calls using this state (holding or waiting for
	// lock); guarded by Revoker.mu. State in use is never dropped, so all
	// of them share one lock.
	users int
	// pending counts changes of the node whose outcome is not known yet
	// (change.go): while it is above zero, the node's sessions are
	// refused and its console is served to no one. Each pending change
	// also counts in users until it is settled.
	pending atomic.Int32
}

func (n *nodeAccess) unlock() { <-n.lock }

// NewRevoker returns a Revoker over the console hub, the registry and the
// database's access epochs. It starts nothing.
func NewRevoker(cfg RevokerConfig, consoles Cutter, reg *sessions.Registry, epochs Epochs, log logrus.FieldLogger) *Revoker {
	cfg.setDefaults()
	r := &Revoker{cfg: cfg, consoles: consoles, reg: reg, epochs: epochs, log: log,
		stop: make(chan struct{}), nodes: map[string]*nodeAccess{}}
	r.cuts.Store(1)
	return r
}

// Mark is what a login takes just before it reads a node's access epoch,
// to pass with that epoch to Open (sessions.Info.Mark): a count of the
// cuts this replica has made. If it has made none since, Open need not
// read the epoch again (admit). Never 0, which marks nothing.
func (r *Revoker) Mark() uint64 { return r.cuts.Load() }

// cutting counts a cut about to be made: called before the registry is
// asked to cut anything, so that an admit that registered its session
// before the count moved is in the cut, and one that registered after
// sees the count moved.
func (r *Revoker) cutting() { r.cuts.Add(1) }

// Revoke cuts label's sessions older than epoch with a reason the user sees
// ("access to node-17 was revoked (token rotated)") and wipes the node's
// scrollback; it returns once the sessions have ended (or the registry's
// bound passed, which is logged). The sessions are cut first and the
// console after, so that nothing an old session printed or attached in its
// last moment survives in a lingering link. An epoch already applied (the
// admin call applied it, then the change watcher saw it) is not applied
// again: sessions that began under it are left alone.
func (r *Revoker) Revoke(label string, epoch int64, why string) {
	r.Begin(label)(epoch, why)
}

// Apply applies a change another replica made and announced (a peer
// notice), as Revoke does; an epoch this replica has applied already, or
// that its change watcher has passed, is skipped, so a late notice never
// wipes the console of the tenancy that followed.
func (r *Revoker) Apply(label string, epoch int64, why string) {
	n := r.use(label)
	defer r.done(label, n)
	n.lock <- struct{}{}
	defer n.unlock()
	r.applyLocked(n, label, epoch, why, true)
}

// Begin starts an access change of label made on this replica, before it
// is written to the database, and returns the function that completes it:
// end(epoch, why) then cuts as Revoke does; end(0, "") (the change failed)
// cuts nothing. Until end is called the node's other revocations wait (the
// change watcher, which may read the change from the database first, and
// sessions being admitted), so the change's users are told its own reason.
// end must be called exactly once.
func (r *Revoker) Begin(label string) (end func(epoch int64, why string)) {
	n := r.use(label)
	n.lock <- struct{}{}
	var once sync.Once
	return func(epoch int64, why string) {
		once.Do(func() {
			defer r.done(label, n)
			defer n.unlock()
			r.applyLocked(n, label, epoch, why, false)
		})
	}
}

// admit decides whether a session (SSH or HTTP) that authenticated at
// epoch may start (Open, which every session goes through). The session must already be in the registry, so that
// any change from then on cuts it; admit checks that none came before:
// epoch must still be the node's current one. An epoch below one this
// replica has applied (every change made here, and every one it has seen)
// is refused without reading the database; otherwise the database is
// read, unless mark (Mark, taken before the login's read of epoch) says
// this replica has cut nothing since: then every change applied here
// after the login's read is applied after the session was registered, and
// cuts it, and one committed but not applied here yet cuts it when it is
// (at once through the peer notice its admin call waits for, or at this
// replica's next poll), as it cuts the node's sessions that started a
// moment before it; and unless the database is unusable now
// (RevokerConfig.Usable). (A read would have refused such a session at once;
// the answer to the change's admin call comes only once this replica has
// applied it, so nothing of the old tenancy runs past that answer either
// way.) If this replica has not applied epoch yet (the change was made on
// another replica and the change watcher has not seen it), admit applies
// it, as Revoke does, so the session never meets the previous tenancy's
// sessions or scrollback; if a revocation of the node is in progress, it
// waits for it.
//
// It returns nil (start), a *sessions.RevokedError (access changed or the
// node was deleted since the session authenticated: it must not start),
// context.Cause(ctx) if ctx ends meanwhile (a session cut by the
// revocation it waits for stops waiting: the cut waits for it to end), or
// another error: access cannot be verified now (the database did not
// answer, or a change of the node made here is still unconfirmed).
func (r *Revoker) admit(ctx context.Context, label string, epoch int64, mark uint64) error {
	n := r.use(label)
	defer r.done(label, n)
	if epoch < n.applied.Load() {
		return &sessions.RevokedError{Node: label, Why: whyChanged}
	}
	if err := n.unsettled(label); err != nil {
		return err
	}
	if mark == 0 || r.cuts.Load() != mark || r.cfg.Usable != nil && !r.cfg.Usable() {
		if err := r.verify(ctx, label, epoch); err != nil {
			return err
		}
	}
	select {
	case n.lock <- struct{}{}:
	case <-ctx.Done():
		return context.Cause(ctx)
	}
	r.applyLocked(n, label, epoch, whyChanged, true)
	n.unlock()
	if ctx.Err() != nil { // cut while being admitted
		return context.Cause(ctx)
	}
	return nil
}

// verify reads label's epoch: it must still be epoch.
func (r *Revoker) verify(ctx context.Context, label string, epoch int64) error {
	cur, err := r.epochs.Epoch(ctx, label)
	switch {
	case ctx.Err() != nil:
		return context.Cause(ctx)
	case errors.Is(err, db.ErrNotFound):
		return &sessions.RevokedError{Node: label, Why: whyDeleted}
	case err != nil:
		return fmt.Errorf("verify access to %s: %w", label, err)
	case cur != epoch:
		return &sessions.RevokedError{Node: label, Why: whyChanged}
	}
	return nil
}

// CutAll ends every session on this replica as revoked, telling its user
// why, and wipes the console of every node that had one: what a replica
// does once it can no longer see access changes (it lost its database).
// Like a revocation, it holds the lock of each node it cuts, and cuts the
// sessions before the consoles; the sessions of all nodes are cut in one
// pass of the registry, so the registry's bound is waited once, not once
// per node. It returns how many sessions were cut.
func (r *Revoker) CutAll(why string) int {
	nodes := map[string]bool{}
	for _, s := range r.reg.List("") {
		nodes[s.Node] = true
	}
	// In one order: two CutAll at once (the loss of the database and a
	// fence) would otherwise each hold a lock the other waits for.
	for _, label := range slices.Sorted(maps.Keys(nodes)) {
		n := r.use(label)
		n.lock <- struct{}{}
		defer r.done(label, n)
		defer n.unlock()
	}
	r.cutting()
	cut, late := r.reg.CutAll(func(node string) error { return &sessions.RevokedError{Node: node, Why: why} })
	total := 0
	for label, k := range cut { // also sessions started since the list
		nodes[label] = true
		total += k
	}
	for label := range nodes {
		r.consoles.Cut(label, &sessions.RevokedError{Node: label, Why: why})
		r.log.WithFields(logrus.Fields{"node": safe(label), "why": why, "cut": cut[label]}).Warn("access_revoked_all")
	}
	if late > 0 {
		r.log.WithFields(logrus.Fields{"why": why, "late": late}).Warn("sessions_slow_to_end")
	}
	return total
}

// Watched tells the Revoker that every access change up to epoch has
// been applied on this replica: the change watcher calls it with the epoch
// it starts from (changes before a replica starts have nothing to cut
// there) and after each batch it applied. State that knows no newer epoch
// is dropped.
func (r *Revoker) Watched(epoch int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if epoch <= r.watched.Load() {
		return
	}
	r.watched.Store(epoch)
	for label, n := range r.nodes {
		r.pruneLocked(label, n)
	}
}

// use returns label's state, counted as in use until done.
func (r *Revoker) use(label string) *nodeAccess {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := r.nodes[label]
	if n == nil {
		n = &nodeAccess{lock: make(chan struct{}, 1)}
		r.nodes[label] = n
	}
	n.users++
	return n
}

// done ends a use of label's state.
func (r *Revoker) done(label string, n *nodeAccess) {
	r.mu.Lock()
	defer r.mu.Unlock()
	n.users--
	r.pruneLocked(label, n)
}

// pruneLocked drops label's state n once nobody uses it and it knows no
// epoch above the watcher's mark: a later call for an epoch it applied is
// then recognised by the mark (admit and the watcher skip it), and a
// later change is newer than both. A deleted node's state goes once the
// watcher has passed the deletion. r.mu held.
func (r *Revoker) pruneLocked(label string, n *nodeAccess) {
	if n.users == 0 && n.pending.Load() == 0 && n.applied.Load() <= r.watched.Load() && r.nodes[label] == n {
		delete(r.nodes, label)
	}
}

// applyLocked cuts label's sessions older than epoch and wipes its
// console, unless epoch is already applied: by this state, or, for a
// session being admitted, by the watcher (the node's state may have been
// dropped since; re-applying would end the viewers of the very tenancy
// being admitted). A change made here is always applied. n.lock held.
func (r *Revoker) applyLocked(n *nodeAccess, label string, epoch int64, why string, admit bool) {
	if epoch <= n.applied.Load() || admit && epoch <= r.watched.Load() {
		return
	}
	n.applied.Store(epoch)
	cause := &sessions.RevokedError{Node: label, Why: why}
	r.cutting()
	cut, late := r.reg.Cut(label, epoch, cause)
	r.consoles.Cut(label, cause)
	if r.cfg.OnApply != nil {
		r.cfg.OnApply(label, epoch)
	}
	log := r.log.WithFields(logrus.Fields{"node": safe(label), "epoch": epoch, "why": why, "cut": cut})
	switch {
	case late > 0:
		log.WithField("late", late).Warn("sessions_slow_to_end")
	case admit && cut == 0:
		log.Debug("access_epoch_admitted")
	default:
		log.Info("access_revoked")
	}
}

// safe makes untrusted text (a node label) printable and bounded, for
// logs and the admin's error messages.
func safe(s string) string { return printable.Clean(s, 100) }

package access

import (
	"cmp"
	"context"
	"fmt"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/obmd/obmd/db"
)

// WhyDBLost is why the sessions of a replica that has not reached its
// database for WatchConfig.DBGrace end (and those of a replica that fenced
// itself, Watcher.Fence).
const WhyDBLost = "this obmd lost its database and cannot check access; reconnect"

// WhyChangesMissed is why the sessions of a replica that finds it missed
// access changes (purged before it read them: Watcher.missed) end.
const WhyChangesMissed = "this obmd missed access changes and cannot tell which sessions they ended; reconnect"

// Defaults of WatchConfig.
const (
	DefaultPoll    = time.Second
	DefaultDBGrace = 30 * time.Second
)

// WatchConfig configures a Watcher. Zero values take the defaults noted.
type WatchConfig struct {
	// Poll is how often the database is read for changes made elsewhere
	// (default 1 s).
	Poll time.Duration
	// Bound limits each poll and each announcement (default 5 s, the
	// change bound).
	Bound time.Duration
	// DBGrace is how long live sessions outlast the loss of the database
	// (new logins are refused at once): after it they are cut, since
	// access changes made through other replicas can no longer reach this
	// one (default 30 s).
	DBGrace time.Duration
	// FenceAfter, in cluster mode, is how long after its last announcement
	// began this replica fences itself (cluster.Cluster.FenceAfter; zero in
	// single-replica mode): the fence cuts every session then (Fence), so
	// in cluster mode sessions outlast the database by no more than that,
	// whatever DBGrace (a longer DBGrace is logged at Start:
	// db_grace_capped). Poll must be below half of it, so that one late
	// poll does not fence a replica whose database answers.
	FenceAfter time.Duration
}

func (c *WatchConfig) setDefaults() {
	if c.Poll <= 0 {
		c.Poll = DefaultPoll
	}
	if c.Bound <= 0 {
		c.Bound = DefaultChangeTimeout
	}
	if c.DBGrace <= 0 {
		c.DBGrace = DefaultDBGrace
	}
}

func (c *WatchConfig) check() error {
	if c.FenceAfter > 0 && 2*c.Poll >= c.FenceAfter {
		return fmt.Errorf("access.poll %v must be below half of %v (cluster.lease_ttl less the fence margin): a replica that has not announced itself by then stops serving",
			c.Poll, c.FenceAfter)
	}
	return nil
}

// WatchStore is where the Watcher reads access changes (*db.Store).
type WatchStore interface {
	LatestChange(ctx context.Context) (int64, error)
	ChangesSince(ctx context.Context, after int64, limit int) ([]db.Change, error)
}

// Watcher applies access changes made elsewhere (another replica, or
// obmctl against another replica) to this replica's sessions, through the
// Revoker; changes made here were applied by their admin call already, and
// the Revoker skips them. Each poll is also this replica's look at the
// database's health (Health): while the database does not answer, logins
// are refused; once it has not answered for DBGrace, or (cluster mode) once
// this replica has fenced itself (Fence), every session is cut.
type Watcher struct {
	cfg      WatchConfig
	store    WatchStore
	health   *Health
	rev      *Revoker
	announce func(ctx context.Context, applied int64) error
	log      logrus.FieldLogger

	// cursor is the newest change applied: set by Start, then owned by Run.
	cursor int64
	// downSince is when the database stopped answering (zero while it
	// answers). Owned by Run.
	downSince time.Time
	// wake asks Run to poll now (Wake); holds one request at most.
	wake chan struct{}
}

// NewWatcher returns a Watcher, or an error if cfg.Poll does not fit in
// cfg.FenceAfter. announce, if set, is told at Start and after each poll
// how far this replica has applied changes (cluster mode: the replica's
// announcement to the others). It starts nothing: Start takes the first
// look, Run polls.
func NewWatcher(cfg WatchConfig, store WatchStore, health *Health, rev *Revoker,
	announce func(ctx context.Context, applied int64) error, log logrus.FieldLogger) (*Watcher, error) {
	cfg.setDefaults()
	if err := cfg.check(); err != nil {
		return nil, err
	}
	if announce == nil {
		announce = func(context.Context, int64) error { return nil }
	}
	return &Watcher{cfg: cfg, store: store, health: health, rev: rev, announce: announce, log: log,
		wake: make(chan struct{}, 1)}, nil
}

// Wake makes Run poll now rather than at its next tick: the database has
// told of a change as it committed (db.Store.ListenChanges). It never
// blocks; wakes that come while one is pending count as one. The poll is
// what applies changes, so a wake that is lost (or never sent) delays a
// cut by one Poll at most.
func (w *Watcher) Wake() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// Start reads where the access changes stand (those made before this
// replica started have nothing to cut here) and announces it, before the
// replica serves anything: in cluster mode a replica is fenced until its
// first announcement, since no other replica would wait for it. Either
// failing fails the start (the database answered a moment ago).
func (w *Watcher) Start(ctx context.Context) error {
	cursor, err := w.store.LatestChange(ctx)
	if err != nil {
		return fmt.Errorf("read access changes: %w", err)
	}
	w.rev.Watched(cursor)
	if err := w.announce(ctx, cursor); err != nil {
		return fmt.Errorf("announce this replica: %w", err)
	}
	w.cursor = cursor
	if w.cfg.FenceAfter > 0 && w.cfg.DBGrace > w.cfg.FenceAfter {
		w.log.WithFields(logrus.Fields{"db_grace": w.cfg.DBGrace.String(), "fence_after": w.cfg.FenceAfter.String()}).
			Info("db_grace_capped")
	}
	return nil
}

// Run polls, from where Start left off, until ctx ends; its caller owns it
// (the daemon's run group). It returns nil.
func (w *Watcher) Run(ctx context.Context) error {
	cursor := w.cursor
	t := time.NewTicker(w.cfg.Poll)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		case <-w.wake:
		}
		pctx, cancel := context.WithTimeout(ctx, w.cfg.Bound)
		changes, err := w.store.ChangesSince(pctx, cursor, 1000)
		cancel()
		if ctx.Err() != nil {
			return nil
		}
		w.polled(w.health.look(err))
		if err != nil {
			continue
		}
		if len(changes) > 0 && changes[0].Epoch > cursor+1 {
			w.missed(cursor, changes[0].Epoch)
		}
		for _, c := range changes {
			if c.Node == "" { // a credential change: no node's; older rows have no reason
				w.rev.RevokeCred(c.Epoch, c.Cred, cmp.Or(c.Reason, db.ReasonCertRevoked))
			} else {
				// The change's own reason ("token rotated"), recorded by
				// the replica that made it; older rows have none.
				w.rev.Revoke(c.Node, c.Epoch, cmp.Or(c.Reason, whyChanged))
			}
			cursor = c.Epoch
		}
		w.rev.Watched(cursor)
		if err := w.announce(ctx, cursor); err != nil && ctx.Err() == nil {
			// The announcement expires, and replicas that change access
			// then stop waiting for this one, which fences itself first.
			w.log.WithError(err).Warn("replica_announce_failed")
		}
	}
}

// missed handles changes this replica never read: epochs are allocated
// one after another (a rolled-back change gives its epoch back), so a poll
// that starts past cursor+1 means the changes between were purged
// (audit.changes_retention; db.PurgeChanges keeps those a live replica has
// not applied, so this replica was cut off longer than that). Which nodes
// they changed is unknown: every session is cut, as when the database is
// lost.
func (w *Watcher) missed(cursor, next int64) {
	w.log.WithFields(logrus.Fields{"applied": cursor, "next": next}).Warn("access_changes_missed")
	w.cutAll("sessions_cut_changes_missed", WhyChangesMissed)
}

// polled acts on the outcome of a look at the database: once it has failed
// for DBGrace, every session is cut (cutAll).
func (w *Watcher) polled(err error) {
	switch {
	case err == nil:
		if !w.downSince.IsZero() {
			w.log.WithField("down_for", time.Since(w.downSince).Round(time.Millisecond)).Info("db_reachable_again")
		}
		w.downSince = time.Time{}
		return
	case w.downSince.IsZero():
		w.downSince = time.Now()
	case time.Since(w.downSince) >= w.cfg.DBGrace:
		w.cutAll("sessions_cut_db_lost", WhyDBLost)
	}
	w.log.WithError(err).Warn("access_poll_failed")
}

// Fence cuts every session at once, as the loss of the database does after
// DBGrace: this replica has fenced itself (cluster.Cluster.Guard calls it),
// since its announcement may lapse for the other replicas, which then act
// without it. Health refuses logins and sessions until it announces itself
// again.
func (w *Watcher) Fence() { w.cutAll("sessions_cut_fenced", WhyDBLost) }

// cutAll cuts every session (as revoked, with why) and wipes their nodes'
// consoles, in one pass over the registry; event names the log line.
func (w *Watcher) cutAll(event, why string) {
	if cut := w.rev.CutAll(why); cut > 0 {
		w.log.WithField("cut", cut).Warn(event)
	}
}

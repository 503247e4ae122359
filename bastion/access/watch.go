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
// database for WatchConfig.DBGrace end.
const WhyDBLost = "this obmd lost its database and cannot check access; reconnect"

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
}

func (c *WatchConfig) setDefaults() {
	if c.Poll <= 0 {
		c.Poll = time.Second
	}
	if c.Bound <= 0 {
		c.Bound = DefaultChangeTimeout
	}
	if c.DBGrace <= 0 {
		c.DBGrace = 30 * time.Second
	}
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
// are refused; once it has not answered for DBGrace, every session is cut.
type Watcher struct {
	cfg      WatchConfig
	store    WatchStore
	health   *Health
	rev      *Revoker
	announce func(ctx context.Context, applied int64)
	log      logrus.FieldLogger

	// downSince is when the database stopped answering (zero while it
	// answers). Owned by Run.
	downSince time.Time
}

// NewWatcher returns a Watcher. announce, if set, is told after each poll
// how far this replica has applied changes (cluster mode: the replica's
// announcement to the others). It starts nothing: Run polls.
func NewWatcher(cfg WatchConfig, store WatchStore, health *Health, rev *Revoker,
	announce func(ctx context.Context, applied int64), log logrus.FieldLogger) *Watcher {
	cfg.setDefaults()
	if announce == nil {
		announce = func(context.Context, int64) {}
	}
	return &Watcher{cfg: cfg, store: store, health: health, rev: rev, announce: announce, log: log}
}

// Run polls until ctx ends; its caller owns it (the daemon's run group).
// It returns nil, or an error if the first read fails (the start is then
// wrong: the database answered a moment ago).
func (w *Watcher) Run(ctx context.Context) error {
	cursor, err := w.store.LatestChange(ctx)
	if err != nil {
		if ctx.Err() != nil { // stopped while starting: not a failure
			return nil
		}
		return fmt.Errorf("read access changes: %w", err)
	}
	w.rev.Watched(cursor) // changes before this replica started have nothing to cut here
	w.announce(ctx, cursor)
	t := time.NewTicker(w.cfg.Poll)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
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
		for _, c := range changes {
			// The change's own reason ("token rotated"), recorded by the
			// replica that made it; older rows have none.
			w.rev.Revoke(c.Node, c.Epoch, cmp.Or(c.Reason, whyChanged))
			cursor = c.Epoch
		}
		w.rev.Watched(cursor)
		w.announce(ctx, cursor)
	}
}

// polled acts on the outcome of a look at the database: once it has failed
// for DBGrace, every session is cut (as revoked, with WhyDBLost) and their
// nodes' consoles wiped, in one pass over the registry.
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
		if cut := w.rev.CutAll(WhyDBLost); cut > 0 {
			w.log.WithField("cut", cut).Warn("sessions_cut_db_lost")
		}
	}
	w.log.WithError(err).Warn("access_poll_failed")
}

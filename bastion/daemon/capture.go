package daemon

import (
	"context"
	"time"

	"github.com/obmd/obmd/db"
	"github.com/obmd/obmd/sol"
)

// runCapture keeps the links of the nodes captured always held open with
// nobody attached (sol.Manager.Hold), and releases the others, as the
// database says at each poll (every epoch_poll): a node registered or set
// to capture always is held within one poll, one set to attached or
// deleted is released. A database that does not answer changes nothing.
// It returns when ctx ends, leaving the holds to the hub's Close.
//
// Single-replica mode only: in cluster mode the links are not held here
// yet (see README, capture).
func (d *Daemon) runCapture(ctx context.Context) error {
	if d.rep.cluster != nil {
		return nil
	}
	every := d.cfg.EpochPoll
	if every <= 0 {
		every = time.Second // the change watcher's default
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		d.syncCapture(ctx)
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// syncCapture is one poll of runCapture.
func (d *Daemon) syncCapture(ctx context.Context) {
	qctx, cancel := context.WithTimeout(ctx, d.cfg.ChangeTimeout)
	caps, err := d.store.Captures(qctx)
	cancel()
	if err != nil {
		if ctx.Err() == nil {
			d.log.WithError(err).Warn("capture_list_failed")
		}
		return
	}
	want := wantedCaptures(caps, d.cfg.Console.Capture)
	for _, label := range d.consoles.Holding() {
		if !want[label] {
			d.consoles.Release(label)
		}
	}
	for label := range want {
		if err := d.consoles.Hold(label); err != nil {
			return // the hub is closing
		}
	}
}

// wantedCaptures is the set of nodes whose capture is always, with def the
// daemon's default.
func wantedCaptures(caps []db.NodeCapture, def string) map[string]bool {
	want := map[string]bool{}
	for _, c := range caps {
		if captureOf(c, def) == sol.CaptureAlways {
			want[c.Label] = true
		}
	}
	return want
}

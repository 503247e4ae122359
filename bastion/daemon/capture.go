package daemon

import (
	"context"
	"hash/crc32"
	"sort"
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
// In cluster mode each replica holds at most its fair share of them
// (fairShare): the ones whose SOL lease no live replica holds, up to
// ceil(captured / live replicas) held here in all; a dead holder's lease
// expires and a survivor takes its nodes at its next poll.
func (d *Daemon) runCapture(ctx context.Context) error {
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
	caps, err := d.store.Captures(qctx, captureCandidates(d.cfg.Console.Capture))
	cancel()
	if err != nil {
		if ctx.Err() == nil {
			d.log.WithError(err).Warn("capture_list_failed")
		}
		return
	}
	want := wantedCaptures(caps, d.cfg.Console.Capture)
	if d.rep.cluster != nil {
		if want, err = d.fairShare(ctx, want); err != nil {
			if ctx.Err() == nil {
				d.log.WithError(err).Warn("capture_share_failed")
			}
			return
		}
	}
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

// fairShare narrows want, the nodes captured always, to those this
// replica holds: the ones it holds already (its SOL lease, or a hold of
// its hub), then unheld ones (no live SOL lease) until it holds
// ceil(len(want) / live replicas). The unheld are taken from a point of
// the sorted list that depends on this replica's ID, so that replicas
// polling at once mostly pick different nodes (a lease decides a race).
func (d *Daemon) fairShare(ctx context.Context, want map[string]bool) (map[string]bool, error) {
	qctx, cancel := context.WithTimeout(ctx, d.cfg.ChangeTimeout)
	defer cancel()
	leases, err := d.store.Leases(qctx, db.LeaseSOL)
	if err != nil {
		return nil, err
	}
	replicas, err := d.store.Replicas(qctx)
	if err != nil {
		return nil, err
	}
	holder := map[string]string{}
	for _, l := range leases {
		holder[l.Node] = l.Owner
	}
	mine := map[string]bool{}
	for _, label := range d.consoles.Holding() {
		if want[label] && (holder[label] == "" || holder[label] == d.cfg.ReplicaID) {
			mine[label] = true
		}
	}
	var unheld []string
	for label := range want {
		switch holder[label] {
		case d.cfg.ReplicaID:
			mine[label] = true
		case "":
			if !mine[label] {
				unheld = append(unheld, label)
			}
		}
	}
	share := (len(want) + max(len(replicas), 1) - 1) / max(len(replicas), 1)
	sort.Strings(unheld)
	start := 0
	if len(unheld) > 0 {
		start = int(crc32.ChecksumIEEE([]byte(d.cfg.ReplicaID)) % uint32(len(unheld)))
	}
	for i := 0; i < len(unheld) && len(mine) < share; i++ {
		mine[unheld[(start+i)%len(unheld)]] = true
	}
	return mine, nil
}

// captureCandidates is which nodes captureOf can make always under the
// daemon's default def, for the database to leave the others out of each
// poll: with the default default, the ipmi and ipmitool nodes that set no
// capture.
func captureCandidates(def string) db.CaptureCandidates {
	switch def {
	case sol.CaptureAlways:
		return db.CaptureCandidates{Unset: true}
	case "":
		return db.CaptureCandidates{UnsetTypes: []string{string(TypeIPMI), string(TypeIPMITool)}}
	}
	return db.CaptureCandidates{}
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

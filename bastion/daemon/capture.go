package daemon

import (
	"context"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/obmd/obmd/db"
	"github.com/obmd/obmd/sol"
)

// awaitPolls: a replica awaiting a hand-off (shareView.plan) polls this
// many times an epoch_poll, for at most this many epoch_polls in a row
// without taking a node: the node comes at most an epoch_poll / awaitPolls
// after the link handed off has closed, and a hand-off that does not come
// (its links have viewers) costs no more than a few polls. Measured gap
// (TestReplicasRebalance, docs/replicas.md): 20-180 ms at 1 s, against
// 460-700 ms polling once an epoch_poll.
const awaitPolls = 5

// runCapture keeps the links of the nodes captured always held open with
// nobody attached (sol.Manager.Hold), and releases the others, as the
// database says at each poll (every epoch_poll): a node registered or set
// to capture always is held within one poll, one set to attached or
// deleted is released. A database that does not answer changes nothing.
// It returns when ctx ends, leaving the holds to the hub's Close.
//
// In cluster mode each replica holds its fair share of them (fairShare,
// shareView.plan): it takes the ones whose SOL lease no live replica
// holds up to its share (a dead holder's lease expires and a survivor
// takes its nodes at its next poll), and gives up what it holds beyond
// it, one node a poll, to a replica short of its share (one that joined,
// or was restarted), which polls faster meanwhile (awaitPolls).
func (d *Daemon) runCapture(ctx context.Context) error {
	every := d.cfg.EpochPoll
	if every <= 0 {
		every = time.Second // the change watcher's default
	}
	t := time.NewTimer(0)
	defer t.Stop()
	leaving := map[string]time.Time{}
	fast, held := 0, 0 // fast polls in a row without a node taken; nodes held
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		awaiting, now := d.syncCapture(ctx, leaving)
		if !awaiting || now > held {
			fast = 0
		}
		held = now
		if awaiting && fast < awaitPolls*awaitPolls {
			fast++
			t.Reset(every / awaitPolls)
		} else {
			t.Reset(every)
		}
	}
}

// syncCapture is one poll of runCapture. leaving is its memory between
// polls: the nodes it handed off, and when (fairShare). It reports whether
// this replica awaits a hand-off, and how many nodes it holds.
func (d *Daemon) syncCapture(ctx context.Context, leaving map[string]time.Time) (awaiting bool, held int) {
	qctx, cancel := context.WithTimeout(ctx, d.cfg.ChangeTimeout)
	caps, err := d.store.Captures(qctx, captureCandidates(d.cfg.Console.Capture))
	cancel()
	if err != nil {
		if ctx.Err() == nil {
			d.log.WithError(err).Warn("capture_list_failed")
		}
		return false, len(d.consoles.Holding())
	}
	want := wantedCaptures(caps, d.cfg.Console.Capture)
	if d.rep.cluster != nil {
		zone := map[string]string{}
		for _, c := range caps {
			if c.Zone != "" && want[c.Label] {
				zone[c.Label] = c.Zone
			}
		}
		p, err := d.fairShare(ctx, want, zone, leaving)
		if err != nil {
			if ctx.Err() == nil {
				d.log.WithError(err).Warn("capture_share_failed")
			}
			return false, len(d.consoles.Holding())
		}
		want, awaiting = p.mine, p.awaiting
	}
	for _, label := range d.consoles.Holding() {
		if !want[label] {
			d.consoles.Release(label)
		}
	}
	for label := range want {
		if err := d.consoles.Hold(label); err != nil {
			break // the hub is closing
		}
	}
	return awaiting, len(want)
}

// fairShare plans which of want, the nodes captured always, this replica
// holds (shareView.plan), from the SOL leases and the live replicas in
// the database; it hands off (sol.Manager.HandOff) the first node the
// plan gives up that has nobody attached, and remembers it in leaving
// until its lease is no longer this replica's (its link has closed), or
// for about twice lease_ttl at most (a viewer here may have opened it
// again).
func (d *Daemon) fairShare(ctx context.Context, want map[string]bool, zone map[string]string, leaving map[string]time.Time) (sharePlan, error) {
	qctx, cancel := context.WithTimeout(ctx, d.cfg.ChangeTimeout)
	defer cancel()
	leases, err := d.store.Leases(qctx, db.LeaseSOL)
	if err != nil {
		return sharePlan{}, err
	}
	replicas, err := d.store.Replicas(qctx)
	if err != nil {
		return sharePlan{}, err
	}
	v := shareView{me: d.cfg.ReplicaID, want: want, holder: map[string]string{}, leaving: map[string]bool{},
		zone: zone, zones: map[string][]string{d.cfg.ReplicaID: d.rep.cluster.Zones()}}
	for _, l := range leases {
		v.holder[l.Node] = l.Owner
	}
	for _, r := range replicas {
		v.live = append(v.live, r.ID)
		if r.ID != v.me {
			v.zones[r.ID] = r.Zones
		}
	}
	if err := d.rep.zones.update(qctx, d.store, replicas); err != nil {
		return sharePlan{}, err
	}
	for label, since := range leaving {
		if v.holder[label] != v.me || time.Since(since) > 2*d.rep.cluster.FenceAfter() {
			delete(leaving, label)
		} else {
			v.leaving[label] = true
		}
	}
	p := v.plan()
	for _, label := range p.giveUp {
		if d.consoles.HandOff(label) {
			delete(p.mine, label)
			leaving[label] = time.Now()
			d.log.WithFields(logrus.Fields{"node": label, "held": len(p.mine), "share": p.target}).Info("capture_handed_off")
			break
		}
	}
	return p, nil
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

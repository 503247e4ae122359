package daemon

import (
	"context"
	"maps"
	"slices"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/obmd/obmd/db"
	"github.com/obmd/obmd/sol"
)

// awaitPolls: a replica awaiting a hand-off (shareView.plan) polls this
// many times an access.poll, for at most this many access.poll intervals in a row
// without taking a node: the node comes at most an access.poll / awaitPolls
// after the link handed off has closed, and a hand-off that does not come
// (its links have viewers) costs no more than a few polls. Measured gap
// (TestReplicasRebalance, docs/replicas.md): 20-180 ms at 1 s, against
// 460-700 ms polling once an access.poll.
const awaitPolls = 5

// runCapture keeps the links of the nodes captured always held open with
// nobody attached (sol.Manager.Hold), and releases the others, as the
// database says at each poll (every access.poll): a node registered or set
// to capture always is held within one poll, one set to attached or
// deleted is released. A database that does not answer changes nothing.
// It returns when ctx ends, leaving the holds to the hub's Close.
//
// In cluster mode each replica holds its fair share of them (fairShare,
// shareView.plan): it takes the ones whose SOL lease no live replica
// holds up to its share (a dead holder's lease expires and a survivor
// takes its nodes at its next poll), and gives up what it holds beyond
// it, at most cluster.handoff_rate a second (handOffBudget; polling each
// second while it has more to give), to a replica short of its share (one
// that joined, or was restarted), which polls faster meanwhile
// (awaitPolls).
func (d *Daemon) runCapture(ctx context.Context) error {
	every := d.cfg.Access.Poll
	if every <= 0 {
		every = time.Second // the change watcher's default
	}
	t := time.NewTimer(0)
	defer t.Stop()
	st := &captureState{leaving: map[string]time.Time{}}
	if d.rep.cluster != nil {
		rate := float64(d.rep.cluster.HandOffRate())
		st.budget, st.takes = handOffBudget{rate: rate}, handOffBudget{rate: rate}
	}
	fast, held := 0, 0 // fast polls in a row without a node taken; nodes held
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		p := d.syncCapture(ctx, st)
		if !p.awaiting || len(p.mine) > held {
			fast = 0
		}
		held = len(p.mine)
		switch {
		case p.awaiting && fast < awaitPolls*awaitPolls:
			fast++
			t.Reset(every / awaitPolls)
		case (len(p.giveUp) > 0 || p.pending) && every > time.Second:
			// More to hand off (over its share of a zone) or to take: at
			// the budget's pace, not the poll's.
			t.Reset(time.Second)
		default:
			t.Reset(every)
		}
	}
}

// captureState is runCapture's memory between polls: the nodes it handed
// off, and when (fairShare), and its budget of hand-offs.
type captureState struct {
	leaving map[string]time.Time
	budget  handOffBudget // hand-offs
	takes   handOffBudget // links newly held (syncCapture)
}

// handOffBudget bounds a replica's hand-offs to rate a second (a token
// bucket holding at most one second's worth): each hand-off closes a link
// to a BMC here and opens one there, so a replica joining a large fleet
// gets its share quickly but never as a storm of SOL sessions.
type handOffBudget struct {
	rate   float64 // hand-offs a second
	tokens float64
	last   time.Time
}

// take returns how many hand-offs may go at now.
func (b *handOffBudget) take(now time.Time) int {
	if b.last.IsZero() {
		b.tokens = b.rate
	} else {
		b.tokens = min(b.tokens+b.rate*now.Sub(b.last).Seconds(), b.rate)
	}
	b.last = now
	return int(b.tokens)
}

// spend counts n hand-offs made.
func (b *handOffBudget) spend(n int) { b.tokens -= float64(n) }

// syncCapture is one poll of runCapture, with its memory st. It returns
// the plan it carried out: the nodes this replica holds (mine), its share,
// and whether it awaits a hand-off (without a plan outside cluster mode,
// or when the database did not answer: only mine, the links held).
func (d *Daemon) syncCapture(ctx context.Context, st *captureState) sharePlan {
	qctx, cancel := context.WithTimeout(ctx, d.cfg.Access.ChangeTimeout)
	caps, err := d.store.Captures(qctx, captureCandidates(d.cfg.Console.Capture))
	cancel()
	if err != nil {
		if ctx.Err() == nil {
			d.log.WithError(err).Warn("capture_list_failed")
		}
		return d.heldPlan()
	}
	want := wantedCaptures(caps, d.cfg.Console.Capture)
	plan := sharePlan{mine: want, target: len(want)}
	if d.rep.cluster != nil {
		zone := map[string]string{}
		for _, c := range caps {
			if c.Zone != "" && want[c.Label] {
				zone[c.Label] = c.Zone
			}
		}
		p, err := d.fairShare(ctx, want, zone, st)
		if err != nil {
			if ctx.Err() == nil {
				d.log.WithError(err).Warn("capture_share_failed")
			}
			return d.heldPlan()
		}
		plan = p
	}
	holding := map[string]bool{}
	for _, label := range d.consoles.Holding() {
		holding[label] = true
		if !plan.mine[label] {
			d.consoles.Release(label)
		}
	}
	// In a cluster, new links open within the budget of takes (as many a
	// second as hand-offs): a replica that starts while the others hold
	// nothing (or that is dealt a dead replica's nodes) does not open
	// thousands of SOL sessions at once.
	if d.rep.cluster != nil {
		st.takes.spend(plan.deferTakes(holding, st.takes.take(time.Now())))
	}
	for _, label := range slices.Sorted(maps.Keys(plan.mine)) {
		if err := d.consoles.Hold(label); err != nil {
			break // the hub is closing
		}
	}
	return plan
}

// heldPlan is the plan of a poll that could not read the database: the
// links held stay held.
func (d *Daemon) heldPlan() sharePlan {
	mine := map[string]bool{}
	for _, label := range d.consoles.Holding() {
		mine[label] = true
	}
	return sharePlan{mine: mine, target: len(mine)}
}

// fairShare plans which of want, the nodes captured always, this replica
// holds (shareView.plan), from the SOL leases and the live replicas in
// the database; it hands off (sol.Manager.HandOff) the nodes the plan
// gives up that have nobody attached, in its order, down to its share and
// within st's budget (cluster.handoff_rate a second), and remembers each in
// st.leaving until its lease is no longer this replica's (its link has
// closed), or for about twice cluster.lease_ttl at most (a viewer here may have
// opened it again).
func (d *Daemon) fairShare(ctx context.Context, want map[string]bool, zone map[string]string, st *captureState) (sharePlan, error) {
	leaving := st.leaving
	qctx, cancel := context.WithTimeout(ctx, d.cfg.Access.ChangeTimeout)
	defer cancel()
	leases, err := d.store.Leases(qctx, db.LeaseSOL)
	if err != nil {
		return sharePlan{}, err
	}
	replicas, err := d.store.Replicas(qctx)
	if err != nil {
		return sharePlan{}, err
	}
	v := shareView{me: d.cfg.Replica.ID, want: want, holder: map[string]string{}, leaving: map[string]bool{},
		zone: zone, zones: map[string][]string{d.cfg.Replica.ID: d.rep.cluster.Zones()}}
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
	handed := p.handOff(st.budget.take(time.Now()), func(label string) bool {
		if !d.consoles.HandOff(label) {
			return false
		}
		leaving[label] = time.Now()
		d.log.WithFields(logrus.Fields{"node": label, "share": p.target}).Info("capture_handed_off")
		return true
	})
	st.budget.spend(handed)
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

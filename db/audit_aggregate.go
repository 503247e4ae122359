package db

import (
	"context"
	"net"
	"slices"
	"strings"
	"sync"
	"time"
)

// WithAuditAggregation turns on the aggregation of repeated events
// (Aggregated) over window, with at most keys keys counted at once (see
// aggregator). Without it every event is a row of its own.
func WithAuditAggregation(window time.Duration, keys int) Option {
	return func(s *Store) {
		if window > 0 && keys > 0 {
			s.agg = &aggregator{window: window, max: keys}
		}
	}
}

// Aggregated reports whether repeats of e are counted into one row per
// window instead of a row each (when the store aggregates): reads and
// session bounds (the actions DeferredAudit lists), console actions
// (console.*: what was typed is never recorded, only how much), and
// refusals of anything (results busy, denied, refused). Power actions that
// reached the BMC, access changes and every other admin change are a row
// each, always.
func Aggregated(e AuditEvent) bool {
	return refusal(e.Result) || DeferredAudit(e.Action) || strings.HasPrefix(e.Action, "console.")
}

// refusal reports whether result is a refusal's (Aggregated).
func refusal(result string) bool {
	switch result {
	case "busy", "denied", "refused":
		return true
	}
	return false
}

// OverflowActor and OverflowSource stand for "not recorded" in a row that
// counts events past audit.aggregate_keys.
const (
	OverflowActor  = "*"
	OverflowSource = "*"
)

// aggDetailLen bounds the detail an aggregated row keeps (of the latest
// repeat), so that a key costs about 1 KB however long the details.
const aggDetailLen = 256

// maxOverflowKeys bounds the overflow counts (by action and result, both
// named in obmd's code, so a few dozen at most): past it, events are
// counted under one key whatever their action.
const maxOverflowKeys = 64

// aggregator counts repeats of aggregated events. The key of an event is
// (node, actor, action, source address, result, kind of detail): the
// source without its port (an IPv6 address as its /64, as the session caps
// count sources), the detail with its numbers left out (detailKind: "on;
// took 3ms" and "on; took 1.2s" are one kind, "12 bytes (forced)" and
// "3 bytes" two).
//
// The first event of a key is written as Audit writes any event (at once,
// or within AuditWindow if DeferredAudit); its repeats are counted, and at
// the end of each window every key that had repeats is written as one row
// (Count, At of the first repeat, the latest repeat's detail) and kept for
// the next window; a key without repeats in a window is forgotten, so the
// next event of it is written at once again. So a key writes at most two
// rows in its first window and one per window after it.
//
// At most max keys are counted at once, refusals' at most half of them
// (so that clients without credentials, whose every event is a refusal,
// cannot take the keys of tenants' logins and reads): an event of a new
// key past it is counted by its action and result only (node, actor and
// source not recorded: OverflowActor, OverflowSource), never written
// alone. So, per window, aggregated events write at most 2*max +
// maxOverflowKeys + 1 rows whatever clients do, and the counts take at
// most max + maxOverflowKeys + 1 keys of about 1 KB (aggDetailLen and the
// cut columns).
type aggregator struct {
	window time.Duration
	max    int

	mu       sync.Mutex
	keys     map[aggKey]*aggCount
	refusals int                  // keys of refusals in keys
	over     map[aggKey]*aggCount // past max: by action and result
	closed   bool                 // stopAggregator has begun: nothing is counted
	stop     chan struct{}        // closed by stopAggregator
	done     chan struct{}        // closed when runAggregator returns
}

type aggKey struct{ node, actor, action, source, result, detail string }

// aggCount is a key's repeats not yet written.
type aggCount struct {
	n      int64
	first  time.Time // At of the first of them
	detail string    // of the latest, cut to aggDetailLen
}

func (c *aggCount) add(e *AuditEvent) {
	if c.n == 0 {
		c.first = e.At
	}
	c.n++
	c.detail = clip(e.Detail, aggDetailLen)
}

// add counts e (cut by Audit) and reports whether it must be written now:
// the first of its key, or the aggregator is closed.
func (a *aggregator) add(e *AuditEvent) (write bool) {
	k := aggKey{e.Node, e.Actor, e.Action, auditSource(e.Source), e.Result, detailKind(clip(e.Detail, aggDetailLen))}
	refused := refusal(e.Result)
	a.mu.Lock()
	defer a.mu.Unlock()
	switch c, ok := a.keys[k]; {
	case a.closed:
		return true
	case ok:
		c.add(e)
		return false
	case len(a.keys) < a.max && (!refused || a.refusals < a.max/2):
		a.keys[k] = &aggCount{}
		if refused {
			a.refusals++
		}
		return true
	}
	k = aggKey{action: e.Action, result: e.Result}
	if _, ok := a.over[k]; !ok && len(a.over) >= maxOverflowKeys {
		k = aggKey{action: "audit.overflow"}
	}
	c := a.over[k]
	if c == nil {
		c = &aggCount{}
		a.over[k] = c
	}
	c.add(e)
	return false
}

// take ends the window: it returns a row for each key with repeats, in
// time order, keeps those keys for the next window with nothing counted,
// and forgets the others.
func (a *aggregator) take() []AuditEvent {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []AuditEvent
	for k, c := range a.keys {
		if c.n == 0 {
			delete(a.keys, k)
			if refusal(k.result) {
				a.refusals--
			}
			continue
		}
		out = append(out, AuditEvent{At: c.first, Node: k.node, Actor: k.actor, Action: k.action,
			Source: k.source, Result: k.result, Detail: c.detail, Count: c.n})
		*c = aggCount{}
	}
	for k, c := range a.over {
		out = append(out, AuditEvent{At: c.first, Actor: OverflowActor, Action: k.action, Source: OverflowSource,
			Result: k.result, Count: c.n, Detail: "past audit.aggregate_keys: node, actor and source not recorded; the latest: " + c.detail})
	}
	clear(a.over)
	slices.SortStableFunc(out, func(x, y AuditEvent) int { return x.At.Compare(y.At) })
	return out
}

// startAggregator starts the goroutine that ends each window (owned by
// the store: Close stops it and waits).
func (s *Store) startAggregator() {
	a := s.agg
	if a == nil {
		return
	}
	a.keys, a.over = map[aggKey]*aggCount{}, map[aggKey]*aggCount{}
	a.stop, a.done = make(chan struct{}), make(chan struct{})
	go s.runAggregator()
}

func (s *Store) runAggregator() {
	a := s.agg
	defer close(a.done)
	t := time.NewTicker(a.window)
	defer t.Stop()
	for {
		select {
		case <-a.stop:
			return
		case <-t.C:
			s.writeAggregated(a.take())
		}
	}
}

// writeAggregated queues the rows of a window's repeats as deferred events
// (they are reads and refusals), or commits them when the queue is full.
func (s *Store) writeAggregated(rows []AuditEvent) {
	for i := range rows {
		if s.deferAudit(rows[i]) {
			continue
		}
		if err := s.commitAudit(context.Background(), &rows[i]); err != nil {
			s.log.WithError(err).WithField("action", rows[i].Action).Error("audit_failed")
		}
	}
}

// stopAggregator ends counting (later events are written one by one),
// stops the goroutine and queues what it had counted (Close, before the
// deferred events are committed).
func (s *Store) stopAggregator() {
	a := s.agg
	if a == nil || a.stop == nil {
		return
	}
	a.mu.Lock()
	was := a.closed
	a.closed = true
	a.mu.Unlock()
	if was {
		return
	}
	close(a.stop)
	<-a.done
	s.writeAggregated(a.take())
}

// auditSource is what aggregation keys a source on: the address without
// its port, an IPv6 address as its /64 (the session caps count sources so
// too: an address of its own costs a client nothing within its /64).
func auditSource(src string) string {
	host := src
	if h, _, err := net.SplitHostPort(src); err == nil {
		host = h
	}
	ip := net.ParseIP(host)
	switch {
	case ip == nil:
		return host
	case ip.To4() != nil:
		return ip.To4().String()
	}
	return ip.Mask(net.CIDRMask(64, 128)).String() + "/64"
}

// detailKind is detail with each number, and the unit letters that follow
// it, replaced by "#" ("exec exit 0 after 1m2.5s" is "exec exit # after
// #"): repeats that differ only in a duration, a count or an exit status
// are one key.
func detailKind(detail string) string {
	var b strings.Builder
	num := false // within a number and its unit
	for _, r := range detail {
		switch {
		case r >= '0' && r <= '9', num && r == '.':
			if !num {
				b.WriteByte('#')
			}
			num = true
			continue
		case num && (r >= 'a' && r <= 'z' || r == 'µ'):
			continue
		}
		num = false
		b.WriteRune(r)
	}
	return b.String()
}

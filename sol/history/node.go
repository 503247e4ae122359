package history

import (
	"sync"
	"sync/atomic"
	"time"
)

// node is the buffer of one node's history on this replica: what its
// Recordings and Mark gave that is not stored yet, and its followers.
type node struct {
	r     *Recorder
	label string

	mu      sync.Mutex
	refs    int     // open Recordings
	epoch   int64   // the tenancy Write records in; never goes back
	pending buffer  // not yet taken by a flush
	kicked  bool    // an urgent flush was asked for what is pending
	flight  *flight // the flush of this node in flight, if any
	// A flush of this node is in flight, or is due but held off by
	// readers: wait is non-nil then, closed when that flush has ended.
	due     bool
	wait    chan struct{}
	readers int                // Cuts not yet read or closed: flushes leave the node alone
	lastSeq map[int64]int64    // per tenancy, the highest Seq stored from here
	lastAt  time.Time          // the last time handed out: times never go back
	subs    map[*Tail]struct{} // live followers
	gone    bool               // removed from the Recorder
}

// clock returns now at the millisecond (as stored), never before the last
// time it returned. n.mu is held.
func (n *node) clock() time.Time {
	at := time.UnixMilli(n.r.cfg.Now().UnixMilli()).UTC()
	if at.Before(n.lastAt) {
		at = n.lastAt
	}
	n.lastAt = at
	return at
}

// flight is one flush of a node's chunks: done is closed when it has
// ended, err then set (nil: the Store has them).
type flight struct {
	done  chan struct{}
	err   error
	items []item
}

// Recording is the handle of one holder of a node's console link on its
// node's recording: its output goes in with Write, in the node's current
// tenancy. Safe for concurrent use.
type Recording struct {
	n      *node
	epoch  int64 // the tenancy it was opened in
	closed atomic.Bool
}

// Epoch is the tenancy the recording was opened in (Recorder.Open): the
// one its holder's console belongs to. (An access change moves what Write
// records to the next tenancy, and ends that holder's console.)
func (h *Recording) Epoch() int64 { return h.epoch }

// Write records p (copied) as console output. It never waits for the
// Store (see Config.BufferBytes) and never fails.
func (h *Recording) Write(p []byte) (int, error) {
	n := h.n
	r := n.r
	if len(p) == 0 || h.closed.Load() || r.closing.Load() {
		return len(p), nil
	}
	n.mu.Lock()
	at := n.clock()
	wasEmpty := len(n.pending.items) == 0
	n.pending.output(n.label, n.epoch, p, at, r.cfg.FlushBytes)
	if len(n.subs) > 0 {
		c := Chunk{Node: n.label, Epoch: n.epoch, At: at, Kind: KindOutput, Data: append([]byte(nil), p...)}
		n.deliverLocked(c)
	}
	dropped := n.pending.trim(r.cfg.BufferBytes)
	urgent := n.pending.size >= r.cfg.FlushBytes && !n.kicked
	n.kicked = n.kicked || urgent
	n.mu.Unlock()
	r.stats.written.Add(uint64(len(p)))
	r.stats.dropped.Add(uint64(dropped))
	if wasEmpty || urgent {
		r.markDirty(n, urgent)
	}
	return len(p), nil
}

// Mark records marker m in the node's current tenancy.
func (h *Recording) Mark(m Marker) {
	if h.closed.Load() || h.n.r.closing.Load() || !m.Kind.Valid() || m.Kind == KindOutput {
		return
	}
	n := h.n
	n.mu.Lock()
	epoch := n.epoch
	n.mu.Unlock()
	if n.mark(epoch, m) {
		n.r.markDirty(n, false)
	}
}

// Close ends this holder's recording. What it wrote is still flushed; the
// node's buffer goes once the last Recording is closed and it is stored.
func (h *Recording) Close() {
	if h.closed.Swap(true) {
		return
	}
	n := h.n
	n.mu.Lock()
	n.refs--
	n.mu.Unlock()
	n.r.reap(n)
}

// mark buffers a marker of tenancy epoch; it reports whether the node had
// nothing pending (its caller then calls markDirty).
func (n *node) mark(epoch int64, m Marker) (wasEmpty bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	c := Chunk{Node: n.label, Epoch: epoch, At: n.clock(), Kind: m.Kind, Data: []byte(cleanText(m.Text))}
	wasEmpty = len(n.pending.items) == 0
	n.pending.marker(c)
	n.deliverLocked(c)
	n.r.stats.dropped.Add(uint64(n.pending.trim(n.r.cfg.BufferBytes)))
	return wasEmpty
}

// deliverLocked gives c to the followers of its tenancy. n.mu is held.
func (n *node) deliverLocked(c Chunk) {
	for t := range n.subs {
		if t.q.Epoch == c.Epoch {
			t.deliver(c)
		}
	}
}

// setEpoch moves the node to a later tenancy; it reports whether chunks of
// an earlier one are pending.
func (n *node) setEpoch(epoch int64) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	if epoch <= n.epoch {
		return false
	}
	n.epoch = epoch
	for t := range n.subs {
		if t.q.Epoch < epoch {
			delete(n.subs, t)
			t.end(ErrEnded, true)
		}
	}
	return len(n.pending.items) > 0
}

// holdsBefore reports whether chunks of a tenancy before epoch are pending
// or being flushed.
func (n *node) holdsBefore(epoch int64) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.flight != nil {
		return true
	}
	for _, it := range n.pending.items {
		if it.c.Epoch < epoch {
			return true
		}
	}
	return false
}

// endTails ends every follower with err.
func (n *node) endTails(err error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for t := range n.subs {
		t.end(err, false)
	}
	n.subs = nil
}

// take hands what is pending to a flush, unless readers hold the node off
// (then the flush is due: readers that come wait for it; the last reader
// to leave asks for it). force ignores readers (the last flush).
func (n *node) take(force bool) (items []item, ok bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.readers > 0 && !force {
		n.due = true
		if n.wait == nil {
			n.wait = make(chan struct{})
		}
		return nil, false
	}
	items = n.pending.take()
	n.kicked, n.due = false, false
	if len(items) > 0 {
		n.flight = &flight{done: make(chan struct{}), items: items}
		if n.wait == nil {
			n.wait = make(chan struct{})
		}
	} else if n.wait != nil {
		close(n.wait)
		n.wait = nil
	}
	return items, true
}

// settle ends the flush of items: stored (each chunk's Seq set, 0 if the
// Store dropped it) or failed with err (they go back in front, and give
// way to what came since if the buffer is over). It reports whether
// something is left to flush.
func (n *node) settle(items []item, stored []Chunk, err error) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	if err != nil {
		n.pending.restore(items)
		n.r.stats.dropped.Add(uint64(n.pending.trim(n.r.cfg.BufferBytes)))
	} else {
		for _, c := range stored {
			if c.Seq > n.lastSeq[c.Epoch] {
				n.lastSeq[c.Epoch] = c.Seq
			}
		}
	}
	if f := n.flight; f != nil {
		f.err = err
		close(f.done)
		n.flight = nil
	}
	if n.wait != nil {
		close(n.wait)
		n.wait = nil
	}
	return len(n.pending.items) > 0
}

// idleLocked reports whether the node can go: no Recording, nothing
// pending or in flight, no reader. n.mu is held.
func (n *node) idleLocked() bool {
	return n.refs == 0 && len(n.pending.items) == 0 && n.flight == nil && n.readers == 0
}

// reap removes n from the Recorder if it is idle; its followers go on by
// polling the Store from what this replica stored last.
func (r *Recorder) reap(n *node) {
	r.mu.Lock()
	defer r.mu.Unlock()
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.gone || !n.idleLocked() {
		return
	}
	n.gone = true
	if r.nodes[n.label] == n {
		delete(r.nodes, n.label)
	}
	delete(r.dirty, n)
	for t := range n.subs {
		t.poll(n.lastSeq[t.q.Epoch])
	}
	n.subs = nil
}

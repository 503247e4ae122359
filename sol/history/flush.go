package history

import (
	"context"
	"time"

	"github.com/sirupsen/logrus"
)

// taken is one node's part of a flush.
type taken struct {
	n     *node
	items []item
	first int // index of its first chunk in the batch
}

// batch is one flush: the chunks taken, whose nodes they came from, and
// the nodes left for the next one.
type batch struct {
	chunks []Chunk
	parts  []taken
	held   []*node // held off by readers: their last reader asks again
	rest   []*node // over maxBatchBytes: next, at once
	bytes  int
}

// flushOnce writes every dirty node's pending chunks in one transaction
// (up to maxBatchBytes; the rest goes next, at once) and settles them.
// force takes nodes held by readers too (the last flush).
func (r *Recorder) flushOnce(force bool) error {
	r.mu.Lock()
	nodes := make([]*node, 0, len(r.dirty))
	for n := range r.dirty {
		nodes = append(nodes, n)
	}
	clear(r.dirty)
	r.urgent = false
	waiters := r.waiters
	r.waiters = nil
	r.mu.Unlock()

	b := collect(nodes, force)
	var err error
	if len(b.chunks) > 0 {
		ctx, cancel := context.WithTimeout(context.Background(), r.cfg.StoreTimeout)
		start := time.Now()
		err = r.st.AppendHistory(ctx, b.chunks, r.cfg.HistoryBytes)
		cancel()
		r.noteFlush(b, time.Since(start), err)
	}
	r.settle(b, waiters, err)
	return err
}

// collect takes the pending chunks of nodes into a batch.
func collect(nodes []*node, force bool) *batch {
	b := &batch{}
	for _, n := range nodes {
		if b.bytes >= maxBatchBytes {
			b.rest = append(b.rest, n)
			continue
		}
		items, ok := n.take(force)
		if !ok {
			b.held = append(b.held, n)
			continue
		}
		if len(items) == 0 {
			continue
		}
		b.parts = append(b.parts, taken{n: n, items: items, first: len(b.chunks)})
		for _, it := range items {
			c := it.chunk(notRecorded)
			b.chunks = append(b.chunks, c)
			b.bytes += len(c.Data)
		}
	}
	return b
}

// settle ends a flush: each node learns the outcome, the nodes with
// something left are dirty again, and the Flush calls it answers (all of
// them unless nodes were left over) get err.
func (r *Recorder) settle(b *batch, waiters []chan error, err error) {
	var again []*node
	for _, p := range b.parts {
		if p.n.settle(p.items, b.chunks[p.first:p.first+len(p.items)], err) {
			again = append(again, p.n)
		}
	}
	r.mu.Lock()
	r.lastErr = err
	if len(r.dirty) == 0 && len(again)+len(b.held)+len(b.rest) > 0 {
		r.dirtyAt = time.Now()
	}
	for _, list := range [][]*node{again, b.held, b.rest} {
		for _, n := range list {
			r.dirty[n] = struct{}{}
		}
	}
	r.urgent = r.urgent || len(b.rest) > 0
	if err == nil && len(b.held)+len(b.rest) > 0 {
		// Not all stored yet: the next flush answers them.
		r.waiters = append(waiters, r.waiters...)
		waiters = nil
	}
	r.mu.Unlock()
	for _, w := range waiters {
		w <- err
	}
	for _, p := range b.parts {
		r.reap(p.n)
	}
}

// noteFlush counts a flush and logs a failure, or the end of a run of them.
func (r *Recorder) noteFlush(b *batch, took time.Duration, err error) {
	r.stats.flushes.Add(1)
	log := r.log.WithFields(logrus.Fields{"chunks": len(b.chunks), "bytes": b.bytes, "duration": took})
	if err != nil {
		if r.stats.flushErrors.Add(1) == 1 || r.lastErrNil() {
			log.WithError(err).Warn("history_flush_failed")
		}
		return
	}
	if !r.lastErrNil() {
		log.Info("history_flush_recovered")
	}
	r.stats.stored.Add(uint64(len(b.chunks)))
	var output uint64 // kept: a chunk the Store dropped has no Seq
	for _, c := range b.chunks {
		if c.Kind == KindOutput && c.Seq != 0 {
			output += uint64(len(c.Data))
		}
	}
	r.stats.storedBytes.Add(output)
}

// lastErrNil reports whether the previous flush succeeded.
func (r *Recorder) lastErrNil() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.lastErr == nil
}

// release ends a reader's hold of n; the last one out asks for the flush
// it held off.
func (n *node) release() {
	n.mu.Lock()
	n.readers--
	due := n.readers == 0 && n.due
	n.mu.Unlock()
	if due {
		n.r.markDirty(n, true)
	}
	n.r.reap(n)
}

// cutWaiting waits until no flush of n is in flight or due (so that a
// stream of reads cannot hold its flushes off for good), then cuts it and
// runs attach (if not nil) at that instant, under n.mu.
func (n *node) cutWaiting(ctx context.Context, c *Cut, attach func(*node)) error {
	n.mu.Lock()
	for n.wait != nil {
		wait := n.wait
		n.mu.Unlock()
		select {
		case <-wait:
		case <-ctx.Done():
			return ctx.Err()
		}
		n.mu.Lock()
	}
	n.cutLocked(c)
	if attach != nil {
		attach(n)
	}
	n.mu.Unlock()
	return nil
}

// cutLocked counts c as a reader of n (flushes leave n alone until c is
// released) and snapshots what is pending and in flight. n.mu is held.
func (n *node) cutLocked(c *Cut) {
	n.readers++
	c.n = n
	c.buffered = n.pending.snapshot(c.q.Epoch)
	if f := n.flight; f != nil {
		c.flight = f
		for _, it := range f.items {
			if it.c.Epoch == c.q.Epoch {
				c.inflight = append(c.inflight, it.chunk(notRecorded).clone())
			}
		}
	}
}

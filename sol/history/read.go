package history

import (
	"bytes"
	"context"
	"sync"
	"time"
)

// Read returns the history q selects, in order: what the Store holds and,
// on the replica that records the node, what is still buffered (so output
// shows the moment it is written), without a chunk twice or a gap between
// the two. It is cut exactly to q.Since (by the stamps) and q.Lines, and
// bounded by q.MaxBytes (default HistoryBytes + BufferBytes).
//
// A tenant's read (q.Admin false) answers ErrEnded once q.Epoch is no
// longer the node's current epoch in the Store, whatever is buffered.
//
// Read waits for a flush of the node that is in flight (one transaction),
// never for the flush interval, and holds the node's next flush off until
// its Store read returns: bound it with ctx.
func (r *Recorder) Read(ctx context.Context, q Query) ([]Chunk, error) {
	c, err := r.cutWaiting(ctx, q, nil)
	if err != nil {
		return nil, err
	}
	out, _, err := c.read(ctx)
	return out, err
}

// cutWaiting is Cut that first waits for a flush in flight or due (see
// node.cutWaiting).
func (r *Recorder) cutWaiting(ctx context.Context, q Query, attach func(*node)) (*Cut, error) {
	if err := q.check(); err != nil {
		return nil, err
	}
	c := &Cut{r: r, q: q}
	if n := r.lookup(q.Node); n != nil {
		if err := n.cutWaiting(ctx, c, attach); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// Cut is one instant of a node's history as this replica has it:
// everything recorded before it (stored, in flight or buffered), nothing
// after. Recorder.Cut takes one without ever blocking, so that it can be
// taken where a viewer that gets what comes next is registered (under the
// lock under which the link's output is also given to Recording.Write):
// Read, outside that lock, then returns exactly what the viewer did not
// get. Until it is read or closed it holds the node's flushes off: read it
// at once.
type Cut struct {
	r        *Recorder
	q        Query
	n        *node   // nil when the node is not recorded here
	buffered []Chunk // pending at the cut
	flight   *flight // the node's flush in flight at the cut, if any
	inflight []Chunk // its chunks of the tenancy
	once     sync.Once
}

// Cut takes a Cut of q's tenancy now. It never blocks (it takes the
// Recorder's and the node's locks, which are never held across I/O).
func (r *Recorder) Cut(q Query) (*Cut, error) {
	if err := q.check(); err != nil {
		return nil, err
	}
	c := &Cut{r: r, q: q}
	if n := r.lookup(q.Node); n != nil {
		n.mu.Lock()
		n.cutLocked(c)
		n.mu.Unlock()
	}
	return c, nil
}

// Read returns what Recorder.Read would have at the instant of the cut
// (see it for q's selections and ErrEnded). It waits for the flush that
// was in flight at the cut, if any; bound it with ctx. Read once.
func (c *Cut) Read(ctx context.Context) ([]Chunk, error) {
	out, _, err := c.read(ctx)
	return out, err
}

// read is Read; it also returns the highest Seq of the stored chunks (or
// q.After).
func (c *Cut) read(ctx context.Context) ([]Chunk, int64, error) {
	defer c.Close()
	if f := c.flight; f != nil {
		select {
		case <-f.done:
		case <-ctx.Done():
			return nil, 0, ctx.Err()
		}
	}
	q := c.q
	if q.MaxBytes == 0 {
		q.MaxBytes = int(c.r.cfg.HistoryBytes) + c.r.cfg.BufferBytes
	}
	sctx, cancel := context.WithTimeout(ctx, c.r.cfg.StoreTimeout)
	stored, err := c.r.st.ReadHistory(sctx, q)
	cancel()
	if err != nil {
		return nil, 0, err
	}
	last := q.After
	for _, ch := range stored {
		last = max(last, ch.Seq)
	}
	out := stored
	if c.flight != nil && c.flight.err != nil {
		// It failed: its chunks went back to the buffer, where the cut
		// keeps them from the next flush until now.
		out = append(out, c.inflight...)
	}
	out = append(out, c.buffered...)
	out = cutSince(out, q.Since)
	if q.Lines > 0 {
		out = lastLines(out, q.Lines)
	}
	return fitBytes(out, q.MaxBytes), last, nil
}

// Close releases a Cut that will not be read (Read releases it too).
func (c *Cut) Close() {
	c.once.Do(func() {
		if c.n != nil {
			c.n.release()
		}
	})
}

// cutSince drops what arrived before since, cutting a chunk that began
// before it at the first write at or after it.
func cutSince(chunks []Chunk, since time.Time) []Chunk {
	if since.IsZero() {
		return chunks
	}
	out := chunks[:0]
	for _, c := range chunks {
		if c.Until().Before(since) {
			continue
		}
		if c.At.Before(since) {
			for _, s := range c.Stamps {
				if !s.At.Before(since) {
					c = c.tail(s.Off)
					break
				}
			}
		}
		out = append(out, c)
	}
	return out
}

// lastLines keeps the last n lines of output, as tail(1) does: a newline
// ends a line, and text after the last one is a line too. Markers after
// the cut stay; they do not count.
func lastLines(chunks []Chunk, n int) []Chunk {
	trailing := true // the last byte of output, if a newline, ends the last line
	for i := len(chunks) - 1; i >= 0; i-- {
		c := chunks[i]
		if c.Kind != KindOutput {
			continue
		}
		d := c.Data
		for j := len(d); j > 0; {
			k := bytes.LastIndexByte(d[:j], '\n')
			if k < 0 {
				if j > 0 {
					trailing = false
				}
				break
			}
			if k < j-1 || !trailing {
				n--
			}
			trailing = false
			if n == 0 {
				out := append([]Chunk{c.tail(k + 1)}, chunks[i+1:]...)
				if len(out[0].Data) == 0 {
					out = out[1:]
				}
				return out
			}
			j = k
		}
	}
	return chunks
}

// fitBytes keeps the newest whole chunks that hold at most limit bytes
// (data and stamps, as the Store counts them).
func fitBytes(chunks []Chunk, limit int) []Chunk {
	size := 0
	for i := len(chunks) - 1; i >= 0; i-- {
		c := chunks[i]
		size += len(c.Data) + len(AppendStamps(nil, c))
		if size > limit {
			return chunks[i+1:]
		}
	}
	return chunks
}

// Follow returns a Tail of q's tenancy: the history q selects (as Read
// returns it), then every chunk recorded after it, live on the replica
// that records the node (from the same instant as the history: nothing
// twice, nothing missed), else polled from the Store every FlushInterval.
// When this replica stops recording the node, the Tail goes on polling
// from the last chunk it stored.
//
// Feeding: live chunks are what the node's Recordings Write and Mark (and
// Mark of a marker of its tenancy) after the Tail began; nothing else is
// needed from the caller.
func (r *Recorder) Follow(ctx context.Context, q Query) (*Tail, error) {
	t := &Tail{r: r, q: Query{Node: q.Node, Epoch: q.Epoch, Admin: q.Admin}, ready: make(chan struct{}, 1)}
	c, err := r.cutWaiting(ctx, q, func(n *node) {
		t.mu.Lock()
		defer t.mu.Unlock()
		switch {
		case n.gone:
		case n.epoch > q.Epoch:
			t.err = ErrEnded
		default:
			if n.subs == nil {
				n.subs = map[*Tail]struct{}{}
			}
			n.subs[t] = struct{}{}
			t.n = n
		}
	})
	if err != nil {
		return nil, err
	}
	hist, last, err := c.read(ctx)
	if err != nil {
		t.Close()
		return nil, err
	}
	t.mu.Lock()
	t.hist = append(hist, t.hist...)
	t.after = max(t.after, last)
	t.polling = t.polling || (t.n == nil && t.err == nil)
	t.mu.Unlock()
	return t, nil
}

// Tail is a follower of one tenancy's history (Follow). Its methods are
// safe for concurrent use; Next is meant for one reader.
type Tail struct {
	r     *Recorder
	q     Query         // Node, Epoch, Admin
	ready chan struct{} // cap 1: something to read, or the Tail ended

	mu       sync.Mutex
	n        *node   // the node followed live; nil when polling or ended
	hist     []Chunk // to hand out before live
	live     buffer  // delivered live, not read yet
	polling  bool
	after    int64     // polling: the highest Seq handed out
	lastPoll time.Time // polling: when the Store was last asked
	err      error     // why the Tail ended (after what it holds)
}

// deliver queues a live chunk; past FollowBytes the oldest give way to a
// gap. The node's lock is held.
func (t *Tail) deliver(c Chunk) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.err != nil {
		return
	}
	t.live.push(c, t.r.cfg.FlushBytes)
	t.live.trim(t.r.cfg.FollowBytes)
	signal(t.ready)
}

// end ends the Tail with err, dropping what it holds if drop (an access
// change: not one more byte). The node's lock is held.
func (t *Tail) end(err error, drop bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.err == nil {
		t.err = err
	}
	if drop {
		t.hist, t.live = nil, buffer{}
	}
	t.n = nil
	signal(t.ready)
}

// poll moves the Tail to polling the Store after seq (its node stopped
// being recorded here). The node's lock is held.
func (t *Tail) poll(seq int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.n, t.polling = nil, true
	t.after = max(t.after, seq)
	signal(t.ready)
}

// Next returns the next chunk, waiting for one until ctx ends. It returns
// ErrEnded when the tenancy ends (an access change), ErrClosed when the
// Tail or the Recorder is closed, or the Store's error (a Tail that
// polls stops at the first one).
func (t *Tail) Next(ctx context.Context) (Chunk, error) {
	for {
		t.mu.Lock()
		if len(t.hist) > 0 {
			c := t.hist[0]
			t.hist[0] = Chunk{}
			t.hist = t.hist[1:]
			t.mu.Unlock()
			return c, nil
		}
		if c, ok := t.live.pop(notDelivered); ok {
			t.mu.Unlock()
			return c, nil
		}
		err, polling := t.err, t.polling
		t.mu.Unlock()
		if err != nil {
			return Chunk{}, err
		}
		if polling {
			if err := t.pollStore(ctx); err != nil {
				return Chunk{}, err
			}
			continue
		}
		select {
		case <-t.ready:
		case <-ctx.Done():
			return Chunk{}, ctx.Err()
		}
	}
}

// pollStore waits until FlushInterval has passed since the last poll, then
// reads what the Store holds after the last chunk handed out.
func (t *Tail) pollStore(ctx context.Context) error {
	t.mu.Lock()
	wait := time.Until(t.lastPoll.Add(t.r.cfg.FlushInterval))
	t.mu.Unlock()
	if wait > 0 {
		timer := time.NewTimer(wait)
		defer timer.Stop()
		select {
		case <-timer.C:
		case <-t.ready: // closed, most likely: Next looks
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if t.r.closing.Load() {
		return ErrClosed
	}
	t.mu.Lock()
	q := t.q
	q.After, q.MaxBytes = t.after, int(t.r.cfg.HistoryBytes)
	t.lastPoll = time.Now()
	t.mu.Unlock()
	sctx, cancel := context.WithTimeout(ctx, t.r.cfg.StoreTimeout)
	chunks, err := t.r.st.ReadHistory(sctx, q)
	cancel()
	if err != nil {
		return err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.err != nil {
		return nil
	}
	for _, c := range chunks {
		t.after = max(t.after, c.Seq)
	}
	t.hist = append(t.hist, chunks...)
	return nil
}

// Close ends the Tail; Next returns ErrClosed.
func (t *Tail) Close() {
	t.mu.Lock()
	n := t.n
	t.mu.Unlock()
	if n != nil {
		n.mu.Lock()
		delete(n.subs, t)
		n.mu.Unlock()
	}
	t.mu.Lock()
	t.n = nil
	if t.err == nil {
		t.err = ErrClosed
	}
	t.hist, t.live = nil, buffer{}
	t.mu.Unlock()
	signal(t.ready)
}

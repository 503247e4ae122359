package history

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sirupsen/logrus"
)

// ErrClosed: the Recorder is closed.
var ErrClosed = errors.New("console history recorder is closed")

// MinHistoryBytes is the smallest Config.HistoryBytes: a few chunks.
const MinHistoryBytes = 64 << 10

// DefaultHistoryBytes is Config.HistoryBytes's default.
const DefaultHistoryBytes = 1 << 20

// maxBatchBytes bounds one flush's transaction; nodes left over go in the
// next one, at once.
const maxBatchBytes = 4 << 20

// Config tunes a Recorder. Zero fields take the documented defaults.
type Config struct {
	// FlushInterval is the longest a byte waits in a node's buffer before
	// a flush stores it (default 1 s): at most this much output is lost
	// when the replica dies.
	FlushInterval time.Duration
	// FlushBytes starts a flush as soon as a node has this many bytes
	// pending (default 16 KiB). It is also the largest chunk.
	FlushBytes int
	// BufferBytes bounds a node's pending bytes (default 256 KiB). Past it
	// the oldest give way to a "not recorded" gap: Write never waits for
	// the Store.
	BufferBytes int
	// HistoryBytes bounds the history stored per tenancy (history.bytes,
	// default 1 MiB, at least MinHistoryBytes): the oldest chunks go first.
	HistoryBytes int64
	// Retention keeps an ended tenancy for admins (history.retention;
	// default 0: deleted at once).
	Retention time.Duration
	// PurgeEvery paces PurgeHistory (default 1 min).
	PurgeEvery time.Duration
	// StoreTimeout bounds each call to the Store (default 10 s).
	StoreTimeout time.Duration
	// FollowBytes bounds what a follower has not read yet (default 256
	// KiB); past it, it skips ahead over a gap marker.
	FollowBytes int
	// Now is the clock of chunk times (default time.Now).
	Now func() time.Time
}

func (c *Config) setDefaults() error {
	if c.FlushInterval < 0 || c.FlushBytes < 0 || c.BufferBytes < 0 || c.HistoryBytes < 0 ||
		c.Retention < 0 || c.PurgeEvery < 0 || c.StoreTimeout < 0 || c.FollowBytes < 0 {
		return errors.New("negative size or duration")
	}
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	defDur := func(v *time.Duration, d time.Duration) {
		if *v == 0 {
			*v = d
		}
	}
	defDur(&c.FlushInterval, time.Second)
	def(&c.FlushBytes, 16<<10)
	def(&c.BufferBytes, 256<<10)
	def(&c.FollowBytes, 256<<10)
	defDur(&c.PurgeEvery, time.Minute)
	defDur(&c.StoreTimeout, 10*time.Second)
	if c.HistoryBytes == 0 {
		c.HistoryBytes = DefaultHistoryBytes
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	switch {
	case c.FlushBytes > MaxChunkBytes:
		return fmt.Errorf("flush bytes %d above the largest chunk, %d", c.FlushBytes, MaxChunkBytes)
	case c.BufferBytes < c.FlushBytes:
		return fmt.Errorf("buffer bytes %d below flush bytes %d", c.BufferBytes, c.FlushBytes)
	case c.HistoryBytes < MinHistoryBytes:
		return fmt.Errorf("history bytes %d below %d", c.HistoryBytes, MinHistoryBytes)
	}
	return nil
}

// Recorder records the console history of the nodes this replica holds
// (Open), keeps markers of any node (Mark), and reads and follows the
// history of any node (Read, Follow).
//
// Goroutines: one flusher, started by the first Open or Mark, which writes
// every dirty node's buffer to the Store in one transaction per flush and
// purges on a timer; Close stops it after a last flush and waits for it.
// Nothing else runs in the background: a Tail does its work in Next.
//
// Locks: Recorder.mu, then node.mu, then Tail.mu; none is held across a
// call to the Store.
type Recorder struct {
	cfg     Config
	st      Store
	log     logrus.FieldLogger
	stats   counters
	closing atomic.Bool

	mu      sync.Mutex
	nodes   map[string]*node
	dirty   map[*node]struct{} // nodes with something to flush (or held by readers)
	dirtyAt time.Time          // when dirty last went from empty to not
	urgent  bool               // flush at once: FlushBytes reached, Flush, SetEpoch
	waiters []chan error       // Flush calls: answered by the next flush that has them
	started bool
	closed  bool
	kick    chan struct{} // cap 1: look again (sent by markDirty and Flush)
	quit    chan struct{} // closed by Close
	done    chan struct{} // closed by the flusher when it returns
	lastErr error         // of the flusher's last flush, for Close
}

// New validates cfg and returns an idle Recorder over st. It starts no
// goroutine.
func New(cfg Config, st Store, log logrus.FieldLogger) (*Recorder, error) {
	if st == nil || log == nil {
		return nil, errors.New("new history recorder: nil store or logger")
	}
	if err := cfg.setDefaults(); err != nil {
		return nil, fmt.Errorf("new history recorder: %w", err)
	}
	return &Recorder{
		cfg: cfg, st: st, log: log,
		nodes: map[string]*node{},
		dirty: map[*node]struct{}{},
		kick:  make(chan struct{}, 1),
		quit:  make(chan struct{}),
		done:  make(chan struct{}),
	}, nil
}

// Stats are the Recorder's counters, for /metrics.
type Stats struct {
	Nodes       int    // nodes with a buffer here (recorded, or a marker pending)
	Written     uint64 // output bytes given to Write
	Dropped     uint64 // output bytes that gave way before they were stored
	Stored      uint64 // chunks the Store took
	StoredBytes uint64 // output bytes in the chunks it kept (markers not counted)
	Flushes     uint64 // transactions
	FlushErrors uint64
}

type counters struct {
	written, dropped, stored, storedBytes, flushes, flushErrors atomic.Uint64
}

// Stats returns the counters.
func (r *Recorder) Stats() Stats {
	r.mu.Lock()
	n := len(r.nodes)
	r.mu.Unlock()
	return Stats{Nodes: n, Written: r.stats.written.Load(), Dropped: r.stats.dropped.Load(),
		Stored: r.stats.stored.Load(), StoredBytes: r.stats.storedBytes.Load(), Flushes: r.stats.flushes.Load(),
		FlushErrors: r.stats.flushErrors.Load()}
}

// Start starts the flusher, and with it the purge timer, if it does not
// run yet (Open and Mark start it too): a replica that records nothing
// still purges kept tenancies. It does nothing once the Recorder is
// closed.
func (r *Recorder) Start() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.closed {
		r.startLocked()
	}
}

// startLocked starts the flusher once. r.mu is held.
func (r *Recorder) startLocked() {
	if !r.started {
		r.started = true
		go r.run() // owned by r: Close stops it and waits (r.done)
	}
}

// nodeLocked returns label's node, creating it at epoch if there is none;
// a node's epoch never goes back. r.mu is held.
func (r *Recorder) nodeLocked(label string, epoch int64) *node {
	n := r.nodes[label]
	if n == nil {
		n = &node{r: r, label: label, epoch: epoch, lastSeq: map[int64]int64{}}
		r.nodes[label] = n
	}
	r.startLocked()
	return n
}

// lookup returns label's node, or nil if it has no buffer here.
func (r *Recorder) lookup(label string) *node {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.nodes[label]
}

// Open starts (or joins) the recording of label's output at tenancy epoch
// (the node's current epoch as this replica knows it): the replica that
// holds the node's console link calls it and gives the link's output to
// the Recording. A node already recorded keeps its buffer; a higher epoch
// switches it (see SetEpoch).
func (r *Recorder) Open(label string, epoch int64) (*Recording, error) {
	if label == "" || epoch <= 0 {
		return nil, fmt.Errorf("open history of %q: no label or epoch", label)
	}
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil, ErrClosed
	}
	n := r.nodeLocked(label, epoch)
	n.mu.Lock()
	n.refs++
	n.mu.Unlock()
	r.mu.Unlock()
	r.SetEpoch(label, epoch)
	return &Recording{n: n, epoch: epoch}, nil
}

// Mark records marker m in label's tenancy epoch (the epoch of the session
// that caused it). On the replica recording the node, it takes its place
// among the output; elsewhere it is stored with the next flush, after what
// was stored before it.
func (r *Recorder) Mark(label string, epoch int64, m Marker) {
	if label == "" || epoch <= 0 || !m.Kind.Valid() || m.Kind == KindOutput {
		return
	}
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return
	}
	// Under r.mu, so that the node cannot be reaped before it holds m.
	n := r.nodeLocked(label, epoch)
	wasEmpty := n.mark(epoch, m)
	r.mu.Unlock()
	if wasEmpty {
		r.markDirty(n, false)
	}
}

// SetEpoch switches label's recording to tenancy epoch after an access
// change: output written from now on belongs to it, what was written
// before stays in the tenancy it was written in (and is flushed at once),
// and followers of earlier tenancies end with ErrEnded, dropping what they
// had not read. A lower or equal epoch changes nothing. It never blocks on
// the Store; a node not recorded here is left alone.
func (r *Recorder) SetEpoch(label string, epoch int64) {
	n := r.lookup(label)
	if n == nil {
		return
	}
	if n.setEpoch(epoch) {
		r.markDirty(n, true)
	}
}

// EndTenancies ends label's tenancies before epoch in the Store, with the
// configured retention, after an access change (and SetEpoch): if this
// replica has bytes of them pending, it first flushes them, so that a kept
// tenancy holds them before its end marker. Every replica may call it for
// every change: it is idempotent.
func (r *Recorder) EndTenancies(ctx context.Context, label string, epoch int64) error {
	if n := r.lookup(label); n != nil && n.holdsBefore(epoch) {
		if err := r.Flush(ctx); err != nil {
			r.log.WithError(err).WithField("node", label).Warn("history_flush_before_end_failed")
		}
	}
	ctx, cancel := context.WithTimeout(ctx, r.cfg.StoreTimeout)
	defer cancel()
	return r.st.EndTenancies(ctx, label, epoch, r.cfg.Retention)
}

// Flush stores everything written before it and returns the outcome of
// the flush that did, or ctx's error.
func (r *Recorder) Flush(ctx context.Context) error {
	done := make(chan error, 1)
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return ErrClosed
	}
	if !r.started {
		r.mu.Unlock()
		return nil // nothing was ever written
	}
	r.waiters = append(r.waiters, done)
	r.urgent = true
	r.mu.Unlock()
	signal(r.kick)
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Close stops the flusher after a last flush of everything buffered and
// waits for it, at most until ctx ends. Followers end with ErrClosed;
// Write and Mark do nothing afterwards.
func (r *Recorder) Close(ctx context.Context) error {
	r.closing.Store(true)
	r.mu.Lock()
	first, started := !r.closed, r.started
	r.closed = true
	r.mu.Unlock()
	if !started {
		return nil
	}
	if first {
		close(r.quit)
	}
	select {
	case <-r.done:
	case <-ctx.Done():
		return fmt.Errorf("close history recorder: %w", ctx.Err())
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.lastErr != nil {
		return fmt.Errorf("close history recorder: last flush: %w", r.lastErr)
	}
	return nil
}

// markDirty queues n for the next flush (at once if urgent).
func (r *Recorder) markDirty(n *node, urgent bool) {
	r.mu.Lock()
	if len(r.dirty) == 0 {
		r.dirtyAt = time.Now()
	}
	r.dirty[n] = struct{}{}
	r.urgent = r.urgent || urgent
	r.mu.Unlock()
	signal(r.kick)
}

// signal sends on a channel of capacity 1 without blocking.
func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// run is the flusher: it flushes when a node's oldest pending byte has
// waited FlushInterval, or at once when asked, and purges on a timer.
func (r *Recorder) run() {
	defer close(r.done)
	purge := time.NewTicker(r.cfg.PurgeEvery)
	defer purge.Stop()
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	for {
		wait := r.nextFlush()
		if wait == 0 {
			r.flushOnce(false)
			continue
		}
		var due <-chan time.Time
		if wait > 0 {
			timer.Reset(wait)
			due = timer.C
		}
		select {
		case <-r.kick:
		case <-due:
			r.flushOnce(false)
		case <-purge.C:
			r.purge()
		case <-r.quit:
			timer.Stop()
			r.drain()
			return
		}
		timer.Stop()
	}
}

// nextFlush is how long until the next flush is due: 0 now, < 0 never
// (nothing is dirty).
func (r *Recorder) nextFlush() time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case r.urgent:
		return 0
	case len(r.dirty) == 0:
		return -1
	}
	return max(time.Until(r.dirtyAt.Add(r.cfg.FlushInterval)), time.Nanosecond)
}

// purge runs the Store's purge (retention, and ends that were missed).
func (r *Recorder) purge() {
	ctx, cancel := context.WithTimeout(context.Background(), r.cfg.StoreTimeout)
	defer cancel()
	n, err := r.st.PurgeHistory(ctx, r.cfg.Retention)
	if err != nil {
		r.log.WithError(err).Warn("history_purge_failed")
	} else if n > 0 {
		r.log.WithField("tenancies", n).Info("history_purged")
	}
}

// drain flushes until nothing is left (or a flush fails), then ends every
// follower and answers every Flush still waiting.
func (r *Recorder) drain() {
	for range 64 {
		r.mu.Lock()
		left := len(r.dirty)
		r.mu.Unlock()
		if left == 0 || r.flushOnce(true) != nil {
			break
		}
	}
	r.mu.Lock()
	nodes := make([]*node, 0, len(r.nodes))
	for _, n := range r.nodes {
		nodes = append(nodes, n)
	}
	waiters := r.waiters
	r.waiters = nil
	r.mu.Unlock()
	for _, n := range nodes {
		n.endTails(ErrClosed)
	}
	for _, w := range waiters {
		w <- ErrClosed
	}
}

package db

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// ErrWriteStuck is returned by CheckWrites while a write has been in
// progress for longer than the caller's bound, or the write probe did not
// finish in time: the database (or the disk under it) is not taking writes.
var ErrWriteStuck = errors.New("database is not completing writes")

// writeWatch tracks the writes in progress (transactions and single
// statements on the writer pool) and runs the write probe, one at a time.
//
// A write can be stuck where no context reaches it: on SQLite, a write()
// or fsync() on a frozen filesystem blocks in the kernel until it thaws.
// Its caller's deadline cannot end it, so the store keeps the start time of
// every write in progress: one older than a bound is what CheckWrites
// reports, whoever is waiting for it.
type writeWatch struct {
	mu     sync.Mutex
	next   uint64
	since  map[uint64]time.Time // start of each write in progress
	probe  chan struct{}        // closed when the running probe ends; nil if none runs
	result error                // of the last probe that ended
	ended  time.Time            // when it ended
	wg     sync.WaitGroup       // the probe's goroutine
	cancel context.CancelFunc   // gives up the running probe (Close)
	// committed counts the writes committed since Open (Committed).
	committed atomic.Uint64
}

// probeEvery is the least time between two write probes: a caller that
// comes sooner gets the last one's outcome (with the stuck-write check).
const probeEvery = time.Second

// probeHold is how long a write probe may be held before it is given up
// (a connection that died under it): past the stall bound it counts as a
// stuck write meanwhile.
const probeHold = 30 * time.Second

// writing records a write in progress until the returned func is called.
func (s *Store) writing() (done func()) {
	w := &s.writes
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.since == nil {
		w.since = map[uint64]time.Time{}
	}
	w.next++
	id := w.next
	w.since[id] = time.Now()
	return func() {
		w.mu.Lock()
		delete(w.since, id)
		w.mu.Unlock()
	}
}

// OldestWrite is how long the oldest write in progress has been running (0
// if none is).
func (s *Store) OldestWrite() time.Duration {
	w := &s.writes
	w.mu.Lock()
	defer w.mu.Unlock()
	var oldest time.Duration
	for _, t := range w.since {
		oldest = max(oldest, time.Since(t))
	}
	return oldest
}

// Committed is how many writes (transactions and single statements) have
// committed since Open: one committed after a look at the database failed
// shows that it completes writes again.
func (s *Store) Committed() uint64 { return s.writes.committed.Load() }

// CheckWrites reports whether the database completes writes: ErrWriteStuck
// (wrapped, with what was seen) if a write has been in progress for longer
// than bound; else the outcome of a write probe (a row inserted and deleted
// in one transaction): the one it waits for until ctx ends, or if ctx ends
// first, the previous one's. A read that answers says nothing about writes:
// a frozen disk serves reads from the page cache.
//
// One probe runs at a time: it is started when none runs and the last one
// ended at least probeEvery ago (else that one's outcome is the answer),
// and callers that come meanwhile wait for it. A probe keeps running after its caller gave
// up (a write stuck in the kernel cannot be called back), held up to
// probeHold (or bound, if longer; see runProbe), and counts among the
// writes in progress from its start: so a caller that does not wait (an
// expired ctx) still learns of a stuck disk at a later call.
func (s *Store) CheckWrites(ctx context.Context, bound time.Duration) error {
	stuck := func() error {
		if age := s.OldestWrite(); age > bound {
			return fmt.Errorf("%w: a write has been in progress for %v", ErrWriteStuck, age.Round(time.Millisecond))
		}
		return nil
	}
	if err := stuck(); err != nil {
		return err
	}
	w := &s.writes
	w.mu.Lock()
	done, last := w.probe, w.result
	if done == nil && !w.ended.IsZero() && time.Since(w.ended) < probeEvery {
		w.mu.Unlock()
		return last
	}
	if done == nil {
		done = make(chan struct{})
		w.probe = done
		w.wg.Add(1)
		go s.runProbe(bound, done) // owned by w.wg (Close)
	}
	w.mu.Unlock()
	select {
	case <-done:
		w.mu.Lock()
		defer w.mu.Unlock()
		return w.result
	case <-ctx.Done():
		if err := stuck(); err != nil {
			return err
		}
		return last
	}
}

// runProbe writes and deletes one row, then records the outcome and closes
// done.
func (s *Store) runProbe(bound time.Duration, done chan struct{}) {
	defer s.writes.wg.Done()
	// Held past bound, the probe is what shows a stuck database (a write
	// in progress for longer than bound) to every later check: so it is
	// not given up at bound. On SQLite nothing could end it anyway (a
	// write blocked in the kernel); on a server it would be cancelled, and
	// a frozen disk there would look healthy again the moment it was.
	// probeHold still ends one held on a connection that died.
	ctx, cancel := context.WithTimeout(context.Background(), max(bound, probeHold))
	defer cancel()
	s.writes.mu.Lock()
	s.writes.cancel = cancel // Close gives it up after probeWait
	s.writes.mu.Unlock()
	defer s.writing()() // in progress from its start, its wait for a connection too
	id := newToken()
	err := s.withTx(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `INSERT INTO write_probes (id, at) VALUES (?, ?)`, id, toMillis(s.now())); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, `DELETE FROM write_probes WHERE id = ?`, id)
		return err
	})
	switch {
	case ctx.Err() != nil:
		err = fmt.Errorf("%w: a write probe did not finish within %v", ErrWriteStuck, max(bound, probeHold))
	case err != nil:
		err = fmt.Errorf("write probe: %w", err)
	}
	w := &s.writes
	w.mu.Lock()
	w.result, w.probe, w.ended = err, nil, time.Now()
	w.mu.Unlock()
	close(done)
}

// Settle waits until every access change begun before it has committed or
// rolled back, then returns label's epoch. ErrNotFound: the node is gone;
// the epoch returned with it is then the latest of any change, so at or
// above every change of label (its deletion's included).
// It takes the lock every access change takes first (access_seq's row, or
// on SQLite the one writer), so a change whose outcome its caller never
// learnt (its deadline passed mid-commit) is decided by the time Settle
// reads. It writes nothing.
func (s *Store) Settle(ctx context.Context, label string) (int64, error) {
	var epoch int64
	errRead := errors.New("read only") // rolls the transaction back
	err := s.withTx(ctx, func(tx *sql.Tx) error {
		// SQLite: the transaction holds the one writer already (BEGIN
		// IMMEDIATE). MySQL, PostgreSQL: the row lock a change holds until
		// it ends.
		lock := `SELECT epoch FROM access_seq WHERE id = 1` + s.forUpdate()
		var seq int64
		if err := tx.QueryRowContext(ctx, lock).Scan(&seq); err != nil {
			return err
		}
		err := tx.QueryRowContext(ctx, `SELECT access_epoch FROM nodes WHERE label = ?`, label).Scan(&epoch)
		if errors.Is(err, sql.ErrNoRows) {
			epoch = seq
			return ErrNotFound
		}
		if err != nil {
			return err
		}
		return errRead
	})
	switch {
	case errors.Is(err, errRead):
		return epoch, nil
	case errors.Is(err, ErrNotFound):
		return epoch, fmt.Errorf("settle changes of %s: %w", label, err)
	}
	return 0, fmt.Errorf("settle changes of %s: %w", label, err)
}

// probeWait bounds how long Close waits for a write probe still running.
const probeWait = 5 * time.Second

// waitProbe waits for a write probe still running, at most probeWait (one
// stuck in the kernel is left behind: the process is going away).
func (s *Store) waitProbe() error {
	done := make(chan struct{})
	go func() { // ends when the probe has
		s.writes.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-time.After(probeWait):
		s.writes.mu.Lock()
		if s.writes.cancel != nil {
			s.writes.cancel() // a server's probe ends with it; one in the kernel does not
		}
		s.writes.mu.Unlock()
		return errors.New("a write probe is still stuck")
	}
}

package db

import (
	"context"
	"slices"
	"time"
)

// AuditWindow is how long a deferred audit event (DeferredAudit) waits at
// most for its commit to begin: the store's audit goroutine commits the
// queue AuditWindow after its first event. It is also what a crash can
// lose of them (see Audit).
const AuditWindow = 50 * time.Millisecond

const (
	// auditBatchMax deferred events are committed at once, without waiting
	// for the window to end.
	auditBatchMax = 512
	// auditLaterMax bounds the deferred queue: beyond it Audit commits an
	// event before it returns, as it does a change's.
	auditLaterMax = 8192
)

// WithAuditWindow replaces AuditWindow: for tests of what a crash loses.
func WithAuditWindow(d time.Duration) Option {
	return func(s *Store) { s.audit.later.window = d }
}

// auditLater is the queue of deferred audit events and its goroutine (run
// by startAuditLater, stopped and waited for by Close). Its fields but the
// channels are guarded by auditQueue.mu.
type auditLater struct {
	events []AuditEvent
	window time.Duration
	closed bool          // Close has begun: no more deferring
	kick   chan struct{} // buffered: the queue got its first event
	full   chan struct{} // buffered: the queue holds auditBatchMax events
	stop   chan struct{} // closed by Close
	done   chan struct{} // closed when the goroutine has committed the rest
}

// take empties the queue (under auditQueue.mu).
func (l *auditLater) take() []AuditEvent {
	ev := l.events
	l.events = nil
	return ev
}

// startAuditLater starts the goroutine that commits deferred events.
func (s *Store) startAuditLater() {
	l := &s.audit.later
	if l.window <= 0 {
		l.window = AuditWindow
	}
	l.kick, l.full = make(chan struct{}, 1), make(chan struct{}, 1)
	l.stop, l.done = make(chan struct{}), make(chan struct{})
	go s.runAuditLater() // owned by the store: Close stops it and waits
}

// deferAudit queues e for the audit goroutine; false if it may not (the
// store is closing, or the queue is full): then e is committed at once.
func (s *Store) deferAudit(e AuditEvent) bool {
	q := &s.audit
	q.mu.Lock()
	l := &q.later
	if l.kick == nil || l.closed || len(l.events) >= auditLaterMax {
		q.mu.Unlock()
		return false
	}
	l.events = append(l.events, e)
	n := len(l.events)
	q.mu.Unlock()
	switch n {
	case 1:
		signal(l.kick)
	case auditBatchMax:
		signal(l.full)
	}
	return true
}

func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// runAuditLater commits the queue a window after its first event (at once
// when full), and what is left when the store closes.
func (s *Store) runAuditLater() {
	l := &s.audit.later
	defer close(l.done)
	timer := time.NewTimer(l.window)
	timer.Stop()
	wait := false // the last commit failed
	for {
		select {
		case <-l.kick:
		case <-l.full: // a full queue is committed at once, not a window on
			wait = s.flushLater() != nil
			continue
		case <-l.stop:
			s.flushLater()
			return
		}
		after, full := l.window, l.full
		if wait { // the last commit failed: not again at once, even when full
			after, full = auditRetry, nil
		}
		timer.Reset(after)
		select {
		case <-timer.C:
		case <-full:
			timer.Stop()
		case <-l.stop:
			timer.Stop()
			s.flushLater()
			return
		}
		wait = s.flushLater() != nil
	}
}

// flushLater commits the deferred events queued so far, if any, and
// returns the commit's error (flushAudit put the events back).
func (s *Store) flushLater() error {
	if s.laterQueued() {
		return s.commitAudit(context.Background(), nil)
	}
	return nil
}

// auditRetry is how long the audit goroutine waits before it tries again
// a commit of deferred events that failed (the database is down, or the
// disk full): not every window, which would flood the log.
const auditRetry = time.Second

// requeueLater puts deferred events whose commit failed (err) back at the
// head of the queue, in order, so that a database that fails for a while
// loses none of them; what the bound (auditLaterMax) leaves no room for,
// and everything once Close has begun, is lost and logged (audit_lost).
func (s *Store) requeueLater(events []AuditEvent, err error) {
	q := &s.audit
	q.mu.Lock()
	l := &q.later
	keep := 0
	if !l.closed {
		keep = min(len(events), max(auditLaterMax-len(l.events), 0))
		l.events = append(slices.Clone(events[:keep]), l.events...)
	}
	q.mu.Unlock()
	if lost := len(events) - keep; lost > 0 {
		s.log.WithError(err).WithField("deferred", lost).Error("audit_lost")
	}
	if keep > 0 {
		s.log.WithError(err).WithField("deferred", keep).Warn("audit_retry")
		signal(l.kick)
	}
}

// laterQueued reports whether deferred events wait for a commit, or may be
// in the one in progress (busy: a commit of deferred events only may have
// taken them).
func (s *Store) laterQueued() bool {
	s.audit.mu.Lock()
	defer s.audit.mu.Unlock()
	return len(s.audit.later.events) > 0 || s.audit.busy
}

// stopAuditLater ends deferring, commits what is queued and waits for the
// goroutine (Close).
func (s *Store) stopAuditLater() {
	q := &s.audit
	q.mu.Lock()
	l := &q.later
	if l.stop == nil || l.closed {
		q.mu.Unlock()
		return
	}
	l.closed = true
	q.mu.Unlock()
	close(l.stop)
	<-l.done
}

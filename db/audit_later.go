package db

import (
	"context"
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
	for {
		select {
		case <-l.kick:
		case <-l.full: // a full queue is committed at once, not a window on
			s.flushLater()
			continue
		case <-l.stop:
			s.flushLater()
			return
		}
		timer.Reset(l.window)
		select {
		case <-timer.C:
		case <-l.full:
			timer.Stop()
		case <-l.stop:
			timer.Stop()
			s.flushLater()
			return
		}
		s.flushLater()
	}
}

// flushLater commits the deferred events queued so far, if any. A failure
// is logged by flushAudit (audit_lost): no caller waits for these events.
func (s *Store) flushLater() {
	if s.laterQueued() {
		_ = s.commitAudit(context.Background(), nil)
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

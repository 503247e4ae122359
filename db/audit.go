package db

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/bits"
	"slices"
	"strings"
	"sync"
	"time"
)

// Audit column limits in bytes; longer values are cut, never refused.
const (
	auditNodeLen   = 80
	auditActorLen  = 80
	auditActionLen = 64
	auditSourceLen = 255
	auditResultLen = 32
	auditDetailLen = 4096
)

// Audit appends an event (At defaults to now). Fields are made valid UTF-8
// and cut to their column's size, so text from the network (an SSH user
// name is any string) never makes the write fail.
//
// Two kinds of event (DeferredAudit says which):
//
//   - A change or an action (an access change, a power action, anything not
//     listed by DeferredAudit): Audit returns once the event is committed,
//     together with every deferred event queued before it. Concurrent calls
//     share one transaction (group commit): one commit (one fsync on SQLite)
//     per event would make the audit log the daemon's bottleneck.
//   - A repeat of an aggregated event (Aggregated), when the store was
//     opened WithAuditAggregation: counted, and written with its key's
//     other repeats as one row at the end of the window (see aggregator),
//     as a deferred event. A crash loses the counts of the window.
//   - A read or a session's bounds (auth, session.start, session.end,
//     conn.close, power.status): Audit queues it and returns at once. The store's audit
//     goroutine commits the queue within AuditWindow of its first event (or
//     as soon as it holds auditBatchMax events), Close commits what is left,
//     and AuditEvents commits it before reading. A commit that fails puts
//     them back at the head of the queue, to be tried again (see
//     requeueLater). A crash or power loss can lose such events queued in
//     the last AuditWindow (plus the commit in progress, or those still
//     queued while the database was failing), never an acknowledged change
//     or action. When auditLaterMax
//     events are queued, a deferred event is committed like a change (the
//     queue is bounded; its caller waits).
//
// Audit ignores ctx's cancellation and deadline (it keeps its values): the
// transaction carries other callers' events too, and a cut session's last
// action must still be recorded. What bounds it instead is auditTimeout
// (10 s) per group commit, and an event waits for at most two: the one in
// progress when it was queued, then the one that takes it. So Audit returns
// within about 20 s; a deadline a caller puts on ctx shortens nothing.
func (s *Store) Audit(ctx context.Context, e AuditEvent) error {
	if e.At.IsZero() {
		e.At = s.now()
	}
	// Cut before queuing: the deferred queue then holds at most the column
	// sizes per event, whatever an unauthenticated client sent.
	e = e.clipped()
	e.Count = 1
	if s.agg != nil && Aggregated(e) && !s.agg.add(&e) {
		return nil // a repeat: counted, written at the window's end
	}
	if DeferredAudit(e.Action) && s.deferAudit(e) {
		return nil
	}
	return s.commitAudit(ctx, &e)
}

// DeferredAudit reports whether events of action are group-committed
// within AuditWindow rather than before Audit returns: logins (successful
// or not), session starts and ends, connections closed by a cut, and
// power status reads. None of them
// changes anything that a crash could leave unrecorded.
func DeferredAudit(action string) bool {
	switch action {
	case "auth", "session.start", "session.end", "conn.close", "power.status":
		return true
	}
	return false
}

// commitAudit commits e (nil: only the deferred queue) with whatever else
// is queued, in one group commit.
func (s *Store) commitAudit(ctx context.Context, e *AuditEvent) error {
	r := &auditReq{e: e, done: make(chan error, 1)}
	q := &s.audit
	q.mu.Lock()
	q.pending = append(q.pending, r)
	lead := !q.busy
	q.busy = true
	q.mu.Unlock()
	if !lead {
		// Wait for a leader to commit r, or to hand r's caller the lead.
		// Never give up early: a handed-over lead must be taken.
		if err := <-r.done; err != errAuditLead {
			return err
		}
	}
	s.flushAudit(context.WithoutCancel(ctx))
	return <-r.done
}

// auditTimeout bounds one group commit (the prepare, the transaction and its
// deadlock retries); see Audit for what it means to a caller.
const auditTimeout = 10 * time.Second

// errAuditLead tells a waiting Audit call to commit the queue itself.
var errAuditLead = errors.New("audit: take the lead")

// auditQueue is the group-commit queue of Audit. One caller at a time (the
// leader, busy) commits everything queued, then hands the lead to the first
// caller that queued meanwhile, so no caller commits more than two batches.
// later holds the deferred events (see Audit and audit_later.go).
type auditQueue struct {
	mu      sync.Mutex
	pending []*auditReq
	busy    bool
	flushes int // group commits begun, for tests
	later   auditLater
}

type auditReq struct {
	e    *AuditEvent // nil: a commit of the deferred events only
	done chan error  // buffered: the commit's result, or errAuditLead
}

// flushAudit commits the queued events, the deferred ones first, in one
// transaction and answers each caller.
func (s *Store) flushAudit(ctx context.Context) {
	q := &s.audit
	q.mu.Lock()
	batch := q.pending
	q.pending = nil
	events := q.later.take()
	q.flushes++
	q.mu.Unlock()
	deferred := len(events)
	for _, r := range batch {
		if r.e != nil {
			events = append(events, *r.e)
		}
	}

	err := s.insertAudit(ctx, events)
	if err != nil {
		err = fmt.Errorf("append %d audit event(s): %w", len(events), err)
		if deferred > 0 {
			s.requeueLater(events[:deferred], err)
		}
	} else if s.sink != nil && len(events) > 0 {
		s.sink.Export(events) // one leader at a time: in commit order
	}
	for _, r := range batch {
		r.done <- err
	}

	q.mu.Lock()
	if len(q.pending) == 0 {
		q.busy = false
		q.mu.Unlock()
		return
	}
	next := q.pending[0]
	q.mu.Unlock()
	next.done <- errAuditLead
}

// clipped returns e with every field valid UTF-8 and cut to its column,
// in strings of its own: a cut field does not keep the caller's long one
// alive while the event waits in the deferred queue.
func (e AuditEvent) clipped() AuditEvent {
	own := func(v string, max int) string {
		c := clip(v, max)
		if len(v) > max {
			c = strings.Clone(c)
		}
		return c
	}
	e.Node, e.Actor, e.Action = own(e.Node, auditNodeLen), own(e.Actor, auditActorLen), own(e.Action, auditActionLen)
	e.Source, e.Result, e.Detail = own(e.Source, auditSourceLen), own(e.Result, auditResultLen), own(e.Detail, auditDetailLen)
	return e
}

// insertAudit writes events (cut by Audit) in one transaction (none:
// nothing to do), in order: as few multi-row INSERTs as the batch's size
// in binary takes (at most auditRows rows each), so that a group commit
// of a busy window is a handful of statements, not one per event (on
// MySQL each is a round trip).
func (s *Store) insertAudit(ctx context.Context, events []AuditEvent) error {
	if len(events) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, auditTimeout)
	defer cancel()
	// Prepared before the transaction: SQLite's writer pool has one
	// connection, which the transaction would hold.
	var inserts [auditSizes]*sql.Stmt
	for rows := len(events); rows > 0; rows -= auditChunk(rows) {
		n := auditChunk(rows)
		i := bits.TrailingZeros(uint(n))
		if inserts[i] != nil {
			continue
		}
		st, err := s.prepared(ctx, s.w, sqlAuditInsert(n))
		if err != nil {
			return err
		}
		inserts[i] = st
	}
	args := make([]any, 0, 8*auditChunk(len(events)))
	return s.withTx(ctx, func(tx *sql.Tx) error {
		for rest := events; len(rest) > 0; {
			n := auditChunk(len(rest))
			args = args[:0]
			for _, e := range rest[:n] {
				args = append(args, toMillis(e.At), e.Node, e.Actor, e.Action, e.Source, e.Result, e.Detail, max(e.Count, 1))
			}
			stmt := tx.StmtContext(ctx, inserts[bits.TrailingZeros(uint(n))])
			_, err := stmt.ExecContext(ctx, args...)
			stmt.Close()
			if err != nil {
				return err
			}
			rest = rest[n:]
		}
		return nil
	})
}

// auditRows is the most rows one audit INSERT writes (a power of two);
// auditSizes the number of statement sizes (1, 2, 4, ... auditRows), which
// follows from it.
const (
	auditShift = 6
	auditRows  = 1 << auditShift
	auditSizes = auditShift + 1
)

// auditChunk is how many of n rows the next INSERT writes: the largest
// power of two at most n and auditRows.
func auditChunk(n int) int {
	return min(1<<(bits.Len(uint(n))-1), auditRows)
}

// sqlAuditInsert is the INSERT of n audit rows.
func sqlAuditInsert(n int) string {
	const row = "(?, ?, ?, ?, ?, ?, ?, ?)"
	return "INSERT INTO audit_events (at, node, actor, action, source, result, detail, count) VALUES " +
		strings.TrimSuffix(strings.Repeat(row+", ", n), ", ")
}

// AuditEvents returns events matching q, oldest first, after committing
// the deferred events queued so far (see Audit).
//
// Node matches exactly; Since keeps events at or after it. When more than
// Limit (default and maximum 1000) events match, the most recent Limit are
// returned, like tail(1). Events are ordered by time, then by insertion.
func (s *Store) AuditEvents(ctx context.Context, q AuditQuery) ([]AuditEvent, error) {
	var (
		where []string
		args  []any
	)
	if q.Node != "" {
		where = append(where, "node = ?")
		args = append(args, q.Node)
	}
	if !q.Since.IsZero() {
		where = append(where, "at >= ?")
		args = append(args, toMillis(q.Since))
	}
	limit := q.Limit
	if limit <= 0 || limit > MaxLimit {
		limit = MaxLimit
	}
	if s.laterQueued() {
		if err := s.commitAudit(ctx, nil); err != nil {
			return nil, fmt.Errorf("query audit events: %w", err)
		}
	}
	query := `SELECT id, at, node, actor, action, source, result, detail, count FROM audit_events`
	if len(where) > 0 {
		query += ` WHERE ` + strings.Join(where, " AND ")
	}
	query += ` ORDER BY at DESC, id DESC LIMIT ?`
	args = append(args, limit)

	rows, err := s.r.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("query audit events: %w", err)
	}
	defer rows.Close()
	var out []AuditEvent
	for rows.Next() {
		var (
			e  AuditEvent
			at int64
		)
		if err := rows.Scan(&e.ID, &at, &e.Node, &e.Actor, &e.Action, &e.Source, &e.Result, &e.Detail, &e.Count); err != nil {
			return nil, fmt.Errorf("query audit events: %w", err)
		}
		e.At = fromMillis(at)
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("query audit events: %w", err)
	}
	slices.Reverse(out)
	return out, nil
}

// AuditSink receives every audit row the store commits (db/auditlog sends
// them to a SIEM): after the commit, in commit order, ID unset. Export is
// called by the group commit's leader, which other audit writers wait for,
// so it must not block: it queues the rows, and drops them if it must.
type AuditSink interface {
	Export(rows []AuditEvent)
}

// WithAuditSink sends every committed audit row to sink as well.
func WithAuditSink(sink AuditSink) Option {
	return func(s *Store) { s.sink = sink }
}

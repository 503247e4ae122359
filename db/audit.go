package db

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
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
// Audit returns once the event is committed. Concurrent calls share one
// transaction (group commit): every connection writes several events and a
// revocation ends many sessions at once, and one commit (one fsync on
// SQLite) per event would make the audit log the daemon's bottleneck.
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
type auditQueue struct {
	mu      sync.Mutex
	pending []*auditReq
	busy    bool
	flushes int // group commits begun, for tests
}

type auditReq struct {
	e    AuditEvent
	done chan error // buffered: the commit's result, or errAuditLead
}

// flushAudit commits the queued events in one transaction and answers each.
func (s *Store) flushAudit(ctx context.Context) {
	q := &s.audit
	q.mu.Lock()
	batch := q.pending
	q.pending = nil
	q.flushes++
	q.mu.Unlock()

	ctx, cancel := context.WithTimeout(ctx, auditTimeout)
	// Prepared before the transaction: SQLite's writer pool has one
	// connection, which the transaction would hold.
	insert, err := s.prepared(ctx, s.w,
		`INSERT INTO audit_events (at, node, actor, action, source, result, detail) VALUES (?, ?, ?, ?, ?, ?, ?)`)
	if err == nil {
		err = s.withTx(ctx, func(tx *sql.Tx) error {
			stmt := tx.StmtContext(ctx, insert)
			defer stmt.Close()
			for _, r := range batch {
				e := r.e
				if _, err := stmt.ExecContext(ctx, toMillis(e.At), clip(e.Node, auditNodeLen), clip(e.Actor, auditActorLen),
					clip(e.Action, auditActionLen), clip(e.Source, auditSourceLen), clip(e.Result, auditResultLen),
					clip(e.Detail, auditDetailLen)); err != nil {
					return err
				}
			}
			return nil
		})
	}
	cancel()
	if err != nil {
		err = fmt.Errorf("append %d audit event(s): %w", len(batch), err)
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

// AuditEvents returns events matching q, oldest first.
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
	query := `SELECT id, at, node, actor, action, source, result, detail FROM audit_events`
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
		if err := rows.Scan(&e.ID, &at, &e.Node, &e.Actor, &e.Action, &e.Source, &e.Result, &e.Detail); err != nil {
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

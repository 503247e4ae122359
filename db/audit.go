package db

import (
	"context"
	"fmt"
	"slices"
	"strings"
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
func (s *Store) Audit(ctx context.Context, e AuditEvent) error {
	if e.At.IsZero() {
		e.At = s.now()
	}
	_, err := s.w.ExecContext(ctx,
		`INSERT INTO audit_events (at, node, actor, action, source, result, detail) VALUES (?, ?, ?, ?, ?, ?, ?)`,
		toMillis(e.At),
		clip(e.Node, auditNodeLen),
		clip(e.Actor, auditActorLen),
		clip(e.Action, auditActionLen),
		clip(e.Source, auditSourceLen),
		clip(e.Result, auditResultLen),
		clip(e.Detail, auditDetailLen))
	if err != nil {
		return fmt.Errorf("append audit event %s: %w", clip(e.Action, auditActionLen), err)
	}
	return nil
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
	if limit <= 0 || limit > defaultLimit {
		limit = defaultLimit
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

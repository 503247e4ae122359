package db

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
)

// AddKey registers a key; ErrNotFound (node), ErrExists (same fingerprint on
// that node). Adding access does not move the epoch. A zero CreatedAt is
// set to now.
func (s *Store) AddKey(ctx context.Context, k Key) error {
	if err := checkLen("fingerprint", k.Fingerprint, MaxFingerprintLen); err != nil {
		return fmt.Errorf("add key to %s: %w", k.Node, err)
	}
	if k.CreatedAt.IsZero() {
		k.CreatedAt = s.now()
	}
	err := s.withTx(ctx, func(tx *sql.Tx) error {
		if err := nodeExists(ctx, tx, k.Node); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx,
			`INSERT INTO node_keys (node, fingerprint, line, comment, created_at) VALUES (?, ?, ?, ?, ?)`,
			k.Node, k.Fingerprint, k.Line, k.Comment, toMillis(k.CreatedAt))
		switch {
		case isDuplicate(err):
			return ErrExists
		case isMissingParent(err): // deleted by another replica since the check
			return errNoNode
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("add key %s to %s: %w", k.Fingerprint, k.Node, err)
	}
	return nil
}

// Keys lists a node's keys ordered by creation; ErrNotFound for an unknown node.
func (s *Store) Keys(ctx context.Context, label string) ([]Key, error) {
	// One statement, so the node check and the list read one snapshot.
	rows, err := s.r.QueryContext(ctx,
		`SELECT k.fingerprint, k.line, k.comment, k.created_at
		 FROM nodes n LEFT JOIN node_keys k ON k.node = n.label
		 WHERE n.label = ?
		 ORDER BY k.id`, label)
	if err != nil {
		return nil, fmt.Errorf("list keys of %s: %w", label, err)
	}
	defer rows.Close()
	found := false
	out := []Key{}
	for rows.Next() {
		found = true
		var (
			fp, line, comment sql.NullString
			created           sql.NullInt64
		)
		if err := rows.Scan(&fp, &line, &comment, &created); err != nil {
			return nil, fmt.Errorf("list keys of %s: %w", label, err)
		}
		if !fp.Valid { // the node has no key
			continue
		}
		out = append(out, Key{
			Node: label, Fingerprint: fp.String, Line: line.String,
			Comment: comment.String, CreatedAt: fromMillis(created.Int64),
		})
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list keys of %s: %w", label, err)
	}
	if !found {
		return nil, fmt.Errorf("list keys of %s: %w", label, ErrNotFound)
	}
	return out, nil
}

// HasKey reports whether fingerprint is registered on label, with the
// node's epoch; ErrNotFound for an unknown node.
func (s *Store) HasKey(ctx context.Context, label, fingerprint string) (epoch int64, ok bool, err error) {
	var fp sql.NullString
	err = s.queryRow(ctx,
		`SELECT n.access_epoch, k.fingerprint
		 FROM nodes n LEFT JOIN node_keys k ON k.node = n.label AND k.fingerprint = ?
		 WHERE n.label = ?`, fingerprint, label).Scan(&epoch, &fp)
	if err != nil {
		return 0, false, fmt.Errorf("check key %s of %s: %w", fingerprint, label, notFound(err))
	}
	return epoch, fp.Valid, nil
}

// DeleteKey removes a key and moves the epoch; ErrNotFound if the node or
// key is absent.
func (s *Store) DeleteKey(ctx context.Context, label, fingerprint string) (int64, error) {
	var epoch int64
	err := s.withTx(ctx, func(tx *sql.Tx) error {
		var err error
		if epoch, err = s.recordChange(ctx, tx, label, ReasonKeyRemoved); err != nil {
			return err
		}
		if err := setEpoch(ctx, tx, label, epoch); err != nil {
			if errors.Is(err, ErrNotFound) {
				return errNoNode
			}
			return err
		}
		res, err := tx.ExecContext(ctx, `DELETE FROM node_keys WHERE node = ? AND fingerprint = ?`, label, fingerprint)
		if err != nil {
			return err
		}
		return mustAffect(res)
	})
	if err != nil {
		return 0, fmt.Errorf("delete key %s of %s: %w", fingerprint, label, err)
	}
	return epoch, nil
}

package db

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/obmd/obmd/keys"
)

// SetToken replaces the node's token hash and moves the epoch; ErrNotFound.
// Only the hash is stored: the caller keeps (and shows once) the token.
func (s *Store) SetToken(ctx context.Context, label string, h keys.TokenHash) (int64, error) {
	var epoch int64
	err := s.withTx(ctx, func(tx *sql.Tx) error {
		var err error
		if epoch, err = s.recordChange(ctx, tx, label, ReasonTokenRotated); err != nil {
			return err
		}
		if err := setEpoch(ctx, tx, label, epoch); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `DELETE FROM node_tokens WHERE node = ?`, label); err != nil {
			return err
		}
		_, err = tx.ExecContext(ctx,
			`INSERT INTO node_tokens (node, hash, created_at) VALUES (?, ?, ?)`,
			label, h.String(), toMillis(s.now()))
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("set token of %s: %w", label, err)
	}
	return epoch, nil
}

// RevokeToken removes the node's token (idempotent) and moves the epoch;
// ErrNotFound for an unknown node.
func (s *Store) RevokeToken(ctx context.Context, label string) (int64, error) {
	var epoch int64
	err := s.withTx(ctx, func(tx *sql.Tx) error {
		var err error
		if epoch, err = s.recordChange(ctx, tx, label, ReasonTokenRevoked); err != nil {
			return err
		}
		if err := setEpoch(ctx, tx, label, epoch); err != nil {
			return err
		}
		_, err = tx.ExecContext(ctx, `DELETE FROM node_tokens WHERE node = ?`, label)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("revoke token of %s: %w", label, err)
	}
	return epoch, nil
}

// Access returns what token authentication needs; ErrNotFound.
func (s *Store) Access(ctx context.Context, label string) (Access, error) {
	var (
		a    Access
		hash sql.NullString
	)
	err := s.queryRow(ctx,
		`SELECT n.access_epoch, t.hash
		 FROM nodes n LEFT JOIN node_tokens t ON t.node = n.label
		 WHERE n.label = ?`, label).Scan(&a.Epoch, &hash)
	if err != nil {
		return Access{}, fmt.Errorf("get access of %s: %w", label, notFound(err))
	}
	if hash.Valid {
		h, err := keys.ParseTokenHash(hash.String)
		if err != nil {
			return Access{}, fmt.Errorf("get access of %s: %w", label, err)
		}
		a.HasToken, a.Token = true, h
	}
	return a, nil
}

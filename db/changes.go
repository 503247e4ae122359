package db

import (
	"context"
	"database/sql"
	"fmt"
)

// MaxLimit is the default and largest page of AuditEvents (AuditQuery.Limit)
// and the default limit of ChangesSince.
const MaxLimit = 1000

// Reasons of access changes, as access_changes records them (Change.Reason)
// and as a session cut by the change reads them ("access to node-17 was
// revoked (token rotated)"). The texts are bastion/admin's Why* texts for
// the same changes.
const (
	ReasonNodeCreated  = "node created"
	ReasonNodeChanged  = "node changed"
	ReasonNodeDeleted  = "node deleted"
	ReasonTokenRotated = "token rotated"
	ReasonTokenRevoked = "token revoked"
	ReasonKeyRemoved   = "key removed"
	// ReasonPrincipals: a node principal was removed (the node left a
	// project). ReasonCARemoved, ReasonCertRevoked: credential changes.
	ReasonPrincipals  = "node principal removed"
	ReasonCARemoved   = "certificate authority removed"
	ReasonCertRevoked = "certificate revoked"
)

// maxReasonLen is the size of access_changes.reason, in bytes.
const maxReasonLen = 64

// recordChange allocates the next access epoch for label and records the
// change with its reason, inside tx. It must be the first statement of the
// transaction (or follow lockChanges, which takes the same lock): the
// UPDATE takes access_seq's row lock until commit, which serialises every
// access change (so epochs commit in order and a poller never skips one) and
// keeps a single lock order (access_seq, then node rows), so two changes
// cannot deadlock. A rolled-back transaction gives its epoch back. On
// Galera two changes through different nodes both update access_seq's row:
// certification lets the first through and the other is run again
// (withTx), so epochs still commit in order, on every node.
func (s *Store) recordChange(ctx context.Context, tx *sql.Tx, label, reason string) (int64, error) {
	if _, err := tx.ExecContext(ctx, `UPDATE access_seq SET epoch = epoch + 1 WHERE id = 1`); err != nil {
		return 0, fmt.Errorf("next epoch: %w", err)
	}
	var epoch int64
	if err := tx.QueryRowContext(ctx, `SELECT epoch FROM access_seq WHERE id = 1`).Scan(&epoch); err != nil {
		return 0, fmt.Errorf("next epoch: %w", err)
	}
	if _, err := tx.ExecContext(ctx,
		`INSERT INTO access_changes (epoch, node, at, reason) VALUES (?, ?, ?, ?)`,
		epoch, label, toMillis(s.now()), clip(reason, maxReasonLen)); err != nil {
		return 0, fmt.Errorf("record change %d: %w", epoch, err)
	}
	if s.dialect == DialectPostgres {
		// Sent when (and only if) the change commits: see ListenChanges.
		if _, err := tx.ExecContext(ctx, `NOTIFY `+changesChannel); err != nil {
			return 0, fmt.Errorf("notify change %d: %w", epoch, err)
		}
	}
	return epoch, nil
}

// lockChanges takes the lock every access change takes first (access_seq's
// row; on SQLite the transaction holds the one writer already), without
// moving the epoch, for a transaction that reads before it decides whether
// it is a change: its reads then see every change committed before it, and
// no change commits until it ends. Like recordChange it must come first.
func lockChanges(ctx context.Context, tx *sql.Tx) error {
	if _, err := tx.ExecContext(ctx, `UPDATE access_seq SET epoch = epoch WHERE id = 1`); err != nil {
		return fmt.Errorf("lock access changes: %w", err)
	}
	return nil
}

// recordCredChange records credential change c (see Change) inside tx,
// under a new epoch, which it returns; like recordChange it must come
// first. Its access_changes row has no node: no node has the label "".
func (s *Store) recordCredChange(ctx context.Context, tx *sql.Tx, c CredChange) (int64, error) {
	reason := ReasonCertRevoked
	if c.Kind == CredCA {
		reason = ReasonCARemoved
	}
	epoch, err := s.recordChange(ctx, tx, "", reason)
	if err != nil {
		return 0, err
	}
	if _, err := tx.ExecContext(ctx,
		`INSERT INTO credential_changes (epoch, kind, ca, serial, key_id) VALUES (?, ?, ?, ?, ?)`,
		epoch, c.Kind, c.CA, int64(c.Serial), c.KeyID); err != nil {
		return 0, fmt.Errorf("record credential change %d: %w", epoch, err)
	}
	return epoch, nil
}

// setEpoch points label's node at epoch; ErrNotFound if there is no such node.
func setEpoch(ctx context.Context, tx *sql.Tx, label string, epoch int64) error {
	res, err := tx.ExecContext(ctx, `UPDATE nodes SET access_epoch = ? WHERE label = ?`, epoch, label)
	if err != nil {
		return err
	}
	return mustAffect(res)
}

// ChangesSince returns access changes with Epoch > after, oldest first, at
// most limit (default 1000).
//
// Epochs are global: a replica keeps the highest epoch it has seen and polls
// with it. A change whose node no longer exists is a deletion; one with no
// node is a credential change (Change.Cred).
func (s *Store) ChangesSince(ctx context.Context, after int64, limit int) ([]Change, error) {
	if limit <= 0 {
		limit = MaxLimit
	}
	rows, err := s.query(ctx,
		`SELECT c.epoch, c.node, c.reason, k.kind, k.ca, k.serial, k.key_id
		 FROM access_changes c LEFT JOIN credential_changes k ON k.epoch = c.epoch
		 WHERE c.epoch > ? ORDER BY c.epoch LIMIT ?`, after, limit)
	if err != nil {
		return nil, fmt.Errorf("changes since %d: %w", after, err)
	}
	defer rows.Close()
	var out []Change
	for rows.Next() {
		var (
			c             Change
			kind, ca, kid sql.NullString
			serial        sql.NullInt64
		)
		if err := rows.Scan(&c.Epoch, &c.Node, &c.Reason, &kind, &ca, &serial, &kid); err != nil {
			return nil, fmt.Errorf("changes since %d: %w", after, err)
		}
		if c.Node == "" { // a kind left empty (no row) Affects every session
			c.Cred = CredChange{Kind: kind.String, CA: ca.String, Serial: uint64(serial.Int64), KeyID: kid.String}
		}
		out = append(out, c)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("changes since %d: %w", after, err)
	}
	return out, nil
}

// LatestChange returns the highest epoch recorded (0 if none).
func (s *Store) LatestChange(ctx context.Context) (int64, error) {
	var epoch int64
	if err := s.r.QueryRowContext(ctx, `SELECT epoch FROM access_seq WHERE id = 1`).Scan(&epoch); err != nil {
		return 0, fmt.Errorf("latest change: %w", err)
	}
	return epoch, nil
}

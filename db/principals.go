package db

import (
	"context"
	"database/sql"
	"fmt"
	"slices"

	"github.com/obmd/obmd/keys/sshcert"
)

// MaxNodePrincipals bounds the extra principals of one node.
const MaxNodePrincipals = 32

// SetNodePrincipals replaces label's extra principals (sshcert.ValidPrincipal
// each, no duplicates, at most MaxNodePrincipals); ErrNotFound for an
// unknown node. Removing one is an access change of the node (a project
// the node leaves takes its certificates' access with it): the epoch moves
// and is returned. Only adding (or no change) is a grant: no epoch moves,
// 0 is returned.
func (s *Store) SetNodePrincipals(ctx context.Context, label string, principals []string) (int64, error) {
	if err := CheckPrincipals(principals); err != nil {
		return 0, fmt.Errorf("set principals of %s: %w", label, err)
	}
	var epoch int64
	err := s.withTx(ctx, func(tx *sql.Tx) error {
		epoch = 0
		// Read the principals after the lock, so no change of them
		// commits between the read and the write.
		if err := lockChanges(ctx, tx); err != nil {
			return err
		}
		if err := nodeExists(ctx, tx, label); err != nil {
			return err
		}
		old, err := principalsOf(ctx, tx, label)
		if err != nil {
			return err
		}
		var gone, added []string
		for _, p := range old {
			if !slices.Contains(principals, p) {
				gone = append(gone, p)
			}
		}
		for _, p := range principals {
			if !slices.Contains(old, p) {
				added = append(added, p)
			}
		}
		if len(gone) > 0 {
			if epoch, err = s.recordChange(ctx, tx, label, ReasonPrincipals); err != nil {
				return err
			}
			if err := setEpoch(ctx, tx, label, epoch); err != nil {
				return err
			}
		}
		for _, p := range gone {
			if _, err := tx.ExecContext(ctx, `DELETE FROM node_principals WHERE node = ? AND principal = ?`, label, p); err != nil {
				return err
			}
		}
		for _, p := range added {
			if _, err := tx.ExecContext(ctx, `INSERT INTO node_principals (node, principal) VALUES (?, ?)`, label, p); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("set principals of %s: %w", label, err)
	}
	return epoch, nil
}

// CheckPrincipals says what is wrong with ps as a node's principals (see
// SetNodePrincipals), or nil; the error is safe to show the administrator.
func CheckPrincipals(ps []string) error {
	if len(ps) > MaxNodePrincipals {
		return fmt.Errorf("%d principals; the limit is %d", len(ps), MaxNodePrincipals)
	}
	for i, p := range ps {
		if err := sshcert.ValidPrincipal(p); err != nil {
			return err
		}
		if slices.Contains(ps[:i], p) {
			return fmt.Errorf("principal %q given twice", p)
		}
	}
	return nil
}

func principalsOf(ctx context.Context, tx *sql.Tx, label string) ([]string, error) {
	rows, err := tx.QueryContext(ctx, `SELECT principal FROM node_principals WHERE node = ?`, label)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var p string
		if err := rows.Scan(&p); err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	return out, rows.Err()
}

// NodePrincipals returns label's extra principals in byte order;
// ErrNotFound for an unknown node.
func (s *Store) NodePrincipals(ctx context.Context, label string) ([]string, error) {
	// One statement, so the node check and the list read one snapshot.
	rows, err := s.r.QueryContext(ctx,
		`SELECT p.principal FROM nodes n LEFT JOIN node_principals p ON p.node = n.label
		 WHERE n.label = ? ORDER BY p.principal`, label)
	if err != nil {
		return nil, fmt.Errorf("list principals of %s: %w", label, err)
	}
	defer rows.Close()
	found, out := false, []string{}
	for rows.Next() {
		found = true
		var p sql.NullString
		if err := rows.Scan(&p); err != nil {
			return nil, fmt.Errorf("list principals of %s: %w", label, err)
		}
		if p.Valid {
			out = append(out, p.String)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list principals of %s: %w", label, err)
	}
	if !found {
		return nil, fmt.Errorf("list principals of %s: %w", label, ErrNotFound)
	}
	return out, nil
}

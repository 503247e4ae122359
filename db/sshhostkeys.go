package db

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"
)

// MaxHostKeyLen bounds a pinned host key's authorized_keys line; MaxAddrLen
// its BMC address.
const (
	MaxHostKeyLen = 16 << 10
	MaxAddrLen    = 300
)

// SSHHostKey is the SSH host key of a node's BMC, pinned on first contact
// (a console over the BMC's SSH service refuses any other): the key as an
// authorized_keys line, the BMC address ("host:port") it was first seen at.
// Pinning it, or resetting it, is no access change: no epoch moves.
type SSHHostKey struct {
	Node      string
	Addr      string
	Key       string
	CreatedAt time.Time
}

// SSHHostKey returns the key pinned for label; ErrNotFound when none is
// (or no node is label).
func (s *Store) SSHHostKey(ctx context.Context, label string) (SSHHostKey, error) {
	k, err := scanHostKey(s.queryRow(ctx,
		`SELECT node, addr, key_line, created_at FROM node_ssh_host_keys WHERE node = ?`, label))
	if err != nil {
		return SSHHostKey{}, fmt.Errorf("get the SSH host key of %s: %w", label, notFound(err))
	}
	return k, nil
}

func scanHostKey(r scanner) (SSHHostKey, error) {
	var (
		k       SSHHostKey
		created int64
	)
	if err := r.Scan(&k.Node, &k.Addr, &k.Key, &created); err != nil {
		return SSHHostKey{}, err
	}
	k.CreatedAt = fromMillis(created)
	return k, nil
}

// PinSSHHostKey pins k for its node unless a key is pinned for the node at
// k.Addr already, and returns the key pinned afterwards: k, or the one
// pinned first (by another replica, say). A key pinned at another address
// is replaced. ErrNotFound for an unknown node. A zero CreatedAt is set to
// now.
func (s *Store) PinSSHHostKey(ctx context.Context, k SSHHostKey) (SSHHostKey, error) {
	if err := checkLen("host key", k.Key, MaxHostKeyLen); err != nil {
		return SSHHostKey{}, fmt.Errorf("pin the SSH host key of %s: %w", k.Node, err)
	}
	if err := checkLen("address", k.Addr, MaxAddrLen); err != nil {
		return SSHHostKey{}, fmt.Errorf("pin the SSH host key of %s: %w", k.Node, err)
	}
	if k.CreatedAt.IsZero() {
		k.CreatedAt = s.now()
	}
	var out SSHHostKey
	err := s.withTx(ctx, func(tx *sql.Tx) error {
		if err := nodeExists(ctx, tx, k.Node); err != nil {
			return err
		}
		// Locked: a replica pinning another key at the same new address
		// meanwhile waits, then finds that pin, rather than overwrite it.
		old, err := scanHostKey(tx.QueryRowContext(ctx,
			`SELECT node, addr, key_line, created_at FROM node_ssh_host_keys WHERE node = ?`+s.forUpdate(), k.Node))
		switch {
		case err == nil && old.Addr == k.Addr:
			out = old
			return nil
		case err == nil:
			_, err = tx.ExecContext(ctx, `UPDATE node_ssh_host_keys SET addr = ?, key_line = ?, created_at = ? WHERE node = ?`,
				k.Addr, k.Key, toMillis(k.CreatedAt), k.Node)
		case errors.Is(err, sql.ErrNoRows):
			_, err = tx.ExecContext(ctx, `INSERT INTO node_ssh_host_keys (node, addr, key_line, created_at) VALUES (?, ?, ?, ?)`,
				k.Node, k.Addr, k.Key, toMillis(k.CreatedAt))
		}
		if isMissingParent(err) { // deleted by another replica since the check
			return errNoNode
		}
		out = k
		return err
	})
	if isDuplicate(err) { // pinned meanwhile by another replica: that key stands
		return s.SSHHostKey(ctx, k.Node)
	}
	if err != nil {
		return SSHHostKey{}, fmt.Errorf("pin the SSH host key of %s: %w", k.Node, err)
	}
	return out, nil
}

// DeleteSSHHostKey forgets the key pinned for label (the next console link
// pins the key it meets); it reports whether one was pinned. ErrNotFound
// for an unknown node.
func (s *Store) DeleteSSHHostKey(ctx context.Context, label string) (bool, error) {
	var existed bool
	err := s.withTx(ctx, func(tx *sql.Tx) error {
		if err := nodeExists(ctx, tx, label); err != nil {
			return err
		}
		res, err := tx.ExecContext(ctx, `DELETE FROM node_ssh_host_keys WHERE node = ?`, label)
		if err != nil {
			return err
		}
		n, err := res.RowsAffected()
		existed = n > 0
		return err
	})
	if err != nil {
		return false, fmt.Errorf("reset the SSH host key of %s: %w", label, err)
	}
	return existed, nil
}

package db

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/obmd/obmd/keys/sshcert"
)

// AddCA trusts ca (validated by the caller: sshcert.ParseAuthority).
// Adding the same key under the same name again changes nothing and
// reports created false, so a retried call succeeds; ErrExists when the
// name is another key's or the key is trusted under another name (the
// error says which). A zero CreatedAt is set to now. Trust granted moves
// no epoch.
func (s *Store) AddCA(ctx context.Context, ca CA) (created bool, err error) {
	if err := checkLen("CA fingerprint", ca.Fingerprint, MaxFingerprintLen); err != nil {
		return false, fmt.Errorf("add CA: %w", err)
	}
	if err := checkLen("CA name", ca.Name, sshcert.MaxNameLen); err != nil {
		return false, fmt.Errorf("add CA %s: %w", ca.Fingerprint, err)
	}
	if ca.Line == "" {
		return false, fmt.Errorf("add CA %s: empty key line", ca.Fingerprint)
	}
	if ca.CreatedAt.IsZero() {
		ca.CreatedAt = s.stamp()
	}
	err = s.withTx(ctx, func(tx *sql.Tx) error {
		created = false
		inserted, err := s.insertNew(ctx, tx,
			`INSERT INTO cert_authorities (fingerprint, name, line, created_at) VALUES (?, ?, ?, ?)`,
			ca.Fingerprint, ca.Name, ca.Line, toMillis(ca.CreatedAt))
		if err != nil || inserted {
			created = inserted
			return err
		}
		var name string
		err = tx.QueryRowContext(ctx, `SELECT name FROM cert_authorities WHERE fingerprint = ?`, ca.Fingerprint).Scan(&name)
		switch {
		case errors.Is(err, sql.ErrNoRows):
			return fmt.Errorf("%w: the name %q is another key's", ErrExists, ca.Name)
		case err != nil:
			return err
		case name != ca.Name:
			return fmt.Errorf("%w: the key is trusted as %q", ErrExists, name)
		}
		return nil // the same CA again
	})
	if err != nil {
		return false, fmt.Errorf("add CA %s: %w", ca.Fingerprint, err)
	}
	return created, nil
}

// CAs lists the trusted CAs by name.
func (s *Store) CAs(ctx context.Context) ([]CA, error) {
	rows, err := s.r.QueryContext(ctx,
		`SELECT fingerprint, name, line, created_at FROM cert_authorities ORDER BY name`)
	if err != nil {
		return nil, fmt.Errorf("list CAs: %w", err)
	}
	defer rows.Close()
	out := []CA{}
	for rows.Next() {
		var (
			ca      CA
			created int64
		)
		if err := rows.Scan(&ca.Fingerprint, &ca.Name, &ca.Line, &created); err != nil {
			return nil, fmt.Errorf("list CAs: %w", err)
		}
		ca.CreatedAt = fromMillis(created)
		out = append(out, ca)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list CAs: %w", err)
	}
	return out, nil
}

// errNoCA rolls back the removal of a CA that is not trusted.
var errNoCA = errors.New("no such CA")

// DeleteCA stops trusting the CA whose key has fingerprint and reports
// whether it was trusted. Its removal is a credential change (CredCA),
// whose epoch it returns: every session that logged in with one of its
// certificates must end, on every replica. A CA that was not trusted
// records nothing: (0, false, nil), so a retried call succeeds.
// Revocations of its certificates stay (it may be trusted again).
func (s *Store) DeleteCA(ctx context.Context, fingerprint string) (epoch int64, existed bool, err error) {
	err = s.withTx(ctx, func(tx *sql.Tx) error {
		var err error
		if epoch, err = s.recordCredChange(ctx, tx, CredChange{Kind: CredCA, CA: fingerprint}); err != nil {
			return err
		}
		res, err := tx.ExecContext(ctx, `DELETE FROM cert_authorities WHERE fingerprint = ?`, fingerprint)
		if err != nil {
			return err
		}
		if err := mustAffect(res); errors.Is(err, ErrNotFound) {
			return errNoCA
		} else if err != nil {
			return err
		}
		return nil
	})
	switch {
	case errors.Is(err, errNoCA):
		return 0, false, nil
	case err != nil:
		return 0, false, fmt.Errorf("delete CA %s: %w", fingerprint, err)
	}
	return epoch, true, nil
}

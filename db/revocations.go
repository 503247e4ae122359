package db

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"
	"unicode/utf8"

	"github.com/obmd/obmd/keys/sshcert"
)

// MaxRevocationExpiry is the latest expiry a revocation may have,
// 9999-12-31T23:59:59Z: the last second RFC 3339 (and JSON's time) can
// write. Revoke refuses a later one (a certificate revoked for longer is
// revoked for good: no expiry); one an older obmd stored lists as this.
func MaxRevocationExpiry() time.Time { return time.Date(9999, 12, 31, 23, 59, 59, 0, time.UTC) }

// checkRevocation validates r: a kind, the one field the kind names, and
// an expiry from 1970 to MaxRevocationExpiry (or none).
func checkRevocation(r Revocation) error {
	// By unix seconds: a time.Time made of huge unix seconds (time.Unix)
	// wraps, and compares as if in the past.
	if sec := r.ExpiresAt.Unix(); !r.ExpiresAt.IsZero() && (sec <= 0 || sec > MaxRevocationExpiry().Unix()) {
		return fmt.Errorf("expiry (unix %d s) is not from 1970 to %s", sec, MaxRevocationExpiry().Format(time.RFC3339))
	}
	if len(r.CA) > MaxFingerprintLen {
		return fmt.Errorf("CA fingerprint longer than %d bytes", MaxFingerprintLen)
	}
	switch r.Kind {
	case CredSerial:
		if r.KeyID != "" {
			return errors.New("a revocation by serial names no key id")
		}
	case CredKeyID:
		if r.Serial != 0 {
			return errors.New("a revocation by key id names no serial")
		}
		if r.KeyID == "" || len(r.KeyID) > sshcert.MaxKeyIDLen || !utf8.ValidString(r.KeyID) {
			return fmt.Errorf("key id must be 1 to %d bytes of UTF-8", sshcert.MaxKeyIDLen)
		}
	default:
		return fmt.Errorf("revocation kind %q is neither %q nor %q", r.Kind, CredSerial, CredKeyID)
	}
	return nil
}

// Revoke refuses the certificates r names from now on, and records it as
// a credential change, whose epoch it returns: the sessions that logged in
// with one of them must end, on every replica. Revoking again what is
// revoked already keeps the later expiry (zero, never, is the latest) and
// records a change again, so a retried call is safe. A zero CreatedAt is
// set to now; r.CA need not be trusted (yet).
func (s *Store) Revoke(ctx context.Context, r Revocation) (int64, error) {
	if err := checkRevocation(r); err != nil {
		return 0, fmt.Errorf("revoke: %w", err)
	}
	if s.dialect == DialectPostgres && !pgText(r.KeyID) {
		return 0, errors.New("revoke: PostgreSQL cannot store a key id with a NUL byte; revoke the certificate by serial")
	}
	if r.CreatedAt.IsZero() {
		r.CreatedAt = s.stamp()
	}
	exp := int64(0)
	if !r.ExpiresAt.IsZero() {
		exp = toMillis(r.ExpiresAt)
	}
	var epoch int64
	err := s.withTx(ctx, func(tx *sql.Tx) error {
		var err error
		epoch, err = s.recordCredChange(ctx, tx, CredChange{Kind: r.Kind, CA: r.CA, Serial: r.Serial, KeyID: r.KeyID})
		if err != nil {
			return err
		}
		key := []any{r.Kind, r.CA, int64(r.Serial), r.KeyID}
		var old int64
		err = tx.QueryRowContext(ctx, `SELECT expires_at FROM cert_revocations
			WHERE kind = ? AND ca = ? AND serial = ? AND key_id = ?`, key...).Scan(&old)
		switch {
		case errors.Is(err, sql.ErrNoRows):
			_, err = tx.ExecContext(ctx, `INSERT INTO cert_revocations
				(kind, ca, serial, key_id, expires_at, created_at) VALUES (?, ?, ?, ?, ?, ?)`,
				append(key, exp, toMillis(r.CreatedAt))...)
			return err
		case err != nil:
			return err
		case old == 0 || exp != 0 && exp <= old:
			return nil // revoked for as long already
		}
		_, err = tx.ExecContext(ctx, `UPDATE cert_revocations SET expires_at = ?
			WHERE kind = ? AND ca = ? AND serial = ? AND key_id = ?`, append([]any{exp}, key...)...)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("revoke %s: %w", describeRevocation(r), err)
	}
	return epoch, nil
}

func describeRevocation(r Revocation) string {
	what := fmt.Sprintf("serial %d", r.Serial)
	if r.Kind == CredKeyID {
		what = fmt.Sprintf("key id %q", r.KeyID)
	}
	if r.CA == "" {
		return what + " of every CA"
	}
	return what + " of CA " + r.CA
}

// revokedQuery answers both questions of IsRevoked in one statement; the
// login read (CertAccess) asks the same.
const revokedQuery = `EXISTS (SELECT 1 FROM cert_revocations
	  WHERE kind = 'serial' AND ca IN ('', ?) AND serial = ? AND key_id = ''),
	EXISTS (SELECT 1 FROM cert_revocations
	  WHERE kind = 'key_id' AND ca IN ('', ?) AND serial = 0 AND key_id = ?)`

// IsRevoked reports whether the certificate of the CA whose key has
// fingerprint ca, with serial and keyID, is revoked by its serial, by its
// key id, or both (for that CA or for every CA). Rows past their expiry
// still count until purged.
func (s *Store) IsRevoked(ctx context.Context, ca string, serial uint64, keyID string) (bySerial, byKeyID bool, err error) {
	err = s.queryRow(ctx, `SELECT `+revokedQuery, ca, int64(serial), ca, s.lookupKeyID(keyID)).Scan(&bySerial, &byKeyID)
	if err != nil {
		return false, false, fmt.Errorf("check revocation of serial %d of %s: %w", serial, ca, err)
	}
	return bySerial, byKeyID, nil
}

// Revocations lists every revocation, oldest first.
func (s *Store) Revocations(ctx context.Context) ([]Revocation, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT kind, ca, serial, key_id, expires_at, created_at
		FROM cert_revocations ORDER BY created_at, kind, ca, serial, key_id`)
	if err != nil {
		return nil, fmt.Errorf("list revocations: %w", err)
	}
	defer rows.Close()
	out := []Revocation{}
	for rows.Next() {
		var (
			r                Revocation
			serial, exp, crt int64
		)
		if err := rows.Scan(&r.Kind, &r.CA, &serial, &r.KeyID, &exp, &crt); err != nil {
			return nil, fmt.Errorf("list revocations: %w", err)
		}
		r.Serial, r.CreatedAt = uint64(serial), fromMillis(crt)
		if exp != 0 {
			r.ExpiresAt = expiryAt(exp)
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list revocations: %w", err)
	}
	return out, nil
}

// expiryAt is a stored expiry (unix ms, not 0) as Revocations lists it:
// within [1970-01-01T00:00:00.001Z, MaxRevocationExpiry], so that no row
// (one an older obmd stored for year 10000 or beyond) makes a time that
// cannot be written. The row itself is left as it is (one past the bound
// is never purged, as one for good).
func expiryAt(ms int64) time.Time {
	return fromMillis(min(max(ms, 1), toMillis(MaxRevocationExpiry())))
}

// DeleteRevocation deletes the revocation r names (its kind, CA, serial or
// key id, as Revoke took them; its expiry is ignored) and reports whether
// there was one: (false, nil) if not, so a retried call succeeds. The
// certificates it named are accepted again from then on; it ends no
// session, so it records no change of access.
func (s *Store) DeleteRevocation(ctx context.Context, r Revocation) (existed bool, err error) {
	r.ExpiresAt = time.Time{}
	if err := checkRevocation(r); err != nil {
		return false, fmt.Errorf("delete revocation: %w", err)
	}
	err = s.withTx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `DELETE FROM cert_revocations
			WHERE kind = ? AND ca = ? AND serial = ? AND key_id = ?`, r.Kind, r.CA, int64(r.Serial), r.KeyID)
		if err != nil {
			return err
		}
		n, err := res.RowsAffected()
		existed = n > 0
		return err
	})
	if err != nil {
		return false, fmt.Errorf("delete revocation of %s: %w", describeRevocation(r), err)
	}
	return existed, nil
}

// PurgeRevocations deletes the revocations that expired before before and
// returns how many. A certificate is refused from its expiry on, so before
// may be now, less a margin for clocks that differ (a revocation purged
// before its certificate expired would let it in again). Purging is no
// change of access: what it removes refuses nothing any more.
func (s *Store) PurgeRevocations(ctx context.Context, before time.Time) (int64, error) {
	var n int64
	err := s.withTx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx,
			`DELETE FROM cert_revocations WHERE expires_at > 0 AND expires_at < ?`, toMillis(before))
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("purge revocations: %w", err)
	}
	return n, nil
}

package db

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/obmd/obmd/keys/sshcert"
)

// CertAccess is what a certificate login needs to know about one
// certificate and one node, read in one statement (Store.CertAccess).
//
// It is the sshcert.Authorities and sshcert.Revocations of that
// certificate only: asked about any other (a CA, serial or key id other
// than those it was read for), it answers untrusted and revoked, so that a
// caller who read it for one certificate and checks another is refused.
type CertAccess struct {
	// Epoch is the node's access epoch, as for tokens (Access).
	Epoch int64
	// TenancyStart is when the change that set Epoch was made (zero if
	// its record is missing: the policy then refuses).
	TenancyStart time.Time
	// Principals are the node's extra principals.
	Principals []string
	// CAName is the name of the certificate's CA; Trusted whether it is
	// trusted at all.
	CAName  string
	Trusted bool
	// RevokedSerial and RevokedKeyID: the certificate is revoked by its
	// serial, by its key id.
	RevokedSerial, RevokedKeyID bool
	// Seen is the latest access epoch when it was read: every change up
	// to it (credential changes included) is reflected above, none after
	// it is (changes commit in epoch order). A credential change with a
	// higher epoch that Affects the certificate must end a session that
	// logged in with this read; one at or below Seen was already seen.
	Seen int64

	ca, keyID string // what it was read for
	serial    uint64
}

// Authority answers for the CA it was read for only.
func (a CertAccess) Authority(fingerprint string) (name string, ok bool) {
	if !a.Trusted || fingerprint != a.ca {
		return "", false
	}
	return a.CAName, true
}

// Revoked answers for the certificate it was read for; any other is
// revoked.
func (a CertAccess) Revoked(ca string, serial uint64, keyID string) (bySerial, byKeyID bool) {
	if ca != a.ca || serial != a.serial || keyID != a.keyID {
		return true, true
	}
	return a.RevokedSerial, a.RevokedKeyID
}

// certAccessQuery reads the node's epoch and the time of the change that
// set it, its principals (one row each, or one NULL row), the CA's name,
// both revocation checks and the latest epoch: one round trip, one
// snapshot.
const certAccessQuery = `SELECT n.access_epoch, c.at, p.principal,
	(SELECT a.name FROM cert_authorities a WHERE a.fingerprint = ?), ` + revokedQuery + `,
	(SELECT q.epoch FROM access_seq q WHERE q.id = 1)
	FROM nodes n
	LEFT JOIN access_changes c ON c.epoch = n.access_epoch
	LEFT JOIN node_principals p ON p.node = n.label
	WHERE n.label = ?`

// noKeyID is a key id no revocation has: longer than sshcert.MaxKeyIDLen.
var noKeyID = strings.Repeat("-", sshcert.MaxKeyIDLen+1)

// lookupKeyID is keyID as the revocation checks look it up. A key id is the
// client's, read before any signature is checked, and may be as long as an
// SSH packet and hold any bytes; none over sshcert.MaxKeyIDLen can be
// revoked, nor on PostgreSQL one that is not text it can store (pgText),
// so such a key id is looked up as noKeyID, which matches nothing.
func (s *Store) lookupKeyID(keyID string) string {
	if len(keyID) > sshcert.MaxKeyIDLen || s.dialect == DialectPostgres && !pgText(keyID) {
		return noKeyID
	}
	return keyID
}

// CertAccess reads what a login to label with the certificate that claims
// (sshcert.Claims) CA fingerprint ca, serial and keyID needs; ErrNotFound
// for an unknown node. The claims are only looked up: sshcert.Policy.Check
// verifies the certificate.
func (s *Store) CertAccess(ctx context.Context, label, ca string, serial uint64, keyID string) (CertAccess, error) {
	a := CertAccess{ca: ca, serial: serial, keyID: keyID, Principals: []string{}}
	rows, err := s.query(ctx, certAccessQuery, ca, ca, int64(serial), ca, s.lookupKeyID(keyID), label)
	if err != nil {
		return CertAccess{}, fmt.Errorf("get certificate access of %s: %w", label, notFound(err))
	}
	defer rows.Close()
	found := false
	for rows.Next() {
		found = true
		var (
			at         sql.NullInt64
			principal  sql.NullString
			name       sql.NullString
			bySerial   bool
			byKeyID    bool
			epochOfRow int64
		)
		if err := rows.Scan(&epochOfRow, &at, &principal, &name, &bySerial, &byKeyID, &a.Seen); err != nil {
			return CertAccess{}, fmt.Errorf("get certificate access of %s: %w", label, err)
		}
		a.Epoch, a.CAName, a.Trusted = epochOfRow, name.String, name.Valid
		a.RevokedSerial, a.RevokedKeyID = bySerial, byKeyID
		if at.Valid {
			a.TenancyStart = fromMillis(at.Int64)
		}
		if principal.Valid {
			a.Principals = append(a.Principals, principal.String)
		}
	}
	if err := rows.Err(); err != nil {
		return CertAccess{}, fmt.Errorf("get certificate access of %s: %w", label, notFound(err))
	}
	if !found {
		return CertAccess{}, fmt.Errorf("get certificate access of %s: %w", label, ErrNotFound)
	}
	slices.Sort(a.Principals) // here, not in SQL: MySQL sorted them in a temporary table
	return a, nil
}

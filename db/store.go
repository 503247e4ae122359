// Package db owns obmd's persistent state over database/sql, on SQLite
// (embedded, the default), MySQL/MariaDB or PostgreSQL (replicas).
//
// It keeps nodes (with sealed BMC info), node tokens (SHA-256 only), node
// keys, access epochs, the audit log and the console history (per tenancy;
// it implements sol/history's Store); and for certificate logins, the
// trusted CAs, certificate revocations and node principals. SQLite is
// modernc.org/sqlite, embedded; MySQL/MariaDB (go-sql-driver) and
// PostgreSQL (pgx) are for production, shared by replicas.
//
// Every change of who may access a node takes the next access epoch and a
// row in access_changes, which replicas poll in epoch order. A change of
// who may log in that is no single node's (a CA removed, a certificate
// revoked) is a credential change: it takes an epoch and a row too, with
// no node (Change.Cred says which sessions it ends), so replicas learn it
// in the same poll, in order with the node changes.
//
// The audit log (Audit) commits a change's or a power action's event before
// Audit returns; reads and session bounds (DeferredAudit) are committed by
// the store's own goroutine within AuditWindow, and by Close.
package db

import (
	"errors"
	"time"

	"github.com/obmd/obmd/keys"
)

// Errors callers branch on.
var (
	ErrNotFound = errors.New("not found")
	ErrExists   = errors.New("already exists")
)

// Node is a registered node. InfoSealed is the BMC info JSON sealed by
// keys.Sealer with the label as owner; the store never sees it in clear.
type Node struct {
	Label      string
	Type       string
	InfoSealed []byte
	// Epoch changes on every change of who may access the node (token
	// rotation or revocation, key removal, info change, deletion). Sessions
	// remember the epoch they authenticated at and end when it moves.
	Epoch int64
	// Capture is whether the node's console is captured with nobody
	// attached: CaptureAlways, CaptureAttached, or "" (the daemon's
	// default for its type). Not access: it moves no epoch.
	Capture string
	// ScreenSize is the size of the node's screen (the terminal emulator
	// of its console): "COLSxROWS" up to 200x100, or "" for the default
	// 80x25. Not access: it moves no epoch.
	ScreenSize string
	// Zone is the BMC network the node's BMC is on (ValidZone): only a
	// replica that reaches it holds the node's console link; "" for any
	// replica. Not access: it moves no epoch.
	Zone      string
	CreatedAt time.Time
	UpdatedAt time.Time
}

// Capture settings of a node (Node.Capture).
const (
	CaptureAlways   = "always"   // its link is held open with nobody attached
	CaptureAttached = "attached" // its link is open while someone watches
)

// Access is what authentication needs about a node, read in one query.
type Access struct {
	Epoch    int64
	HasToken bool
	Token    keys.TokenHash // zero unless HasToken
}

// Key is a public key allowed on a node.
type Key struct {
	Node        string
	Fingerprint string // SHA256:...
	Line        string // normalised authorized_keys line
	Comment     string
	CreatedAt   time.Time
}

// Change is one access change (see Node.Epoch), for replicas that watch.
type Change struct {
	Epoch int64 // the node's new epoch; changes are ordered by it
	// Node is the node changed; "" for a credential change (Cred).
	Node string
	// Reason says why, for the sessions the change cuts (one of the
	// Reason* texts); empty for changes recorded before migration 6.
	Reason string
	// Cred is what a credential change (Node "") changed; zero otherwise.
	Cred CredChange
}

// Credential change kinds (CredChange.Kind; Revocation.Kind takes the last
// two).
const (
	CredCA     = "ca"     // a CA is no longer trusted
	CredSerial = "serial" // certificates revoked by serial
	CredKeyID  = "key_id" // certificates revoked by key id
)

// CredChange is a credential change: a change of who may log in that is no
// single node's. Sessions it Affects must end, on every replica; it moves
// no node's epoch (a node's tenancy goes on).
type CredChange struct {
	Kind string // CredCA, CredSerial or CredKeyID
	// CA is the fingerprint of the CA concerned; "" (revocations only):
	// every CA.
	CA     string
	Serial uint64 // CredSerial
	KeyID  string // CredKeyID
}

// Affects reports whether a session that logged in with a certificate of
// the CA whose key has fingerprint ca, with serial and keyID, must end.
// A kind this version does not know (a newer replica's) ends every
// certificate session: fail closed.
func (c CredChange) Affects(ca string, serial uint64, keyID string) bool {
	ofCA := c.CA == "" || c.CA == ca
	switch c.Kind {
	case CredCA:
		return ca == c.CA
	case CredSerial:
		return ofCA && serial == c.Serial
	case CredKeyID:
		return ofCA && keyID == c.KeyID
	}
	return true
}

// CA is a trusted user CA: certificates it signs may open nodes.
type CA struct {
	Fingerprint string // SHA256:... of its key
	Name        string // the admin's name for it ("hil")
	Line        string // its authorized-key line
	CreatedAt   time.Time
}

// Revocation refuses certificates before they expire: by serial or by key
// id, of one CA or of every CA.
type Revocation struct {
	Kind string // CredSerial or CredKeyID
	// CA is the fingerprint of the CA whose certificates it refuses; ""
	// refuses them whatever their CA.
	CA     string
	Serial uint64 // Kind CredSerial
	KeyID  string // Kind CredKeyID
	// ExpiresAt is when the certificates it refuses would have expired
	// anyway (the caller knows it): after it the row may be purged
	// (PurgeRevocations). Zero keeps it for good; at most
	// MaxRevocationExpiry.
	ExpiresAt time.Time
	CreatedAt time.Time
}

// AuditEvent is one audit record. Never holds a secret.
type AuditEvent struct {
	ID     int64
	At     time.Time
	Node   string // may be empty (admin actions on no node)
	Actor  string // "admin", "ssh:<method>", "http:token", "system"
	Action string // "auth", "session.start", "power.on", "token.rotate", ...
	Source string // remote address
	Result string // "ok", "denied", "error", "busy", ...
	Detail string // short, safe text
	// Count is how many events the row stands for: 1 for an event of its
	// own, more for the repeats of an aggregated one (Aggregated), whose
	// At is the first repeat's and Detail the latest's. Audit ignores it.
	Count int64
}

// AuditQuery filters AuditEvents; zero fields do not filter.
type AuditQuery struct {
	Node  string
	Since time.Time
	Limit int // default and maximum MaxLimit (1000)
}

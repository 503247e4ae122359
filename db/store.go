// Package db owns obmd's persistent state over database/sql: nodes (with
// sealed BMC info), node tokens (SHA-256 only), node keys, access epochs,
// the audit log and the console history (per tenancy; it implements
// sol/history's Store), on SQLite (modernc.org/sqlite, the embedded
// default) or MySQL/MariaDB (production, shared by replicas).
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
	Epoch     int64
	CreatedAt time.Time
	UpdatedAt time.Time
}

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
	Node  string
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
}

// AuditQuery filters AuditEvents; zero fields do not filter.
type AuditQuery struct {
	Node  string
	Since time.Time
	Limit int // default and maximum MaxLimit (1000)
}

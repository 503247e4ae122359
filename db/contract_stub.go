package db

// CONTRACT STUB: the db helper replaces this file with the implementation.
// Signatures and documented behaviour are fixed; other packages compile
// against them.

import (
	"context"

	"github.com/obmd/obmd/keys"
	"github.com/sirupsen/logrus"
)

// Store is obmd's persistent state. Safe for concurrent use.
type Store struct{}

// Open connects to dsn: a SQLite file path (or "file:..." URI), or
// "mysql://user:pass@tcp(host:port)/dbname[?params]". SQLite gets WAL and a
// busy timeout; MySQL gets parseTime. It pings but does not migrate.
func Open(ctx context.Context, dsn string, log logrus.FieldLogger) (*Store, error) { panic("stub") }

// Migrate applies the embedded goose migrations for the store's dialect.
func (s *Store) Migrate(ctx context.Context) error { panic("stub") }

// Dialect is "sqlite" or "mysql".
func (s *Store) Dialect() string { panic("stub") }

// Ping checks the database answers.
func (s *Store) Ping(ctx context.Context) error { panic("stub") }

// Close closes the pool.
func (s *Store) Close() error { panic("stub") }

// CreateNode inserts n (Epoch and timestamps are assigned and returned).
// ErrExists if the label is taken.
func (s *Store) CreateNode(ctx context.Context, n Node) (Node, error) { panic("stub") }

// Node returns one node; ErrNotFound.
func (s *Store) Node(ctx context.Context, label string) (Node, error) { panic("stub") }

// Nodes returns every node ordered by label.
func (s *Store) Nodes(ctx context.Context) ([]Node, error) { panic("stub") }

// UpdateNodeInfo replaces type and sealed info and moves the epoch; ErrNotFound.
func (s *Store) UpdateNodeInfo(ctx context.Context, label, typ string, sealed []byte) (Node, error) {
	panic("stub")
}

// DeleteNode removes the node with its token and keys and records the
// change; returns the change's epoch. ErrNotFound if absent.
func (s *Store) DeleteNode(ctx context.Context, label string) (int64, error) { panic("stub") }

// SetToken replaces the node's token hash and moves the epoch; ErrNotFound.
func (s *Store) SetToken(ctx context.Context, label string, h keys.TokenHash) (int64, error) {
	panic("stub")
}

// RevokeToken removes the node's token (idempotent) and moves the epoch;
// ErrNotFound for an unknown node.
func (s *Store) RevokeToken(ctx context.Context, label string) (int64, error) { panic("stub") }

// Access returns what token authentication needs; ErrNotFound.
func (s *Store) Access(ctx context.Context, label string) (Access, error) { panic("stub") }

// Epoch returns the node's current epoch; ErrNotFound.
func (s *Store) Epoch(ctx context.Context, label string) (int64, error) { panic("stub") }

// AddKey registers a key; ErrNotFound (node), ErrExists (same fingerprint on
// that node). Adding access does not move the epoch.
func (s *Store) AddKey(ctx context.Context, k Key) error { panic("stub") }

// Keys lists a node's keys ordered by creation; ErrNotFound for an unknown node.
func (s *Store) Keys(ctx context.Context, label string) ([]Key, error) { panic("stub") }

// HasKey reports whether fingerprint is registered on label, with the
// node's epoch; ErrNotFound for an unknown node.
func (s *Store) HasKey(ctx context.Context, label, fingerprint string) (epoch int64, ok bool, err error) {
	panic("stub")
}

// DeleteKey removes a key and moves the epoch; ErrNotFound if the node or
// key is absent.
func (s *Store) DeleteKey(ctx context.Context, label, fingerprint string) (int64, error) {
	panic("stub")
}

// ChangesSince returns access changes with Epoch > after, oldest first, at
// most limit (default 1000).
func (s *Store) ChangesSince(ctx context.Context, after int64, limit int) ([]Change, error) {
	panic("stub")
}

// LatestChange returns the highest epoch recorded (0 if none).
func (s *Store) LatestChange(ctx context.Context) (int64, error) { panic("stub") }

// Audit appends an event (At defaults to now).
func (s *Store) Audit(ctx context.Context, e AuditEvent) error { panic("stub") }

// AuditEvents returns events matching q, oldest first.
func (s *Store) AuditEvents(ctx context.Context, q AuditQuery) ([]AuditEvent, error) {
	panic("stub")
}

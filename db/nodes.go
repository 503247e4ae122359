package db

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	"github.com/obmd/obmd/sol/screen"
)

// CreateNode inserts n (Epoch and timestamps are assigned and returned).
// ErrExists if the label is taken.
//
// Creation records an access change, so a node deleted and created again
// gets an epoch it never had before.
func (s *Store) CreateNode(ctx context.Context, n Node) (Node, error) {
	if err := checkLen("label", n.Label, MaxLabelLen); err != nil {
		return Node{}, fmt.Errorf("create node: %w", err)
	}
	if err := checkLen("type", n.Type, MaxTypeLen); err != nil {
		return Node{}, fmt.Errorf("create node %s: %w", n.Label, err)
	}
	if n.InfoSealed == nil {
		n.InfoSealed = []byte{} // the column is NOT NULL
	}
	if err := checkCapture(n.Capture); err != nil {
		return Node{}, fmt.Errorf("create node %s: %w", n.Label, err)
	}
	if _, err := screen.ParseSize(n.ScreenSize); err != nil {
		return Node{}, fmt.Errorf("create node %s: %w", n.Label, err)
	}
	if err := ValidZone(n.Zone); err != nil {
		return Node{}, fmt.Errorf("create node %s: %w", n.Label, err)
	}
	err := s.withTx(ctx, func(tx *sql.Tx) error {
		epoch, err := s.recordChange(ctx, tx, n.Label, ReasonNodeCreated)
		if err != nil {
			return err
		}
		n.Epoch = epoch
		n.CreatedAt = s.stamp()
		n.UpdatedAt = n.CreatedAt
		_, err = tx.ExecContext(ctx,
			`INSERT INTO nodes (label, type, info_sealed, access_epoch, capture, screen_size, zone, created_at, updated_at)
			 VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`,
			n.Label, n.Type, n.InfoSealed, n.Epoch, n.Capture, n.ScreenSize, n.Zone, toMillis(n.CreatedAt), toMillis(n.UpdatedAt))
		if isDuplicate(err) {
			return ErrExists
		}
		return err
	})
	if err != nil {
		return Node{}, fmt.Errorf("create node %s: %w", n.Label, err)
	}
	return n, nil
}

const nodeColumns = `label, type, info_sealed, access_epoch, capture, screen_size, zone, created_at, updated_at`

type scanner interface{ Scan(dest ...any) error }

func scanNode(r scanner) (Node, error) {
	var (
		n                Node
		created, updated int64
	)
	if err := r.Scan(&n.Label, &n.Type, &n.InfoSealed, &n.Epoch, &n.Capture, &n.ScreenSize, &n.Zone, &created, &updated); err != nil {
		return Node{}, err
	}
	n.CreatedAt, n.UpdatedAt = fromMillis(created), fromMillis(updated)
	return n, nil
}

// Node returns one node; ErrNotFound.
func (s *Store) Node(ctx context.Context, label string) (Node, error) {
	n, err := scanNode(s.queryRow(ctx, `SELECT `+nodeColumns+` FROM nodes WHERE label = ?`, label))
	if err != nil {
		return Node{}, fmt.Errorf("get node %s: %w", label, notFound(err))
	}
	return n, nil
}

// Nodes returns every node ordered by label (byte order on both engines).
func (s *Store) Nodes(ctx context.Context) ([]Node, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT `+nodeColumns+` FROM nodes ORDER BY label`)
	if err != nil {
		return nil, fmt.Errorf("list nodes: %w", err)
	}
	defer rows.Close()
	var out []Node
	for rows.Next() {
		n, err := scanNode(rows)
		if err != nil {
			return nil, fmt.Errorf("list nodes: %w", err)
		}
		out = append(out, n)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list nodes: %w", err)
	}
	return out, nil
}

// UpdateNodeInfo replaces type and sealed info and moves the epoch; ErrNotFound.
func (s *Store) UpdateNodeInfo(ctx context.Context, label, typ string, sealed []byte) (Node, error) {
	if err := checkLen("type", typ, MaxTypeLen); err != nil {
		return Node{}, fmt.Errorf("update node %s: %w", label, err)
	}
	if sealed == nil {
		sealed = []byte{}
	}
	var n Node
	err := s.withTx(ctx, func(tx *sql.Tx) error {
		epoch, err := s.recordChange(ctx, tx, label, ReasonNodeChanged)
		if err != nil {
			return err
		}
		n, err = updateNode(ctx, tx, label,
			`UPDATE nodes SET type = ?, info_sealed = ?, access_epoch = ?, updated_at = ? WHERE label = ?`,
			typ, sealed, epoch, toMillis(s.stamp()), label)
		return err
	})
	if err != nil {
		return Node{}, fmt.Errorf("update node %s: %w", label, err)
	}
	return n, nil
}

// DeleteNode removes the node with its token and keys and records the
// change; returns the change's epoch. ErrNotFound if absent.
func (s *Store) DeleteNode(ctx context.Context, label string) (int64, error) {
	var epoch int64
	err := s.withTx(ctx, func(tx *sql.Tx) error {
		var err error
		if epoch, err = s.recordChange(ctx, tx, label, ReasonNodeDeleted); err != nil {
			return err
		}
		// Token and keys go with it: ON DELETE CASCADE.
		res, err := tx.ExecContext(ctx, `DELETE FROM nodes WHERE label = ?`, label)
		if err != nil {
			return err
		}
		return mustAffect(res)
	})
	if err != nil {
		return 0, fmt.Errorf("delete node %s: %w", label, err)
	}
	return epoch, nil
}

// SetCapture sets the node's capture (CaptureAlways, CaptureAttached or
// "" for the daemon's default) and returns the node. It is not an access
// change: no epoch moves, no session is cut, the tenancy goes on.
// ErrNotFound.
func (s *Store) SetCapture(ctx context.Context, label, capture string) (Node, error) {
	if err := checkCapture(capture); err != nil {
		return Node{}, fmt.Errorf("set capture of %s: %w", label, err)
	}
	var n Node
	err := s.withTx(ctx, func(tx *sql.Tx) error {
		var err error
		n, err = updateNode(ctx, tx, label, `UPDATE nodes SET capture = ?, updated_at = ? WHERE label = ?`,
			capture, toMillis(s.stamp()), label)
		return err
	})
	if err != nil {
		return Node{}, fmt.Errorf("set capture of %s: %w", label, err)
	}
	return n, nil
}

// SetScreenSize sets the size of the node's screen ("COLSxROWS" up to
// 200x100, or "" for the default) and returns the node; a bad size is
// screen.ErrBadSize (wrapped). It is not an access change (see
// SetCapture); the node's next console link draws at the new size.
// ErrNotFound.
func (s *Store) SetScreenSize(ctx context.Context, label, size string) (Node, error) {
	if _, err := screen.ParseSize(size); err != nil {
		return Node{}, fmt.Errorf("set screen size of %s: %w", label, err)
	}
	var n Node
	err := s.withTx(ctx, func(tx *sql.Tx) error {
		var err error
		n, err = updateNode(ctx, tx, label, `UPDATE nodes SET screen_size = ?, updated_at = ? WHERE label = ?`,
			size, toMillis(s.stamp()), label)
		return err
	})
	if err != nil {
		return Node{}, fmt.Errorf("set screen size of %s: %w", label, err)
	}
	return n, nil
}

// SetZone sets the zone of the node's BMC (ValidZone; "" for none) and
// returns the node. It is not an access change (see SetCapture): the
// replicas move its console link to one that reaches the zone at their
// next capture poll or the link's next opening. ErrNotFound.
func (s *Store) SetZone(ctx context.Context, label, zone string) (Node, error) {
	if err := ValidZone(zone); err != nil {
		return Node{}, fmt.Errorf("set zone of %s: %w", label, err)
	}
	var n Node
	err := s.withTx(ctx, func(tx *sql.Tx) error {
		var err error
		n, err = updateNode(ctx, tx, label, `UPDATE nodes SET zone = ?, updated_at = ? WHERE label = ?`,
			zone, toMillis(s.stamp()), label)
		return err
	})
	if err != nil {
		return Node{}, fmt.Errorf("set zone of %s: %w", label, err)
	}
	return n, nil
}

// NodeZone returns the zone of the node's BMC; ErrNotFound.
func (s *Store) NodeZone(ctx context.Context, label string) (string, error) {
	var zone string
	if err := s.queryRow(ctx, `SELECT zone FROM nodes WHERE label = ?`, label).Scan(&zone); err != nil {
		return "", fmt.Errorf("get zone of %s: %w", label, notFound(err))
	}
	return zone, nil
}

// Zones returns the zones the nodes name (not ""), sorted.
func (s *Store) Zones(ctx context.Context) ([]string, error) {
	rows, err := s.query(ctx, `SELECT DISTINCT zone FROM nodes WHERE zone <> '' ORDER BY zone`)
	if err != nil {
		return nil, fmt.Errorf("list zones: %w", err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var z string
		if err := rows.Scan(&z); err != nil {
			return nil, fmt.Errorf("list zones: %w", err)
		}
		out = append(out, z)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list zones: %w", err)
	}
	return out, nil
}

// updateNode runs update (of label's row) in tx and returns the node as it
// is then; ErrNotFound if no row changed.
func updateNode(ctx context.Context, tx *sql.Tx, label, update string, args ...any) (Node, error) {
	res, err := tx.ExecContext(ctx, update, args...)
	if err != nil {
		return Node{}, err
	}
	if err := mustAffect(res); err != nil {
		return Node{}, err
	}
	return scanNode(tx.QueryRowContext(ctx, `SELECT `+nodeColumns+` FROM nodes WHERE label = ?`, label))
}

// checkCapture refuses a capture setting the column does not take.
func checkCapture(c string) error {
	switch c {
	case "", CaptureAlways, CaptureAttached:
		return nil
	}
	return fmt.Errorf("capture %q is not %q, %q or empty", c, CaptureAlways, CaptureAttached)
}

// NodeCapture is what the capture of a node's console depends on.
type NodeCapture struct {
	Label   string
	Type    string
	Capture string // Node.Capture
	Zone    string // Node.Zone
}

// CaptureCandidates narrows Captures to the nodes whose capture can be
// always: every node set to CaptureAlways, and of those that set none
// (Node.Capture ""), every one if Unset, else those of a type in
// UnsetTypes. A node set to CaptureAttached is never one.
type CaptureCandidates struct {
	Unset      bool
	UnsetTypes []string
}

// Captures lists the candidates' type and capture setting, by label,
// without reading their sealed info: what each replica reads every
// epoch_poll to decide which consoles to hold open. The others (a fleet of
// nodes captured while attached) are left in the database: a poll's rows,
// allocations and scans grow with the nodes it may hold, not with the
// fleet.
func (s *Store) Captures(ctx context.Context, c CaptureCandidates) ([]NodeCapture, error) {
	q := `SELECT label, type, capture, zone FROM nodes WHERE capture = ?`
	args := []any{CaptureAlways}
	switch {
	case c.Unset:
		q += ` OR capture = ''`
	case len(c.UnsetTypes) > 0:
		q += ` OR (capture = '' AND type IN (?` + strings.Repeat(`, ?`, len(c.UnsetTypes)-1) + `))`
		for _, t := range c.UnsetTypes {
			args = append(args, t)
		}
	}
	rows, err := s.r.QueryContext(ctx, q+` ORDER BY label`, args...)
	if err != nil {
		return nil, fmt.Errorf("list captures: %w", err)
	}
	defer rows.Close()
	var out []NodeCapture
	for rows.Next() {
		var c NodeCapture
		if err := rows.Scan(&c.Label, &c.Type, &c.Capture, &c.Zone); err != nil {
			return nil, fmt.Errorf("list captures: %w", err)
		}
		out = append(out, c)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list captures: %w", err)
	}
	return out, nil
}

// Epoch returns the node's current epoch; ErrNotFound.
func (s *Store) Epoch(ctx context.Context, label string) (int64, error) {
	var epoch int64
	err := s.queryRow(ctx, `SELECT access_epoch FROM nodes WHERE label = ?`, label).Scan(&epoch)
	if err != nil {
		return 0, fmt.Errorf("get epoch of %s: %w", label, notFound(err))
	}
	return epoch, nil
}

// errNoNode distinguishes a missing node from a missing key inside a
// transaction; both surface as ErrNotFound.
var errNoNode = fmt.Errorf("no such node: %w", ErrNotFound)

// nodeExists returns errNoNode unless label exists, reading through q.
func nodeExists(ctx context.Context, q interface {
	QueryRowContext(context.Context, string, ...any) *sql.Row
}, label string) error {
	var one int
	err := q.QueryRowContext(ctx, `SELECT 1 FROM nodes WHERE label = ?`, label).Scan(&one)
	if errors.Is(err, sql.ErrNoRows) {
		return errNoNode
	}
	return err
}

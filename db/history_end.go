package db

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/obmd/obmd/sol/history"
)

// EndTenancies ends every open tenancy of node that began before epoch
// (the node's epoch after an access change): with retention 0 its chunks
// and row are deleted at once; else it is kept for admins only, closed by
// a TenancyEnded marker, until PurgeHistory removes it once retention has
// passed. It records the end first (console_ends), so that no later append
// opens one of those tenancies again. Idempotent.
//
// It is not part of the access change's own transaction: that one must
// stay short (it holds the lock every change takes), and ending a tenancy
// is not what keeps it from a tenant: ReadHistory does, by the epoch.
func (s *Store) EndTenancies(ctx context.Context, node string, epoch int64, retention time.Duration) error {
	err := s.withTx(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, s.sqlRecordEnd(), node, epoch); err != nil {
			return err
		}
		epochs, err := s.openTenancies(ctx, tx, node, epoch)
		if err != nil {
			return err
		}
		for _, e := range epochs {
			if err := s.endTenancy(ctx, tx, node, e, retention); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("end tenancies of %s before %d: %w", node, epoch, err)
	}
	return nil
}

// sqlRecordEnd raises node's end watermark to epoch (never lowers it).
// SQLite and PostgreSQL share the upsert; the greater of two values is
// SQLite's two-argument MAX, PostgreSQL's GREATEST.
func (s *Store) sqlRecordEnd() string {
	if s.dialect == DialectMySQL {
		return `INSERT INTO console_ends (node, epoch) VALUES (?, ?)
			ON DUPLICATE KEY UPDATE epoch = GREATEST(epoch, VALUES(epoch))`
	}
	greatest := "GREATEST"
	if s.dialect == DialectSQLite {
		greatest = "MAX"
	}
	return `INSERT INTO console_ends (node, epoch) VALUES (?, ?)
		ON CONFLICT (node) DO UPDATE SET epoch = ` + greatest + `(console_ends.epoch, excluded.epoch)`
}

// openTenancies lists node's open tenancies that began before epoch, with
// their rows locked on MySQL and PostgreSQL (an append that opened one just
// now has committed by then, the end recorded above having waited for it).
func (s *Store) openTenancies(ctx context.Context, tx *sql.Tx, node string, epoch int64) ([]int64, error) {
	query := `SELECT epoch FROM console_tenancies WHERE node = ? AND epoch < ? AND ended_at = 0 ORDER BY epoch` + s.forUpdate()
	rows, err := tx.QueryContext(ctx, query, node, epoch)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []int64
	for rows.Next() {
		var e int64
		if err := rows.Scan(&e); err != nil {
			return nil, err
		}
		out = append(out, e)
	}
	return out, rows.Err()
}

// endTenancy ends one open tenancy inside tx: deleted (retention 0) or kept
// until now+retention with its end marker.
func (s *Store) endTenancy(ctx context.Context, tx *sql.Tx, node string, epoch int64, retention time.Duration) error {
	if retention <= 0 {
		_, err := deleteTenancy(ctx, tx, node, epoch, `ended_at = 0`)
		return err
	}
	m := history.TenancyEnded()
	now := s.stamp()
	size := int64(len(m.Text))
	ended, err := affected(tx.ExecContext(ctx,
		`UPDATE console_tenancies SET ended_at = ?, purge_at = ?, bytes = bytes + ?, last_seq = last_seq + 1
		 WHERE node = ? AND epoch = ? AND ended_at = 0`,
		toMillis(now), toMillis(now.Add(retention)), size, node, epoch))
	if err != nil || !ended {
		return err
	}
	var seq int64
	if err := tx.QueryRowContext(ctx,
		`SELECT last_seq FROM console_tenancies WHERE node = ? AND epoch = ?`, node, epoch).Scan(&seq); err != nil {
		return err
	}
	_, err = tx.ExecContext(ctx, sqlAddChunk+sqlChunkRow,
		node, epoch, seq, toMillis(now), toMillis(now), int(m.Kind), 0, size, []byte{}, []byte(m.Text))
	return err
}

// deleteTenancy deletes a tenancy's row, if cond holds of it, then its
// chunks; it reports whether the row went.
func deleteTenancy(ctx context.Context, tx *sql.Tx, node string, epoch int64, cond string, args ...any) (bool, error) {
	gone, err := affected(tx.ExecContext(ctx,
		`DELETE FROM console_tenancies WHERE node = ? AND epoch = ? AND `+cond, append([]any{node, epoch}, args...)...))
	if err != nil || !gone {
		return false, err
	}
	_, err = tx.ExecContext(ctx, `DELETE FROM console_chunks WHERE node = ? AND epoch = ?`, node, epoch)
	return err == nil, err
}

// PurgeHistory removes kept tenancies whose retention has passed, and ends
// (as EndTenancies would, with retention) every tenancy left open although
// its node's epoch has moved on or its node is gone: an end that was missed
// (a crash between an access change and EndTenancies, or an append racing
// the change on another Galera node). One transaction per tenancy. It
// returns how many tenancies it deleted. Every replica may run it on a
// timer; the work is done once (the count is what this call deleted, as
// far as it can tell).
func (s *Store) PurgeHistory(ctx context.Context, retention time.Duration) (int, error) {
	stale, err := s.tenancyKeys(ctx,
		`SELECT t.node, t.epoch FROM console_tenancies t LEFT JOIN nodes n ON n.label = t.node
		 WHERE t.ended_at = 0 AND (n.label IS NULL OR n.access_epoch <> t.epoch)`)
	if err != nil {
		return 0, fmt.Errorf("purge history: %w", err)
	}
	removed := 0
	for _, k := range stale {
		// Only up to this epoch: the node may have been created again
		// since, with a tenancy of its own.
		if err := s.EndTenancies(ctx, k.Node, k.Epoch+1, retention); err != nil {
			return removed, fmt.Errorf("purge history: %w", err)
		}
		if retention <= 0 {
			removed++
		}
	}
	now := toMillis(s.now())
	expired, err := s.tenancyKeys(ctx,
		`SELECT node, epoch FROM console_tenancies WHERE ended_at > 0 AND purge_at <= ?`, now)
	if err != nil {
		return removed, fmt.Errorf("purge history: %w", err)
	}
	for _, k := range expired {
		var gone bool
		err := s.withTx(ctx, func(tx *sql.Tx) error {
			var err error
			gone, err = deleteTenancy(ctx, tx, k.Node, k.Epoch, `ended_at > 0 AND purge_at <= ?`, now)
			return err
		})
		if err != nil {
			return removed, fmt.Errorf("purge history of %s, tenancy %d: %w", k.Node, k.Epoch, err)
		}
		if gone {
			removed++
		}
	}
	return removed, nil
}

// tenancyKeys runs a query of (node, epoch) rows.
func (s *Store) tenancyKeys(ctx context.Context, query string, args ...any) ([]Tenancy, error) {
	rows, err := s.r.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []Tenancy
	for rows.Next() {
		var t Tenancy
		if err := rows.Scan(&t.Node, &t.Epoch); err != nil {
			return nil, err
		}
		out = append(out, t)
	}
	return out, rows.Err()
}

// Tenancies lists the stored tenancies of node, oldest first: the current
// one (if anything was recorded in it) and the ended ones kept for admins.
// A node that is gone may still have kept tenancies; an unknown node has
// none (no error).
func (s *Store) Tenancies(ctx context.Context, node string) ([]Tenancy, error) {
	rows, err := s.r.QueryContext(ctx,
		`SELECT t.epoch, t.started_at, t.ended_at, t.purge_at, t.bytes, n.access_epoch
		 FROM console_tenancies t LEFT JOIN nodes n ON n.label = t.node
		 WHERE t.node = ? ORDER BY t.epoch`, node)
	if err != nil {
		return nil, fmt.Errorf("list tenancies of %s: %w", node, err)
	}
	defer rows.Close()
	var out []Tenancy
	for rows.Next() {
		var (
			t                       = Tenancy{Node: node}
			started, ended, purgeAt int64
			current                 sql.NullInt64
		)
		if err := rows.Scan(&t.Epoch, &started, &ended, &purgeAt, &t.Bytes, &current); err != nil {
			return nil, fmt.Errorf("list tenancies of %s: %w", node, err)
		}
		t.StartedAt = fromMillis(started)
		if ended > 0 {
			t.EndedAt, t.PurgeAt = fromMillis(ended), fromMillis(purgeAt)
		}
		t.Current = ended == 0 && current.Valid && current.Int64 == t.Epoch
		out = append(out, t)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list tenancies of %s: %w", node, err)
	}
	return out, nil
}

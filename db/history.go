package db

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/obmd/obmd/sol/history"
)

// The store implements the Recorder's storage.
var _ history.Store = (*Store)(nil)

// Tenancy is one stored tenancy of a node's console history (see package
// sol/history), as admins list them.
type Tenancy struct {
	Node      string
	Epoch     int64 // the node's access epoch when it began; names it
	StartedAt time.Time
	EndedAt   time.Time // zero while it is open
	PurgeAt   time.Time // when a kept tenancy goes; zero while open
	Bytes     int64     // what its chunks hold (data and stamps)
	Current   bool      // the node's current tenancy: what its tenant reads
}

// ReadHistory returns the chunks q selects, in order (see history.Query).
//
// A tenant's read (q.Admin false) joins the node's row and returns chunks
// only where the node's current epoch is q.Epoch, in the one statement that
// reads them: a read racing an access change sees the tenancy either still
// current or gone, never the next one's nor a previous one's chunks. With
// nothing to return it answers history.ErrEnded if the epoch has moved (or
// the node is gone). An admin's read returns any stored tenancy, or
// history.ErrNoTenancy when there is none (a current tenancy with nothing
// recorded yet reads as empty).
func (s *Store) ReadHistory(ctx context.Context, q history.Query) ([]history.Chunk, error) {
	if q.Node == "" || q.Epoch <= 0 || q.Lines < 0 || q.MaxBytes < 0 || q.After < 0 {
		return nil, fmt.Errorf("read history of %q: incomplete query", q.Node)
	}
	since := int64(math.MinInt64)
	if !q.Since.IsZero() {
		since = toMillis(q.Since)
	}
	lo, hi := q.After+1, int64(math.MaxInt64)
	if q.Lines > 0 || q.MaxBytes > 0 {
		var err error
		if lo, hi, err = s.historyRange(ctx, q, since); err != nil {
			return nil, fmt.Errorf("read history of %s: %w", q.Node, err)
		}
	}
	var out []history.Chunk
	if lo <= hi {
		var err error
		if out, err = s.readChunks(ctx, q, since, lo, hi); err != nil {
			return nil, fmt.Errorf("read history of %s: %w", q.Node, err)
		}
	}
	if len(out) == 0 {
		if err := s.checkTenancy(ctx, q); err != nil {
			return nil, fmt.Errorf("read history of %s: %w", q.Node, err)
		}
	}
	return out, nil
}

// historyRange finds the seqs [lo, hi] of the newest chunks that hold
// q.Lines lines and fit in q.MaxBytes, from sizes and line counts alone.
// lo > hi: nothing fits.
func (s *Store) historyRange(ctx context.Context, q history.Query, since int64) (lo, hi int64, err error) {
	rows, err := s.query(ctx,
		`SELECT seq, size, newlines FROM console_chunks
		 WHERE node = ? AND epoch = ? AND seq > ? AND last_at >= ? ORDER BY seq DESC`,
		q.Node, q.Epoch, q.After, since)
	if err != nil {
		return 0, 0, err
	}
	defer rows.Close()
	lo, hi = 1, 0 // empty
	var bytes, lines int64
	for rows.Next() {
		var seq, size, n int64
		if err := rows.Scan(&seq, &size, &n); err != nil {
			return 0, 0, err
		}
		if hi == 0 { // the newest chunk: seqs start at 1
			lo, hi = seq+1, seq
		}
		if q.MaxBytes > 0 && bytes+size > int64(q.MaxBytes) {
			break
		}
		bytes, lines, lo = bytes+size, lines+n, seq
		// One newline more than asked: the line before the last q.Lines
		// ends in this range, so they are whole.
		if q.Lines > 0 && lines > int64(q.Lines) {
			break
		}
	}
	return lo, hi, rows.Err()
}

// readChunks reads the chunks of seqs [lo, hi] that arrived until since or
// later; for a tenant, only while q.Epoch is the node's current epoch.
func (s *Store) readChunks(ctx context.Context, q history.Query, since, lo, hi int64) ([]history.Chunk, error) {
	query := `SELECT c.seq, c.at, c.kind, c.stamps, c.data
		FROM nodes n JOIN console_chunks c ON c.node = n.label AND c.epoch = n.access_epoch
		WHERE n.label = ? AND n.access_epoch = ? AND c.seq >= ? AND c.seq <= ? AND c.last_at >= ?
		ORDER BY c.seq`
	if q.Admin {
		query = `SELECT seq, at, kind, stamps, data FROM console_chunks
			WHERE node = ? AND epoch = ? AND seq >= ? AND seq <= ? AND last_at >= ?
			ORDER BY seq`
	}
	rows, err := s.query(ctx, query, q.Node, q.Epoch, lo, hi, since)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []history.Chunk
	for rows.Next() {
		c := history.Chunk{Node: q.Node, Epoch: q.Epoch}
		var (
			at     int64
			kind   int
			stamps []byte
		)
		if err := rows.Scan(&c.Seq, &at, &kind, &stamps, &c.Data); err != nil {
			return nil, err
		}
		c.At, c.Kind = fromMillis(at), history.Kind(kind)
		if c.Stamps, err = history.ParseStamps(stamps, c.At, len(c.Data)); err != nil {
			return nil, fmt.Errorf("chunk %d: %w", c.Seq, err)
		}
		if c.Data == nil {
			c.Data = []byte{}
		}
		out = append(out, c)
	}
	return out, rows.Err()
}

// checkTenancy says why a read found nothing: for a tenant, ErrEnded unless
// q.Epoch is (still) the node's current epoch; for an admin, ErrNoTenancy
// unless it is stored or current.
func (s *Store) checkTenancy(ctx context.Context, q history.Query) error {
	epoch, err := s.Epoch(ctx, q.Node)
	switch {
	case err != nil && !errors.Is(err, ErrNotFound):
		return err
	case err == nil && epoch == q.Epoch:
		return nil
	case !q.Admin:
		return history.ErrEnded
	}
	var one int
	err = s.queryRow(ctx, `SELECT 1 FROM console_tenancies WHERE node = ? AND epoch = ?`, q.Node, q.Epoch).Scan(&one)
	if errors.Is(err, sql.ErrNoRows) {
		return history.ErrNoTenancy
	}
	return err
}

package db

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"slices"
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

// historyGroup is the chunks of one tenancy in a batch (indexes into it).
type historyGroup struct {
	node  string
	epoch int64
	idx   []int
	sizes []int64
	size  int64
}

// groupChunks checks chunks and groups them by tenancy, ordered by node
// and epoch: every transaction takes tenancy rows in that order, so two
// replicas appending at once cannot deadlock each other.
func groupChunks(chunks []history.Chunk) ([]*historyGroup, [][]byte, error) {
	type key struct {
		node  string
		epoch int64
	}
	byKey := map[key]*historyGroup{}
	var groups []*historyGroup
	stamps := make([][]byte, len(chunks))
	for i := range chunks {
		c := &chunks[i]
		if err := c.Check(); err != nil {
			return nil, nil, err
		}
		if err := checkLen("node label", c.Node, MaxLabelLen); err != nil {
			return nil, nil, err
		}
		k := key{c.Node, c.Epoch}
		g := byKey[k]
		if g == nil {
			g = &historyGroup{node: c.Node, epoch: c.Epoch}
			byKey[k] = g
			groups = append(groups, g)
		}
		stamps[i] = history.AppendStamps([]byte{}, *c) // NOT NULL
		size := int64(len(c.Data) + len(stamps[i]))
		g.idx = append(g.idx, i)
		g.sizes = append(g.sizes, size)
		g.size += size
	}
	slices.SortStableFunc(groups, func(a, b *historyGroup) int {
		return cmp.Or(cmp.Compare(a.node, b.node), cmp.Compare(a.epoch, b.epoch))
	})
	return groups, stamps, nil
}

// The statements of every append, prepared before its transaction (on
// SQLite the transaction holds the writer pool's one connection).
const (
	sqlGrowTenancy = `UPDATE console_tenancies SET bytes = bytes + ?, last_seq = last_seq + ? WHERE node = ? AND epoch = ?`
	// A tenancy row is created by its first chunks, unless its end is
	// recorded (console_ends) or its epoch is not (yet) one of the node's:
	// on MySQL the SELECT takes shared locks on the node's row and its
	// console_ends entry (or the gap where it would be), so an access
	// change or an end in progress is waited for, and then seen.
	sqlOpenTenancy = `INSERT INTO console_tenancies (node, epoch, started_at, ended_at, purge_at, bytes, last_seq)
		SELECT n.label, ?, ?, 0, 0, ?, ? FROM nodes n LEFT JOIN console_ends e ON e.node = n.label
		WHERE n.label = ? AND n.access_epoch >= ? AND (e.epoch IS NULL OR e.epoch <= ?)`
	sqlTenancySize = `SELECT bytes, last_seq FROM console_tenancies WHERE node = ? AND epoch = ?`
	sqlAddChunk    = `INSERT INTO console_chunks (node, epoch, seq, at, last_at, kind, newlines, size, stamps, data)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`
)

type appendStmts struct{ grow, open, size, add *sql.Stmt }

// AppendHistory stores chunks in one transaction (see history.Store): a
// batch of every recorded node's output since the last flush. Per tenancy
// it costs an UPDATE of its row (an INSERT for its first chunk), a SELECT
// and an INSERT per chunk; the bound costs nothing until the tenancy is
// over maxBytes, then a read of its few oldest chunks' sizes and a DELETE.
func (s *Store) AppendHistory(ctx context.Context, chunks []history.Chunk, maxBytes int64) error {
	if maxBytes <= 0 {
		return errors.New("append history: the bound must be positive")
	}
	groups, stamps, err := groupChunks(chunks)
	if err != nil {
		return fmt.Errorf("append history: %w", err)
	}
	if len(groups) == 0 {
		return nil
	}
	var st appendStmts
	for _, p := range []struct {
		to    **sql.Stmt
		query string
	}{{&st.grow, sqlGrowTenancy}, {&st.open, sqlOpenTenancy}, {&st.size, sqlTenancySize}, {&st.add, sqlAddChunk}} {
		if *p.to, err = s.prepared(ctx, s.w, p.query); err != nil {
			return fmt.Errorf("append history: %w", err)
		}
	}
	err = s.withTx(ctx, func(tx *sql.Tx) error {
		for i := range chunks {
			chunks[i].Seq = 0 // a retried transaction starts over
		}
		txst := appendStmts{tx.StmtContext(ctx, st.grow), tx.StmtContext(ctx, st.open),
			tx.StmtContext(ctx, st.size), tx.StmtContext(ctx, st.add)}
		for _, g := range groups {
			if err := s.appendGroup(ctx, tx, txst, g, chunks, stamps, maxBytes); err != nil {
				return fmt.Errorf("tenancy %d of %s: %w", g.epoch, g.node, err)
			}
		}
		return nil
	})
	if err != nil {
		for i := range chunks {
			chunks[i].Seq = 0
		}
		return fmt.Errorf("append %d history chunk(s): %w", len(chunks), err)
	}
	return nil
}

// appendGroup stores one tenancy's chunks of a batch, inside tx.
func (s *Store) appendGroup(ctx context.Context, tx *sql.Tx, st appendStmts, g *historyGroup,
	chunks []history.Chunk, stamps [][]byte, maxBytes int64) error {
	k := int64(len(g.idx))
	ok, bytes, last, err := s.claimSeqs(ctx, st, g)
	if err != nil || !ok {
		return err // !ok: its tenancy ended (or never was the node's): dropped
	}
	first := last - k + 1
	for j, i := range g.idx {
		c := &chunks[i]
		seq := first + int64(j)
		if _, err := st.add.ExecContext(ctx, c.Node, c.Epoch, seq, toMillis(c.At), toMillis(c.Until()),
			int(c.Kind), c.Lines(), g.sizes[j], stamps[i], notNull(c.Data)); err != nil {
			return err
		}
		c.Seq = seq
	}
	if bytes > maxBytes {
		return evictHistory(ctx, tx, g.node, g.epoch, bytes-maxBytes)
	}
	return nil
}

// claimSeqs counts g's chunks into their tenancy's row (opening it if it
// is the node's current tenancy), and returns what the row then holds and
// the last seq it gave out; ok is false if g has no tenancy to go to.
func (s *Store) claimSeqs(ctx context.Context, st appendStmts, g *historyGroup) (ok bool, bytes, last int64, err error) {
	k := int64(len(g.idx))
	grow := func() (bool, error) { return affected(st.grow.ExecContext(ctx, g.size, k, g.node, g.epoch)) }
	grown, err := grow()
	if err != nil {
		return false, 0, 0, err
	}
	if !grown {
		opened, err := affected(st.open.ExecContext(ctx, g.epoch, toMillis(s.now()), g.size, k, g.node, g.epoch, g.epoch))
		switch {
		case isDuplicate(err):
			// Another replica opened it since the UPDATE (a takeover):
			// the row is committed now, and the UPDATE sees it.
			if grown, err = grow(); err != nil {
				return false, 0, 0, err
			}
		case err != nil:
			return false, 0, 0, err
		case !opened:
			return false, 0, 0, nil // ended, or not one of the node's
		default:
			return true, g.size, k, nil
		}
	}
	if !grown {
		return false, 0, 0, nil
	}
	// Our own UPDATE made the row visible to this read, on MySQL too.
	err = st.size.QueryRowContext(ctx, g.node, g.epoch).Scan(&bytes, &last)
	return err == nil, bytes, last, err
}

// notNull is b, or an empty slice for nil (the column is NOT NULL).
func notNull(b []byte) []byte {
	if b == nil {
		return []byte{}
	}
	return b
}

// affected reports whether an Exec changed (matched) a row.
func affected(res sql.Result, err error) (bool, error) {
	if err != nil {
		return false, err
	}
	n, err := res.RowsAffected()
	return n > 0, err
}

// evictBatch is how many of the oldest chunks' sizes one read fetches: a
// flush over the bound evicts a chunk or two, and InnoDB reads whole rows.
const evictBatch = 16

// evictHistory deletes a tenancy's oldest chunks until at least excess
// bytes are freed, inside tx.
func evictHistory(ctx context.Context, tx *sql.Tx, node string, epoch, excess int64) error {
	var freed, upTo int64
	for freed < excess {
		rows, err := tx.QueryContext(ctx,
			`SELECT seq, size FROM console_chunks WHERE node = ? AND epoch = ? AND seq > ? ORDER BY seq LIMIT ?`,
			node, epoch, upTo, evictBatch)
		if err != nil {
			return fmt.Errorf("evict: %w", err)
		}
		n := 0
		for rows.Next() && freed < excess {
			var seq, size int64
			if err := rows.Scan(&seq, &size); err != nil {
				rows.Close()
				return fmt.Errorf("evict: %w", err)
			}
			n++
			freed, upTo = freed+size, seq
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return fmt.Errorf("evict: %w", err)
		}
		if n == 0 {
			break
		}
	}
	if _, err := tx.ExecContext(ctx,
		`DELETE FROM console_chunks WHERE node = ? AND epoch = ? AND seq <= ?`, node, epoch, upTo); err != nil {
		return fmt.Errorf("evict: %w", err)
	}
	if _, err := tx.ExecContext(ctx,
		`UPDATE console_tenancies SET bytes = bytes - ? WHERE node = ? AND epoch = ?`, freed, node, epoch); err != nil {
		return fmt.Errorf("evict: %w", err)
	}
	return nil
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

package db

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/obmd/obmd/sol/history"
)

// historyGroup is the chunks of one tenancy in a batch (indexes into it).
type historyGroup struct {
	tenancyKey
	idx  []int
	size int64 // data and stamps of its chunks
}

type tenancyKey struct {
	node  string
	epoch int64
}

// groupChunks checks chunks and groups them by tenancy, ordered by node
// and epoch: every transaction takes tenancy rows in that order, so two
// replicas appending at once cannot deadlock each other. It returns the
// encoded stamps of each chunk too.
func groupChunks(chunks []history.Chunk) ([]*historyGroup, [][]byte, error) {
	byKey := map[tenancyKey]*historyGroup{}
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
		k := tenancyKey{c.Node, c.Epoch}
		g := byKey[k]
		if g == nil {
			g = &historyGroup{tenancyKey: k}
			byKey[k] = g
			groups = append(groups, g)
		}
		stamps[i] = history.AppendStamps([]byte{}, *c) // NOT NULL
		g.idx = append(g.idx, i)
		g.size += int64(len(c.Data) + len(stamps[i]))
	}
	slices.SortFunc(groups, func(a, b *historyGroup) int {
		return cmp.Or(cmp.Compare(a.node, b.node), cmp.Compare(a.epoch, b.epoch))
	})
	return groups, stamps, nil
}

// The statements every append may run, prepared before its transaction
// (on SQLite the transaction holds the writer pool's one connection, and
// on MySQL an unprepared statement with arguments costs three round
// trips). Those that name many tenancies at once are built per batch.
const (
	// A tenancy row is created by its first chunks, unless its end is
	// recorded (console_ends) or its epoch is not (yet) one of the node's:
	// on MySQL the SELECT takes shared locks on the node's row and its
	// console_ends entry (or the gap where it would be), so an access
	// change or an end in progress is waited for, and then seen.
	sqlOpenTenancy = `INSERT INTO console_tenancies (node, epoch, started_at, ended_at, purge_at, bytes, last_seq, first_seq)
		SELECT n.label, ?, ?, 0, 0, ?, ?, 1 FROM nodes n LEFT JOIN console_ends e ON e.node = n.label
		WHERE n.label = ? AND n.access_epoch >= ? AND (e.epoch IS NULL OR e.epoch <= ?)`
	sqlAddChunk = `INSERT INTO console_chunks (node, epoch, seq, at, last_at, kind, newlines, size, stamps, data) VALUES `
	sqlChunkRow = `(?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`
)

const (
	// addRows is how many chunks one INSERT stores; a batch's last few
	// go one by one.
	addRows = 16
	// evictWindow is how many of a tenancy's oldest chunks one read
	// fetches the sizes of: a flush over the bound evicts a chunk or two,
	// and reading a size reads the row (on SQLite, its page).
	evictWindow = 4
)

// groupsPerStmt bounds the tenancies one statement names: on MySQL and
// PostgreSQL 64, where every statement is a round trip; on SQLite 1, where
// a statement costs no round trip and a prepared one nothing to parse.
func (s *Store) groupsPerStmt() int {
	if s.dialect == DialectSQLite {
		return 1
	}
	return 64
}

// The statements that name n tenancies (or nodes) at once.

// sqlClaimRead reads n tenancy rows; lock is s.forUpdate().
func sqlClaimRead(n int, lock string) string {
	return `SELECT node, epoch, bytes, last_seq, first_seq FROM console_tenancies WHERE ` + keysWhere(n, "") + lock
}

// sqlLockEnds locks the console_ends rows of n nodes, creating those
// missing (epoch 0: no tenancy has ended), for PostgreSQL, which locks no
// gap where a row is missing: an append holds them from before it reads
// its tenancies until it commits, and EndTenancies' write of the row
// waits for it (and it for EndTenancies), as gap locks make them on
// MySQL. The nodes must be distinct, and in order (no deadlock).
func sqlLockEnds(n int) string {
	return `INSERT INTO console_ends (node, epoch) VALUES (?, 0)` + strings.Repeat(`, (?, 0)`, n-1) +
		` ON CONFLICT (node) DO UPDATE SET epoch = console_ends.epoch`
}

func sqlClaim(n int) string {
	when := strings.Repeat(" WHEN node = ? AND epoch = ? THEN ?", n)
	return `UPDATE console_tenancies SET bytes = bytes + CASE` + when + ` ELSE 0 END, last_seq = last_seq + CASE` +
		when + ` ELSE 0 END WHERE ` + keysWhere(n, "")
}

func sqlEvictRead(n int) string {
	return `SELECT node, epoch, seq, size FROM console_chunks WHERE ` + keysWhere(n, " AND seq > ? AND seq <= ?") +
		` ORDER BY node, epoch, seq`
}

func sqlEvict(n int) string {
	return `DELETE FROM console_chunks WHERE ` + keysWhere(n, " AND seq >= ? AND seq <= ?")
}

func sqlEvicted(n int) string {
	when := strings.Repeat(" WHEN node = ? AND epoch = ? THEN ?", n)
	return `UPDATE console_tenancies SET bytes = bytes - CASE` + when + ` ELSE 0 END, first_seq = CASE` + when +
		` ELSE first_seq END WHERE ` + keysWhere(n, "")
}

// keysWhere is the condition "(node = ? AND epoch = ?[ AND extra]) OR ..."
// for n tenancies.
func keysWhere(n int, extra string) string {
	term := "(node = ? AND epoch = ?" + extra + ")"
	return strings.Repeat(term+" OR ", n-1) + term
}

// appendStmts runs the statements of an append in its transaction: those
// prepared beforehand (the fixed ones, and the one-tenancy forms of the
// others) through their prepared statements, any other directly.
type appendStmts struct {
	tx    *sql.Tx
	fixed map[string]*sql.Stmt // bound to tx
}

func (st appendStmts) exec(ctx context.Context, query string, args ...any) (sql.Result, error) {
	if p := st.fixed[query]; p != nil {
		return p.ExecContext(ctx, args...)
	}
	return st.tx.ExecContext(ctx, query, args...)
}

func (st appendStmts) query(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	if p := st.fixed[query]; p != nil {
		return p.QueryContext(ctx, args...)
	}
	return st.tx.QueryContext(ctx, query, args...)
}

var (
	sqlAddOne  = sqlAddChunk + sqlChunkRow
	sqlAddMany = sqlAddChunk + strings.Repeat(sqlChunkRow+", ", addRows-1) + sqlChunkRow
)

// prepareAppend prepares (or takes from the cache) the statements of an
// append, and returns a function that binds them to a transaction.
func (s *Store) prepareAppend(ctx context.Context) (func(tx *sql.Tx) appendStmts, error) {
	queries := []string{sqlOpenTenancy, sqlAddOne, sqlAddMany,
		sqlClaimRead(1, s.forUpdate()), sqlClaim(1), sqlEvictRead(1), sqlEvict(1), sqlEvicted(1)}
	if s.dialect == DialectPostgres {
		queries = append(queries, sqlLockEnds(1))
	}
	ps := make(map[string]*sql.Stmt, len(queries))
	for _, q := range queries {
		st, err := s.prepared(ctx, s.w, q)
		if err != nil {
			return nil, err
		}
		ps[q] = st
	}
	return func(tx *sql.Tx) appendStmts {
		st := appendStmts{tx: tx, fixed: make(map[string]*sql.Stmt, len(ps))}
		for q, p := range ps {
			st.fixed[q] = tx.StmtContext(ctx, p)
		}
		return st
	}, nil
}

// AppendHistory stores chunks in one transaction (see history.Store): a
// batch of every recorded node's output since the last flush. Its cost
// hardly grows with the number of tenancies: per 64 of them one SELECT
// (locking their rows) and one UPDATE; per 16 chunks one INSERT; an
// INSERT per tenancy opened. The bound costs nothing until a tenancy is
// over maxBytes, then per 64 such tenancies a read of the sizes of their
// oldest chunks, a DELETE and an UPDATE.
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
	bind, err := s.prepareAppend(ctx)
	if err != nil {
		return fmt.Errorf("append history: %w", err)
	}
	err = s.withTx(ctx, func(tx *sql.Tx) error {
		for i := range chunks {
			chunks[i].Seq = 0 // a retried transaction starts over
		}
		return s.appendTx(ctx, bind(tx), groups, chunks, stamps, maxBytes)
	})
	if err != nil {
		for i := range chunks {
			chunks[i].Seq = 0
		}
		return fmt.Errorf("append %d history chunk(s): %w", len(chunks), err)
	}
	return nil
}

// tenancyRow is what a tenancy's row holds.
type tenancyRow struct{ bytes, last, first int64 }

// overBound is a tenancy an append took over its bound.
type overBound struct {
	tenancyKey
	first, excess int64
}

// appendTx is AppendHistory's transaction: seqs first (tenancy rows, in
// order), then the chunks, then the evictions.
func (s *Store) appendTx(ctx context.Context, st appendStmts, groups []*historyGroup,
	chunks []history.Chunk, stamps [][]byte, maxBytes int64) error {
	var (
		over []overBound
		rows []int // the chunks to insert
	)
	for part := range slices.Chunk(groups, s.groupsPerStmt()) {
		claimed, err := s.claimSeqs(ctx, st, part)
		if err != nil {
			return err
		}
		for _, g := range part {
			t, ok := claimed[g.tenancyKey]
			if !ok {
				continue // its tenancy ended (or never was the node's): dropped
			}
			for j, i := range g.idx {
				chunks[i].Seq = t.last - int64(len(g.idx)-j) + 1
				rows = append(rows, i)
			}
			if t.bytes > maxBytes {
				over = append(over, overBound{g.tenancyKey, t.first, t.bytes - maxBytes})
			}
		}
	}
	if err := insertChunks(ctx, st, chunks, stamps, rows); err != nil {
		return fmt.Errorf("store chunks: %w", err)
	}
	for part := range slices.Chunk(over, s.groupsPerStmt()) {
		if err := evictHistory(ctx, st, part); err != nil {
			return err
		}
	}
	return nil
}

// claimSeqs counts each group's chunks into its tenancy's row and returns
// the rows as they then are: the rows are read and locked in one SELECT
// (FOR UPDATE on MySQL, which locks the gap of a missing row too, so that
// no one else opens it meanwhile; on PostgreSQL the nodes' console_ends
// rows are locked first, sqlLockEnds), those found are updated in one
// UPDATE, and those missing are opened one by one where they may be.
func (s *Store) claimSeqs(ctx context.Context, st appendStmts, groups []*historyGroup) (map[tenancyKey]tenancyRow, error) {
	var args, nodes []any
	for i, g := range groups {
		args = append(args, g.node, g.epoch)
		if i == 0 || g.node != groups[i-1].node { // groups are in node order
			nodes = append(nodes, g.node)
		}
	}
	if s.dialect == DialectPostgres {
		if _, err := st.exec(ctx, sqlLockEnds(len(nodes)), nodes...); err != nil {
			return nil, fmt.Errorf("lock tenancy ends: %w", err)
		}
	}
	found, err := scanTenancyRows(st.query(ctx, sqlClaimRead(len(groups), s.forUpdate()), args...))
	if err != nil {
		return nil, fmt.Errorf("read tenancies: %w", err)
	}
	out := map[tenancyKey]tenancyRow{}
	var grow []*historyGroup
	for _, g := range groups {
		k := int64(len(g.idx))
		if t, ok := found[g.tenancyKey]; ok {
			out[g.tenancyKey] = tenancyRow{t.bytes + g.size, t.last + k, t.first}
			grow = append(grow, g)
			continue
		}
		opened, err := affected(st.exec(ctx, sqlOpenTenancy, g.epoch, toMillis(s.now()), g.size, k, g.node, g.epoch, g.epoch))
		if err != nil {
			return nil, fmt.Errorf("open tenancy %d of %s: %w", g.epoch, g.node, err)
		}
		if opened {
			out[g.tenancyKey] = tenancyRow{g.size, k, 1}
		}
	}
	if len(grow) == 0 {
		return out, nil
	}
	var sizes, counts, where []any
	for _, g := range grow {
		sizes = append(sizes, g.node, g.epoch, g.size)
		counts = append(counts, g.node, g.epoch, int64(len(g.idx)))
		where = append(where, g.node, g.epoch)
	}
	if _, err := st.exec(ctx, sqlClaim(len(grow)), slices.Concat(sizes, counts, where)...); err != nil {
		return nil, fmt.Errorf("count chunks into tenancies: %w", err)
	}
	return out, nil
}

// scanTenancyRows reads (node, epoch, bytes, last_seq, first_seq) rows.
func scanTenancyRows(rows *sql.Rows, err error) (map[tenancyKey]tenancyRow, error) {
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[tenancyKey]tenancyRow{}
	for rows.Next() {
		var (
			k tenancyKey
			t tenancyRow
		)
		if err := rows.Scan(&k.node, &k.epoch, &t.bytes, &t.last, &t.first); err != nil {
			return nil, err
		}
		out[k] = t
	}
	return out, rows.Err()
}

// insertChunks stores the chunks at rows, addRows to a statement while
// there are that many left.
func insertChunks(ctx context.Context, st appendStmts, chunks []history.Chunk, stamps [][]byte, rows []int) error {
	for len(rows) > 0 {
		n, add := 1, sqlAddOne
		if len(rows) >= addRows {
			n, add = addRows, sqlAddMany
		}
		args := make([]any, 0, 10*n)
		for _, i := range rows[:n] {
			c := &chunks[i]
			args = append(args, c.Node, c.Epoch, c.Seq, toMillis(c.At), toMillis(c.Until()),
				int(c.Kind), c.Lines(), int64(len(c.Data)+len(stamps[i])), stamps[i], notNull(c.Data))
		}
		if _, err := st.exec(ctx, add, args...); err != nil {
			return err
		}
		rows = rows[n:]
	}
	return nil
}

// evicted is what evictHistory takes from one tenancy: seqs first..upTo.
type evicted struct {
	excess, first, upTo, freed int64
	seen                       int // rows read in the last round
}

// evictHistory deletes the oldest chunks of each tenancy in over, from its
// first_seq on, until its excess is freed: the sizes of evictWindow chunks
// of each are read in one SELECT (a tenancy that needs more is read again),
// then one DELETE and one UPDATE.
func evictHistory(ctx context.Context, st appendStmts, over []overBound) error {
	cut := map[tenancyKey]*evicted{}
	for _, o := range over {
		cut[o.tenancyKey] = &evicted{excess: o.excess, first: o.first, upTo: o.first - 1}
	}
	for left := over; len(left) > 0; {
		var args []any
		for _, o := range left {
			e := cut[o.tenancyKey]
			e.seen = 0
			args = append(args, o.node, o.epoch, e.upTo, e.upTo+evictWindow)
		}
		rows, err := st.query(ctx, sqlEvictRead(len(left)), args...)
		if err != nil {
			return fmt.Errorf("evict: %w", err)
		}
		if err := takeOldest(rows, cut); err != nil {
			return fmt.Errorf("evict: %w", err)
		}
		var next []overBound
		for _, o := range left {
			if e := cut[o.tenancyKey]; e.freed < e.excess && e.seen == evictWindow {
				next = append(next, o)
			}
		}
		left = next
	}
	return deleteEvicted(ctx, st, cut)
}

// takeOldest counts the chunks read, oldest first, into what each tenancy
// gives up, until its excess is freed.
func takeOldest(rows *sql.Rows, cut map[tenancyKey]*evicted) error {
	defer rows.Close()
	for rows.Next() {
		var (
			k         tenancyKey
			seq, size int64
		)
		if err := rows.Scan(&k.node, &k.epoch, &seq, &size); err != nil {
			return err
		}
		e := cut[k]
		if e == nil {
			continue
		}
		e.seen++
		if e.freed < e.excess {
			e.freed, e.upTo = e.freed+size, seq
		}
	}
	return rows.Err()
}

// deleteEvicted deletes what cut says and counts it out of the tenancies'
// rows.
func deleteEvicted(ctx context.Context, st appendStmts, cut map[tenancyKey]*evicted) error {
	var del, freed, firsts, where []any
	for k, e := range cut {
		if e.upTo < e.first {
			continue
		}
		del = append(del, k.node, k.epoch, e.first, e.upTo)
		freed = append(freed, k.node, k.epoch, e.freed)
		firsts = append(firsts, k.node, k.epoch, e.upTo+1)
		where = append(where, k.node, k.epoch)
	}
	n := len(where) / 2
	if n == 0 {
		return nil
	}
	if _, err := st.exec(ctx, sqlEvict(n), del...); err != nil {
		return fmt.Errorf("evict: %w", err)
	}
	if _, err := st.exec(ctx, sqlEvicted(n), slices.Concat(freed, firsts, where)...); err != nil {
		return fmt.Errorf("evict: %w", err)
	}
	return nil
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

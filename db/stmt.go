package db

import (
	"context"
	"database/sql"
	"errors"
	"sync"
)

// stmtCache keeps prepared statements of the queries every SSH connection
// runs (token, key and epoch lookups, the node's driver info, the audit
// insert) and of those replicas run all the time (leases, the access-change
// poll). Parsing them anew each time was a tenth of obmd's CPU per
// connection on SQLite, and on MySQL every unprepared query with arguments
// costs three round trips (prepare, execute, close) instead of one.
// database/sql re-prepares a Stmt on each pooled connection as needed.
//
// mu guards m and closed only: it is never held across I/O, so a prepare
// in progress (waiting for SQLite's single writer connection, or for a
// MySQL dial while the server is down) never holds up the use of a
// statement already cached.
type stmtCache struct {
	mu     sync.Mutex
	m      map[stmtKey]*sql.Stmt
	closed bool // set by closeStmts; later prepares are closed at once
}

type stmtKey struct {
	db    *sql.DB
	query string
}

// errStmtsClosed is returned by prepared once the store is closed.
var errStmtsClosed = errors.New("store is closed")

// prepared returns the cached statement of query on db, preparing it on
// first use. Two callers may prepare the same query at once; the first to
// finish is cached and the other closes its own and uses that one. A failed
// prepare is not cached: the next call tries again.
func (s *Store) prepared(ctx context.Context, db *sql.DB, query string) (*sql.Stmt, error) {
	c := &s.stmts
	k := stmtKey{db, query}
	c.mu.Lock()
	st, closed := c.m[k], c.closed
	c.mu.Unlock()
	if st != nil {
		return st, nil
	}
	if closed {
		return nil, errStmtsClosed
	}
	st, err := db.PrepareContext(ctx, query)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		_ = st.Close() // the store closed while we prepared
		return nil, errStmtsClosed
	}
	if won := c.m[k]; won != nil {
		_ = st.Close() // lost the race; nothing else holds st
		return won, nil
	}
	if c.m == nil {
		c.m = map[stmtKey]*sql.Stmt{}
	}
	c.m[k] = st
	return st, nil
}

// queryRow runs a one-row read through a cached statement on the read pool.
// A failure to prepare comes back through Row.Scan, as database/sql's own
// QueryRowContext reports errors.
func (s *Store) queryRow(ctx context.Context, query string, args ...any) rowScanner {
	return s.queryRowOn(ctx, s.r, query, args...)
}

// queryRowOn is queryRow on pool db. On the writer pool it must not run
// inside a transaction: see exec. On a Galera node the read runs when it
// is scanned, and again on another connection if its wait for the cluster
// was held past heldBound (heldRow).
func (s *Store) queryRowOn(ctx context.Context, db *sql.DB, query string, args ...any) rowScanner {
	st, err := s.prepared(ctx, db, query)
	if err != nil {
		return errRow{err}
	}
	if s.heldBound() > 0 {
		return heldRow{s: s, ctx: ctx, st: st, args: args}
	}
	return st.QueryRowContext(ctx, args...)
}

// heldRow is a one-row read on a Galera node, run by Scan: an attempt not
// answered within heldBound is abandoned, and the read is run again until
// ctx ends (a read changes nothing).
type heldRow struct {
	s    *Store
	ctx  context.Context
	st   *sql.Stmt
	args []any
}

func (r heldRow) Scan(dest ...any) error {
	for attempt := 1; ; attempt++ {
		actx, cancel := context.WithTimeoutCause(r.ctx, r.s.heldBound(), errSyncHeld)
		err := r.st.QueryRowContext(actx, r.args...).Scan(dest...)
		held := errors.Is(context.Cause(actx), errSyncHeld)
		cancel()
		if err == nil || !held || r.ctx.Err() != nil {
			return err
		}
		r.s.log.WithError(errSyncHeld).WithField("attempt", attempt).Warn("db_sync_wait_held")
	}
}

// query runs a read of many rows through a cached statement on the read
// pool.
func (s *Store) query(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	st, err := s.prepared(ctx, s.r, query)
	if err != nil {
		return nil, err
	}
	return st.QueryContext(ctx, args...)
}

// exec runs a single-statement write on the writer pool, through a cached
// statement, for the statements replicas run all the time (leases,
// announcements). It runs in a transaction of its own (withTx): so it
// counts as a write in progress (CheckWrites) only once it holds its
// connection, as every transaction does, and database/sql runs the cached
// statement on that connection (tx.StmtContext), prepared there once. A
// statement that lost a conflict is run again, so it must be safe to repeat.
// Never call it from inside withTx: on SQLite the writer pool's single
// connection belongs to the transaction, so exec (preparing or beginning)
// would wait for it forever. In a transaction use tx.StmtContext on a
// statement prepared beforehand, as flushAudit does.
func (s *Store) exec(ctx context.Context, query string, args ...any) (sql.Result, error) {
	st, err := s.prepared(ctx, s.w, query)
	if err != nil {
		return nil, err
	}
	var res sql.Result
	err = s.withTx(ctx, func(tx *sql.Tx) error {
		var err error
		res, err = tx.StmtContext(ctx, st).ExecContext(ctx, args...)
		return err
	})
	return res, err
}

// rowScanner is *sql.Row or an error standing in for one.
type rowScanner interface {
	Scan(dest ...any) error
}

type errRow struct{ err error }

func (r errRow) Scan(...any) error { return r.err }

// closeStmts closes every cached statement (Close).
func (s *Store) closeStmts() error {
	c := &s.stmts
	c.mu.Lock()
	defer c.mu.Unlock()
	var errs []error
	for _, st := range c.m {
		errs = append(errs, st.Close())
	}
	c.m = nil
	c.closed = true
	return errors.Join(errs...)
}

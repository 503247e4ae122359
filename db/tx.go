package db

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/go-sql-driver/mysql"
	"modernc.org/sqlite" // also registers the "sqlite" database/sql driver
	sqlite3 "modernc.org/sqlite/lib"
)

// Lost conflicts are retried: a transaction or statement that the database
// rolled back because it lost a conflict with another writer did nothing,
// so running it again is safe. On MySQL that is a deadlock victim or a lock
// wait that timed out, on PostgreSQL a deadlock victim or a serialization
// failure; on Galera also every write that lost certification to a
// conflicting write committed first through another node (reported as a
// deadlock, at COMMIT or at the statement it was running when the other
// write was applied). The retries are bounded by the caller's deadline
// (or, for a caller without one, by conflictAttempts), each after a
// jittered wait whose bound doubles from conflictBackoff to
// conflictBackoffMax, so that writers through different nodes do not keep
// colliding in step. A fixed count was not enough: writers through the two
// other nodes, each bumping access_seq, can win certification many times
// in a row on a loaded cluster (in CI, TestGaleraNodeKilled's first write
// through one node lost all of 30 tries, a few seconds, with most of its
// 30 s deadline left). Measured on three Galera nodes: 9 writers rotating
// one node's token at once needed at most 11 retries for one rotation
// (TestGaleraConflictRetries).
const (
	conflictAttempts   = 30
	conflictBackoff    = 2 * time.Millisecond
	conflictBackoffMax = 100 * time.Millisecond
)

// withTx runs fn in a write transaction and commits it, or rolls it back if
// fn fails. fn must use only tx (on SQLite the writer pool holds a single
// connection, which tx owns) and must be safe to run again: a transaction
// that lost a conflict is run again (retryConflicts).
func (s *Store) withTx(ctx context.Context, fn func(tx *sql.Tx) error) error {
	return s.retryConflicts(ctx, func() error { return s.tryTx(ctx, fn) })
}

// retryConflicts runs op until it returns anything but a lost conflict
// or a wait for the cluster held past its bound (errSyncHeld), and not
// after ctx ends (conflictAttempts times at most when ctx has no
// deadline).
func (s *Store) retryConflicts(ctx context.Context, op func() error) error {
	for attempt := 1; ; attempt++ {
		err := op()
		_, bounded := ctx.Deadline()
		held := errors.Is(err, errSyncHeld)
		if !isConflict(err) && !held || ctx.Err() != nil || (!bounded && attempt == conflictAttempts) {
			return err
		}
		if held {
			s.log.WithError(err).WithField("attempt", attempt).Warn("db_sync_wait_held")
		} else {
			s.conflicts.Add(1)
			s.log.WithError(err).WithField("attempt", attempt).Debug("db_conflict_retry")
		}
		wait := time.NewTimer(rand.N(conflictBound(attempt)))
		select {
		case <-wait.C:
		case <-ctx.Done():
			wait.Stop()
			return err
		}
	}
}

// conflictBound is the bound of the jittered wait after attempt lost a
// conflict: conflictBackoff doubled per attempt, at most
// conflictBackoffMax. The shift is capped: a caller's deadline allows
// attempts without number, and past about 43 doublings a Duration wraps to
// a bound of 0 or below, on which rand.N panics.
func conflictBound(attempt int) time.Duration {
	return min(conflictBackoff<<min(attempt-1, 16), conflictBackoffMax)
}

// ConflictRetries is how many times a write has been run again because it
// lost a conflict (see retryConflicts), since Open: for metrics.
func (s *Store) ConflictRetries() int64 { return s.conflicts.Load() }

// tryTx runs fn in one transaction. The transaction counts as a write in
// progress (CheckWrites) from when it holds its connection: the wait for
// one behind other writes says nothing about the database.
func (s *Store) tryTx(ctx context.Context, fn func(tx *sql.Tx) error) error {
	tx, end, err := s.begin(ctx)
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	defer end()
	defer s.writing()()
	if err := fn(tx); err != nil {
		_ = tx.Rollback() // fn's error is the cause; a failed rollback is discarded with the connection
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	s.writes.committed.Add(1)
	return nil
}

// forUpdate is the clause that locks the rows a SELECT reads until the
// transaction ends: none on SQLite, whose transactions hold the one writer.
func (s *Store) forUpdate() string {
	if s.dialect == DialectSQLite {
		return ""
	}
	return ` FOR UPDATE`
}

// insertNew runs insert (an INSERT of one row) in tx and reports whether
// it inserted the row: false, with no error, when a row with the same key
// exists. The transaction goes on either way: on PostgreSQL, where an
// error ends the transaction, the INSERT skips a duplicate (ON CONFLICT DO
// NOTHING) rather than fail.
func (s *Store) insertNew(ctx context.Context, tx *sql.Tx, insert string, args ...any) (bool, error) {
	if s.dialect == DialectPostgres {
		insert += ` ON CONFLICT DO NOTHING`
	}
	inserted, err := affected(tx.ExecContext(ctx, insert, args...))
	if isDuplicate(err) {
		return false, nil
	}
	return inserted, err
}

// begin begins a transaction on the writer pool; end releases what it
// holds once the transaction has committed or rolled back. On a Galera
// node a BEGIN held past heldBound (its wait for the cluster) is abandoned,
// and begin returns errSyncHeld, which retryConflicts runs again (on
// another connection: the driver closes one whose statement it abandons).
func (s *Store) begin(ctx context.Context) (tx *sql.Tx, end func(), err error) {
	bound := s.heldBound()
	if bound <= 0 {
		tx, err = s.w.BeginTx(ctx, nil)
		return tx, func() {}, err
	}
	// The transaction lives in tctx (database/sql rolls it back when that
	// ends), which the timer ends only while BEGIN is waiting.
	tctx, cancel := context.WithCancelCause(ctx)
	held := time.AfterFunc(bound, func() { cancel(errSyncHeld) })
	tx, err = s.w.BeginTx(tctx, nil)
	if !held.Stop() { // held: abandoned, even if it answered as the bound passed
		if tx != nil {
			_ = tx.Rollback() // begun as tctx ended: database/sql rolls it back anyway
		}
		cancel(errSyncHeld)
		return nil, nil, fmt.Errorf("%w (%v)", errSyncHeld, bound)
	}
	if err != nil {
		cancel(nil)
		return nil, nil, err
	}
	return tx, func() { cancel(nil) }, nil
}

// isDuplicate reports a primary-key or unique violation.
func isDuplicate(err error) bool {
	var se *sqlite.Error
	if errors.As(err, &se) {
		return se.Code() == sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY || se.Code() == sqlite3.SQLITE_CONSTRAINT_UNIQUE
	}
	var me *mysql.MySQLError
	return errors.As(err, &me) && me.Number == 1062 || // ER_DUP_ENTRY
		pgCode(err) == "23505" // unique_violation
}

// isMissingParent reports a foreign-key violation on insert: the node is gone.
func isMissingParent(err error) bool {
	var se *sqlite.Error
	if errors.As(err, &se) {
		return se.Code() == sqlite3.SQLITE_CONSTRAINT_FOREIGNKEY
	}
	var me *mysql.MySQLError
	return errors.As(err, &me) && (me.Number == 1452 || me.Number == 1216) || // ER_NO_REFERENCED_ROW(_2)
		pgCode(err) == "23503" // foreign_key_violation
}

// isConflict reports a write the database rolled back because it lost a
// conflict: ER_LOCK_DEADLOCK (also Galera's certification failure) or
// ER_LOCK_WAIT_TIMEOUT; on PostgreSQL deadlock_detected or
// serialization_failure.
func isConflict(err error) bool {
	var me *mysql.MySQLError
	if errors.As(err, &me) {
		return me.Number == 1213 || me.Number == 1205
	}
	code := pgCode(err)
	return code == "40P01" || code == "40001"
}

// notFound maps sql.ErrNoRows to ErrNotFound, and so a lookup by a key
// that PostgreSQL cannot take as text (unstorable): no row has it.
func notFound(err error) error {
	if errors.Is(err, sql.ErrNoRows) || unstorable(err) {
		return ErrNotFound
	}
	return err
}

// unstorable reports PostgreSQL's refusal of a text value that is not
// valid UTF-8 or holds a NUL byte (character_not_in_repertoire): an SSH
// user name may be any bytes, and no row can hold such a key.
func unstorable(err error) bool { return pgCode(err) == "22021" }

// mustAffect returns ErrNotFound when res changed no row.
func mustAffect(res sql.Result) error {
	n, err := res.RowsAffected()
	if err != nil {
		return err
	}
	if n == 0 {
		return ErrNotFound
	}
	return nil
}

// Times are stored as unix milliseconds, UTC, on both engines.

func toMillis(t time.Time) int64 { return t.UnixMilli() }

func fromMillis(ms int64) time.Time { return time.UnixMilli(ms).UTC() }

// stamp is now as it will read back from the database.
func (s *Store) stamp() time.Time { return fromMillis(toMillis(s.now())) }

// Column limits, in bytes (labels and fingerprints are VARBINARY on MySQL;
// the type column counts characters, so a type within these bytes fits).
const (
	// MaxLabelLen is the longest node label the store accepts.
	MaxLabelLen = 80
	// MaxTypeLen is the longest node type the store accepts.
	MaxTypeLen = 32
	// MaxFingerprintLen is the longest key fingerprint the store accepts.
	MaxFingerprintLen = 100
)

func checkLen(what, v string, max int) error {
	if v == "" {
		return fmt.Errorf("empty %s", what)
	}
	if len(v) > max {
		return fmt.Errorf("%s longer than %d bytes", what, max)
	}
	return nil
}

// clip makes v storable in a column of max bytes: valid UTF-8 (MySQL's
// utf8mb4 rejects anything else) without NUL bytes (PostgreSQL's text
// rejects them), cut at a rune boundary. Audit fields come from the network
// (an SSH user name is any string) and must never make an audit write fail.
func clip(v string, max int) string {
	v = strings.ReplaceAll(strings.ToValidUTF8(v, "\uFFFD"), "\x00", "\uFFFD")
	if len(v) <= max {
		return v
	}
	v = v[:max]
	for len(v) > 0 && !utf8.ValidString(v) {
		v = v[:len(v)-1]
	}
	return v
}

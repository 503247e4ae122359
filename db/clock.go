package db

import "time"

// Two clocks:
//
//   - The database's clock decides every time that replicas compare: lease
//     expiry (AcquireLease, RenewLease, Lease) and replica announcements
//     (Announce, Replicas). Each such statement reads the database's NOW
//     itself (dbNow), so a replica whose clock is off neither steals a live
//     lease nor keeps a dead one alive, and only the database servers'
//     clocks need to agree (on Galera: the nodes', see docs/replicas.md).
//   - The store's own clock (Store.now, the replica's time) stamps what is
//     only displayed or filtered by a person: audit events (their order is
//     by at, then id), creation and update times of nodes, tokens and keys,
//     the time of an access change. No replica compares those with its own
//     clock to decide anything.
//
// Times that come back to a caller for it to act on (Lease.ExpiresAt,
// Replica.ExpiresAt) are on the store's clock (time.Now, whatever
// WithClockSkew says): the database's remaining time added to the store's
// time of the call.

// Option configures a Store at Open.
type Option func(*Store)

// WithClockSkew puts the store's wall clock d ahead of the system's (behind
// when negative): for tests of a replica whose clock is wrong. Leases and
// announcements follow the database's clock and are not affected; audit
// and creation times are. As on a host whose wall clock is wrong, durations
// are not: the ExpiresAt the store returns is on the process's time.Now(),
// as the lease's holder and readers compare it.
func WithClockSkew(d time.Duration) Option {
	return func(s *Store) {
		s.now = func() time.Time { return time.Now().Add(d) }
		s.skew = d
	}
}

// WithoutListen makes ListenChanges return at once, as on an engine that
// sends no notifications: for tests of a replica that learns of changes
// made elsewhere only by polling.
func WithoutListen() Option {
	return func(s *Store) { s.pg = nil }
}

// durationBase is the store's time without WithClockSkew's: what the
// ExpiresAt it returns are measured from.
func (s *Store) durationBase() time.Time { return s.now().Add(-s.skew) }

// SQL expressions of the database's current time in unix milliseconds (the
// unit of every time column), fixed for the whole statement on every engine.
// MySQL's UTC_TIMESTAMP does not depend on the session's time zone (NOW()
// does, and UNIX_TIMESTAMP(NOW()) is ambiguous for the hour that a
// daylight-saving change repeats). Galera replicates the rows a statement
// produced (ROW format), so every node stores the value its origin computed.
// PostgreSQL's statement_timestamp() is the start of the statement (NOW() is
// the transaction's, which a long transaction would leave behind), and an
// epoch has no time zone.
const (
	sqliteNow   = `CAST(ROUND(unixepoch('subsec') * 1000) AS INTEGER)`
	mysqlNow    = `(TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6)) DIV 1000)`
	postgresNow = `CAST(FLOOR(EXTRACT(EPOCH FROM statement_timestamp()) * 1000) AS BIGINT)`
)

// dbNow returns the expression of the database's time for the store's
// dialect.
func (s *Store) dbNow() string {
	switch s.dialect {
	case DialectMySQL:
		return mysqlNow
	case DialectPostgres:
		return postgresNow
	}
	return sqliteNow
}

// millis is d in whole milliseconds, at least 1 for a positive d.
func millis(d time.Duration) int64 {
	return max(d.Milliseconds(), 1)
}

// fromNow returns the store's time (durationBase) plus left milliseconds
// of the database's clock.
func (s *Store) fromNow(left int64) time.Time {
	return s.durationBase().Add(time.Duration(left) * time.Millisecond)
}

package db

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"time"

	"github.com/sirupsen/logrus"
)

// PurgeBatch is the most rows one purge statement deletes: a few
// milliseconds of work, so that the writers behind it (SQLite's one writer
// connection; on MySQL nothing else locks rows that old) wait no longer,
// and a statement never runs long enough to count as a stuck write
// (CheckWrites).
const PurgeBatch = 500

// purgeRest is the least pause between two purge statements; the pause is
// also at least as long as the statement took, so a purge takes at most
// half of the writer's time however much there is to delete.
const purgeRest = 10 * time.Millisecond

// purgeLiveGrace: a replica whose announcement expired less than this ago
// still counts as live for PurgeChanges (it may not have fenced itself
// yet: its fence comes a sixth of cluster.lease_ttl before the expiry, and
// cluster.lease_ttl is seconds).
const purgeLiveGrace = time.Minute

// PurgeAudit deletes the oldest audit rows from before before, at most
// PurgeBatch, and returns how many. Two replicas purging at once delete
// each row once between them (the other finds it gone, or loses the
// conflict and is run again).
func (s *Store) PurgeAudit(ctx context.Context, before time.Time) (int, error) {
	ids, err := s.purgeCandidates(ctx, `SELECT id FROM audit_events WHERE at < ? ORDER BY at LIMIT ?`,
		toMillis(before), PurgeBatch)
	var n int
	if err == nil {
		n, err = s.deleteKeys(ctx, ids, "audit_events", "id")
	}
	if err != nil {
		return 0, fmt.Errorf("purge audit events: %w", err)
	}
	return n, nil
}

// PurgeChanges deletes access changes from before before that nobody needs
// any more, oldest first, at most PurgeBatch (with their credential_changes
// rows), and returns how many. A change is kept while:
//
//   - it set a node's current epoch: its time is when the node's tenancy
//     began, before which no certificate is accepted (CertAccess);
//   - a live replica (its announcement not expired, or expired less than a
//     minute ago) has not applied it (Announce's applied): its watcher
//     reads it next. In single-replica mode nobody announces; the replica
//     polls every epoch_poll, long past by before.
//
// A replica cut off for longer than that has fenced itself and cut every
// session; if it comes back to find changes it missed gone, its watcher
// sees the gap in the epochs and cuts every session again
// (access.Watcher).
func (s *Store) PurgeChanges(ctx context.Context, before time.Time) (int, error) {
	floor, err := s.appliedByAll(ctx)
	if err != nil {
		return 0, fmt.Errorf("purge access changes: %w", err)
	}
	ids, err := s.purgeCandidates(ctx, `SELECT epoch FROM access_changes
		WHERE at < ? AND epoch <= ? AND epoch NOT IN (SELECT access_epoch FROM nodes)
		ORDER BY epoch LIMIT ?`, toMillis(before), floor, PurgeBatch)
	var n int
	if err == nil {
		n, err = s.deleteKeys(ctx, ids, "credential_changes", "epoch", "access_changes", "epoch")
	}
	if err != nil {
		return 0, fmt.Errorf("purge access changes: %w", err)
	}
	return n, nil
}

// appliedByAll is the epoch up to which every live replica has applied the
// access changes (see PurgeChanges); the latest epoch if none announces.
func (s *Store) appliedByAll(ctx context.Context) (int64, error) {
	live, err := s.ReplicasWithin(ctx, purgeLiveGrace)
	if err != nil {
		return 0, err
	}
	if len(live) == 0 {
		return s.LatestChange(ctx)
	}
	floor := live[0].Applied
	for _, r := range live[1:] {
		floor = min(floor, r.Applied)
	}
	return floor, nil
}

// purgeCandidates reads the keys a purge deletes (a plain read: it locks
// nothing).
func (s *Store) purgeCandidates(ctx context.Context, query string, args ...any) ([]any, error) {
	rows, err := s.r.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var ids []any
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		ids = append(ids, id)
	}
	return ids, rows.Err()
}

// deleteKeys deletes, in one transaction, the rows whose key column is in
// ids from each table, given as pairs of table and column, and returns how
// many rows it deleted from the last table (another replica's purge may
// have deleted some).
func (s *Store) deleteKeys(ctx context.Context, ids []any, tableCols ...string) (int, error) {
	if len(ids) == 0 {
		return 0, nil
	}
	in := strings.TrimSuffix(strings.Repeat("?, ", len(ids)), ", ")
	var n int64
	err := s.withTx(ctx, func(tx *sql.Tx) error {
		for i := 0; i < len(tableCols); i += 2 {
			res, err := tx.ExecContext(ctx, `DELETE FROM `+tableCols[i]+` WHERE `+tableCols[i+1]+` IN (`+in+`)`, ids...)
			if err != nil {
				return err
			}
			if n, err = res.RowsAffected(); err != nil {
				return err
			}
		}
		return nil
	})
	return int(n), err
}

// RunPurge deletes, until ctx ends, the audit rows older than
// cfg.Retention and the access changes PurgeChanges lets go that are older
// than cfg.ChangesRetention: a minute after it starts (or
// cfg.PurgeInterval, if shorter), then every cfg.PurgeInterval, each time
// until nothing is left to delete. It deletes PurgeBatch rows per
// statement and pauses between statements as long as the last one took
// (at least purgeRest), so audit writes, access changes and logins never
// wait for more than one statement. Its caller owns it (the daemon's run
// group); it returns nil. Every replica runs it: see PurgeAudit.
func (s *Store) RunPurge(ctx context.Context, cfg AuditConfig) error {
	cfg, err := cfg.WithDefaults()
	if err != nil {
		return err
	}
	t := time.NewTimer(min(cfg.PurgeInterval, time.Minute))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		now := s.now()
		s.purgeAll(ctx, "audit_purged", func(ctx context.Context) (int, error) {
			return s.PurgeAudit(ctx, now.Add(-cfg.Retention))
		})
		s.purgeAll(ctx, "access_changes_purged", func(ctx context.Context) (int, error) {
			return s.PurgeChanges(ctx, now.Add(-cfg.ChangesRetention))
		})
		t.Reset(cfg.PurgeInterval)
	}
}

// purgeBound bounds one purge statement: a database that does not answer
// fails it, and the purge tries again at its next interval.
const purgeBound = 30 * time.Second

// purgeAll runs purge until it deletes less than a batch, ctx ends or it
// fails, pausing between batches (RunPurge); event names the log line of
// what it deleted.
func (s *Store) purgeAll(ctx context.Context, event string, purge func(context.Context) (int, error)) {
	total := 0
	defer func() {
		if total > 0 {
			s.log.WithField("rows", total).Info(event)
		}
	}()
	for {
		start := time.Now()
		bctx, cancel := context.WithTimeout(ctx, purgeBound)
		n, err := purge(bctx)
		cancel()
		total += n
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			s.log.WithError(err).WithFields(logrus.Fields{"rows": total}).Warn("purge_failed")
			return
		case n == 0:
			return
		}
		rest := time.NewTimer(max(time.Since(start), purgeRest))
		select {
		case <-ctx.Done():
			rest.Stop()
			return
		case <-rest.C:
		}
	}
}

package db

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// defaultSuspect is Galera's evs.suspect_timeout when wsrep_provider_options
// does not name it.
const defaultSuspect = 5 * time.Second

// GaleraSuspect is the Galera node's evs.suspect_timeout: how long the
// cluster waits for a silent node before it evicts it, every write
// stalling meanwhile (a lease or an announcement included). 0 when the
// store is not on a Galera node.
func (s *Store) GaleraSuspect() time.Duration { return s.suspect }

// writeStall is how long a write may be in progress before the database
// counts as not completing writes, off Galera: a healthy write takes
// milliseconds, and a frozen disk or a stopped server holds it for good.
const writeStall = 2 * time.Second

// evictionMargin is what a Galera cluster's eviction of a silent member
// takes beyond evs.suspect_timeout: the suspicion is checked every
// evs.inactive_check_period, then the others agree on a view without it
// (measured after a SIGKILL: 1-2 s).
const evictionMargin = 2 * time.Second

// Eviction is how long the Galera cluster of the store's node may hold
// every write, and every read that waits for the cluster
// (wsrep_sync_wait), while it evicts a member that died: its
// evs.suspect_timeout and evictionMargin (7 s with Galera's default).
// 0 when the store is not on a Galera node.
func (s *Store) Eviction() time.Duration {
	if s.suspect <= 0 {
		return 0
	}
	return s.suspect + evictionMargin
}

// StallBound is how long the database may hold a write (or, on Galera, a
// read's wait for the cluster) before it counts as not answering: 2 s,
// plus the Eviction on a Galera node (9 s with Galera's default), where
// the death of any member holds everything that long and the cluster then
// goes on by itself.
func (s *Store) StallBound() time.Duration { return writeStall + s.Eviction() }

// errSyncHeld is a statement abandoned because its wait for the cluster
// was held past the stall bound (heldBound).
var errSyncHeld = errors.New("the wait for the cluster (wsrep_sync_wait) was held past the stall bound")

// heldBound is how long a statement that waits for the cluster
// (wsrep_sync_wait: every read, and the BEGIN of every transaction) may
// wait before it is abandoned and run again on another connection: the
// StallBound on a Galera node, 0 (never) elsewhere. Such a wait normally
// takes a round trip within the cluster, and as long as an eviction holds
// it; but one that races a configuration change (a member rejoining) may
// be held until the provider's repl.causal_read_timeout (30 s by default),
// while the waits that come after it pass at once: Galera times the wait
// out only to avoid a deadlock with the monitor drain of the change. A
// statement abandoned that way did nothing (its wait comes first), and
// the driver closes its connection.
func (s *Store) heldBound() time.Duration {
	if s.suspect <= 0 {
		return 0
	}
	return s.StallBound()
}

// galeraSuspect reads evs.suspect_timeout from the server's
// wsrep_provider_options.
func galeraSuspect(ctx context.Context, pool *sql.DB) (time.Duration, error) {
	var opts string
	if err := pool.QueryRowContext(ctx, `SELECT @@wsrep_provider_options`).Scan(&opts); err != nil {
		return 0, fmt.Errorf("ask for wsrep_provider_options: %w", err)
	}
	return suspectOf(opts)
}

// suspectOf finds evs.suspect_timeout in wsrep_provider_options ("k = v;
// k = v"), an ISO 8601 duration (PT5S, PT1.5S, PT1M30S); Galera's default
// when it is not there.
func suspectOf(opts string) (time.Duration, error) {
	for _, kv := range strings.Split(opts, ";") {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || strings.TrimSpace(k) != "evs.suspect_timeout" {
			continue
		}
		d, err := isoDuration(strings.TrimSpace(v))
		if err != nil {
			return 0, fmt.Errorf("evs.suspect_timeout: %w", err)
		}
		return d, nil
	}
	return defaultSuspect, nil
}

// isoDuration parses the time part of an ISO 8601 duration as Galera
// writes it: PT, then numbers (a fraction allowed) with H, M or S.
func isoDuration(v string) (time.Duration, error) {
	bad := fmt.Errorf("%q is no ISO 8601 duration (PT...)", v)
	rest, ok := strings.CutPrefix(strings.ToUpper(v), "PT")
	if !ok || rest == "" {
		return 0, bad
	}
	var d time.Duration
	for rest != "" {
		i := strings.IndexAny(rest, "HMS")
		if i <= 0 {
			return 0, bad
		}
		n, err := strconv.ParseFloat(rest[:i], 64)
		if err != nil || n < 0 {
			return 0, bad
		}
		unit := time.Second
		switch rest[i] {
		case 'H':
			unit = time.Hour
		case 'M':
			unit = time.Minute
		}
		d += time.Duration(n * float64(unit))
		rest = rest[i+1:]
	}
	return d, nil
}

package db

import (
	"context"
	"database/sql"
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

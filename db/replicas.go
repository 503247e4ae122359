package db

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Replica is one live replica as it announced itself (Announce).
type Replica struct {
	ID   string
	Addr string // its peer address
	// Zones are the BMC networks it reaches (Reaches); none: every one.
	Zones []string
	// Applied is the epoch up to which the replica has applied every access
	// change, as of its last announcement.
	Applied int64
	// ExpiresAt is when the announcement expires, on the store's clock (the
	// time the answer arrived plus what the database said was left).
	ExpiresAt time.Time
}

// Announce records that replica id is alive for ttl from the database's
// now, reachable at addr, having applied every access change up to applied.
// Replicas call it at each poll of the access changes. It declares no
// zones (AnnounceIn).
func (s *Store) Announce(ctx context.Context, id, addr string, applied int64, ttl time.Duration) error {
	return s.AnnounceIn(ctx, id, addr, nil, applied, ttl)
}

// AnnounceIn is Announce for a replica that reaches the BMCs of zones
// (ValidZones; none: every zone).
func (s *Store) AnnounceIn(ctx context.Context, id, addr string, zones []string, applied int64, ttl time.Duration) error {
	if err := ValidZones(zones); err != nil {
		return fmt.Errorf("announce replica %s: %w", id, err)
	}
	if err := checkLen("replica id", id, maxOwnerLen); err != nil {
		return fmt.Errorf("announce replica: %w", err)
	}
	if len(addr) > maxAddrLen {
		return fmt.Errorf("announce replica %s: peer address longer than %d bytes", id, maxAddrLen)
	}
	exp := millis(ttl)
	zs := joinZones(zones)
	res, err := s.exec(ctx, `UPDATE replicas SET peer_addr = ?, zones = ?, applied = ?, expires_at = `+s.dbNow()+` + ? WHERE id = ?`,
		addr, zs, applied, exp, id)
	if err == nil {
		if err = mustAffect(res); errors.Is(err, ErrNotFound) {
			_, err = s.exec(ctx, `INSERT INTO replicas (id, peer_addr, zones, applied, expires_at) VALUES (?, ?, ?, ?, `+s.dbNow()+` + ?)`,
				id, addr, zs, applied, exp)
		}
	}
	if err != nil {
		return fmt.Errorf("announce replica %s: %w", id, err)
	}
	return nil
}

// Withdraw removes replica id's announcement (a clean stop).
func (s *Store) Withdraw(ctx context.Context, id string) error {
	if _, err := s.exec(ctx, `DELETE FROM replicas WHERE id = ?`, id); err != nil {
		return fmt.Errorf("withdraw replica %s: %w", id, err)
	}
	return nil
}

// Replicas returns the replicas whose announcement has not expired on the
// database's clock, by ID. Expired ones are left in place (a restart with
// the same ID overwrites its row).
func (s *Store) Replicas(ctx context.Context) ([]Replica, error) {
	return s.ReplicasWithin(ctx, 0)
}

// ReplicasWithin returns the replicas whose announcement has not expired,
// or expired less than grace ago, on the database's clock, by ID: those
// another replica must still count as running when it leaves a margin
// (cluster.Config.FenceMargin). The announcement's expiry is stamped and
// compared by the same clock, so the replicas' clocks play no part.
func (s *Store) ReplicasWithin(ctx context.Context, grace time.Duration) ([]Replica, error) {
	rows, err := s.query(ctx, `SELECT id, peer_addr, zones, applied, expires_at - `+s.dbNow()+`
		FROM replicas WHERE expires_at > `+s.dbNow()+` - ? ORDER BY id`, grace.Milliseconds())
	if err != nil {
		return nil, fmt.Errorf("list replicas: %w", err)
	}
	defer rows.Close()
	var out []Replica
	for rows.Next() {
		var (
			r     Replica
			zones string
			left  int64 // on the database's clock
		)
		if err := rows.Scan(&r.ID, &r.Addr, &zones, &r.Applied, &left); err != nil {
			return nil, fmt.Errorf("list replicas: %w", err)
		}
		r.Zones = splitZones(zones)
		r.ExpiresAt = s.fromNow(left)
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list replicas: %w", err)
	}
	return out, nil
}

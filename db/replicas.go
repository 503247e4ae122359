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
	// Applied is the epoch up to which the replica has applied every access
	// change, as of its last announcement.
	Applied   int64
	ExpiresAt time.Time
}

// Announce records that replica id is alive until now+ttl, reachable at
// addr, having applied every access change up to applied. Replicas call it
// at each poll of the access changes.
func (s *Store) Announce(ctx context.Context, id, addr string, applied int64, ttl time.Duration) error {
	if err := checkLen("replica id", id, maxOwnerLen); err != nil {
		return fmt.Errorf("announce replica: %w", err)
	}
	if len(addr) > maxAddrLen {
		return fmt.Errorf("announce replica %s: peer address longer than %d bytes", id, maxAddrLen)
	}
	exp := toMillis(s.stamp().Add(ttl))
	res, err := s.exec(ctx, `UPDATE replicas SET peer_addr = ?, applied = ?, expires_at = ? WHERE id = ?`,
		addr, applied, exp, id)
	if err == nil {
		if err = mustAffect(res); errors.Is(err, ErrNotFound) {
			_, err = s.exec(ctx, `INSERT INTO replicas (id, peer_addr, applied, expires_at) VALUES (?, ?, ?, ?)`,
				id, addr, applied, exp)
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

// Replicas returns the replicas whose announcement has not expired, by ID.
// Expired ones are left in place (a restart with the same ID overwrites
// its row).
func (s *Store) Replicas(ctx context.Context) ([]Replica, error) {
	return s.ReplicasWithin(ctx, 0)
}

// ReplicasWithin returns the replicas whose announcement has not expired,
// or expired less than grace ago, by ID: those another replica must still
// count as running, when it leaves a margin for the clocks.
func (s *Store) ReplicasWithin(ctx context.Context, grace time.Duration) ([]Replica, error) {
	rows, err := s.query(ctx, `SELECT id, peer_addr, applied, expires_at FROM replicas WHERE expires_at > ? ORDER BY id`,
		toMillis(s.now().Add(-grace)))
	if err != nil {
		return nil, fmt.Errorf("list replicas: %w", err)
	}
	defer rows.Close()
	var out []Replica
	for rows.Next() {
		var (
			r   Replica
			exp int64
		)
		if err := rows.Scan(&r.ID, &r.Addr, &r.Applied, &exp); err != nil {
			return nil, fmt.Errorf("list replicas: %w", err)
		}
		r.ExpiresAt = fromMillis(exp)
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list replicas: %w", err)
	}
	return out, nil
}

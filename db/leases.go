package db

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Lease kinds.
const (
	// LeaseSOL is held by the replica that owns a node's SOL link; the
	// other replicas relay their viewers through it (at Lease.Addr).
	LeaseSOL = "sol"
	// LeasePower is held for the length of one power or boot-device
	// operation, so that operations on a node never overlap across replicas.
	LeasePower = "power"
)

// Column limits of leases, in bytes.
const (
	maxKindLen  = 16
	maxOwnerLen = 100
	maxAddrLen  = 255
	tokenLen    = 32
)

// ErrLeaseHeld is returned by AcquireLease while another acquisition holds
// a live lease.
var ErrLeaseHeld = errors.New("lease held by another replica")

// Lease is one replica's claim on one kind of work on a node, until it
// expires. Every acquisition has its own Token (32 characters, e.g. 16
// random bytes in hex): renewing and releasing need it, so a replica that
// lost its lease (it expired and someone else took it) cannot touch the
// new holder's.
//
// Expiry is decided by the database's clock (see clock.go): the database
// stores its own NOW plus the TTL and compares with its own NOW, so the
// replicas' clocks play no part in who holds a lease.
type Lease struct {
	Node  string
	Kind  string // LeaseSOL or LeasePower
	Owner string // replica ID, for operators and error messages
	Token string
	// Addr is where other replicas reach the owner (its peer address); may
	// be empty.
	Addr string
	// ExpiresAt is when the lease expires, on the clock of the store that
	// returned it (the system clock, with its monotonic reading, unless a
	// test set one): compare it with time.Now() and wait with time.Until.
	// For the holder (AcquireLease, RenewLease) it is the time the request
	// was sent plus the TTL, so never later than the database's expiry;
	// for a lease read (Lease, ErrLeaseHeld) it is the time the answer
	// arrived plus what the database said was left.
	ExpiresAt time.Time
}

func (l Lease) check() error {
	if err := checkLen("node label", l.Node, MaxLabelLen); err != nil {
		return err
	}
	if err := checkLen("lease kind", l.Kind, maxKindLen); err != nil {
		return err
	}
	if err := checkLen("lease owner", l.Owner, maxOwnerLen); err != nil {
		return err
	}
	if len(l.Token) != tokenLen {
		return fmt.Errorf("lease token must be %d characters", tokenLen)
	}
	if len(l.Addr) > maxAddrLen {
		return fmt.Errorf("peer address longer than %d bytes", maxAddrLen)
	}
	return nil
}

// AcquireLease takes l.Kind on l.Node for ttl (at least 1 ms), for the
// acquisition l.Token: it succeeds when no lease exists, when the existing
// one has expired on the database's clock, or when l.Token already holds it
// (then it is a renewal that may also change Owner and Addr). It returns the
// lease as stored. While another token holds a live lease it returns that
// lease and ErrLeaseHeld.
//
// Correct under concurrency on every engine: a missing row is created by an
// INSERT that only one contender can win (primary key), and an existing row
// changes hands by an UPDATE whose condition the engine evaluates on the
// current row under its lock, so two contenders for an expired lease never
// both succeed. On Galera the two may run on different nodes, each under
// its own lock: certification lets only the first to commit through, and
// the other's statement, retried (exec), then finds the lease held.
func (s *Store) AcquireLease(ctx context.Context, l Lease, ttl time.Duration) (Lease, error) {
	if err := l.check(); err != nil {
		return Lease{}, fmt.Errorf("acquire lease: %w", err)
	}
	if ttl < time.Millisecond {
		return Lease{}, errors.New("acquire lease: ttl must be at least 1 ms")
	}
	sent := s.durationBase()
	res, err := s.exec(ctx,
		`UPDATE node_leases SET owner = ?, token = ?, peer_addr = ?, expires_at = `+s.dbNow()+` + ?
		 WHERE node = ? AND kind = ? AND (token = ? OR expires_at <= `+s.dbNow()+`)`,
		l.Owner, l.Token, l.Addr, millis(ttl), l.Node, l.Kind, l.Token)
	if err != nil {
		return Lease{}, fmt.Errorf("acquire %s lease of %s: %w", l.Kind, l.Node, err)
	}
	l.ExpiresAt = sent.Add(ttl)
	if err := mustAffect(res); err == nil {
		return l, nil
	} else if !errors.Is(err, ErrNotFound) {
		return Lease{}, fmt.Errorf("acquire %s lease of %s: %w", l.Kind, l.Node, err)
	}
	// No row matched: there is none, or a live one of someone else.
	_, err = s.exec(ctx,
		`INSERT INTO node_leases (node, kind, owner, token, peer_addr, expires_at) VALUES (?, ?, ?, ?, ?, `+s.dbNow()+` + ?)`,
		l.Node, l.Kind, l.Owner, l.Token, l.Addr, millis(ttl))
	if err == nil {
		return l, nil
	}
	if !isDuplicate(err) {
		return Lease{}, fmt.Errorf("acquire %s lease of %s: %w", l.Kind, l.Node, err)
	}
	held, err := s.Lease(ctx, l.Node, l.Kind)
	if errors.Is(err, ErrNotFound) {
		// Released between our INSERT and this read: report it as held
		// (briefly true); the caller retries later anyway.
		return Lease{Node: l.Node, Kind: l.Kind}, ErrLeaseHeld
	}
	if err != nil {
		return Lease{}, fmt.Errorf("acquire %s lease of %s: %w", l.Kind, l.Node, err)
	}
	// Possibly expired by now: it changed hands between our statements.
	// Still "held": the caller retries later.
	return held, ErrLeaseHeld
}

// RenewLease extends the lease that token holds to ttl (at least 1 ms) from
// the database's now, and returns the new expiry on the store's clock (the
// time the request was sent plus ttl; see Lease.ExpiresAt). It also renews
// a lease that has expired but that nobody else has taken since.
// ErrNotFound: token no longer holds it.
func (s *Store) RenewLease(ctx context.Context, node, kind, token string, ttl time.Duration) (time.Time, error) {
	if ttl < time.Millisecond {
		return time.Time{}, errors.New("renew lease: ttl must be at least 1 ms")
	}
	sent := s.durationBase()
	res, err := s.exec(ctx,
		`UPDATE node_leases SET expires_at = `+s.dbNow()+` + ? WHERE node = ? AND kind = ? AND token = ?`,
		millis(ttl), node, kind, token)
	if err != nil {
		return time.Time{}, fmt.Errorf("renew %s lease of %s: %w", kind, node, err)
	}
	if err := mustAffect(res); err != nil {
		return time.Time{}, fmt.Errorf("renew %s lease of %s: %w", kind, node, err)
	}
	return sent.Add(ttl), nil
}

// ReleaseLease gives up the lease that token holds. Releasing a lease that
// token no longer holds does nothing (idempotent).
func (s *Store) ReleaseLease(ctx context.Context, node, kind, token string) error {
	if _, err := s.exec(ctx,
		`DELETE FROM node_leases WHERE node = ? AND kind = ? AND token = ?`, node, kind, token); err != nil {
		return fmt.Errorf("release %s lease of %s: %w", kind, node, err)
	}
	return nil
}

// Lease returns the stored lease of kind on node, live or expired (then
// ExpiresAt is in the past). ErrNotFound if there is none.
func (s *Store) Lease(ctx context.Context, node, kind string) (Lease, error) {
	l := Lease{Node: node, Kind: kind}
	var left int64 // on the database's clock
	err := s.queryRowOn(ctx, s.w,
		`SELECT owner, token, peer_addr, expires_at - `+s.dbNow()+` FROM node_leases WHERE node = ? AND kind = ?`,
		node, kind).Scan(&l.Owner, &l.Token, &l.Addr, &left)
	if err != nil {
		return Lease{}, fmt.Errorf("read %s lease of %s: %w", kind, node, notFound(err))
	}
	l.ExpiresAt = s.fromNow(left)
	return l, nil
}

// Leases returns the live leases of kind (not expired on the database's
// clock), by node: which nodes' SOL links are held, and by whom.
func (s *Store) Leases(ctx context.Context, kind string) ([]Lease, error) {
	rows, err := s.query(ctx,
		`SELECT node, owner, token, peer_addr, expires_at - `+s.dbNow()+` FROM node_leases
		 WHERE kind = ? AND expires_at > `+s.dbNow()+` ORDER BY node`, kind)
	if err != nil {
		return nil, fmt.Errorf("list %s leases: %w", kind, err)
	}
	defer rows.Close()
	var out []Lease
	for rows.Next() {
		l := Lease{Kind: kind}
		var left int64 // on the database's clock
		if err := rows.Scan(&l.Node, &l.Owner, &l.Token, &l.Addr, &left); err != nil {
			return nil, fmt.Errorf("list %s leases: %w", kind, err)
		}
		l.ExpiresAt = s.fromNow(left)
		out = append(out, l)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list %s leases: %w", kind, err)
	}
	return out, nil
}

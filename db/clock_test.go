package db

import (
	"context"
	"errors"
	"testing"
	"time"
)

// testLeaseClockSkew: replicas whose clocks are a minute ahead and a minute
// behind neither steal a live lease nor keep a dead one, and announce
// themselves for as long as they asked, because the database's clock
// decides. With the replicas' clocks deciding, every check fails: the one
// ahead takes live leases and its own outlive it by a minute, the one
// behind leaves its leases and announcements expired at once.
func testLeaseClockSkew(t *testing.T, s *Store, env testEnv) {
	ctx := context.Background()
	// Opened as replicas start: migrating first (which on Galera also
	// waits for the tables s created through another node).
	ahead, behind, honest := openTestStore(t, env.at(1)), openTestStore(t, env.at(2)), openTestStore(t, env.at(0))
	WithClockSkew(time.Minute)(ahead)
	WithClockSkew(-time.Minute)(behind)
	WithClockSkew(0)(honest)
	const live, short = 30 * time.Second, time.Second

	// Live leases held by the honest replica stay its own.
	if _, err := honest.AcquireLease(ctx, lease("live", LeaseSOL, "honest", 1), live); err != nil {
		t.Fatal(err)
	}
	for name, st := range map[string]*Store{"ahead": ahead, "behind": behind} {
		if _, err := st.AcquireLease(ctx, lease("live", LeaseSOL, name, 2), live); !errors.Is(err, ErrLeaseHeld) {
			t.Errorf("replica %s acquires a live lease: got %v, want ErrLeaseHeld", name, err)
		}
	}
	// Live leases held by the skewed replicas stay theirs.
	for i, st := range []*Store{ahead, behind} {
		l := lease("skewed-live", LeaseSOL, "skewed", 10+i)
		l.Node += string(rune('a' + i))
		got, err := st.AcquireLease(ctx, l, live)
		if err != nil {
			t.Fatal(err)
		}
		// The holder's expiry is the TTL from its time.Now(), whatever the
		// skew of its wall clock (as time.Until, with the monotonic
		// reading, measures it).
		if left := time.Until(got.ExpiresAt); left > live || left < live-5*time.Second {
			t.Errorf("holder's view of %s: %v left, want about %v", l.Node, left, live)
		}
		if _, err := honest.AcquireLease(ctx, lease(l.Node, LeaseSOL, "honest", 20+i), live); !errors.Is(err, ErrLeaseHeld) {
			t.Errorf("honest replica acquires %s, live: got %v, want ErrLeaseHeld", l.Node, err)
		}
		if _, err := honest.RenewLease(ctx, l.Node, LeaseSOL, l.Token, live); err != nil {
			t.Errorf("renew %s: %v", l.Node, err)
		}
	}
	if err := behind.Announce(ctx, "behind", "b:1", 1, live); err != nil {
		t.Fatal(err)
	}

	// Short leases and announcements, left to die.
	if _, err := ahead.AcquireLease(ctx, lease("dead-ahead", LeaseSOL, "ahead", 30), short); err != nil {
		t.Fatal(err)
	}
	if _, err := honest.AcquireLease(ctx, lease("dead-honest", LeaseSOL, "honest", 31), short); err != nil {
		t.Fatal(err)
	}
	if err := ahead.Announce(ctx, "ahead", "a:1", 1, short); err != nil {
		t.Fatal(err)
	}
	if ids := replicaIDs(t, honest); ids != "ahead behind" {
		t.Errorf("live replicas: got %q, want \"ahead behind\"", ids)
	}
	time.Sleep(short + 100*time.Millisecond)
	if _, err := honest.AcquireLease(ctx, lease("dead-ahead", LeaseSOL, "honest", 32), live); err != nil {
		t.Errorf("take the dead lease of the replica ahead: %v", err)
	}
	if _, err := behind.AcquireLease(ctx, lease("dead-honest", LeaseSOL, "behind", 33), live); err != nil {
		t.Errorf("replica behind takes a dead lease: %v", err)
	}
	if ids := replicaIDs(t, honest); ids != "behind" {
		t.Errorf("live replicas after the short announcement expired: got %q, want \"behind\"", ids)
	}
}

// replicaIDs lists the live replicas' IDs, space-separated.
func replicaIDs(t *testing.T, s *Store) string {
	t.Helper()
	reps, err := s.Replicas(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	out := ""
	for i, r := range reps {
		if i > 0 {
			out += " "
		}
		out += r.ID
	}
	return out
}

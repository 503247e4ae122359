package db

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/obmd/obmd/db/dbtest"
)

// TestLeases runs the lease cases on every engine (see TestStore), each
// on a fresh database.
func TestLeases(t *testing.T) {
	cases := []storeCase{
		{"acquire_renew_release", testLeaseLifecycle},
		{"expiry_hands_over", testLeaseExpiry},
		{"kinds_and_nodes_independent", testLeaseIndependent},
		{"invalid", testLeaseInvalid},
		{"concurrent_acquire_one_winner", testLeaseConcurrent},
		{"skewed_replica_clock", testLeaseClockSkew},
	}
	runCases(t, cases)
}

// age moves every stored expiry in table d into the past, as if d had
// passed on the database's clock (which tests cannot set).
func age(t *testing.T, s *Store, table string, d time.Duration) {
	t.Helper()
	if _, err := s.w.ExecContext(context.Background(),
		`UPDATE `+table+` SET expires_at = expires_at - ?`, d.Milliseconds()); err != nil {
		t.Fatalf("age %s by %v: %v", table, d, err)
	}
}

// clock is a settable time shared by stores in a test.
type clock struct{ ms atomic.Int64 }

func newClock() *clock {
	c := &clock{}
	c.ms.Store(time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC).UnixMilli())
	return c
}

func (c *clock) now() time.Time          { return time.UnixMilli(c.ms.Load()).UTC() }
func (c *clock) advance(d time.Duration) { c.ms.Add(d.Milliseconds()) }

func token(i int) string { return fmt.Sprintf("%032d", i) }

func lease(node, kind, owner string, tok int) Lease {
	return Lease{Node: node, Kind: kind, Owner: owner, Token: token(tok), Addr: owner + ":7000"}
}

func testLeaseLifecycle(t *testing.T, s *Store, _ testEnv) {
	ctx := context.Background()
	clk := newClock()
	s.now = clk.now
	const ttl = 6 * time.Second

	if _, err := s.Lease(ctx, "n1", LeaseSOL); !errors.Is(err, ErrNotFound) {
		t.Fatalf("lease before any: got %v, want ErrNotFound", err)
	}
	a := lease("n1", LeaseSOL, "replica-a", 1)
	got, err := s.AcquireLease(ctx, a, ttl)
	if err != nil {
		t.Fatalf("acquire free lease: %v", err)
	}
	if want := clk.now().Add(ttl); !got.ExpiresAt.Equal(want) || got.Owner != "replica-a" || got.Token != a.Token {
		t.Errorf("acquired: got %+v, want owner replica-a expiring %v", got, want)
	}

	// Another replica sees who holds it, and where to reach it.
	held, err := s.AcquireLease(ctx, lease("n1", LeaseSOL, "replica-b", 2), ttl)
	if !errors.Is(err, ErrLeaseHeld) {
		t.Fatalf("acquire held lease: got %v, want ErrLeaseHeld", err)
	}
	// As read, the expiry is what the database says is left, from now.
	if held.Owner != "replica-a" || held.Addr != "replica-a:7000" ||
		held.ExpiresAt.After(got.ExpiresAt) || held.ExpiresAt.Before(got.ExpiresAt.Add(-5*time.Second)) {
		t.Errorf("holder: got %+v, want replica-a's lease expiring by %v", held, got.ExpiresAt)
	}

	// The holder renews; a stranger's token cannot.
	clk.advance(2 * time.Second)
	exp, err := s.RenewLease(ctx, "n1", LeaseSOL, a.Token, ttl)
	if err != nil || !exp.Equal(clk.now().Add(ttl)) {
		t.Errorf("renew: got %v, %v, want %v", exp, err, clk.now().Add(ttl))
	}
	if _, err := s.RenewLease(ctx, "n1", LeaseSOL, token(2), ttl); !errors.Is(err, ErrNotFound) {
		t.Errorf("renew with another token: got %v, want ErrNotFound", err)
	}
	// Acquiring again with the holding token is a renewal.
	if _, err := s.AcquireLease(ctx, a, ttl); err != nil {
		t.Errorf("re-acquire by the holder: %v", err)
	}

	// A stranger's release does nothing; the holder's frees it.
	if err := s.ReleaseLease(ctx, "n1", LeaseSOL, token(2)); err != nil {
		t.Errorf("release with another token: %v", err)
	}
	if l, err := s.Lease(ctx, "n1", LeaseSOL); err != nil || l.Token != a.Token {
		t.Errorf("after a stranger's release: got %+v, %v, want still held by a", l, err)
	}
	if err := s.ReleaseLease(ctx, "n1", LeaseSOL, a.Token); err != nil {
		t.Errorf("release: %v", err)
	}
	if err := s.ReleaseLease(ctx, "n1", LeaseSOL, a.Token); err != nil {
		t.Errorf("release twice: %v", err)
	}
	if _, err := s.RenewLease(ctx, "n1", LeaseSOL, a.Token, ttl); !errors.Is(err, ErrNotFound) {
		t.Errorf("renew after release: got %v, want ErrNotFound", err)
	}
	if _, err := s.AcquireLease(ctx, lease("n1", LeaseSOL, "replica-b", 2), ttl); err != nil {
		t.Errorf("acquire after release: %v", err)
	}
}

func testLeaseExpiry(t *testing.T, s *Store, _ testEnv) {
	ctx := context.Background()
	const ttl = time.Minute
	a, b := lease("n1", LeaseSOL, "a", 1), lease("n1", LeaseSOL, "b", 2)
	if _, err := s.AcquireLease(ctx, a, ttl); err != nil {
		t.Fatalf("acquire: %v", err)
	}

	// Expired but not taken: the holder may still renew it.
	age(t, s, "node_leases", ttl+time.Second)
	if l, err := s.Lease(ctx, "n1", LeaseSOL); err != nil || l.ExpiresAt.After(s.now()) {
		t.Errorf("read an expired lease: got %+v, %v, want it expired", l, err)
	}
	if _, err := s.RenewLease(ctx, "n1", LeaseSOL, a.Token, ttl); err != nil {
		t.Errorf("renew an expired, untaken lease: %v", err)
	}
	age(t, s, "node_leases", ttl-5*time.Second)
	if _, err := s.AcquireLease(ctx, b, ttl); !errors.Is(err, ErrLeaseHeld) {
		t.Errorf("acquire 5 s before expiry: got %v, want ErrLeaseHeld", err)
	}
	// Once expired it is anyone's; the old holder has lost it for good.
	age(t, s, "node_leases", 5*time.Second)
	got, err := s.AcquireLease(ctx, b, ttl)
	if err != nil || got.Owner != "b" {
		t.Fatalf("acquire at expiry: got %+v, %v, want b's lease", got, err)
	}
	if _, err := s.RenewLease(ctx, "n1", LeaseSOL, a.Token, ttl); !errors.Is(err, ErrNotFound) {
		t.Errorf("renew by the old holder: got %v, want ErrNotFound", err)
	}
	if err := s.ReleaseLease(ctx, "n1", LeaseSOL, a.Token); err != nil {
		t.Errorf("release by the old holder: %v", err)
	}
	if l, err := s.Lease(ctx, "n1", LeaseSOL); err != nil || l.Owner != "b" {
		t.Errorf("after the old holder's release: got %+v, %v, want b's lease", l, err)
	}
	if _, err := s.AcquireLease(ctx, a, ttl); !errors.Is(err, ErrLeaseHeld) {
		t.Errorf("old holder re-acquires: got %v, want ErrLeaseHeld", err)
	}
}

func testLeaseIndependent(t *testing.T, s *Store, _ testEnv) {
	ctx := context.Background()
	const ttl = time.Minute
	for i, l := range []Lease{
		lease("n1", LeaseSOL, "a", 1),
		lease("n1", LeasePower, "b", 2),
		lease("n2", LeaseSOL, "b", 3),
		lease("N1", LeaseSOL, "c", 4), // labels are byte-exact
	} {
		if _, err := s.AcquireLease(ctx, l, ttl); err != nil {
			t.Errorf("acquire %d (%s %s): %v", i, l.Node, l.Kind, err)
		}
	}
	if _, err := s.AcquireLease(ctx, lease("n1", LeasePower, "a", 5), ttl); !errors.Is(err, ErrLeaseHeld) {
		t.Errorf("acquire held power lease: got %v, want ErrLeaseHeld", err)
	}
}

func testLeaseInvalid(t *testing.T, s *Store, _ testEnv) {
	ctx := context.Background()
	long := string(make([]byte, 300))
	for _, c := range []struct {
		name string
		l    Lease
		ttl  time.Duration
	}{
		{"no node", lease("", LeaseSOL, "a", 1), time.Second},
		{"no kind", lease("n1", "", "a", 1), time.Second},
		{"no owner", Lease{Node: "n1", Kind: LeaseSOL, Token: token(1)}, time.Second},
		{"short token", Lease{Node: "n1", Kind: LeaseSOL, Owner: "a", Token: "x"}, time.Second},
		{"long address", Lease{Node: "n1", Kind: LeaseSOL, Owner: "a", Token: token(1), Addr: long}, time.Second},
		{"zero ttl", lease("n1", LeaseSOL, "a", 1), 0},
		{"sub-millisecond ttl", lease("n1", LeaseSOL, "a", 1), time.Microsecond},
	} {
		if _, err := s.AcquireLease(ctx, c.l, c.ttl); err == nil || errors.Is(err, ErrLeaseHeld) {
			t.Errorf("%s: got %v, want a validation error", c.name, err)
		}
	}
	if _, err := s.RenewLease(ctx, "n1", LeaseSOL, token(1), 0); err == nil {
		t.Errorf("renew with zero ttl: got nil, want an error")
	}
}

// testLeaseConcurrent has replicas (separate stores on one database; on
// Galera, one on each node) race for the same lease, fresh and then
// expired, many times: exactly one wins each round, and every replica then
// reads the winner as the holder.
func testLeaseConcurrent(t *testing.T, s *Store, env testEnv) {
	ctx := context.Background()
	const replicas, racers, rounds, ttl = 3, 4, 30, time.Minute
	stores := []*Store{s}
	for i := range replicas - 1 {
		stores = append(stores, openTestStore(t, env.at(i+1)))
	}
	next := 0
	for round := range rounds {
		age(t, s, "node_leases", ttl) // whatever the last round left has expired
		var (
			held    atomic.Int32
			wg      sync.WaitGroup
			mu      sync.Mutex
			winners []string
		)
		start := make(chan struct{})
		for i := range replicas * racers {
			next++
			l := lease("n1", LeaseSOL, fmt.Sprintf("r%d", i%replicas), next)
			st := stores[i%replicas]
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				_, err := st.AcquireLease(ctx, l, ttl)
				switch {
				case err == nil:
					mu.Lock()
					winners = append(winners, l.Token)
					mu.Unlock()
				case errors.Is(err, ErrLeaseHeld):
					held.Add(1)
				default:
					t.Errorf("round %d: acquire: %v", round, err)
				}
			}()
		}
		close(start)
		wg.Wait()
		if len(winners) != 1 || held.Load() != replicas*racers-1 {
			t.Fatalf("round %d: got %d winners and %d held, want 1 and %d", round, len(winners), held.Load(), replicas*racers-1)
		}
		for i, st := range stores {
			if l, err := st.Lease(ctx, "n1", LeaseSOL); err != nil || l.Token != winners[0] {
				t.Fatalf("round %d: holder as replica %d reads it: got %+v, %v, want the winner's token %s", round, i, l, err, winners[0])
			}
		}
	}
	var conflicts int64
	for _, st := range stores {
		conflicts += st.ConflictRetries()
	}
	t.Logf("%d rounds of %d racers: %d lost conflicts retried", rounds, replicas*racers, conflicts)
}

// BenchmarkRenewLease is a single-statement write (exec), as each replica
// runs one per console lease every few seconds, on each engine.
func BenchmarkRenewLease(b *testing.B) {
	for _, e := range dbtest.Engines() {
		b.Run(e.Name, func(b *testing.B) {
			s := openTestStore(b, e.DSN(b))
			ctx := context.Background()
			if _, err := s.CreateNode(ctx, Node{Label: "n1", Type: "mock", InfoSealed: []byte("x")}); err != nil {
				b.Fatal(err)
			}
			if _, err := s.AcquireLease(ctx, lease("n1", LeaseSOL, "replica-a", 1), time.Minute); err != nil {
				b.Fatal(err)
			}
			for b.Loop() {
				if _, err := s.RenewLease(ctx, "n1", LeaseSOL, token(1), time.Minute); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

package cluster

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/obmd/obmd/db"
	"github.com/obmd/obmd/sol/sim"
)

// stuckStore is a store cut off from its database: once stuck, lease
// renewals and announcements hang until their context ends (as the MySQL
// driver's calls do on a connection that no longer answers) or the test
// does.
type stuckStore struct {
	Store
	stuck   atomic.Bool
	release chan struct{}
}

func (s *stuckStore) hang(ctx context.Context) error {
	if !s.stuck.Load() {
		return nil
	}
	select {
	case <-s.release:
		return errors.New("released")
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (s *stuckStore) RenewLease(ctx context.Context, node, kind, token string, ttl time.Duration) (time.Time, error) {
	if err := s.hang(ctx); err != nil {
		return time.Time{}, err
	}
	return s.Store.RenewLease(ctx, node, kind, token, ttl)
}

func (s *stuckStore) AnnounceIn(ctx context.Context, id, addr string, zones []string, applied int64, ttl time.Duration) error {
	if err := s.hang(ctx); err != nil {
		return err
	}
	return s.Store.AnnounceIn(ctx, id, addr, zones, applied, ttl)
}

func newStuckStore(t *testing.T, dsn string) *stuckStore {
	s := &stuckStore{Store: openStore(t, dsn), release: make(chan struct{})}
	t.Cleanup(func() { close(s.release) })
	return s
}

// TestLinkFencedBeforeLease: a holder whose lease renewals hang closes its
// SOL link FenceMargin before the lease expires, though no renewal has
// returned: by the time another replica may take the lease over, this one
// no longer reads or writes the node's console. (Before, the link stayed
// open until a renewal failed after the lease had expired.)
func TestLinkFencedBeforeLease(t *testing.T) {
	engines(t, func(t *testing.T, dsn string) {
		key, lab := newHostKey(t), sim.NewLab()
		b := lab.BMC("n1", sim.ModeNormal)
		st := newStuckStore(t, dsn)
		r0 := startReplica(t, "r0", st, lab, key)
		rec := record(attach(t, r0, "n1", "alice"))
		waitFor(t, "the link", func() bool { return b.ConsoleActive() })
		seeAll(t, b, "before\n", rec)

		st.stuck.Store(true)
		lease, err := openStore(t, dsn).Lease(context.Background(), "n1", db.LeaseSOL)
		if err != nil {
			t.Fatal(err)
		}
		waitFor(t, "the link closed", func() bool { return !b.ConsoleActive() })
		if early := time.Until(lease.ExpiresAt); early < r0.c.cfg.FenceMargin/2 {
			t.Errorf("link closed %v before the lease expires, want at least about the fence margin %v", early, r0.c.cfg.FenceMargin)
		}
		waitFor(t, "the viewer told", func() bool { return len(rec.Notices()) > 0 })
	})
}

// TestGuard: a replica is fenced until it announces itself and again once
// its fence passes with no announcement since (one stuck in the database
// does not count): then its links are closed and the caller's cut runs,
// before the announcement expires for the others; the next announcement
// that succeeds lifts the fence.
func TestGuard(t *testing.T) {
	engines(t, func(t *testing.T, dsn string) {
		key, lab := newHostKey(t), sim.NewLab()
		b := lab.BMC("n1", sim.ModeNormal)
		st := newStuckStore(t, dsn)
		r0 := startReplica(t, "r0", st, lab, key)
		if !r0.c.Fenced() {
			t.Error("before its first announcement: not fenced, want fenced")
		}
		ctx, cancel := context.WithCancel(context.Background())
		cuts := make(chan time.Time, 10)
		guarded := make(chan error, 1)
		go func() { guarded <- r0.c.Guard(ctx, func() { cuts <- time.Now() }) }() // ends at cancel
		t.Cleanup(func() {
			cancel()
			if err := <-guarded; err != nil {
				t.Errorf("Guard: %v", err)
			}
		})
		// Opened first: the announcement lasts testTTL, and opening a
		// store (a PostgreSQL one's new connections) may take a good part
		// of it on a loaded machine.
		reader := openStore(t, dsn)
		if err := r0.c.Announce(ctx, 1); err != nil {
			t.Fatal(err)
		}
		if r0.c.Fenced() {
			t.Error("after an announcement: fenced, want serving")
		}
		attach(t, r0, "n1", "alice")
		waitFor(t, "the link", func() bool { return b.ConsoleActive() })
		reps, err := reader.Replicas(ctx)
		if err != nil || len(reps) != 1 {
			t.Fatalf("replicas: got %v, %v", reps, err)
		}

		st.stuck.Store(true)
		go r0.c.Announce(context.Background(), 2) // hangs: no announcement
		var cut time.Time
		select {
		case cut = <-cuts:
		case <-time.After(wait):
			t.Fatal("no fence within the bound")
		}
		if early := reps[0].ExpiresAt.Sub(cut); early < r0.c.cfg.FenceMargin/2 {
			t.Errorf("fenced %v before the announcement expires, want at least about the fence margin %v", early, r0.c.cfg.FenceMargin)
		}
		if !r0.c.Fenced() {
			t.Error("after the fence: not fenced")
		}
		waitFor(t, "the link closed", func() bool { return !b.ConsoleActive() })

		st.stuck.Store(false)
		if err := r0.c.Announce(ctx, 3); err != nil {
			t.Fatal(err)
		}
		if r0.c.Fenced() {
			t.Error("after a new announcement: fenced, want serving")
		}
	})
}

// TestNotifyWaitsMargin: a replica that cannot be reached is counted as
// stopped only FenceMargin after its announcement expired, not at the
// expiry: it fences itself FenceMargin before it, so there are two margins
// between its fence and the acknowledgement.
func TestNotifyWaitsMargin(t *testing.T) {
	engines(t, func(t *testing.T, dsn string) {
		key, lab := newHostKey(t), sim.NewLab()
		r0 := startReplica(t, "r0", openStore(t, dsn), lab, key)
		r1 := startReplica(t, "r1", openStore(t, dsn), lab, key)
		ctx := context.Background()
		if err := r1.c.Announce(ctx, 1); err != nil {
			t.Fatal(err)
		}
		reps, err := openStore(t, dsn).Replicas(ctx)
		if err != nil || len(reps) != 1 {
			t.Fatalf("replicas: got %v, %v", reps, err)
		}
		r1.kill(t) // unreachable, announces no more
		cctx, cancel := context.WithTimeout(ctx, wait)
		defer cancel()
		if err := r0.c.Notify(cctx, "n1", 5, "token rotated"); err != nil {
			t.Fatalf("Notify: %v", err)
		}
		if after := time.Since(reps[0].ExpiresAt); after < r0.c.cfg.FenceMargin {
			t.Errorf("counted r1 stopped %v after its announcement expired, want at least the fence margin %v", after, r0.c.cfg.FenceMargin)
		}
	})
}

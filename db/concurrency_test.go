package db

import (
	"context"
	"errors"
	"testing"

	"github.com/obmd/obmd/db/dbtest"
	"github.com/obmd/obmd/keys"
	logtest "github.com/sirupsen/logrus/hooks/test"
)

// TestMigrateConcurrent starts several stores on one fresh database at
// once, as replicas do. MySQL only: replicas share MySQL, and several
// processes migrating one SQLite file at once is not a supported setup.
func TestMigrateConcurrent(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	// Several fresh databases: the race (replicas creating goose's version
	// table at once) was lost only now and then.
	const rounds, n = 5, 4
	for round := range rounds {
		dsn := dbtest.MySQLDSN(t)
		ctx := context.Background()
		errs := make(chan error, n)
		for range n {
			go func() {
				log, _ := logtest.NewNullLogger()
				st, err := Open(ctx, dsn, log)
				if err != nil {
					errs <- err
					return
				}
				err = st.Migrate(ctx)
				errs <- errors.Join(err, st.Close())
			}()
		}
		for range n {
			if err := <-errs; err != nil {
				t.Errorf("round %d: concurrent migrate: %v", round, err)
			}
		}
	}
}

func testConcurrentWriters(t *testing.T, s *Store, _ testEnv) {
	ctx := context.Background()
	const workers, rounds = 20, 10
	nodes := []string{"n0", "n1", "n2"}
	for _, l := range nodes {
		mustCreate(t, s, l)
	}
	start, _ := s.LatestChange(ctx)

	// A replica's poller: it keeps the highest epoch seen and must never
	// skip one, i.e. no epoch may become visible after a higher one.
	stop := make(chan struct{})
	polled := make(chan int64, 1)
	go func() {
		cursor := start
		defer func() { polled <- cursor }()
		for final := false; ; {
			select {
			case <-stop:
				final = true
			default:
			}
			changes, err := s.ChangesSince(ctx, cursor, 0)
			if err != nil {
				t.Errorf("poll: %v", err)
				return
			}
			for _, c := range changes {
				if c.Epoch != cursor+1 {
					t.Errorf("poll after %d: got epoch %d, want %d (an epoch was skipped)", cursor, c.Epoch, cursor+1)
					return
				}
				cursor = c.Epoch
			}
			if final {
				return
			}
		}
	}()

	done := make(chan struct{})
	for w := range workers {
		go func() {
			defer func() { done <- struct{}{} }()
			label := nodes[w%len(nodes)]
			for i := range rounds {
				tok, err := keys.NewToken()
				if err != nil {
					t.Error(err)
					return
				}
				if _, err := s.SetToken(ctx, label, keys.HashToken(tok)); err != nil {
					t.Errorf("worker %d round %d: set token: %v", w, i, err)
					return
				}
				if err := s.Audit(ctx, AuditEvent{Node: label, Action: "token.rotate", Result: "ok"}); err != nil {
					t.Errorf("worker %d round %d: audit: %v", w, i, err)
					return
				}
				if _, err := s.Access(ctx, label); err != nil {
					t.Errorf("worker %d round %d: access: %v", w, i, err)
					return
				}
			}
		}()
	}
	for range workers {
		<-done
	}
	close(stop)
	latest, _ := s.LatestChange(ctx)
	if cursor := <-polled; cursor != latest {
		t.Errorf("poller reached epoch %d, want %d", cursor, latest)
	}
	if got, want := latest-start, int64(workers*rounds); got != want {
		t.Errorf("changes recorded: got %d, want %d", got, want)
	}
	changes, _ := s.ChangesSince(ctx, start, 0)
	if len(changes) != workers*rounds {
		t.Errorf("changes listed: got %d, want %d", len(changes), workers*rounds)
	}
	for i, c := range changes {
		if c.Epoch != start+int64(i)+1 {
			t.Errorf("change %d: epoch got %d, want %d (no gaps)", i, c.Epoch, start+int64(i)+1)
			break
		}
	}
	var maxEpoch int64
	for _, l := range nodes {
		e, _ := s.Epoch(ctx, l)
		maxEpoch = max(maxEpoch, e)
	}
	if maxEpoch != latest {
		t.Errorf("highest node epoch: got %d, want %d", maxEpoch, latest)
	}
}

package galera

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/obmd/obmd/db/dbtest"
)

// Shared is the one cluster of a test binary: started by the first test
// that asks for it (so a run that selects no Galera test pays nothing),
// reused by every later one, and stopped by Close, which TestMain calls
// after m.Run:
//
//	var cluster galera.Shared
//
//	func TestMain(m *testing.M) {
//		code := m.Run()
//		cluster.Close()
//		os.Exit(code)
//	}
//
// A start that failed is not tried again: every later test fails at once.
type Shared struct {
	mu    sync.Mutex
	tried bool
	c     *Cluster
	err   error
}

// startTimeout bounds Start (about 20 s on two idle cores).
const startTimeout = 4 * time.Minute

// Cluster returns the running cluster, starting it on first use, with
// every node running and synced (Heal). It skips t when this machine
// cannot run one, or fails it under OBMD_REQUIRE_INTEGRATION=1.
func (s *Shared) Cluster(t testing.TB) *Cluster {
	t.Helper()
	dbtest.External(t, "a Galera cluster")
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.tried {
		s.tried = true
		ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
		s.c, s.err = Start(ctx)
		cancel()
		if s.err == nil {
			fmt.Fprintf(os.Stderr, "galera: three nodes started in %v\n", s.c.Started.Round(100*time.Millisecond))
		}
	}
	if errors.Is(s.err, ErrUnavailable) {
		dbtest.Missing(t, "%v", s.err)
	}
	if s.err != nil {
		t.Fatalf("start galera cluster: %v", s.err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	if err := s.c.Heal(ctx); err != nil {
		t.Fatalf("galera cluster: %v", err)
	}
	return s.c
}

// Database creates a scratch database on the cluster for t, dropped when t
// ends, and returns its DSN on each node (index = node).
func (s *Shared) Database(t testing.TB) []string {
	t.Helper()
	c := s.Cluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	name, err := c.CreateDatabase(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := c.DropDatabase(ctx, name); err != nil {
			t.Errorf("%v", err)
		}
	})
	dsns := make([]string, Size)
	for i := range dsns {
		dsns[i] = c.DSN(i, name, "")
	}
	return dsns
}

// Close stops the cluster if it was started.
func (s *Shared) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.c == nil {
		return nil
	}
	err := s.c.Close()
	s.c = nil
	return err
}

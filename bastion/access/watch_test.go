package access

import (
	"context"
	"errors"
	"io"
	"sync"
	"testing"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/obmd/obmd/bastion/access/sessions"
	"github.com/obmd/obmd/db"
)

// fakeDB is the database as the Watcher and Health read it: changes to
// hand out, a switch that fails every read, a count of committed writes,
// the age of the oldest write in progress, a stall bound (default 2 s),
// and a switch that holds Ping until its context ends.
type fakeDB struct {
	mu        sync.Mutex
	down      bool
	latest    int64 // the epoch changes stand at when the Watcher starts
	changes   []db.Change
	committed uint64
	oldest    time.Duration
	stall     time.Duration
	hold      bool
}

func (f *fakeDB) setDown(down bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.down = down
}

func (f *fakeDB) fail() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.down {
		return errors.New("database not answering")
	}
	return nil
}

func (f *fakeDB) LatestChange(context.Context) (int64, error) {
	if err := f.fail(); err != nil {
		return 0, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.latest, nil
}

func (f *fakeDB) ChangesSince(_ context.Context, after int64, _ int) ([]db.Change, error) {
	if err := f.fail(); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []db.Change
	for _, c := range f.changes {
		if c.Epoch > after {
			out = append(out, c)
		}
	}
	return out, nil
}

func (f *fakeDB) Ping(ctx context.Context) error {
	f.mu.Lock()
	hold := f.hold
	f.mu.Unlock()
	if hold {
		<-ctx.Done()
		return ctx.Err()
	}
	return f.fail()
}

func (f *fakeDB) CheckWrites(context.Context, time.Duration) error { return f.fail() }

func (f *fakeDB) OldestWrite() time.Duration {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.oldest
}

func (f *fakeDB) Committed() uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.committed
}

func (f *fakeDB) StallBound() time.Duration {
	if f.stall > 0 {
		return f.stall
	}
	return 2 * time.Second
}

// set changes f under its lock.
func (f *fakeDB) set(change func(f *fakeDB)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	change(f)
}

// TestWatcher: a change made elsewhere cuts the node's older sessions; a
// database that stops answering makes the replica unusable at once (logins
// refused) and, after DBGrace, cuts every session; it recovers by itself.
func TestWatcher(t *testing.T) {
	store := &fakeDB{latest: 1}
	health := NewHealth(store, nil)
	_, reg := startWatcher(t, WatchConfig{Poll: 5 * time.Millisecond, DBGrace: 100 * time.Millisecond}, store, health)

	old := session(t, reg, "n1", 1)
	store.mu.Lock()
	store.changes = append(store.changes, db.Change{Node: "n1", Epoch: 2})
	store.mu.Unlock()
	waitCut(t, old, "access to n1 was revoked (access changed)") // a change recorded without its reason

	// A change's recorded reason is what its sessions read, wherever it
	// was made.
	rotated := session(t, reg, "n1", 2)
	store.mu.Lock()
	store.changes = append(store.changes, db.Change{Node: "n1", Epoch: 3, Reason: db.ReasonTokenRotated})
	store.mu.Unlock()
	waitCut(t, rotated, "access to n1 was revoked (token rotated)")

	live := session(t, reg, "n2", 4)
	store.setDown(true)
	waitUntil(t, "the database to count as unusable", func() bool { return !health.Usable() })
	if err := health.Ready(context.Background()); err == nil {
		t.Errorf("Ready while the database is down: got nil, want an error")
	}
	waitCut(t, live, "access to n2 was revoked ("+WhyDBLost+")")

	store.setDown(false)
	waitUntil(t, "the database to count as usable again", health.Usable)
}

// TestWatcherWake: a wake (a database that tells of changes as they
// commit) makes the Watcher poll at once, long before its next tick.
func TestWatcherWake(t *testing.T) {
	store := &fakeDB{latest: 1}
	w, reg := startWatcher(t, WatchConfig{Poll: time.Hour}, store, NewHealth(store, nil))
	old := session(t, reg, "n1", 1)
	store.mu.Lock()
	store.changes = append(store.changes, db.Change{Node: "n1", Epoch: 2, Reason: db.ReasonTokenRotated})
	store.mu.Unlock()
	w.Wake()
	w.Wake() // one pending at most: never blocks
	waitCut(t, old, "access to n1 was revoked (token rotated)")
}

// startWatcher starts a Watcher of store with cfg (runWatcher), running
// until t ends, and returns it with the registry whose sessions it cuts.
func startWatcher(t *testing.T, cfg WatchConfig, store *fakeDB, health *Health) (*Watcher, *sessions.Registry) {
	t.Helper()
	r, _, reg, _ := newTestRevoker()
	log := logrus.New()
	log.SetOutput(io.Discard)
	w, err := NewWatcher(cfg, store, health, r, nil, log)
	if err != nil {
		t.Fatal(err)
	}
	runWatcher(t, w)
	return w, reg
}

func waitCut(t *testing.T, ctx context.Context, want string) {
	t.Helper()
	select {
	case <-ctx.Done():
	case <-time.After(10 * time.Second):
		t.Fatalf("session not cut, want %q", want)
	}
	var r *sessions.RevokedError
	if cause := context.Cause(ctx); !errors.As(cause, &r) || cause.Error() != want {
		t.Errorf("cause: got %v, want %q", cause, want)
	}
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// TestWatcherMissedChanges: a poll that finds the next epoch gone (purged
// before this replica read it) cuts every session, since which nodes the
// missed changes ended is unknown.
func TestWatcherMissedChanges(t *testing.T) {
	r, _, reg, _ := newTestRevoker()
	store := &fakeDB{latest: 3}
	runWatcher(t, fastWatcher(t, store, r))
	other := session(t, reg, "n2", 3)
	mine := session(t, reg, "n1", 3)
	store.mu.Lock()
	store.changes = append(store.changes, db.Change{Node: "n1", Epoch: 4, Reason: db.ReasonTokenRotated})
	store.mu.Unlock()
	waitCut(t, mine, "access to n1 was revoked (token rotated)")
	alive(t, "the other node's session", other) // epochs 4 and on: nothing missed

	later := session(t, reg, "n3", 4)
	store.mu.Lock()
	store.changes = append(store.changes, db.Change{Node: "n1", Epoch: 9, Reason: db.ReasonTokenRotated})
	store.mu.Unlock()
	waitCut(t, other, "access to n2 was revoked ("+WhyChangesMissed+")")
	waitCut(t, later, "access to n3 was revoked ("+WhyChangesMissed+")")
}

// fastWatcher is a Watcher of store polling every 5 ms, logging nowhere.
func fastWatcher(t *testing.T, store *fakeDB, r *Revoker) *Watcher {
	t.Helper()
	log := logrus.New()
	log.SetOutput(io.Discard)
	w, err := NewWatcher(WatchConfig{Poll: 5 * time.Millisecond}, store, NewHealth(store, nil), r, nil, log)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

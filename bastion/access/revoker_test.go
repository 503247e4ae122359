package access

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/obmd/obmd/bastion/access/sessions"
	"github.com/obmd/obmd/db"
	"github.com/obmd/obmd/sol"
)

// fakeCutter records console cuts.
type fakeCutter struct {
	mu   sync.Mutex
	cuts []string // "label: cause"
	// liveAtCut is how many sessions of the label the registry still had
	// when the console was cut.
	liveAtCut []int
	reg       *sessions.Registry
}

func (f *fakeCutter) Cut(label string, cause error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.cuts = append(f.cuts, label+": "+cause.Error())
	f.liveAtCut = append(f.liveAtCut, len(f.reg.List(label)))
}

func (f *fakeCutter) taken() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.cuts...)
}

// fakeEpochs is the database's access epochs: a missing label is
// db.ErrNotFound; err, if set, fails every read.
type fakeEpochs struct {
	mu    sync.Mutex
	epoch map[string]int64
	err   error
	reads int
}

func (f *fakeEpochs) Epoch(_ context.Context, label string) (int64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reads++
	if f.err != nil {
		return 0, f.err
	}
	e, ok := f.epoch[label]
	if !ok {
		return 0, db.ErrNotFound
	}
	return e, nil
}

// Settle is Epoch: these tests have no change in flight in a database.
func (f *fakeEpochs) Settle(ctx context.Context, label string) (int64, error) {
	return f.Epoch(ctx, label)
}

func (f *fakeEpochs) set(label string, epoch int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.epoch[label] = epoch
}

func (f *fakeEpochs) readCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.reads
}

func newTestRevoker() (*Revoker, *fakeCutter, *sessions.Registry, *fakeEpochs) {
	reg := sessions.New(sessions.Config{CutWait: 5 * time.Second})
	cons := &fakeCutter{reg: reg}
	epochs := &fakeEpochs{epoch: map[string]int64{}}
	log := logrus.New()
	log.SetOutput(io.Discard)
	return NewRevoker(RevokerConfig{}, cons, reg, epochs, log), cons, reg, epochs
}

// session registers a session at epoch that ends when cut.
func session(t *testing.T, reg *sessions.Registry, node string, epoch int64) context.Context {
	t.Helper()
	ctx, _, end, err := reg.Start(context.Background(), sessions.Info{Node: node, Epoch: epoch}, "a")
	if err != nil {
		t.Fatal(err)
	}
	go func() { <-ctx.Done(); end() }()
	return ctx
}

func TestRevokerRevoke(t *testing.T) {
	r, cons, reg, _ := newTestRevoker()
	old := session(t, reg, "n1", 3)
	cur := session(t, reg, "n1", 5)
	r.Revoke("n1", 5, "token rotated")
	if got := context.Cause(old); got == nil || got.Error() != "access to n1 was revoked (token rotated)" {
		t.Errorf("old session: got cause %v, want the rotation", got)
	}
	if cur.Err() != nil {
		t.Errorf("a session of the new epoch was cut")
	}
	if got := cons.taken(); len(got) != 1 || got[0] != "n1: access to n1 was revoked (token rotated)" {
		t.Errorf("console cuts: got %q, want one with the reason", got)
	}
	if cons.liveAtCut[0] != 1 {
		t.Errorf("the console was cut with %d sessions live, want only the new one (sessions first)", cons.liveAtCut[0])
	}
	// The same epoch again (the change watcher): nothing more.
	r.Revoke("n1", 5, "access changed")
	r.Revoke("n1", 4, "access changed")
	if got := cons.taken(); len(got) != 1 {
		t.Errorf("an applied epoch cut again: %q", got)
	}
}

func TestRevokerAdmit(t *testing.T) {
	r, cons, reg, epochs := newTestRevoker()
	old := session(t, reg, "n1", 3)
	// A session of epoch 7 arrives before this replica heard of the change.
	epochs.set("n1", 7)
	if err := r.admit(context.Background(), "n1", 7, 0); err != nil {
		t.Fatalf("Admit at the current epoch: got %v, want nil", err)
	}
	if old.Err() == nil {
		t.Errorf("admitting epoch 7 left a session of epoch 3 live")
	}
	if got := cons.taken(); len(got) != 1 {
		t.Errorf("console cuts: got %q, want the scrollback wiped once", got)
	}
	if err := r.admit(context.Background(), "n1", 7, 0); err != nil {
		t.Errorf("Admit again: got %v, want nil", err)
	}
	r.Revoke("n1", 7, "access changed")
	if got := cons.taken(); len(got) != 1 {
		t.Errorf("an admitted epoch cut again: %q", got)
	}
}

// TestRevokerAdmitRefuses: Admit is the whole check a session passes
// before it starts: a stale epoch, a deleted node and an unreachable
// database each keep it from starting, each with its own error.
func TestRevokerAdmitRefuses(t *testing.T) {
	down := errors.New("database is down")
	tests := []struct {
		name    string
		current int64 // the node's epoch in the database; 0: no such node
		err     error // of the database read
		epoch   int64 // the session's
		want    string
		revoked bool
	}{
		{"current", 5, nil, 5, "", false},
		{"changed since the login", 6, nil, 5, "access to n1 was revoked (access changed)", true},
		{"node deleted", 0, nil, 5, "access to n1 was revoked (node deleted)", true},
		{"database down", 5, down, 5, "verify access to n1: database is down", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, cons, _, epochs := newTestRevoker()
			if tt.current > 0 {
				epochs.set("n1", tt.current)
			}
			epochs.err = tt.err
			err := r.admit(context.Background(), "n1", tt.epoch, 0)
			var rev *sessions.RevokedError
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("got %v, want nil", err)
			case tt.want != "" && (err == nil || err.Error() != tt.want || errors.As(err, &rev) != tt.revoked):
				t.Fatalf("got %v (revoked %v), want %q (revoked %v)", err, errors.As(err, &rev), tt.want, tt.revoked)
			}
			if tt.err != nil && !errors.Is(err, tt.err) {
				t.Errorf("got %v, want it to wrap %v", err, tt.err)
			}
			if got := cons.taken(); tt.want != "" && len(got) != 0 {
				t.Errorf("a refused session applied its epoch: console cuts %q", got)
			}
		})
	}
}

// TestRevokerAdmitStaleNoRead: an epoch below one this replica applied (a
// change made here) is refused without reading the database.
func TestRevokerAdmitStaleNoRead(t *testing.T) {
	r, _, _, epochs := newTestRevoker()
	r.Revoke("n1", 8, "token rotated")
	epochs.set("n1", 5) // what a lagging read would say: must not be asked
	err := r.admit(context.Background(), "n1", 5, 0)
	var rev *sessions.RevokedError
	if !errors.As(err, &rev) {
		t.Errorf("epoch 5 after 8 was applied: got %v, want a RevokedError", err)
	}
	if n := epochs.readCount(); n != 0 {
		t.Errorf("database reads: got %d, want 0", n)
	}
}

// A change made here keeps the node's lock from before its database write
// to its cut: the change watcher, which may read the change first, waits,
// and the users get the change's own reason.
func TestRevokerBeginOutranksWatcher(t *testing.T) {
	r, cons, reg, _ := newTestRevoker()
	old := session(t, reg, "n1", 3)
	end := r.Begin("n1")
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		r.Revoke("n1", 4, "access changed") // the watcher saw epoch 4 in the database
	}()
	select {
	case <-watched:
		t.Fatal("the watcher's revocation ran during the change")
	case <-time.After(50 * time.Millisecond):
	}
	end(4, "token rotated")
	<-watched
	if got := context.Cause(old); got == nil || got.Error() != "access to n1 was revoked (token rotated)" {
		t.Errorf("got cause %v, want the change's own reason", got)
	}
	if got := cons.taken(); len(got) != 1 {
		t.Errorf("console cuts: got %q, want one", got)
	}
	// A failed change cuts nothing and releases the node.
	end = r.Begin("n1")
	end(0, "")
	end(9, "twice") // only the first call counts
	if got := cons.taken(); len(got) != 1 {
		t.Errorf("a failed change cut: %q", got)
	}
	r.Revoke("n1", 9, "access changed")
	if got := cons.taken(); len(got) != 2 {
		t.Errorf("the node stayed locked after a failed change: %q", got)
	}
}

// A session waiting in Admit while a revocation that cuts it holds the
// node's lock stops waiting, so the revocation does not wait for it in
// vain.
func TestRevokerAdmitCutWhileWaiting(t *testing.T) {
	r, _, reg, epochs := newTestRevoker()
	ctx, _, endSession, err := reg.Start(context.Background(), sessions.Info{Node: "n1", Epoch: 3}, "a")
	if err != nil {
		t.Fatal(err)
	}
	end := r.Begin("n1")
	admitted := make(chan struct{})
	epochs.set("n1", 3)
	var admitErr error
	go func() { // the session: registered, now asks to be admitted
		defer close(admitted)
		admitErr = r.admit(ctx, "n1", 3, 0)
		endSession()
	}()
	time.Sleep(20 * time.Millisecond)
	began := time.Now()
	end(4, "token rotated") // cuts the waiting session and waits for it
	if took := time.Since(began); took > time.Second {
		t.Errorf("the revocation took %v: it waited for a session stuck in Admit", took)
	}
	<-admitted
	var rev *sessions.RevokedError
	if !errors.As(context.Cause(ctx), &rev) || admitErr != context.Cause(ctx) {
		t.Errorf("got cause %v and Admit %v, want the revocation for both", context.Cause(ctx), admitErr)
	}
}

// Revocations of different nodes do not wait for each other.
func TestRevokerNodesIndependent(t *testing.T) {
	r, _, _, epochs := newTestRevoker()
	end := r.Begin("n1")
	defer end(0, "")
	done := make(chan struct{})
	epochs.set("n3", 1)
	go func() {
		r.Revoke("n2", 1, "token rotated")
		if err := r.admit(context.Background(), "n3", 1, 0); err != nil {
			t.Errorf("Admit n3: %v", err)
		}
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("a change of n1 blocked n2 and n3")
	}
}

// TestRevokerCutAll: losing the database cuts every session, all nodes in
// one pass of the registry (its bound waited once), sessions before
// consoles, each node under its revocation lock.
func TestRevokerCutAll(t *testing.T) {
	const bound = 200 * time.Millisecond
	reg := sessions.New(sessions.Config{CutWait: bound})
	cons := &fakeCutter{reg: reg}
	log := logrus.New()
	log.SetOutput(io.Discard)
	r := NewRevoker(RevokerConfig{}, cons, reg, &fakeEpochs{epoch: map[string]int64{}}, log)
	var live []context.Context
	for _, node := range []string{"n1", "n2", "n3"} {
		live = append(live, session(t, reg, node, 5))
		_, _, end, err := reg.Start(context.Background(), sessions.Info{Node: node, Epoch: 5}, "b") // never ends by itself
		if err != nil {
			t.Fatal(err)
		}
		defer end()
	}
	// A change of n2 is in progress: CutAll waits for it.
	endChange := r.Begin("n2")
	done := make(chan int, 1)
	began := time.Now()
	go func() { done <- r.CutAll("db lost") }()
	held := 4 * bound // longer than cutting the three nodes one by one would take
	time.Sleep(held)
	select {
	case <-done:
		t.Fatal("CutAll returned during a change of n2")
	default:
	}
	if live[1].Err() != nil {
		t.Errorf("a session of n2 was cut during a change of n2 (the node's lock was not taken)")
	}
	endChange(0, "")
	cut := <-done
	if took := time.Since(began); took > held+2*bound {
		t.Errorf("CutAll took %v: want the registry's bound (%v) waited once, not once per node", took, bound)
	}
	if cut != 6 {
		t.Errorf("cut: got %d, want 6", cut)
	}
	for i, ctx := range live {
		if got := context.Cause(ctx); got == nil || got.Error() != fmt.Sprintf("access to n%d was revoked (db lost)", i+1) {
			t.Errorf("session on n%d: got cause %v", i+1, got)
		}
	}
	got := cons.taken()
	slices.Sort(got)
	if want := []string{"n1: access to n1 was revoked (db lost)", "n2: access to n2 was revoked (db lost)",
		"n3: access to n3 was revoked (db lost)"}; !slices.Equal(got, want) {
		t.Errorf("console cuts: got %q, want %q", got, want)
	}
	cons.mu.Lock()
	defer cons.mu.Unlock()
	for i, n := range cons.liveAtCut {
		if n > 1 { // only the stuck session (late) may remain
			t.Errorf("console cut %d with %d sessions live, want the sessions cut first", i, n)
		}
	}
}

// TestRevokerCutAllConcurrent: the loss of the database (the change
// watcher) and a fence (the cluster's guard) cut every session from two
// goroutines, often together since one causes the other; each CutAll
// takes the locks of many nodes, so they must take them in one order, or
// each holds a lock the other waits for and neither returns.
func TestRevokerCutAllConcurrent(t *testing.T) {
	reg := sessions.New(sessions.Config{CutWait: time.Millisecond})
	cons := &fakeCutter{reg: reg}
	log := logrus.New()
	log.SetOutput(io.Discard)
	r := NewRevoker(RevokerConfig{}, cons, reg, &fakeEpochs{epoch: map[string]int64{}}, log)
	for i := range 32 {
		// Sessions that never end by themselves stay listed, so that every
		// CutAll below takes every node's lock.
		_, _, end, err := reg.Start(context.Background(), sessions.Info{Node: fmt.Sprintf("n%d", i), Epoch: 5}, "b")
		if err != nil {
			t.Fatal(err)
		}
		defer end()
	}
	for round := range 20 {
		var wg sync.WaitGroup
		for range 2 {
			wg.Go(func() { r.CutAll("db lost") })
		}
		done := make(chan struct{})
		go func() { wg.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatalf("round %d: two CutAll at once did not return (each holds a lock the other waits for)", round)
		}
	}
}

// TestRevokerForgets: the Revoker keeps a node's state only while it is in
// use or knows an epoch the change watcher has not passed; dropping it
// changes nothing: the watcher's replay of a change made here, and a
// session admitted at an epoch already applied, cut nothing.
func TestRevokerForgets(t *testing.T) {
	r, cons, reg, epochs := newTestRevoker()
	tracked := func() int {
		r.mu.Lock()
		defer r.mu.Unlock()
		return len(r.nodes)
	}
	r.Watched(4) // the watcher starts
	old := session(t, reg, "n1", 4)
	r.Begin("n1")(5, "token rotated") // a change made here
	r.Begin("gone")(6, "node deleted")
	if old.Err() == nil || len(cons.taken()) != 2 {
		t.Fatalf("the changes did not cut: session cause %v, console cuts %q", context.Cause(old), cons.taken())
	}
	if got := tracked(); got != 2 {
		t.Errorf("nodes tracked before the watcher saw the changes: got %d, want 2", got)
	}
	// The watcher sees both changes, then marks them.
	r.Revoke("n1", 5, "access changed")
	r.Revoke("gone", 6, "access changed")
	r.Watched(6)
	if got := tracked(); got != 0 {
		t.Errorf("nodes tracked once the watcher passed their changes: got %d, want 0", got)
	}
	// A session of the new tenancy with its console, then another: neither
	// admission re-applies epoch 5.
	epochs.set("n1", 5)
	for i := range 2 {
		cur := session(t, reg, "n1", 5)
		if err := r.admit(context.Background(), "n1", 5, 0); err != nil || cur.Err() != nil {
			t.Fatalf("admit %d at the current epoch: got %v, session cause %v", i, err, context.Cause(cur))
		}
	}
	if got := cons.taken(); len(got) != 2 {
		t.Errorf("console cuts: got %q, want only the two changes'", got)
	}
	if got := tracked(); got != 0 {
		t.Errorf("nodes tracked after the admissions: got %d, want 0", got)
	}
	// State in use is kept: a change in progress still holds the watcher.
	end := r.Begin("n1")
	r.Watched(7)
	watched := make(chan struct{})
	go func() { defer close(watched); r.Revoke("n1", 8, "access changed") }()
	select {
	case <-watched:
		t.Fatal("the watcher's revocation ran during the change: the node's state was dropped while in use")
	case <-time.After(50 * time.Millisecond):
	}
	end(8, "token rotated")
	<-watched
	r.Watched(8)
	if got := tracked(); got != 0 {
		t.Errorf("nodes tracked at the end: got %d, want 0", got)
	}
}

// TestRevokerCurrentUnverified: a database that fails the read of a
// node's epoch makes Current's error ErrUnverified, which a console link
// that cannot open for it tells its viewers as obmd's database, not the
// BMC, failing (sol.TenantText).
func TestRevokerCurrentUnverified(t *testing.T) {
	r, _, _, epochs := newTestRevoker()
	epochs.set("n1", 1)
	r.Current(context.Background(), "n1") // applies epoch 1 (a change it had not seen)
	if _, err := r.Current(context.Background(), "n1"); err != nil {
		t.Fatal(err)
	}
	epochs.mu.Lock()
	epochs.err = errors.New("dial tcp 192.0.2.9:3306: i/o timeout")
	epochs.mu.Unlock()
	_, err := r.Current(context.Background(), "n1")
	if !errors.Is(err, ErrUnverified) {
		t.Fatalf("Current with the database failing: %v, want ErrUnverified", err)
	}
	if got := sol.TenantText(fmt.Errorf("console history: %w", err)); got != "obmd cannot reach its database right now" {
		t.Errorf("tenant text: %q, want obmd's database named, not the BMC", got)
	}
}

package access

import (
	"context"
	"errors"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/obmd/obmd/bastion/access/sessions"
	"github.com/obmd/obmd/db"
)

// fakePeers records notices and answers each with err.
type fakePeers struct {
	mu    sync.Mutex
	err   error
	calls []string
}

func (f *fakePeers) Notify(_ context.Context, label string, epoch int64, why string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, label+" "+why)
	return f.err
}

func (f *fakePeers) NotifyCred(_ context.Context, epoch int64, c db.CredChange, why string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, c.Kind+" "+why)
	return f.err
}

func (f *fakePeers) taken() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.calls...)
}

// settleEpochs is fakeEpochs whose Settle waits for release and then
// answers the epoch as set by then.
type settleEpochs struct {
	*fakeEpochs
	release chan struct{}
}

func (s *settleEpochs) Settle(ctx context.Context, label string) (int64, error) {
	select {
	case <-s.release:
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	return s.Epoch(ctx, label)
}

const testBound = 150 * time.Millisecond

func newChangeRevoker(peers Peers) (*Revoker, *fakeCutter, *sessions.Registry, *settleEpochs) {
	reg := sessions.New(sessions.Config{CutWait: 5 * time.Second})
	cons := &fakeCutter{reg: reg}
	epochs := &settleEpochs{fakeEpochs: &fakeEpochs{epoch: map[string]int64{}}, release: make(chan struct{})}
	log := logrus.New()
	log.SetOutput(io.Discard)
	return NewRevoker(RevokerConfig{ChangeTimeout: testBound, Peers: peers}, cons, reg, epochs, log), cons, reg, epochs
}

// TestChangeConfirmed: a change stored in time cuts the older sessions
// here and is passed to the peers before Change returns.
func TestChangeConfirmed(t *testing.T) {
	peers := &fakePeers{}
	r, cons, reg, epochs := newChangeRevoker(peers)
	epochs.set("n1", 3)
	old := session(t, reg, "n1", 3)
	err := r.Change(context.Background(), Change{Node: "n1", Why: "token rotated",
		Do: func(context.Context) (int64, error) { epochs.set("n1", 4); return 4, nil }})
	if err != nil {
		t.Fatalf("Change: %v", err)
	}
	if got := context.Cause(old); got == nil || got.Error() != "access to n1 was revoked (token rotated)" {
		t.Errorf("old session: got %v, want cut with the change's reason", got)
	}
	if got := peers.taken(); len(got) != 1 || got[0] != "n1 token rotated" {
		t.Errorf("peers told: got %q, want the change once", got)
	}
	if got := cons.taken(); len(got) != 1 {
		t.Errorf("console cuts: got %q, want one", got)
	}

	// The peers do not confirm: stored and applied here, but the caller is
	// told so.
	peers.err = errors.New("not confirmed by replica rep-b")
	err = r.Change(context.Background(), Change{Node: "n1", Why: "token revoked",
		Do: func(context.Context) (int64, error) { epochs.set("n1", 5); return 5, nil }})
	if !errors.Is(err, ErrNotConfirmed) || !errors.Is(err, ErrIncomplete) || !strings.Contains(err.Error(), "rep-b") {
		t.Errorf("Change with a peer silent: got %v, want ErrNotConfirmed naming rep-b", err)
	}
}

// TestChangeOutcomeUnknown: a database call that outlives the bound is
// answered within it, the node fails closed (sessions cut, admission and
// consoles refused) until the database has decided, and then the outcome
// is applied and reported.
func TestChangeOutcomeUnknown(t *testing.T) {
	for _, stored := range []bool{true, false} {
		name := map[bool]string{true: "stored_late", false: "not_stored"}[stored]
		t.Run(name, func(t *testing.T) {
			peers := &fakePeers{}
			r, _, reg, epochs := newChangeRevoker(peers)
			epochs.set("n1", 3)
			live := session(t, reg, "n1", 3)
			commit := make(chan struct{})
			settled := make(chan bool, 1)
			start := time.Now()
			err := r.Change(context.Background(), Change{Node: "n1", Why: "token rotated",
				Do: func(context.Context) (int64, error) {
					<-commit // a write stuck in the kernel: no context reaches it
					if !stored {
						return 0, errors.New("disk I/O error")
					}
					epochs.set("n1", 4)
					return 4, nil
				},
				Settled: func(s bool) { settled <- s }})
			if took := time.Since(start); !errors.Is(err, ErrOutcomeUnknown) || took > testBound+time.Second {
				t.Fatalf("Change: got %v after %v, want ErrOutcomeUnknown within the bound", err, took)
			}
			if got := context.Cause(live); got == nil || !strings.Contains(got.Error(), whyUnconfirmed) {
				t.Errorf("live session: got %v, want cut (fail closed)", got)
			}
			if err := r.admit(context.Background(), "n1", 3, 0); err == nil || !strings.Contains(err.Error(), "not confirmed") {
				t.Errorf("Admit while pending: got %v, want refused", err)
			}
			if _, err := r.Current(context.Background(), "n1"); err == nil {
				t.Error("Current while pending: got nil, want refused")
			}
			if err := r.Serve(context.Background(), "n1", 3, func() error { return nil }); err == nil {
				t.Error("Serve while pending: got nil, want refused")
			}
			close(commit)
			close(epochs.release)
			select {
			case got := <-settled:
				if got != stored {
					t.Errorf("settled: got stored %v, want %v", got, stored)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("never settled")
			}
			want, stale := int64(3), int64(4)
			if stored {
				want, stale = 4, 3
			}
			if err := r.admit(context.Background(), "n1", want, 0); err != nil {
				t.Errorf("Admit at epoch %d after settling: %v", want, err)
			}
			if err := r.admit(context.Background(), "n1", stale, 0); err == nil {
				t.Errorf("Admit at epoch %d after settling: got nil, want refused", stale)
			}
			if got := peers.taken(); (len(got) == 1) != stored {
				t.Errorf("peers told: got %q, want the late change only if stored", got)
			}
			if err := r.Close(context.Background()); err != nil {
				t.Errorf("Close: %v", err)
			}
		})
	}
}

// TestChangeGrantUndone: a grant whose database call outlived the bound
// and then landed is taken back once settled (the caller was told it
// failed), and the epoch that moved is applied.
func TestChangeGrantUndone(t *testing.T) {
	r, _, _, epochs := newChangeRevoker(nil)
	epochs.set("n1", 3)
	commit := make(chan struct{})
	undone := make(chan struct{})
	settled := make(chan bool, 1)
	err := r.Change(context.Background(), Change{Node: "n1", Why: "key removed",
		Do: func(context.Context) (int64, error) { <-commit; return 0, nil },
		Undo: func(context.Context) (bool, int64, error) {
			close(undone)
			epochs.set("n1", 4)
			return true, 4, nil
		},
		Settled: func(s bool) { settled <- s }})
	if !errors.Is(err, ErrOutcomeUnknown) {
		t.Fatalf("Change: got %v, want ErrOutcomeUnknown", err)
	}
	close(commit)
	close(epochs.release)
	if !<-settled {
		t.Error("settled: got not stored, want stored (and undone)")
	}
	select {
	case <-undone:
	default:
		t.Error("the grant was not undone")
	}
	if err := r.admit(context.Background(), "n1", 3, 0); err == nil {
		t.Error("Admit at the epoch before the undo: got nil, want refused")
	}
	r.Close(context.Background())
}

// TestChangeWaitsBounded: a change that cannot even take the node's lock
// (another one holds it) or read the node gives up within the bound,
// having changed nothing.
func TestChangeWaitsBounded(t *testing.T) {
	r, _, _, epochs := newChangeRevoker(nil)
	epochs.set("n1", 3)
	end := r.Begin("n1")
	ran := false
	err := r.Change(context.Background(), Change{Node: "n1", Why: "token rotated",
		Do: func(context.Context) (int64, error) { ran = true; return 4, nil }})
	end(0, "")
	if !errors.Is(err, ErrNotStored) || ran {
		t.Errorf("Change behind a held lock: got %v (ran %v), want ErrNotStored without running", err, ran)
	}
	epochs.err = context.DeadlineExceeded
	err = r.Change(context.Background(), Change{Node: "n1", Why: "token rotated",
		Do: func(context.Context) (int64, error) { ran = true; return 4, nil }})
	if ran || err == nil {
		t.Errorf("Change with the database failing: got %v (ran %v), want its error without running", err, ran)
	}
}

// TestFenceServe: the holder serves a relay only at the node's current
// epoch, applies that epoch first if it had not, and attaches under the
// node's lock, so a change applied meanwhile waits for the attach and then
// cuts what it attached.
func TestFenceServe(t *testing.T) {
	r, cons, reg, epochs := newTestRevoker()
	epochs.set("n1", 5)
	old := session(t, reg, "n1", 4)
	attached := false
	err := r.Serve(context.Background(), "n1", 4, func() error { attached = true; return nil })
	if !errors.Is(err, ErrStaleEpoch) || attached {
		t.Errorf("Serve at epoch 4 of 5: got %v (attached %v), want ErrStaleEpoch", err, attached)
	}
	if old.Err() != nil {
		t.Error("a refused relay cut sessions")
	}
	inAttach, release := make(chan struct{}), make(chan struct{})
	served := make(chan error, 1)
	go func() {
		served <- r.Serve(context.Background(), "n1", 5, func() error {
			close(inAttach)
			<-release
			return nil
		})
	}()
	<-inAttach
	if old.Err() == nil {
		t.Error("serving epoch 5 left a session of epoch 4 live on the holder")
	}
	applied := make(chan struct{})
	go func() {
		r.Apply("n1", 6, "token rotated")
		close(applied)
	}()
	select {
	case <-applied:
		t.Fatal("a change was applied while a relay was being attached")
	case <-time.After(50 * time.Millisecond):
	}
	close(release)
	if err := <-served; err != nil {
		t.Errorf("Serve at the current epoch: %v", err)
	}
	<-applied
	if got := cons.taken(); len(got) != 2 {
		t.Errorf("console cuts: got %q, want epoch 5 applied before the attach, 6 after", got)
	}
	// A database read lagging behind the change applied here (6) does not
	// let a relay at 5 through.
	if err := r.Serve(context.Background(), "n1", 5, func() error { return nil }); !errors.Is(err, ErrStaleEpoch) {
		t.Errorf("Serve at epoch 5 after 6 was applied, the database still at 5: got %v, want ErrStaleEpoch", err)
	}
}

// TestFenceCurrent: a replica that has not applied the node's epoch
// applies it (cutting the console being opened) and refuses the open;
// then it answers the epoch.
func TestFenceCurrent(t *testing.T) {
	r, cons, reg, epochs := newTestRevoker()
	r.Watched(3)
	epochs.set("n1", 3)
	if e, err := r.Current(context.Background(), "n1"); err != nil || e != 3 {
		t.Fatalf("Current at the watched epoch: got %d, %v, want 3", e, err)
	}
	old := session(t, reg, "n1", 3)
	epochs.set("n1", 4)
	if _, err := r.Current(context.Background(), "n1"); err == nil {
		t.Error("Current after a change not applied here: got nil, want refused")
	}
	if old.Err() == nil || len(cons.taken()) != 1 {
		t.Errorf("the change was not applied: session err %v, console cuts %q", old.Err(), cons.taken())
	}
	if e, err := r.Current(context.Background(), "n1"); err != nil || e != 4 {
		t.Errorf("Current once applied: got %d, %v, want 4", e, err)
	}
	// A late notice of an epoch the watcher passed wipes nothing.
	r.Watched(4)
	r.Apply("n1", 4, "access changed")
	r.Apply("n1", 2, "access changed")
	if got := cons.taken(); len(got) != 1 {
		t.Errorf("late notices cut: %q", got)
	}
}

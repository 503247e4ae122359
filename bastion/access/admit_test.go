package access

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/obmd/obmd/bastion/access/sessions"
	"github.com/obmd/obmd/sol"
)

// TestOpenErrors: what Open refuses, and how its errors tell each case.
func TestOpenErrors(t *testing.T) {
	r, _, reg, epochs := newTestRevoker()
	epochs.set("n1", 5)
	info := sessions.Info{Node: "n1", Kind: sessions.KindExec, Epoch: 5}

	s, err := r.Open(context.Background(), info, "a", nil)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	if s.Info().ID == "" || len(reg.List("n1")) != 1 {
		t.Errorf("open: got %+v, want a registered session", s.Info())
	}
	s.End()
	if live := reg.List("n1"); len(live) != 0 {
		t.Errorf("after End: got %+v, want no session", live)
	}

	stale := info
	stale.Epoch = 4
	var se *StaleError
	var revoked *sessions.RevokedError
	if _, err := r.Open(context.Background(), stale, "a", nil); !errors.As(err, &se) || !errors.As(err, &revoked) ||
		err.Error() != "access to n1 was revoked (access changed)" {
		t.Errorf("stale login: got %v, want a *StaleError that is the revocation", err)
	}

	epochs.mu.Lock()
	epochs.err = errors.New("database at 10.0.0.9 not answering")
	epochs.mu.Unlock()
	if _, err := r.Open(context.Background(), info, "a", nil); !errors.Is(err, ErrUnverified) {
		t.Errorf("database down: got %v, want ErrUnverified", err)
	}
	epochs.mu.Lock()
	epochs.err = nil
	epochs.mu.Unlock()

	gone, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := r.Open(gone, info, "a", nil); !errors.Is(err, context.Canceled) || IsCut(err) {
		t.Errorf("client gone: got %v, want its context's cause", err)
	}
	if live := reg.List(""); len(live) != 0 {
		t.Errorf("refused sessions left in the registry: %+v", live)
	}

	reg.Shutdown()
	if _, err := r.Open(context.Background(), info, "a", nil); !errors.Is(err, sol.ErrShutdown) || !IsCut(err) {
		t.Errorf("shutting down: got %v, want sol.ErrShutdown", err)
	}
}

// TestOpenWatchdog: a cut session that does not finish has its client
// unblocked after CutGrace; one that finishes in time, or whose client
// left, is not.
func TestOpenWatchdog(t *testing.T) {
	r, _, _, epochs := newTestRevoker()
	epochs.set("n1", 5)
	info := sessions.Info{Node: "n1", Kind: sessions.KindConsole, Epoch: 5}
	open := func(ctx context.Context) (*Session, chan struct{}) {
		unblocked := make(chan struct{})
		s, err := r.Open(ctx, info, "a", func() { close(unblocked) })
		if err != nil {
			t.Fatal(err)
		}
		return s, unblocked
	}

	stuck, unblocked := open(context.Background())
	cut := time.Now()
	revoked := make(chan struct{})
	go func() { // waited for below
		defer close(revoked)
		r.Revoke("n1", 6, "token rotated") // waits for stuck to end
	}()
	select {
	case <-unblocked:
		if took := time.Since(cut); took < CutGrace {
			t.Errorf("unblocked after %v, want at least CutGrace (%v)", took, CutGrace)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a stuck cut session was never unblocked")
	}
	stuck.End()
	<-revoked

	epochs.set("n1", 7)
	info.Epoch = 7
	polite, unblocked := open(context.Background())
	go func() {
		<-polite.Context().Done()
		polite.Finish() // says its last words at once
	}()
	r.Revoke("n1", 8, "token revoked")
	polite.End()
	select {
	case <-unblocked:
		t.Error("a session that finished in time was unblocked")
	default:
	}

	epochs.set("n1", 9)
	info.Epoch = 9
	ctx, leave := context.WithCancel(context.Background())
	left, unblocked := open(ctx)
	leave()
	time.Sleep(2 * CutGrace)
	left.End()
	select {
	case <-unblocked:
		t.Error("a session whose client left was unblocked")
	default:
	}
}

// TestOpenMark: a session whose login took the Revoker's mark before its
// read starts without a second read of the epoch if nothing was cut here
// since; a login that raced a change applied here (the mark moved) is read
// again and refused, even once the node's state is forgotten; and one
// that raced a change not applied here yet starts, and is cut with the
// node's other sessions when the change is applied.
func TestOpenMark(t *testing.T) {
	r, _, _, epochs := newTestRevoker()
	epochs.set("n1", 5)
	info := sessions.Info{Node: "n1", Kind: sessions.KindExec, Epoch: 5, Mark: r.Mark()}
	s, err := r.Open(context.Background(), info, "a", nil)
	if err != nil {
		t.Fatalf("open with a current mark: %v", err)
	}
	s.End()
	if n := epochs.readCount(); n != 0 {
		t.Errorf("open with a current mark read the epoch %d time(s), want 0", n)
	}

	// A database this replica cannot use: the epoch is read (and, through
	// the Gate, refused) whatever the mark.
	usable := false
	r.cfg.Usable = func() bool { return usable }
	info.Mark = r.Mark()
	if s, err := r.Open(context.Background(), info, "a", nil); err != nil {
		t.Fatalf("open while the database is unusable (the fake still answers): %v", err)
	} else {
		s.End()
	}
	if n := epochs.readCount(); n != 1 {
		t.Errorf("open while the database is unusable read the epoch %d time(s), want 1", n)
	}
	usable = true
	epochs.mu.Lock()
	epochs.reads = 0
	epochs.mu.Unlock()

	// The login read epoch 5 with this mark; a rotation is then applied
	// here and the watcher passes it (the node's state is dropped).
	mark := r.Mark()
	epochs.set("n1", 6)
	r.Revoke("n1", 6, "token rotated")
	r.Watched(6)
	raced := info
	raced.Mark = mark
	var se *StaleError
	if _, err := r.Open(context.Background(), raced, "a", nil); !errors.As(err, &se) {
		t.Errorf("login that raced a rotation applied here: got %v, want a *StaleError", err)
	}
	if n := epochs.readCount(); n != 1 {
		t.Errorf("the raced login read the epoch %d time(s), want 1", n)
	}

	// A change committed elsewhere that this replica has not applied: the
	// session starts (as one a moment earlier would have) and is cut when
	// the change is applied.
	cur := sessions.Info{Node: "n1", Kind: sessions.KindExec, Epoch: 6, Mark: r.Mark()}
	epochs.set("n1", 7)
	s, err = r.Open(context.Background(), cur, "a", nil)
	if err != nil {
		t.Fatalf("open before the change is applied here: %v", err)
	}
	defer s.End()
	r.Apply("n1", 7, "token rotated")
	if got := context.Cause(s.Context()); !IsCut(got) {
		t.Errorf("the session of epoch 6 after epoch 7 was applied: cause %v, want a cut", got)
	}
}

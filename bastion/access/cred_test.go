package access

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/obmd/obmd/bastion/access/sessions"
	"github.com/obmd/obmd/db"
)

// certSession starts a session of node that logged in with a certificate
// of CA ca, serial and key id keyID, its login's read at epoch seen.
func certSession(t *testing.T, reg *sessions.Registry, node, ca string, serial uint64, keyID string, seen int64) context.Context {
	t.Helper()
	ctx, _, end, err := reg.Start(context.Background(), sessions.Info{Node: node, Epoch: 1,
		Cert: &sessions.Cert{CA: ca, Serial: serial, KeyID: keyID, Seen: seen}}, "a")
	if err != nil {
		t.Fatal(err)
	}
	go func() { <-ctx.Done(); end() }()
	return ctx
}

func alive(t *testing.T, what string, ctx context.Context) {
	t.Helper()
	if ctx.Err() != nil {
		t.Errorf("%s: cut (%v), want alive", what, context.Cause(ctx))
	}
}

// TestRevokeCred: a credential change cuts the certificate sessions it
// names that logged in before it, on every node, and wipes no console; a
// session that read the database after it, a token session, and another
// certificate are left alone; applying it again cuts nothing more.
func TestRevokeCred(t *testing.T) {
	r, cons, reg, _ := newTestRevoker()
	cut1 := certSession(t, reg, "n1", "SHA256:ca", 42, "alice", 4)
	cut2 := certSession(t, reg, "n2", "SHA256:ca", 42, "alice", 4)
	after := certSession(t, reg, "n1", "SHA256:ca", 42, "alice", 5)
	other := certSession(t, reg, "n1", "SHA256:ca", 43, "alice", 4)
	otherCA := certSession(t, reg, "n1", "SHA256:other", 42, "carol", 4)
	token := session(t, reg, "n1", 1)
	if n := r.RevokeCred(5, db.CredChange{Kind: db.CredSerial, CA: "SHA256:ca", Serial: 42}, db.ReasonCertRevoked); n != 2 {
		t.Errorf("cut: got %d, want 2", n)
	}
	waitCut(t, cut1, "access to n1 was revoked (certificate revoked)")
	waitCut(t, cut2, "access to n2 was revoked (certificate revoked)")
	for what, ctx := range map[string]context.Context{"logged in after": after, "other serial": other,
		"other CA": otherCA, "token": token} {
		alive(t, what, ctx)
	}
	if got := cons.taken(); len(got) != 0 {
		t.Errorf("consoles cut: %q, want none (a credential change ends no tenancy)", got)
	}
	if n := r.RevokeCred(5, db.CredChange{Kind: db.CredSerial, CA: "SHA256:ca", Serial: 42}, db.ReasonCertRevoked); n != 0 {
		t.Errorf("applied again: cut %d, want 0", n)
	}
	// Every CA's key id; then a CA removed; then a kind this version does
	// not know, which ends every certificate session from before it.
	byID := certSession(t, reg, "n3", "SHA256:third", 1, "alice", 6)
	r.ApplyCred(7, db.CredChange{Kind: db.CredKeyID, KeyID: "alice"}, db.ReasonCertRevoked)
	waitCut(t, byID, "access to n3 was revoked (certificate revoked)")
	waitCut(t, other, "access to n1 was revoked (certificate revoked)")
	r.RevokeCred(8, db.CredChange{Kind: db.CredCA, CA: "SHA256:other"}, db.ReasonCARemoved)
	waitCut(t, otherCA, "access to n1 was revoked (certificate authority removed)")
	bob := certSession(t, reg, "n1", "SHA256:new", 9, "bob", 8)
	r.RevokeCred(9, db.CredChange{Kind: "from-the-future"}, "certificate revoked")
	waitCut(t, bob, "access to n1 was revoked (certificate revoked)")
	alive(t, "token", token)
}

// TestChangeCred: a credential change stored in time cuts here, then tells
// the peers; one the database does not confirm in time cuts every session
// it names here at once (whenever they logged in), refuses such sessions
// at Open until the call returns, and is applied and told then.
func TestChangeCred(t *testing.T) {
	peers := &fakePeers{}
	r, _, reg, epochs := newChangeRevoker(peers)
	epochs.set("n1", 1)
	c := db.CredChange{Kind: db.CredCA, CA: "SHA256:ca"}
	old := certSession(t, reg, "n1", "SHA256:ca", 1, "alice", 3)
	err := r.ChangeCred(context.Background(), CredChange{Cred: c, Why: db.ReasonCARemoved,
		Do: func(context.Context) (int64, error) { return 4, nil }})
	if err != nil {
		t.Fatalf("ChangeCred: %v", err)
	}
	waitCut(t, old, "access to n1 was revoked (certificate authority removed)")
	if got := peers.taken(); len(got) != 1 || got[0] != "ca certificate authority removed" {
		t.Errorf("peers told: got %q, want the change once", got)
	}
	if err := r.ChangeCred(context.Background(), CredChange{Cred: c, Why: db.ReasonCARemoved,
		Do: func(context.Context) (int64, error) { return 0, nil }}); err != nil || len(peers.taken()) != 1 {
		t.Errorf("a change that changed nothing: got %v and peers %q, want nil and no notice", err, peers.taken())
	}
	boom := errors.New("boom")
	if err := r.ChangeCred(context.Background(), CredChange{Cred: c, Why: db.ReasonCARemoved,
		Do: func(context.Context) (int64, error) { return 0, boom }}); !errors.Is(err, boom) {
		t.Errorf("a failed change: got %v, want its error", err)
	}

	// Unconfirmed: Do outlives the bound.
	late := certSession(t, reg, "n1", "SHA256:ca", 1, "alice", 100) // "after" it by its read: cut all the same
	release := make(chan struct{})
	err = r.ChangeCred(context.Background(), CredChange{Cred: c, Why: db.ReasonCARemoved,
		Do: func(context.Context) (int64, error) { <-release; return 5, nil }})
	if !errors.Is(err, ErrOutcomeUnknown) {
		t.Fatalf("unconfirmed: got %v, want ErrOutcomeUnknown", err)
	}
	waitCut(t, late, "access to n1 was revoked (certificate authority removed)")
	info := sessions.Info{Node: "n1", Epoch: 1, Cert: &sessions.Cert{CA: "SHA256:ca", Serial: 2, KeyID: "bob", Seen: 100}}
	if _, err := r.Open(context.Background(), info, "a", nil); !errors.Is(err, ErrUnverified) {
		t.Errorf("Open while the change is pending: got %v, want ErrUnverified", err)
	}
	info.Cert.CA = "SHA256:unrelated"
	s, err := r.Open(context.Background(), info, "a", nil)
	if err != nil {
		t.Fatalf("Open of another CA's certificate while the change is pending: %v", err)
	}
	s.End()
	close(release)
	info.Cert.CA = "SHA256:ca"
	waitUntil(t, "the pending change to settle", func() bool { return r.certSettled(info.Cert) == nil })
	waitUntil(t, "the settled change told to the peers", func() bool { return len(peers.taken()) == 2 })
	if err := r.Close(context.Background()); err != nil {
		t.Errorf("Close: %v", err)
	}
}

// TestWatcherCred: the change watcher applies a credential change made
// elsewhere (a change with no node) to the certificate sessions it names.
func TestWatcherCred(t *testing.T) {
	r, cons, reg, _ := newTestRevoker()
	store := &fakeDB{latest: 1}
	runWatcher(t, fastWatcher(t, store, r))
	old := certSession(t, reg, "n1", "SHA256:ca", 42, "alice", 1)
	token := session(t, reg, "n1", 1)
	store.mu.Lock()
	store.changes = append(store.changes, db.Change{Epoch: 2, Reason: db.ReasonCertRevoked,
		Cred: db.CredChange{Kind: db.CredSerial, Serial: 42}})
	store.mu.Unlock()
	waitCut(t, old, "access to n1 was revoked (certificate revoked)")
	time.Sleep(20 * time.Millisecond) // a few more polls
	alive(t, "token", token)
	if got := cons.taken(); len(got) != 0 {
		t.Errorf("consoles cut: %q, want none", got)
	}
}

// runWatcher starts and runs w until the test ends, and checks that it
// ended well.
func runWatcher(t *testing.T, w *Watcher) {
	ctx, cancel := context.WithCancel(context.Background())
	if err := w.Start(ctx); err != nil {
		cancel()
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }() // waited for at cleanup
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: got %v, want nil", err)
		}
	})
}

package cluster

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	gossh "golang.org/x/crypto/ssh"

	"github.com/obmd/obmd/db"
	"github.com/obmd/obmd/db/dbtest"
	"github.com/obmd/obmd/sol"
	"github.com/obmd/obmd/sol/sim"
)

// TestRelayAtCurrentEpoch: a relay carries the epoch its replica has
// applied; once the holder applies a change (a notice), the relaying
// replica's previous tenancy gets nothing more: its relay ends, and it can
// reopen one only after it has applied the change itself, which ends its
// old viewers.
func TestRelayAtCurrentEpoch(t *testing.T) {
	key, lab := newHostKey(t), sim.NewLab()
	b := lab.BMC("n1", sim.ModeNormal)
	dsn := dbtest.SQLiteDSN(t)
	epochs := &sharedEpochs{}
	r0 := startReplica(t, "r0", openStore(t, dsn), lab, key, epochs)
	r1 := startReplica(t, "r1", openStore(t, dsn), lab, key, epochs)
	old0 := attach(t, r0, "n1", "old@r0")
	waitFor(t, "the link", func() bool { return r0.hub.Stats().LinksUp == 1 })
	old1 := attach(t, r1, "n1", "old@r1")
	rec0, rec1 := record(old0), record(old1)
	seeAll(t, b, "before\n", rec0, rec1)

	epochs.set("n1", 2) // committed
	r0.acc.Apply("n1", 2, "token rotated")
	for _, v := range []*sol.Viewer{old0, old1} {
		select {
		case <-v.Done():
		case <-time.After(wait):
			t.Fatalf("viewer %s not ended by the change", v.Name())
		}
	}
	if got := r1.acc.taken(); len(got) != 0 {
		t.Errorf("r1 was told %q: it must learn of the change from its own check", got)
	}
	new1 := attach(t, r1, "n1", "new@r1")
	recNew := record(new1)
	seeAll(t, b, "after\n", recNew)
	if rec1.has("after") || rec0.has("after") {
		t.Error("an old viewer saw output of the next tenancy")
	}
	typed := len(b.Typed())
	old1.Write([]byte("old-keys")) // fails: ended
	if _, err := new1.Write([]byte("new-keys")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the new keys", func() bool { return strings.Contains(string(b.Typed()[typed:]), "new-keys") })
	if strings.Contains(string(b.Typed()[typed:]), "old-keys") {
		t.Error("an old viewer's keys reached the node")
	}
}

// TestRelayStaleRefused: the holder refuses a relay at an epoch behind the
// node's, and applies a newer one before it serves it.
func TestRelayStaleRefused(t *testing.T) {
	key, lab := newHostKey(t), sim.NewLab()
	lab.BMC("n1", sim.ModeNormal)
	dsn := dbtest.SQLiteDSN(t)
	epochs := &sharedEpochs{}
	r0 := startReplica(t, "r0", openStore(t, dsn), lab, key, epochs)
	old := attach(t, r0, "n1", "old@r0")
	waitFor(t, "the link", func() bool { return r0.hub.Stats().LinksUp == 1 })
	epochs.set("n1", 3) // r0 has not heard of it

	c, err := r0.c.dialPeer(context.Background(), r0.l.Addr().String(), "r0")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, _, err = c.OpenChannel(consoleChannel, gossh.Marshal(consoleOpen{Label: "n1", From: "x", Epoch: 2}))
	var oce *gossh.OpenChannelError
	if !errors.As(err, &oce) || !strings.HasPrefix(oce.Message, staleMessage) {
		t.Errorf("relay at epoch 2 of 3: got %v, want refused as stale", err)
	}
	select {
	case <-old.Done():
		t.Error("a stale relay made the holder cut its viewers")
	default:
	}
	ch, reqs, err := c.OpenChannel(consoleChannel, gossh.Marshal(consoleOpen{Label: "n1", From: "x", Epoch: 3}))
	if err != nil {
		t.Fatalf("relay at the current epoch: %v", err)
	}
	go gossh.DiscardRequests(reqs)
	defer ch.Close()
	select {
	case <-old.Done():
	case <-time.After(wait):
		t.Error("the holder served epoch 3 with a viewer of the previous tenancy still attached")
	}
}

// TestNotify: a change is passed to every announced replica and to the
// node's SOL lease holder; one that cannot be reached counts once its
// announcement shows the change applied; Notify names those that never
// confirm.
func TestNotify(t *testing.T) {
	engines(t, func(t *testing.T, dsn string) {
		key, lab := newHostKey(t), sim.NewLab()
		st := openStore(t, dsn)
		var rs []*replica
		for i := range 4 {
			rs = append(rs, startReplica(t, fmt.Sprintf("r%d", i), openStore(t, dsn), lab, key))
		}
		ctx := context.Background()
		for _, r := range rs[:3] { // r3 never announces: it holds n1's SOL lease
			if err := r.c.Announce(ctx, 1); err != nil {
				t.Fatal(err)
			}
		}
		holder := rs[3].c.lease("n1", db.LeaseSOL, newToken())
		if _, err := st.AcquireLease(ctx, holder, time.Minute); err != nil {
			t.Fatal(err)
		}
		if err := rs[0].c.Notify(ctx, "n1", 5, "token rotated"); err != nil {
			t.Fatalf("Notify: %v", err)
		}
		for _, r := range rs[1:] {
			if got := r.acc.taken(); len(got) != 1 || got[0] != "n1 5 token rotated" {
				t.Errorf("%s: got notices %q, want the change", r.id, got)
			}
		}
		if got := rs[0].acc.taken(); len(got) != 0 {
			t.Errorf("the replica that made the change told itself: %q", got)
		}

		// r2's peer server is gone; it polls the database and announces.
		rs[2].kill(t)
		rs[2].store.dead.Store(false)
		go func() {
			time.Sleep(200 * time.Millisecond)
			if err := rs[2].c.Announce(ctx, 6); err != nil {
				t.Error(err)
			}
		}()
		cctx, cancel := context.WithTimeout(ctx, wait)
		defer cancel()
		if err := rs[0].c.Notify(cctx, "n1", 6, "token revoked"); err != nil {
			t.Errorf("Notify with r2 unreachable, then announcing: %v", err)
		}
		short, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		defer cancel()
		if err := rs[0].c.Notify(short, "n1", 7, "key removed"); err == nil || !strings.Contains(err.Error(), "r2") {
			t.Errorf("Notify with r2 silent: got %v, want an error naming r2", err)
		}
	})
}

// TestNotifyCred: a credential change is passed to every announced
// replica over the peer link (the notice carries the change whole), not
// to a lease holder that does not announce itself; a replica that cannot
// be reached (or refuses the notice: one from before credential notices)
// counts once its announcement shows the change applied.
func TestNotifyCred(t *testing.T) {
	engines(t, func(t *testing.T, dsn string) {
		key, lab := newHostKey(t), sim.NewLab()
		st := openStore(t, dsn)
		var rs []*replica
		for i := range 3 {
			rs = append(rs, startReplica(t, fmt.Sprintf("r%d", i), openStore(t, dsn), lab, key))
		}
		ctx := context.Background()
		for _, r := range rs[:2] { // r2 never announces: it holds n1's SOL lease
			if err := r.c.Announce(ctx, 1); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := st.AcquireLease(ctx, rs[2].c.lease("n1", db.LeaseSOL, newToken()), time.Minute); err != nil {
			t.Fatal(err)
		}
		c := db.CredChange{Kind: db.CredKeyID, CA: "SHA256:abc", KeyID: "alice smith"}
		if err := rs[0].c.NotifyCred(ctx, 5, c, db.ReasonCertRevoked); err != nil {
			t.Fatalf("NotifyCred: %v", err)
		}
		want := "cred key_id SHA256:abc 0 alice smith 5 certificate revoked"
		if got := rs[1].acc.taken(); len(got) != 1 || got[0] != want {
			t.Errorf("r1: got notices %q, want %q", got, want)
		}
		if got := rs[2].acc.taken(); len(got) != 0 {
			t.Errorf("r2 (not announced, lease holder): got notices %q, want none", got)
		}

		// A replica that refuses the notice is waited for through its
		// announcement.
		rs[1].kill(t)
		rs[1].store.dead.Store(false)
		go func() {
			time.Sleep(200 * time.Millisecond)
			if err := rs[1].c.Announce(ctx, 6); err != nil {
				t.Error(err)
			}
		}()
		cctx, cancel := context.WithTimeout(ctx, wait)
		defer cancel()
		if err := rs[0].c.NotifyCred(cctx, 6, db.CredChange{Kind: db.CredCA, CA: "SHA256:abc"}, db.ReasonCARemoved); err != nil {
			t.Errorf("NotifyCred with r1 unreachable, then announcing: %v", err)
		}
	})
}

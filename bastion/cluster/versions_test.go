package cluster

import (
	"context"
	"testing"
	"time"

	"github.com/obmd/obmd/bastion/access/sessions"
	"github.com/obmd/obmd/sol/sim"
)

// TestMixedVersions: a replica of the previous release (peer protocol 1)
// and one of this release serve one cluster: consoles relay both ways,
// and each lists the other's sessions, those of the older one in the
// node's current tenancy (its list names none). The full test, with the
// previous release's binary, is the daemon's TestUpgradeSkew.
func TestMixedVersions(t *testing.T) {
	engines(t, func(t *testing.T, dsn string) {
		key, lab := newHostKey(t), sim.NewLab()
		b := lab.BMC("n1", sim.ModeNormal)
		epochs := &sharedEpochs{}
		epochs.set("n1", 7)
		old := startReplicaSpeaking(t, 1, "old", openStore(t, dsn), lab, key, epochs)
		cur := startReplica(t, "new", openStore(t, dsn), lab, key, epochs)
		for _, r := range []*replica{old, cur} {
			announce(t, r)
			r.acc.Current(context.Background(), "n1") // applies epoch 7 before anyone attaches
		}

		for _, order := range [][2]*replica{{old, cur}, {cur, old}} {
			holder, relaying := order[0], order[1]
			vh := attach(t, holder, "n1", "on "+holder.id)
			waitFor(t, holder.id+" holding the link", func() bool { return holder.c.Holds("n1") })
			vr := attach(t, relaying, "n1", "on "+relaying.id)
			rh, rr := record(vh), record(vr)
			seeAll(t, b, "relayed-from-"+holder.id+";", rh, rr)
			if relaying.c.Holds("n1") {
				t.Errorf("%s holds the link too", relaying.id)
			}
			vr.Close()
			vh.Close()
			waitFor(t, "the link closed", func() bool { return !holder.c.Holds("n1") && !holder.hub.LinkUp("n1") })
		}

		for _, r := range []*replica{old, cur} {
			ctx, _, end, err := r.reg.Start(context.Background(), sessions.Info{Node: "n1", Kind: sessions.KindConsole,
				User: "token", Remote: "127.0.0.1:1", Epoch: 7}, "127.0.0.1")
			if err != nil {
				t.Fatal(err)
			}
			go func() { <-ctx.Done(); end() }()
			t.Cleanup(end)
		}
		ctx, cancel := context.WithTimeout(context.Background(), wait)
		defer cancel()
		announce(t, old) // announcements last testTTL
		announce(t, cur)
		for _, r := range []*replica{old, cur} {
			list, err := r.c.RemoteSessions(ctx, "n1")
			if err != nil || len(list) != 1 {
				t.Fatalf("%s's list of the other's sessions: got %+v, %v, want one", r.id, list, err)
			}
			if s := list[0]; s.Epoch != 7 || s.Replica == r.id || s.Started.IsZero() || time.Since(s.Started) > wait {
				t.Errorf("%s lists the other's session as %+v, want it at epoch 7, started now", r.id, s)
			}
		}
	})
}

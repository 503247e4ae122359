package history

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/obmd/obmd/bastion/e2e/obmdtest"

	gossh "golang.org/x/crypto/ssh"

	"github.com/obmd/obmd/db"
	"github.com/obmd/obmd/sol/soltest"
	"github.com/obmd/obmd/sol/soltest/ipmisim"
)

// TestReplicasHistory: three replicas on MariaDB (then PostgreSQL) and a node captured
// always, with nobody attached. Each kind of access change (token rotated
// or revoked, key removed, node deleted and registered again, node changed
// by PUT), made through another replica, hides the old tenancy from the
// next tenant's console-log, replay and --follow on the other replicas. One replica holds its link (a lease);
// console-log returns the same history on each replica; a viewer
// attaching on any replica gets it in its replay; after SIGKILL of the
// holder, a survivor takes the capture over and appends to the same
// history, which lost at most the last flush interval.
func TestReplicasHistory(t *testing.T) { obmdtest.OnSharedEngines(t, testReplicasHistory) }

func testReplicasHistory(t *testing.T, dsn string) {
	ipmisim.Require(t, "ipmitool")
	bmc := ipmisim.Start(t)
	reps := obmdtest.Cluster(t, dsn, map[string]string{"OBMD_CLUSTER_LEASE_TTL": obmdtest.LeaseTTL.String(),
		"OBMD_CONSOLE_CAPTURE": "always", "OBMD_ACCESS_POLL": "200ms"})
	a := reps[0]
	a.MustAPI(200, "PUT", "/node/n1", map[string]any{"type": "ipmi", "info": bmc.Info()})
	tok := a.Rotate("n1")
	logOn := func(r *obmdtest.Replica) string {
		res, err := r.Exec("n1", tok, "console-log")
		if err != nil || res.Code != 0 {
			return ""
		}
		return res.Stdout
	}
	obmdtest.PrintUntilSeen(t, bmc.WriteSerial, "captured", func(m string) bool { return strings.Contains(logOn(a), m) })
	// Each kind of access change, made through another replica than the
	// reader: the next tenant sees nothing from before it, on any replica.
	var secrets []string
	for _, sc := range obmdtest.AccessChanges() {
		var secret string
		tok, secret = historyChange(t, reps, bmc, sc, tok)
		secrets = append(secrets, secret)
	}
	before := "before-the-kill-" + obmdtest.Random(t)[:8]
	if err := bmc.WriteSerial([]byte(before + "\r\n")); err != nil {
		t.Fatal(err)
	}
	var logs []string
	obmdtest.WaitUntil(t, "the same history on every replica", func() bool {
		logs = logs[:0]
		for _, r := range reps {
			logs = append(logs, logOn(r))
		}
		return strings.Contains(logs[0], before) && logs[1] == logs[0] && logs[2] == logs[0]
	})
	if k := strings.Count(logs[0], before); k != 1 {
		t.Errorf("the history holds %s %d times, want once (one replica records):\n%s", before, k, logs[0])
	}
	for i, r := range reps {
		v := r.GoViewer(t, "n1", tok)
		v.Out.Wait(t, "the replay on "+reps[i].Name, 0, before)
		for _, secret := range secrets {
			if strings.Contains(v.Out.String(), secret) || strings.Contains(logs[i], secret) {
				t.Errorf("%s shows a previous tenancy's output (%s) to the next tenant", reps[i].Name, secret)
			}
		}
	}

	st := obmdtest.OpenStore(t, dsn)
	l, err := st.Lease(context.Background(), "n1", db.LeaseSOL)
	if err != nil {
		t.Fatalf("SOL lease: %v", err)
	}
	var holder *obmdtest.Replica
	var survivors []*obmdtest.Replica
	for _, r := range reps {
		if r.Name == l.Owner {
			holder = r
		} else {
			survivors = append(survivors, r)
		}
	}
	if holder == nil {
		t.Fatalf("the SOL lease is held by %q, no replica of the test", l.Owner)
	}
	flushed := "flushed-" + obmdtest.Random(t)[:8]
	if err := bmc.WriteSerial([]byte(flushed + "\r\n")); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1500 * time.Millisecond) // past one flush interval
	holder.Kill(t)
	after := obmdtest.PrintUntilSeen(t, bmc.WriteSerial, "after-the-kill", func(m string) bool {
		return strings.Contains(logOn(survivors[0]), m)
	})
	var got string // the other survivor reads it from the database: one flush later
	obmdtest.WaitUntil(t, "the new holder's output on the other survivor", func() bool {
		got = logOn(survivors[1])
		return strings.Contains(got, after)
	})
	for _, want := range []string{before, flushed, after} {
		if !strings.Contains(got, want) {
			t.Errorf("console-log on %s after the holder's death lacks %s:\n%s", survivors[1].Name, want, got)
		}
	}
	if k := strings.Index(got, before); k < 0 || !strings.Contains(got[k:], after) {
		t.Errorf("the survivor's capture is not appended to the same history:\n%s", got)
	}
	t.Logf("holder %s killed; the capture was taken over", holder.Name)

	// A clean stop releases the lease at once (a kill leaves it for
	// cluster.lease_ttl), and the last replica takes the capture over.
	l, err = st.Lease(context.Background(), "n1", db.LeaseSOL)
	if err != nil {
		t.Fatalf("SOL lease after the takeover: %v", err)
	}
	last := survivors[0]
	if last.Name == l.Owner {
		last = survivors[1]
	}
	for _, r := range survivors {
		if r.Name == l.Owner {
			r.Stop(t)
		}
	}
	if l2, err := st.Lease(context.Background(), "n1", db.LeaseSOL); err == nil && l2.Owner == l.Owner {
		t.Errorf("the SOL lease is still %s's right after its SIGTERM stop", l.Owner)
	}
	obmdtest.PrintUntilSeen(t, bmc.WriteSerial, "after-the-stop", func(m string) bool { return strings.Contains(logOn(last), m) })
}

// historyChange runs one access change of sc on node n1 (captured, on
// bmc) through reps[1], the current tenant holding tok, and returns the
// next tenant's token and a secret the old tenancy printed. On reps[2]
// and reps[0], the next tenant's console-log, attach replay and --follow
// show the new tenancy's output and not the secret.
func historyChange(t *testing.T, reps []*obmdtest.Replica, bmc *ipmisim.Sim, sc obmdtest.AccessChange, tok string) (string, string) {
	t.Helper()
	logShows := func(r *obmdtest.Replica, tok string) func(string) bool {
		return func(m string) bool {
			res, err := r.Exec("n1", tok, "console-log")
			return err == nil && res.Code == 0 && strings.Contains(res.Stdout, m)
		}
	}
	fp := ""
	if sc.Key {
		k, _ := obmdtest.NewKey(t)
		fp = reps[0].AddKey("n1", k.PublicKey())
	}
	secret := obmdtest.PrintUntilSeen(t, bmc.WriteSerial, "old-"+sc.Name, logShows(reps[2], tok))
	switch sc.Name {
	case "info-change": // the node stays on bmc, with another cipher choice
		reps[1].MustAPI(200, "PUT", "/v1/nodes/n1", map[string]any{"type": "ipmi", "info": soltest.Unpinned(bmc.Info())})
	default:
		sc.Change(reps[1].Admin, "n1", fp)
	}
	switch sc.Name {
	case "rotate", "revoke":
		tok = reps[1].Rotate("n1")
	case "node-deletion":
		reps[1].MustAPI(200, "PUT", "/node/n1", map[string]any{"type": "ipmi", "info": bmc.Info()})
		tok = reps[1].Rotate("n1")
	}
	// The held link comes back for the new tenancy: output in between is
	// not captured (the BMC has no one to send it to).
	fresh := obmdtest.PrintUntilSeen(t, bmc.WriteSerial, "new-"+sc.Name, logShows(reps[2], tok))
	for _, r := range []*obmdtest.Replica{reps[2], reps[0]} {
		follow := obmdtest.StartGoSession(t, r.Listening["ssh"], "n1", gossh.Password(tok), obmdtest.SessionOpts{Cmd: "console-log --follow"})
		viewer := r.GoViewer(t, "n1", tok)
		follow.Expect(fresh)
		viewer.Expect(fresh) // the replay
		live := obmdtest.PrintUntilSeen(t, bmc.WriteSerial, "live-"+sc.Name, obmdtest.Shows(viewer.Out))
		follow.Expect(live) // from the database: one flush later
		res, err := r.Exec("n1", tok, "console-log")
		if err != nil || res.Code != 0 || !strings.Contains(res.Stdout, live) {
			t.Fatalf("%s on %s: console-log of the new tenancy: %v %v, want %s", sc.Name, r.Name, res, err, live)
		}
		for what, out := range map[string]string{"console-log": res.Stdout, "--follow": follow.Out.String(),
			"attach replay": viewer.Out.String()} {
			if strings.Contains(out, secret) {
				t.Errorf("%s on %s after %s shows the previous tenancy: %q", what, r.Name, sc.Name, out)
			}
		}
	}
	return tok, secret
}

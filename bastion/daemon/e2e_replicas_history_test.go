package daemon_test

import (
	"context"
	"strings"
	"testing"
	"time"

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
func TestReplicasHistory(t *testing.T) { onSharedEngines(t, testReplicasHistory) }

func testReplicasHistory(t *testing.T, dsn string) {
	ipmisim.Require(t, "ipmitool")
	bmc := ipmisim.Start(t)
	reps := rpCluster(t, dsn, map[string]string{"OBMD_LEASE_TTL": rpLeaseTTL.String(),
		"OBMD_CONSOLE_CAPTURE": "always", "OBMD_EPOCH_POLL": "200ms"})
	a := reps[0]
	a.mustAPI(200, "PUT", "/node/n1", map[string]any{"type": "ipmi", "info": bmc.Info()})
	tok := a.rotate("n1")
	logOn := func(r *rpReplica) string {
		res, err := r.exec("n1", tok, "console-log")
		if err != nil || res.Code != 0 {
			return ""
		}
		return res.Stdout
	}
	printUntilSeen(t, bmc.WriteSerial, "captured", func(m string) bool { return strings.Contains(logOn(a), m) })
	// Each kind of access change, made through another replica than the
	// reader: the next tenant sees nothing from before it, on any replica.
	var secrets []string
	for _, sc := range rvScenarios() {
		var secret string
		tok, secret = rpHistoryChange(t, reps, bmc, sc, tok)
		secrets = append(secrets, secret)
	}
	before := "before-the-kill-" + rpRandom(t)[:8]
	if err := bmc.WriteSerial([]byte(before + "\r\n")); err != nil {
		t.Fatal(err)
	}
	var logs []string
	waitUntil(t, "the same history on every replica", func() bool {
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
		v := r.goViewer(t, "n1", tok)
		v.out.wait(t, "the replay on "+reps[i].name, 0, before)
		for _, secret := range secrets {
			if strings.Contains(v.out.String(), secret) || strings.Contains(logs[i], secret) {
				t.Errorf("%s shows a previous tenancy's output (%s) to the next tenant", reps[i].name, secret)
			}
		}
	}

	st := rpStore(t, dsn)
	l, err := st.Lease(context.Background(), "n1", db.LeaseSOL)
	if err != nil {
		t.Fatalf("SOL lease: %v", err)
	}
	var holder *rpReplica
	var survivors []*rpReplica
	for _, r := range reps {
		if r.name == l.Owner {
			holder = r
		} else {
			survivors = append(survivors, r)
		}
	}
	if holder == nil {
		t.Fatalf("the SOL lease is held by %q, no replica of the test", l.Owner)
	}
	flushed := "flushed-" + rpRandom(t)[:8]
	if err := bmc.WriteSerial([]byte(flushed + "\r\n")); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1500 * time.Millisecond) // past one flush interval
	holder.kill(t)
	after := printUntilSeen(t, bmc.WriteSerial, "after-the-kill", func(m string) bool {
		return strings.Contains(logOn(survivors[0]), m)
	})
	var got string // the other survivor reads it from the database: one flush later
	waitUntil(t, "the new holder's output on the other survivor", func() bool {
		got = logOn(survivors[1])
		return strings.Contains(got, after)
	})
	for _, want := range []string{before, flushed, after} {
		if !strings.Contains(got, want) {
			t.Errorf("console-log on %s after the holder's death lacks %s:\n%s", survivors[1].name, want, got)
		}
	}
	if k := strings.Index(got, before); k < 0 || !strings.Contains(got[k:], after) {
		t.Errorf("the survivor's capture is not appended to the same history:\n%s", got)
	}
	t.Logf("holder %s killed; the capture was taken over", holder.name)

	// A clean stop releases the lease at once (a kill leaves it for
	// lease_ttl), and the last replica takes the capture over.
	l, err = st.Lease(context.Background(), "n1", db.LeaseSOL)
	if err != nil {
		t.Fatalf("SOL lease after the takeover: %v", err)
	}
	last := survivors[0]
	if last.name == l.Owner {
		last = survivors[1]
	}
	for _, r := range survivors {
		if r.name == l.Owner {
			r.stop(t)
		}
	}
	if l2, err := st.Lease(context.Background(), "n1", db.LeaseSOL); err == nil && l2.Owner == l.Owner {
		t.Errorf("the SOL lease is still %s's right after its SIGTERM stop", l.Owner)
	}
	printUntilSeen(t, bmc.WriteSerial, "after-the-stop", func(m string) bool { return strings.Contains(logOn(last), m) })
}

// rpHistoryChange runs one access change of sc on node n1 (captured, on
// bmc) through reps[1], the current tenant holding tok, and returns the
// next tenant's token and a secret the old tenancy printed. On reps[2]
// and reps[0], the next tenant's console-log, attach replay and --follow
// show the new tenancy's output and not the secret.
func rpHistoryChange(t *testing.T, reps []*rpReplica, bmc *ipmisim.Sim, sc rvScenario, tok string) (string, string) {
	t.Helper()
	logShows := func(r *rpReplica, tok string) func(string) bool {
		return func(m string) bool {
			res, err := r.exec("n1", tok, "console-log")
			return err == nil && res.Code == 0 && strings.Contains(res.Stdout, m)
		}
	}
	fp := ""
	if sc.key {
		k, _ := newKey(t)
		fp = reps[0].addKey("n1", k.PublicKey())
	}
	secret := printUntilSeen(t, bmc.WriteSerial, "old-"+sc.name, logShows(reps[2], tok))
	switch sc.name {
	case "info-change": // the node stays on bmc, with another cipher choice
		reps[1].mustAPI(200, "PUT", "/v1/nodes/n1", map[string]any{"type": "ipmi", "info": soltest.Unpinned(bmc.Info())})
	default:
		sc.change(reps[1].adminClient, "n1", fp)
	}
	switch sc.name {
	case "rotate", "revoke":
		tok = reps[1].rotate("n1")
	case "node-deletion":
		reps[1].mustAPI(200, "PUT", "/node/n1", map[string]any{"type": "ipmi", "info": bmc.Info()})
		tok = reps[1].rotate("n1")
	}
	// The held link comes back for the new tenancy: output in between is
	// not captured (the BMC has no one to send it to).
	fresh := printUntilSeen(t, bmc.WriteSerial, "new-"+sc.name, logShows(reps[2], tok))
	for _, r := range []*rpReplica{reps[2], reps[0]} {
		follow := goSession(t, r.listening["ssh"], "n1", gossh.Password(tok), conOpts{cmd: "console-log --follow"})
		viewer := r.goViewer(t, "n1", tok)
		follow.expect(fresh)
		viewer.expect(fresh) // the replay
		live := printUntilSeen(t, bmc.WriteSerial, "live-"+sc.name, shows(viewer.out))
		follow.expect(live) // from the database: one flush later
		res, err := r.exec("n1", tok, "console-log")
		if err != nil || res.Code != 0 || !strings.Contains(res.Stdout, live) {
			t.Fatalf("%s on %s: console-log of the new tenancy: %v %v, want %s", sc.name, r.name, res, err, live)
		}
		for what, out := range map[string]string{"console-log": res.Stdout, "--follow": follow.out.String(),
			"attach replay": viewer.out.String()} {
			if strings.Contains(out, secret) {
				t.Errorf("%s on %s after %s shows the previous tenancy: %q", what, r.name, sc.name, out)
			}
		}
	}
	return tok, secret
}

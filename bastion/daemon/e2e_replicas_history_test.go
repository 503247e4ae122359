package daemon_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/obmd/obmd/db"
	"github.com/obmd/obmd/db/dbtest"
	"github.com/obmd/obmd/sol/soltest/ipmisim"
)

// TestReplicasHistory: three replicas on MariaDB and a node captured
// always, with nobody attached. An access change made through another
// replica than the holder hides the old tenancy from the next tenant's
// console-log and replay everywhere. One replica holds its link (a lease);
// console-log returns the same history on each replica; a viewer
// attaching on any replica gets it in its replay; after SIGKILL of the
// holder, a survivor takes the capture over and appends to the same
// history, which lost at most the last flush interval.
func TestReplicasHistory(t *testing.T) {
	dsn := dbtest.MySQLDSN(t)
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
	// An access change made through another replica: the next tenant sees
	// nothing of this tenancy, on any replica.
	secret := "old-tenancy-" + rpRandom(t)[:8]
	if err := bmc.WriteSerial([]byte(secret + "\r\n")); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the old tenancy's output stored", func() bool { return strings.Contains(logOn(reps[2]), secret) })
	tok = reps[1].rotate("n1")
	// The held link comes back for the new tenancy: output in between is
	// not captured (the BMC has no one to send it to).
	printUntilSeen(t, bmc.WriteSerial, "new-tenancy", func(m string) bool { return strings.Contains(logOn(a), m) })
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
		if strings.Contains(v.out.String(), secret) || strings.Contains(logs[i], secret) {
			t.Errorf("%s shows the previous tenancy's output to the next tenant", reps[i].name)
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

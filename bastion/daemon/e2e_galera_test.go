package daemon_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	gossh "golang.org/x/crypto/ssh"

	"github.com/obmd/obmd/db"
	"github.com/obmd/obmd/db/dbtest/galera"
	"github.com/obmd/obmd/sol/soltest/ipmisim"
)

// galeraLeaseTTL is the lease TTL replicas on Galera take when lease_ttl
// is left unset: twice (evs.suspect_timeout + 1 s), the harness leaving
// Galera's default suspect timeout of 5 s (docs/replicas.md).
const galeraLeaseTTL = 12 * time.Second

// galeraCluster is the test binary's Galera cluster (db/dbtest/galera),
// started by the first test that asks for it, stopped by TestMain.
var galeraCluster galera.Shared

// TestReplicasGalera (issue 14): three replicas, each on its own node of
// a three-node MariaDB Galera cluster, in front of one ipmi_sim, with a
// viewer on each. One writer in the cluster (checked on the serial side);
// a rotation through one replica cuts the sessions on all three within 2 s,
// with the reason. SIGKILL of the Galera node of the replica holding the
// console link: the console moves to a survivor, whose writer keeps
// writing; the replicas on the other two nodes keep serving logins, power
// and consoles, the one on the dead node answers 503 on /readyz and
// refuses logins; once the node has rejoined it serves again, and what
// was acknowledged meanwhile (a rotation) is there.
func TestReplicasGalera(t *testing.T) {
	ipmisim.Require(t, "ssh", "ipmitool")
	dsns := galeraCluster.Database(t)
	gc := galeraCluster.Cluster(t)
	bmc := ipmisim.Start(t)
	// lease_ttl left unset: each replica derives one that outlasts
	// Galera's eviction of a dead node (6-7 s, in which every write
	// waits); a shorter one would fence every replica then (their
	// announcements cannot be renewed), cutting all sessions.
	reps := rpClusterOn(t, dsns, nil)
	for _, r := range reps {
		line := `"lease_ttl":"` + galeraLeaseTTL.String() + `"`
		if got := r.logs.String(); !strings.Contains(got, `"msg":"lease_ttl_from_galera"`) || !strings.Contains(got, line) {
			t.Fatalf("replica %s: no lease_ttl_from_galera line with %s in its log:\n%s", r.name, line, tailString(got, 2000))
		}
	}
	a, b, c := reps[0], reps[1], reps[2]
	a.mustAPI(200, "PUT", "/node/n1", map[string]any{"type": "ipmi", "info": bmc.Info()})
	tok := b.rotate("n1")
	signer, keyFile := newKey(t)
	line := strings.TrimSpace(string(gossh.MarshalAuthorizedKey(signer.PublicKey())))
	c.mustAPI(201, "POST", "/v1/nodes/n1/keys", map[string]string{"key": line})

	va := a.goViewer(t, "n1", tok)
	va.out.wait(t, "the first viewer's banner", 0, "you are writing")
	viewers := []*client{va, b.sshViewer(t, "n1", keyFile), c.sshViewer(t, "n1", keyFile)}
	rpSeeAll(t, bmc, "galera-boot", viewers...)
	rpOneWriter(t, bmc, viewers, reps, keyFile)

	start := time.Now()
	tok = c.rotate("n1")
	for i, v := range viewers {
		took := v.end.wait(t, "viewer on "+reps[i].name).Sub(start)
		if took >= rpRotateGoal {
			t.Errorf("rotation through %s ended the viewer on %s after %v, want under %v", c.name, reps[i].name, took, rpRotateGoal)
		}
		if !strings.Contains(v.out.String(), "access to n1 was revoked (token rotated)") {
			t.Errorf("viewer on %s: not told the reason; screen %q", reps[i].name, tailString(v.out.String(), 300))
		}
		t.Logf("BENCH galera rotate_to_end replica=%s took=%v", reps[i].name, took.Round(time.Millisecond))
	}

	// Galera node 0 dies: A's database, and A holds the console link
	// (its viewer came first). B's viewer writes.
	viewers = []*client{a.goViewer(t, "n1", tok)}
	viewers[0].out.wait(t, "the holder's viewer", 0, "console of n1")
	viewers = append(viewers, b.sshViewer(t, "n1", keyFile), c.sshViewer(t, "n1", keyFile))
	rpSeeAll(t, bmc, "before-kill", viewers...)
	survivors := viewers[1:]
	rpSurvivingWriter(t, bmc, survivors, true)
	if err := gc.Kill(0); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	t.Cleanup(func() { // a failed run leaves the node down for the next test's Cluster to restart
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		gc.Heal(ctx)
	})
	waitUntil(t, "/readyz of the replica on the dead node to fail", func() bool {
		code, _ := a.request("GET", "/readyz", nil, "", "")
		return code == http.StatusServiceUnavailable
	})
	// The link moves to a survivor once the cluster has evicted the dead
	// node (writes wait for it) and A's lease has expired; the writer on
	// B keeps writing, C's keys do not reach the node.
	st := rpStore(t, dsns[1])
	waitUntil(t, "a survivor holding the SOL lease", func() bool {
		l, err := st.Lease(context.Background(), "n1", db.LeaseSOL)
		return err == nil && l.Owner != a.name && time.Now().Before(l.ExpiresAt)
	})
	rpSeeAll(t, bmc, "after-kill", survivors...)
	t.Logf("BENCH galera console_takeover_after_holder_node_kill=%v", time.Since(killed).Round(time.Millisecond))
	rpSurvivingWriter(t, bmc, survivors, false)
	// A change through a survivor (one meanwhile may answer 503: retried).
	waitUntil(t, "a rotation through a surviving node", func() bool {
		code, body := b.api("POST", "/node/n1/token", nil)
		var out struct{ Token string }
		if code != http.StatusOK || json.Unmarshal(body, &out) != nil || out.Token == "" {
			return false
		}
		tok = out.Token
		return true
	})
	t.Logf("BENCH galera rotation_after_node_kill=%v", time.Since(killed).Round(time.Millisecond))
	for _, r := range []*rpReplica{b, c} {
		if code, _ := r.request("GET", "/readyz", nil, "", ""); code != http.StatusOK {
			t.Errorf("/readyz of %s, on a surviving node: got %d, want 200", r.name, code)
		}
	}
	if res, err := a.exec("n1", tok, "power-status"); err == nil {
		t.Errorf("login through %s, whose database is dead: got %v, want refused", a.name, res)
	}
	for _, r := range []*rpReplica{b, c} {
		if res, err := r.exec("n1", tok, "power-on"); err != nil || res.Code != 0 {
			t.Errorf("power-on through %s with a Galera node down: %v, %v", r.name, res, err)
		}
	}
	v := c.sshViewer(t, "n1", keyFile)
	rpSeeAll(t, bmc, "node-down", v)

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := gc.Restart(ctx, 0); err != nil {
		t.Fatalf("restart Galera node 0: %v", err)
	}
	waitUntil(t, "the replica on the rejoined node ready", func() bool {
		code, _ := a.request("GET", "/readyz", nil, "", "")
		return code == http.StatusOK
	})
	// What was acknowledged while it was down is there: the token of the
	// last rotation works through A.
	waitUntil(t, "a login through the replica on the rejoined node", func() bool {
		res, err := a.exec("n1", tok, "power-status")
		return err == nil && res.Code == 0
	})
}

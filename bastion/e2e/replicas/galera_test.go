package replicas

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/obmd/obmd/bastion/e2e/obmdtest"

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
	gc, dsns, bmc, reps := galeraReplicas(t)
	a, b, c := reps[0], reps[1], reps[2]
	a.MustAPI(200, "PUT", "/node/n1", map[string]any{"type": "ipmi", "info": bmc.Info()})
	tok := b.Rotate("n1")
	signer, keyFile := obmdtest.NewKey(t)
	line := strings.TrimSpace(string(gossh.MarshalAuthorizedKey(signer.PublicKey())))
	c.MustAPI(201, "POST", "/v1/nodes/n1/keys", map[string]string{"key": line})

	va := a.GoViewer(t, "n1", tok)
	va.Out.Wait(t, "the first viewer's banner", 0, "you are writing")
	viewers := []*obmdtest.Client{va, b.SSHViewer(t, "n1", keyFile), c.SSHViewer(t, "n1", keyFile)}
	obmdtest.SeeAll(t, bmc, "galera-boot", viewers...)
	oneWriter(t, bmc, viewers, reps, keyFile)

	start := time.Now()
	tok = c.Rotate("n1")
	for i, v := range viewers {
		took := v.End.Wait(t, "viewer on "+reps[i].Name).Sub(start)
		if took >= rotateGoal {
			t.Errorf("rotation through %s ended the viewer on %s after %v, want under %v", c.Name, reps[i].Name, took, rotateGoal)
		}
		if !strings.Contains(v.Out.String(), "access to n1 was revoked (token rotated)") {
			t.Errorf("viewer on %s: not told the reason; screen %q", reps[i].Name, obmdtest.Tail(v.Out.String(), 300))
		}
		t.Logf("BENCH galera rotate_to_end replica=%s took=%v", reps[i].Name, took.Round(time.Millisecond))
	}

	// Galera node 0 dies: A's database, and A holds the console link
	// (its viewer came first). B's viewer writes.
	viewers = []*obmdtest.Client{a.GoViewer(t, "n1", tok)}
	viewers[0].Out.Wait(t, "the holder's viewer", 0, "console of n1")
	viewers = append(viewers, b.SSHViewer(t, "n1", keyFile), c.SSHViewer(t, "n1", keyFile))
	obmdtest.SeeAll(t, bmc, "before-kill", viewers...)
	survivors := viewers[1:]
	survivingWriter(t, bmc, survivors, true)
	if err := gc.Kill(0); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	t.Cleanup(func() { // a failed run leaves the node down for the next test's Cluster to restart
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		gc.Heal(ctx)
	})
	obmdtest.WaitUntil(t, "/readyz of the replica on the dead node to fail", func() bool {
		code, _ := a.Request("GET", "/readyz", nil, "", "")
		return code == http.StatusServiceUnavailable
	})
	// The link moves to a survivor once the cluster has evicted the dead
	// node (writes wait for it) and A's lease has expired; the writer on
	// B keeps writing, C's keys do not reach the node.
	st := obmdtest.OpenStore(t, dsns[1])
	obmdtest.WaitUntil(t, "a survivor holding the SOL lease", func() bool {
		l, err := st.Lease(context.Background(), "n1", db.LeaseSOL)
		return err == nil && l.Owner != a.Name && time.Now().Before(l.ExpiresAt)
	})
	obmdtest.SeeAll(t, bmc, "after-kill", survivors...)
	t.Logf("BENCH galera console_takeover_after_holder_node_kill=%v", time.Since(killed).Round(time.Millisecond))
	survivingWriter(t, bmc, survivors, false)
	// A change through a survivor (one meanwhile may answer 503: retried).
	obmdtest.WaitUntil(t, "a rotation through a surviving node", func() bool {
		code, body := b.API("POST", "/node/n1/token", nil)
		var out struct{ Token string }
		if code != http.StatusOK || json.Unmarshal(body, &out) != nil || out.Token == "" {
			return false
		}
		tok = out.Token
		return true
	})
	t.Logf("BENCH galera rotation_after_node_kill=%v", time.Since(killed).Round(time.Millisecond))
	for _, r := range []*obmdtest.Replica{b, c} {
		if code, _ := r.Request("GET", "/readyz", nil, "", ""); code != http.StatusOK {
			t.Errorf("/readyz of %s, on a surviving node: got %d, want 200", r.Name, code)
		}
	}
	if res, err := a.Exec("n1", tok, "power-status"); err == nil {
		t.Errorf("login through %s, whose database is dead: got %v, want refused", a.Name, res)
	}
	for _, r := range []*obmdtest.Replica{b, c} {
		if res, err := r.Exec("n1", tok, "power-on"); err != nil || res.Code != 0 {
			t.Errorf("power-on through %s with a Galera node down: %v, %v", r.Name, res, err)
		}
	}
	v := c.SSHViewer(t, "n1", keyFile)
	obmdtest.SeeAll(t, bmc, "node-down", v)

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := gc.Restart(ctx, 0); err != nil {
		t.Fatalf("restart Galera node 0: %v", err)
	}
	obmdtest.WaitUntil(t, "the replica on the rejoined node ready", func() bool {
		code, _ := a.Request("GET", "/readyz", nil, "", "")
		return code == http.StatusOK
	})
	// What was acknowledged while it was down is there: the token of the
	// last rotation works through A.
	obmdtest.WaitUntil(t, "a login through the replica on the rejoined node", func() bool {
		res, err := a.Exec("n1", tok, "power-status")
		return err == nil && res.Code == 0
	})
}

// galeraStallBound is the stall bound of a replica on Galera
// (db.Store.StallBound): 2 s, plus Galera's default evs.suspect_timeout
// (5 s), plus 2 s for the eviction to complete.
const galeraStallBound = 9 * time.Second

// galeraReplicas starts three replicas, each on its own node of the test
// binary's Galera cluster (replica i on node i), with lease_ttl left unset,
// in front of one ipmi_sim. Each derives from the cluster's settings a
// lease TTL and a stall bound that outlast Galera's eviction of a dead
// node (6-7 s, in which every write waits): a shorter TTL would fence
// every replica then (their announcements cannot be renewed), cutting all
// sessions, and a shorter stall bound would refuse every login.
func galeraReplicas(t *testing.T) (*galera.Cluster, []string, *ipmisim.Sim, []*obmdtest.Replica) {
	t.Helper()
	ipmisim.Require(t, "ssh", "ipmitool")
	dsns := galeraCluster.Database(t)
	gc := galeraCluster.Cluster(t)
	bmc := ipmisim.Start(t)
	reps := obmdtest.ClusterOn(t, dsns, nil)
	for _, r := range reps {
		got := r.Logs.String()
		for _, want := range []string{`"msg":"lease_ttl_from_galera"`, `"lease_ttl":"` + galeraLeaseTTL.String() + `"`,
			`"stall_bound":"` + galeraStallBound.String() + `"`} {
			if !strings.Contains(got, want) {
				t.Fatalf("replica %s: no %s in its log:\n%s", r.Name, want, obmdtest.Tail(got, 2000))
			}
		}
	}
	return gc, dsns, bmc, reps
}

// galeraLossWatch is how long after the SIGKILL of a Galera node
// TestReplicasGaleraNodeLoss keeps logging in and checking readiness: the
// eviction (6-7 s, every write held meanwhile) and a few seconds more, up
// to past the lease TTL, when the dead node's replica's leases and
// announcement expire.
const galeraLossWatch = galeraLeaseTTL + 3*time.Second

// galeraCheckTimeout is the /readyz timeout of TestReplicasGaleraNodeLoss's
// health checks: a load balancer's (HAProxy's `inter 5s` with no `timeout
// check` gives a check 5 s).
const galeraCheckTimeout = 5 * time.Second

// TestReplicasGaleraNodeLoss (issue 24): three replicas, each on its own
// node of a three-node Galera cluster, one ipmi_sim; SIGKILL of one
// Galera node. While the cluster evicts it (every write, and every read
// that waits for the cluster, held for seconds), the replicas on the two
// surviving nodes serve every login (none refused: one may wait), power
// operations and consoles (viewers attached before stay, new ones attach),
// and their /readyz stays 200 for a balancer's check, while the replica on
// the dead node answers 503 and refuses logins. Once the node has
// rejoined, that replica serves again.
func TestReplicasGaleraNodeLoss(t *testing.T) {
	gc, _, bmc, reps := galeraReplicas(t)
	const victim = 2
	dead, survivors := reps[victim], reps[:victim]
	survivors[0].MustAPI(200, "PUT", "/node/n1", map[string]any{"type": "ipmi", "info": bmc.Info()})
	tok := survivors[1].Rotate("n1")
	// The SOL link on a survivor (its viewer came first), relayed to the
	// other.
	holder := survivors[1].GoViewer(t, "n1", tok)
	holder.Out.Wait(t, "the holder's viewer", 0, "console of n1")
	viewers := []*obmdtest.Client{holder, survivors[0].GoViewer(t, "n1", tok)}
	obmdtest.SeeAll(t, bmc, "before-kill", viewers...)

	watch := &galeraLossWatcher{}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	probe := func(what string, pause time.Duration, next func() (*obmdtest.Replica, bool, string)) {
		wg.Add(1)
		go func() { defer wg.Done(); watch.probe(what, pause, stop, next) }()
	}
	for _, r := range reps {
		probe("login", 100*time.Millisecond, func() (*obmdtest.Replica, bool, string) {
			res, err := r.Exec("n1", tok, "power-status")
			return r, err == nil && res.Code == 0, fmt.Sprintf("%v %q", err, res.Stderr)
		})
		probe("readyz", 250*time.Millisecond, func() (*obmdtest.Replica, bool, string) {
			code, err := galeraReadyz(r)
			return r, err == nil && code == http.StatusOK, fmt.Sprintf("%d %v", code, err)
		})
		probe("console", 500*time.Millisecond, func() (*obmdtest.Replica, bool, string) {
			err := galeraConsole(r, tok)
			return r, err == nil, fmt.Sprint(err)
		})
	}
	turn := 0 // power operations one at a time, through each survivor in turn: a second at once would be busy
	probe("power", 300*time.Millisecond, func() (*obmdtest.Replica, bool, string) {
		r := survivors[turn%len(survivors)]
		turn++
		res, err := r.Exec("n1", tok, "power-on")
		return r, err == nil && res.Code == 0, fmt.Sprintf("%v %q", err, res.Stderr)
	})
	time.Sleep(time.Second) // a few of each before the kill
	if err := gc.Kill(victim); err != nil {
		t.Fatal(err)
	}
	watch.kill()
	t.Cleanup(func() { // a failed run leaves the node down for the next test's Cluster to restart
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		gc.Heal(ctx)
	})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for i := range survivors {
		if err := gc.WaitSize(ctx, i, 2); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("the survivors' nodes evicted the dead one %v after the kill", watch.since().Round(time.Millisecond))
	time.Sleep(galeraLossWatch - watch.since())
	close(stop)
	wg.Wait()
	for i, v := range viewers {
		if v.End.Ended() {
			t.Errorf("console viewer %d on a surviving node ended: %q", i, obmdtest.Tail(v.Out.String(), 300))
		}
	}
	obmdtest.SeeAll(t, bmc, "after-kill", viewers...)
	watch.check(t, survivors, dead)

	rctx, rcancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer rcancel()
	if err := gc.Restart(rctx, victim); err != nil {
		t.Fatalf("restart Galera node %d: %v", victim, err)
	}
	obmdtest.WaitUntil(t, "the replica on the rejoined node ready", func() bool {
		code, err := galeraReadyz(dead)
		return err == nil && code == http.StatusOK
	})
	obmdtest.WaitUntil(t, "a login through the replica on the rejoined node", func() bool {
		res, err := dead.Exec("n1", tok, "power-status")
		return err == nil && res.Code == 0
	})
}

// galeraLossWatcher records what the replicas answered around the kill of
// a Galera node: each login, power operation and readiness check, by
// replica, with its time from the kill (negative: before it).
type galeraLossWatcher struct {
	mu     sync.Mutex
	killed time.Time
	events []galeraLossEvent
}

type galeraLossEvent struct {
	replica, what string
	at, took      time.Duration // from the kill, at its start
	ok            bool
	detail        string
}

func (w *galeraLossWatcher) kill() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.killed = time.Now()
}

// since is the time since the kill.
func (w *galeraLossWatcher) since() time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	return time.Since(w.killed)
}

func (w *galeraLossWatcher) record(r *obmdtest.Replica, what string, began time.Time, ok bool, detail string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	at := time.Duration(-1)
	if !w.killed.IsZero() {
		at = began.Sub(w.killed)
	}
	w.events = append(w.events, galeraLossEvent{replica: r.Name, what: what, at: at, took: time.Since(began), ok: ok, detail: detail})
}

// probe runs next every pause until stop, recording each outcome as what
// on the replica it names.
func (w *galeraLossWatcher) probe(what string, pause time.Duration, stop <-chan struct{}, next func() (*obmdtest.Replica, bool, string)) {
	for {
		select {
		case <-stop:
			return
		case <-time.After(pause):
		}
		began := time.Now()
		r, ok, detail := next()
		w.record(r, what, began, ok, detail)
	}
}

// galeraConsole attaches to n1's console through r and waits for the
// banner naming it (at most e2eWait).
func galeraConsole(r *obmdtest.Replica, tok string) error {
	c, err := obmdtest.DialSSH(r.Listening["ssh"], "n1", gossh.Password(tok))
	if err != nil {
		return err
	}
	defer c.Close()
	s, err := c.NewSession()
	if err != nil {
		return err
	}
	defer s.Close()
	out := obmdtest.NewBuffer()
	s.Stdout, s.Stderr = out, out
	if err := s.Shell(); err != nil {
		return err
	}
	if _, ok := out.Find(0, []byte("console of n1"), obmdtest.Timeout); !ok {
		return fmt.Errorf("no banner: %q", obmdtest.Tail(out.String(), 300))
	}
	return nil
}

// check fails the test for anything the survivors refused, or the dead
// node's replica served after it reported unready.
func (w *galeraLossWatcher) check(t *testing.T, survivors []*obmdtest.Replica, dead *obmdtest.Replica) {
	t.Helper()
	w.mu.Lock()
	defer w.mu.Unlock()
	served, slowest := map[string]int{}, map[string]time.Duration{}
	var unready time.Duration = -1
	for _, e := range w.events {
		if e.replica == dead.Name {
			switch {
			case e.what == "readyz" && !e.ok && e.at >= 0 && unready < 0:
				unready = e.at
			case (e.what == "login" || e.what == "console") && e.ok && unready >= 0 && e.at > unready:
				t.Errorf("%s, on the dead node, admitted a %s at +%v, after it reported unready (+%v)", dead.Name, e.what, e.at, unready)
			}
			continue
		}
		if e.ok {
			served[e.replica+" "+e.what]++
			k := e.replica + " " + e.what
			slowest[k] = max(slowest[k], e.took)
			continue
		}
		t.Errorf("%s %s at %+.1fs (took %v), its node alive: refused: %s", e.replica, e.what, e.at.Seconds(), e.took.Round(time.Millisecond), e.detail)
	}
	if unready < 0 {
		t.Errorf("%s, on the dead node: /readyz never answered 503", dead.Name)
	} else {
		t.Logf("%s, on the dead node, reported unready %v after the kill", dead.Name, unready.Round(time.Millisecond))
	}
	for _, r := range survivors {
		for _, what := range []string{"login", "power", "readyz", "console"} {
			if served[r.Name+" "+what] == 0 {
				t.Errorf("%s: no %s served at all", r.Name, what)
			}
		}
	}
	t.Logf("served on the surviving nodes: %v; the slowest: %v", served, slowest)
}

// galeraReadyz asks r's /readyz within galeraCheckTimeout.
func galeraReadyz(r *obmdtest.Replica) (int, error) {
	c := &http.Client{Timeout: galeraCheckTimeout}
	resp, err := c.Get("http://" + r.Listening["admin"] + "/readyz")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	_, err = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, err
}

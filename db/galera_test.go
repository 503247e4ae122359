package db

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/obmd/obmd/db/dbtest"
	"github.com/obmd/obmd/keys"
	logtest "github.com/sirupsen/logrus/hooks/test"
)

// Tests across the nodes of the shared Galera cluster (galeraCluster). The
// store cases run there too (the "galera" engine of runCases), with a store
// on each node where a case opens several (two replicas on two nodes
// racing for one lease: TestLeases/galera/concurrent_acquire_one_winner).

// withParams adds DSN parameters ("k=v").
func withParams(dsn, params string) string {
	if strings.Contains(dsn, "?") {
		return dsn + "&" + params
	}
	return dsn + "?" + params
}

// TestGaleraReadAfterWrite: an access change committed through node 1 is
// what Access, HasKey and ChangesSince read through node 2 at once. A node
// applies other nodes' writes a little later (here: much later, its
// applier paused), and a store's reads wait for it (wsrep_sync_wait, set
// by Open); a connection without the wait reads the access the change took
// away.
func TestGaleraReadAfterWrite(t *testing.T) {
	dsns := galeraCluster.Database(t)
	ctx := context.Background()
	w, r := openTestStore(t, dsns[0]), openTestStore(t, dsns[1])
	var wait int
	if err := r.r.QueryRowContext(ctx, `SELECT @@session.wsrep_sync_wait`).Scan(&wait); err != nil || wait != 1 {
		t.Fatalf("wsrep_sync_wait of a store's connection: got %d, %v, want 1", wait, err)
	}
	mustCreate(t, w, "n1")
	for i := range 100 {
		h := keys.HashToken(fmt.Sprintf("token-%d", i))
		epoch, err := w.SetToken(ctx, "n1", h)
		if err != nil {
			t.Fatal(err)
		}
		a, err := r.Access(ctx, "n1")
		if err != nil || !a.Token.Equal(h) || a.Epoch != epoch {
			t.Fatalf("round %d: access through node 2: got %+v, %v, want the token set through node 1 at epoch %d", i, a, err, epoch)
		}
		if err := w.AddKey(ctx, Key{Node: "n1", Fingerprint: "SHA256:k", Line: "l"}); err != nil {
			t.Fatal(err)
		}
		if epoch, err = w.DeleteKey(ctx, "n1", "SHA256:k"); err != nil {
			t.Fatal(err)
		}
		if e, ok, err := r.HasKey(ctx, "n1", "SHA256:k"); err != nil || ok || e != epoch {
			t.Fatalf("round %d: key through node 2: got %d, %v, %v, want removed at epoch %d", i, e, ok, err, epoch)
		}
		if cs, err := r.ChangesSince(ctx, epoch-1, 0); err != nil || len(cs) != 1 || cs[0].Reason != ReasonKeyRemoved {
			t.Fatalf("round %d: changes through node 2: got %+v, %v, want the key's removal", i, cs, err)
		}
	}

	// Node 2's applier paused (a read lock on every table, which a Galera
	// node honours by desyncing and applying nothing until it is lifted).
	nowait := openTestStore(t, withParams(dsns[1], "wsrep_sync_wait=0"))
	before, err := r.Access(ctx, "n1")
	if err != nil {
		t.Fatal(err)
	}
	lock, err := galeraCluster.Cluster(t).Root(1).Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close()
	if _, err := lock.ExecContext(ctx, `FLUSH TABLES WITH READ LOCK`); err != nil {
		t.Fatal(err)
	}
	unlock := sync.OnceFunc(func() {
		if _, err := lock.ExecContext(ctx, `UNLOCK TABLES`); err != nil {
			t.Errorf("unlock tables: %v", err)
		}
	})
	defer unlock()
	h := keys.HashToken("rotated-while-node-2-lags")
	epoch, err := w.SetToken(ctx, "n1", h)
	if err != nil {
		t.Fatal(err)
	}
	if a, err := nowait.Access(ctx, "n1"); err != nil || a.Epoch != before.Epoch {
		t.Fatalf("read without the wait while node 2 lags: got %+v, %v, want the old access (epoch %d): the test cannot tell", a, err, before.Epoch)
	}
	got := make(chan Access, 1)
	go func() {
		a, err := r.Access(ctx, "n1")
		if err != nil {
			t.Errorf("access through node 2: %v", err)
		}
		got <- a
	}()
	select {
	case a := <-got:
		t.Fatalf("access through node 2 while it lags: got %+v at once, want it to wait for epoch %d", a, epoch)
	case <-time.After(500 * time.Millisecond):
	}
	unlock()
	if a := <-got; !a.Token.Equal(h) || a.Epoch != epoch {
		t.Errorf("access through node 2 once it caught up: got %+v, want the new token at epoch %d", a, epoch)
	}
}

// TestGaleraConflictRetries: writers through three nodes rotate the same
// node's token at once, so their transactions conflict (access_seq's row,
// the node's rows) and all but the first to commit lose certification.
// Every rotation still succeeds, once, in epoch order.
func TestGaleraConflictRetries(t *testing.T) {
	dsns := galeraCluster.Database(t)
	ctx := context.Background()
	var stores []*Store
	for _, dsn := range dsns {
		stores = append(stores, openTestStore(t, dsn))
	}
	mustCreate(t, stores[0], "n1")
	start, err := stores[0].LatestChange(ctx)
	if err != nil {
		t.Fatal(err)
	}
	const perStore, rounds = 3, 15
	var wg sync.WaitGroup
	var done atomic.Int64
	for _, st := range stores {
		for w := range perStore {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range rounds {
					if _, err := st.SetToken(ctx, "n1", keys.HashToken(fmt.Sprintf("%p-%d-%d", st, w, i))); err != nil {
						t.Errorf("rotate: %v", err)
						return
					}
					done.Add(1)
				}
			}()
		}
	}
	wg.Wait()
	var retries int64
	for _, st := range stores {
		retries += st.ConflictRetries()
	}
	t.Logf("%d rotations through 3 nodes, %d certification conflicts retried", done.Load(), retries)
	if retries == 0 {
		t.Errorf("conflicts retried: got 0, want some (the test provoked none)")
	}
	want := int64(len(stores) * perStore * rounds)
	for i, st := range stores {
		changes, err := st.ChangesSince(ctx, start, 0)
		if err != nil {
			t.Fatal(err)
		}
		if int64(len(changes)) != want {
			t.Errorf("changes through node %d: got %d, want %d", i+1, len(changes), want)
		}
		for j, c := range changes {
			if c.Epoch != start+int64(j)+1 {
				t.Errorf("node %d change %d: epoch %d, want %d (no gaps, in order)", i+1, j, c.Epoch, start+int64(j)+1)
				break
			}
		}
		if e, err := st.Epoch(ctx, "n1"); err != nil || e != start+want {
			t.Errorf("epoch through node %d: got %d, %v, want %d", i+1, e, err, start+want)
		}
	}
}

// TestGaleraMigrateConcurrent: replicas on every node migrate one fresh
// database at once. A named lock (GET_LOCK) is local to each node: they all
// held it, and all but one failed on DDL the first had run.
func TestGaleraMigrateConcurrent(t *testing.T) {
	const rounds, perNode = 3, 2
	for round := range rounds {
		dsns := galeraCluster.Database(t)
		ctx := context.Background()
		errs := make(chan error, len(dsns)*perNode)
		for i := range len(dsns) * perNode {
			go func() {
				log, _ := logtest.NewNullLogger()
				st, err := Open(ctx, dsns[i%len(dsns)], log)
				if err != nil {
					errs <- err
					return
				}
				err = st.Migrate(ctx)
				errs <- errors.Join(err, st.Close())
			}()
		}
		for range len(dsns) * perNode {
			if err := <-errs; err != nil {
				t.Errorf("round %d: concurrent migrate: %v", round, err)
			}
		}
		for i, dsn := range dsns {
			cur, latest, err := openTestStore(t, dsn).SchemaVersion(ctx)
			if err != nil || cur != latest {
				t.Errorf("round %d: schema through node %d: got %d of %d, %v, want the latest", round, i+1, cur, latest, err)
			}
		}
	}
}

// TestGaleraNodeKilled: writers through all three nodes register nodes,
// set tokens, add keys and audit, while one node is killed (SIGKILL) and
// later restarted. The stores on the other two keep working (each write
// waits at most for the cluster to evict the dead node); the killed node
// rejoins by IST and catches up; every write acknowledged through any node
// is then read back through every node.
func TestGaleraNodeKilled(t *testing.T) {
	c := galeraCluster.Cluster(t)
	dsns := galeraCluster.Database(t)
	ctx := context.Background()
	var stores [3]*Store
	for i, dsn := range dsns {
		stores[i] = openTestStore(t, dsn)
	}
	const victim = 2
	ws := &galeraWriters{stop: make(chan struct{})}
	for i, st := range stores {
		ws.wg.Add(1)
		go ws.run(t, i, st, i == victim)
	}
	defer ws.end()

	ws.waitAcks(t, 0, 5)
	killed := time.Now()
	if err := c.Kill(victim); err != nil {
		t.Fatal(err)
	}
	// Writes through the survivors resume, without failing.
	for i := range stores {
		if i != victim {
			ws.waitAcks(t, i, ws.acksOf(i)+5)
		}
	}
	resumed := time.Since(killed)
	if err := c.WaitSize(ctx, 0, 2); err != nil {
		t.Fatal(err)
	}
	ws.waitAcks(t, 0, ws.acksOf(0)+20) // written while the victim is down: it must catch up
	restart := time.Now()
	if err := c.Restart(ctx, victim); err != nil {
		t.Fatal(err)
	}
	if how := c.StateTransfer(victim); how != "IST" {
		t.Errorf("rejoined by %q, want IST", how)
	}
	rejoined := time.Since(restart)
	ws.waitAcks(t, victim, ws.acksOf(victim)+5) // its store works again
	ws.end()
	t.Logf("writes through the survivors resumed %v after the kill (slowest write %v); node %d rejoined in %v; %d of %d writes acknowledged",
		resumed.Round(time.Millisecond), ws.slowest.Round(time.Millisecond), victim+1, rejoined.Round(time.Millisecond),
		ws.acks[0]+ws.acks[1]+ws.acks[2], len(ws.acked))
	for i, st := range stores {
		ws.check(t, fmt.Sprintf("node %d", i+1), st)
	}
}

// galeraWriters are TestGaleraNodeKilled's writers, one per node.
type galeraWriters struct {
	stop chan struct{}
	wg   sync.WaitGroup
	once sync.Once

	mu      sync.Mutex
	acked   []galeraWrite
	acks    [3]int
	slowest time.Duration // through a node that stayed up
}

// galeraWrite is one write and how much of it was acknowledged.
type galeraWrite struct {
	label                 string
	token                 keys.TokenHash
	node, tok, key, audit bool
}

func (ws *galeraWriters) end() {
	ws.once.Do(func() { close(ws.stop) })
	ws.wg.Wait()
}

// run writes through st until stop. A write through the victim's node may
// fail (while it is down); any other failure fails the test.
func (ws *galeraWriters) run(t *testing.T, i int, st *Store, victim bool) {
	defer ws.wg.Done()
	for n := 0; ; n++ {
		select {
		case <-ws.stop:
			return
		default:
		}
		w := galeraWrite{label: fmt.Sprintf("w%d-%d", i, n), token: keys.HashToken(fmt.Sprintf("tok-%d-%d", i, n))}
		began := time.Now()
		err := w.write(st)
		ws.mu.Lock()
		ws.acked = append(ws.acked, w)
		if err == nil {
			ws.acks[i]++
		}
		if !victim {
			ws.slowest = max(ws.slowest, time.Since(began))
		}
		ws.mu.Unlock()
		switch {
		case err == nil:
		case victim:
			time.Sleep(100 * time.Millisecond) // its node is down; try again
		default:
			t.Errorf("write %s through node %d: %v", w.label, i+1, err)
			return
		}
	}
}

// write registers w's node, sets its token, adds a key and audits,
// recording each step acknowledged.
func (w *galeraWrite) write(st *Store) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := st.CreateNode(ctx, Node{Label: w.label, Type: "mock"}); err != nil {
		return err
	}
	w.node = true
	if _, err := st.SetToken(ctx, w.label, w.token); err != nil {
		return err
	}
	w.tok = true
	if err := st.AddKey(ctx, Key{Node: w.label, Fingerprint: "SHA256:" + w.label, Line: "l"}); err != nil {
		return err
	}
	w.key = true
	if err := st.Audit(ctx, AuditEvent{Node: w.label, Action: "token.rotate", Result: "ok"}); err != nil {
		return err
	}
	w.audit = true
	return nil
}

func (ws *galeraWriters) acksOf(i int) int {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	return ws.acks[i]
}

// waitAcks waits until writer i has had n writes acknowledged.
func (ws *galeraWriters) waitAcks(t *testing.T, i, n int) {
	t.Helper()
	for deadline := time.Now().Add(2 * time.Minute); ws.acksOf(i) < n; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("writer through node %d: %d writes acknowledged, want %d", i+1, ws.acksOf(i), n)
		}
	}
}

// check reads every acknowledged step back through st.
func (ws *galeraWriters) check(t *testing.T, through string, st *Store) {
	t.Helper()
	ctx := context.Background()
	lost := 0
	for _, w := range ws.acked {
		if !w.node {
			continue
		}
		a, err := st.Access(ctx, w.label)
		ok := err == nil && (!w.tok || a.HasToken && a.Token.Equal(w.token))
		if ok && w.key {
			_, has, err := st.HasKey(ctx, w.label, "SHA256:"+w.label)
			ok = err == nil && has
		}
		if ok && w.audit {
			evs, err := st.AuditEvents(ctx, AuditQuery{Node: w.label})
			ok = err == nil && len(evs) == 1
		}
		if !ok {
			lost++
			if lost <= 5 {
				t.Errorf("through %s: write %+v acknowledged but not read back", through, w)
			}
		}
	}
	if lost > 0 {
		t.Errorf("through %s: %d acknowledged writes lost", through, lost)
	}
}

// TestGaleraSuspect: a store on a Galera node knows the cluster's
// evs.suspect_timeout (the harness leaves Galera's default, 5 s), and from
// it how long an eviction may hold everything (7 s) and its stall bound
// (9 s); one on a plain server or on SQLite reports 0, 0 and 2 s.
func TestGaleraSuspect(t *testing.T) {
	dsns := galeraCluster.Database(t)
	st := openTestStore(t, dsns[1])
	if got := st.GaleraSuspect(); got != 5*time.Second {
		t.Errorf("on a Galera node: got %v, want 5s", got)
	}
	if ev, stall := st.Eviction(), st.StallBound(); ev != 7*time.Second || stall != 9*time.Second {
		t.Errorf("on a Galera node: eviction %v, stall bound %v, want 7s, 9s", ev, stall)
	}
	for _, e := range dbtest.Engines() {
		st := openTestStore(t, e.DSN(t))
		if got, ev, stall := st.GaleraSuspect(), st.Eviction(), st.StallBound(); got != 0 || ev != 0 || stall != 2*time.Second {
			t.Errorf("on %s: suspect %v, eviction %v, stall bound %v, want 0, 0, 2s", e.Name, got, ev, stall)
		}
	}
}

// TestGaleraHeldSyncWait: on a Galera node, a statement whose wait for the
// cluster is held past the stall bound (as one that races a member's
// rejoin is, until repl.causal_read_timeout, 30 s, while later ones pass:
// a write's BEGIN once waited out TestGaleraNodeKilled's whole deadline) is
// abandoned and run again on another connection. Here every connection
// the store has open stops being answered (a proxy holds them): a write
// and a read complete after about the bound, not at their deadline.
func TestGaleraHeldSyncWait(t *testing.T) {
	dsns := galeraCluster.Database(t)
	p := dbtest.StartProxy(t, dsns[0])
	st := openTestStore(t, p.DSN)
	mustCreate(t, st, "n1")
	if _, err := st.Access(context.Background(), "n1"); err != nil { // a reader in the pool
		t.Fatal(err)
	}
	p.Hold()
	bound := st.StallBound()
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for what, op := range map[string]func() error{
		"write": func() error { _, err := st.SetToken(ctx, "n1", keys.HashToken("held")); return err },
		"read":  func() error { _, err := st.Access(ctx, "n1"); return err },
	} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			start := time.Now()
			err := op()
			took := time.Since(start)
			switch {
			case err != nil:
				t.Errorf("%s on held connections: %v after %v, want it run again on another", what, err, took)
			case took < bound:
				t.Errorf("%s on held connections: answered after %v, before the bound %v: it was not held, the test cannot tell", what, took, bound)
			}
			t.Logf("%s on held connections: answered after %v (bound %v)", what, took.Round(time.Millisecond), bound)
		}()
	}
	wg.Wait()
}

package replicas

// Tenant isolation across replicas (issue 11, item 1): once an access
// change has been acknowledged by one replica, no session from before it,
// on any replica, receives a byte the node printed after it or delivers a
// keystroke typed after it.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/obmd/obmd/bastion/e2e/obmdtest"

	gossh "golang.org/x/crypto/ssh"

	"github.com/obmd/obmd/db"
	"github.com/obmd/obmd/db/dbtest"
	"github.com/obmd/obmd/sol/soltest/ipmisim"
)

// rounds is how many rotations TestReplicaIsolation attacks.
const rounds = 20

// leakWindow is how long, after a rotation, the test keeps printing and
// typing as the old tenant: longer than the epoch poll, so a replica that
// learns of the change only by polling is caught leaking.
const leakWindow = 1500 * time.Millisecond

// partitionEvery: every partitionEvery-th round of
// TestReplicaIsolation, the holder is cut off from the database and from
// the other replicas (not from its tenants nor its BMC) before the
// rotation.
const partitionEvery = 5

// replica is a replica of TestReplicaIsolation with its links to the
// database and to the other replicas, which a round can cut (nil for
// rep-a, which is never cut off).
type replica struct {
	*obmdtest.Replica
	db   *dbtest.Proxy
	peer *obmdtest.Pipe
}

// TestReplicaIsolation: three replicas on MariaDB in front of ipmi_sim.
// In each round the old tenant has a console on the replica holding the
// node's SOL link (x/crypto) and one on a replica relaying it (OpenSSH);
// HIL rotates the token through the third replica, and the new tenant
// attaches there at once. From the moment the rotation is answered, the
// test prints markers on the serial port and types as the old tenant: the
// old tenant must see none of those markers (the new tenant sees them),
// and none of its keys may reach the serial port. In every fifth round the
// holder is cut off from the database and the other replicas first: the
// rotation is then answered only once the holder has fenced itself.
func TestReplicaIsolation(t *testing.T) {
	dsn := dbtest.MySQLDSN(t)
	ipmisim.Require(t, "ssh", "sshpass", "ipmitool")
	bmc := ipmisim.Start(t)
	bin, vars := obmdtest.ReplicaEnv(t)
	reps := []*replica{{Replica: obmdtest.StartReplica(t, bin, "rep-a", vars(dsn, ""))}}
	for _, name := range []string{"rep-b", "rep-c"} {
		r := &replica{db: dbtest.StartProxy(t, dsn), peer: obmdtest.StartPipe(t)}
		if r.Replica = obmdtest.StartReplica(t, bin, name, vars(r.db.DSN, r.peer.Addr())); r.Replica == nil {
			t.FailNow()
		}
		r.peer.SetTarget(r.Listening["peer"])
		reps = append(reps, r)
	}
	if reps[0].Replica == nil {
		t.FailNow()
	}
	a := reps[0]
	a.MustAPI(200, "PUT", "/node/n1", map[string]any{"type": "ipmi", "info": bmc.Info()})
	tok := a.Rotate("n1")
	st := obmdtest.OpenStore(t, dsn)

	leaks := 0
	for round := range rounds {
		// The holder alternates between rep-b and rep-c.
		holder, relayer := reps[1+round%2], reps[2-round%2]
		partition := round%partitionEvery == partitionEvery-1
		name := fmt.Sprintf("round_%02d_holder_%s", round, holder.Name)
		if partition {
			name += "_cut_off"
		}
		failed := !t.Run(name, func(t *testing.T) {
			tok = isolationRound(t, bmc, st, a.Replica, holder, relayer.Replica, tok, round, partition)
		})
		if failed {
			leaks++
		}
	}
	if leaks > 0 {
		t.Errorf("the old tenant saw or typed past the change (or a round failed) in %d of %d rounds", leaks, rounds)
	}
}

// cut cuts r off from the database and the other replicas; the
// function it returns reconnects it and waits until it serves again.
func cut(t *testing.T, r *replica) (heal func()) {
	r.db.Cut(true)
	r.peer.Cut()
	return func() {
		r.db.Cut(false)
		r.peer.Heal()
		obmdtest.WaitUntil(t, r.Name+" to serve again", func() bool {
			code, _ := r.On(t).Request("GET", "/readyz", nil, "", "")
			return code == 200
		})
	}
}

// isolationRound runs one round of TestReplicaIsolation (cutting the holder off
// before the rotation if partition) and returns the new token.
func isolationRound(t *testing.T, bmc *ipmisim.Sim, st *db.Store, a *obmdtest.Replica, holder *replica, relayer *obmdtest.Replica, tok string,
	round int, partition bool) string {
	// The previous round's link (held by a) must be gone, so that the old
	// tenant's first console makes holder the holder.
	obmdtest.WaitUntil(t, "no SOL lease of n1", func() bool {
		_, err := st.Lease(context.Background(), "n1", db.LeaseSOL)
		return errors.Is(err, db.ErrNotFound)
	})
	onHolder := &obmdtest.StartGoSession(t, holder.Listening["ssh"], "n1", gossh.Password(tok), obmdtest.SessionOpts{PTY: true, Merge: true}).Client
	obmdtest.SeeAll(t, bmc, fmt.Sprintf("r%d-held", round), onHolder)
	if l, err := st.Lease(context.Background(), "n1", db.LeaseSOL); err != nil || l.Owner != holder.Name {
		t.Fatalf("SOL lease: got %+v, %v, want it held by %s", l, err, holder.Name)
	}
	onRelayer := &obmdtest.SSHPTY(t, relayer.Listening["ssh"], "n1", tok, nil).Client
	obmdtest.SeeAll(t, bmc, fmt.Sprintf("r%d-both", round), onHolder, onRelayer)
	olds := map[string]*obmdtest.Client{"old tenant on " + holder.Name: onHolder, "old tenant on " + relayer.Name: onRelayer}
	seenFrom := map[string]int{}
	for what, v := range olds {
		seenFrom[what] = v.Out.Len()
	}
	typedFrom := len(bmc.Serial())

	if partition {
		heal := cut(t, holder)
		defer heal()
	}
	newTok := a.On(t).Rotate("n1")
	// Acknowledged: from now on the old tenant gets nothing and sends
	// nothing. It keeps trying, on both replicas, for leakWindow.
	after := fmt.Sprintf("after-%d-", round)
	oldKeys := fmt.Sprintf("oldkeys-%d-", round)
	stop := time.Now().Add(leakWindow)
	var wg sync.WaitGroup
	for _, v := range olds {
		wg.Add(1)
		go func() { // ends at stop
			defer wg.Done()
			for k := 0; time.Now().Before(stop); k++ {
				v.In.Write([]byte(fmt.Sprintf("%s%d\r", oldKeys, k))) // fails once cut: the attempt is what counts
				time.Sleep(20 * time.Millisecond)
			}
		}()
	}
	wg.Add(1)
	go func() { // ends at stop
		defer wg.Done()
		for k := 0; time.Now().Before(stop); k++ {
			if err := bmc.WriteSerial([]byte(fmt.Sprintf("<%s%d>\r\n", after, k))); err != nil {
				t.Errorf("print on the serial port: %v", err)
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()
	newSession := obmdtest.StartGoSession(t, a.Listening["ssh"], "n1", gossh.Password(newTok), obmdtest.SessionOpts{PTY: true, Merge: true})
	newTenant := &newSession.Client
	wg.Wait()
	// The new tenant receives what the node prints after the change.
	obmdtest.PrintUntilSeen(t, bmc.WriteSerial, fmt.Sprintf("r%d-new", round), obmdtest.Shows(newTenant.Out))
	newKeys := fmt.Sprintf("newkeys-%d-%s\r", round, obmdtest.Random(t)[:6])
	newTenant.TypeKeys(newKeys)
	bmc.WaitSerial(t, []byte(newKeys), obmdtest.Timeout)

	for what, v := range olds {
		v.End.Wait(t, what)
		screen := v.Out.Bytes()[seenFrom[what]:]
		for _, printed := range []string{"<" + after, fmt.Sprintf("<r%d-new", round)} { // all the node printed since
			if i := bytes.Index(screen, []byte(printed)); i >= 0 {
				t.Errorf("%s saw output printed after the rotation: %q", what, obmdtest.Tail(string(screen[i:]), 200))
			}
		}
		if !strings.Contains(string(screen), "access to n1 was revoked") {
			t.Errorf("%s: no reason given; screen %q", what, obmdtest.Tail(string(screen), 400))
		}
	}
	if typed := bmc.Serial()[typedFrom:]; bytes.Contains(typed, []byte(oldKeys)) {
		i := bytes.Index(typed, []byte(oldKeys))
		t.Errorf("keys the old tenant typed after the rotation reached the node: %q", obmdtest.Tail(string(typed[i:]), 200))
	}
	newSession.Conn.Close() // its console link lingers out and the lease is released
	return newTok
}

// TestAttackPartitionedHolderOutlivesAck: "once any replica has
// acknowledged an access change, no session older than it, on any
// replica, gets one more byte of the node's output or sends one more
// keystroke". The replica holding a node's SOL link (B) is cut off from
// the database and from the other replicas, not from its tenants nor its
// BMC (a management network apart from the database's). HIL rotates the
// token through A: A cannot tell B, so it waits until B's announcement
// expires (Notify counts an expired announcement as a stopped replica)
// and answers 200. But B's SOL lease lasts as long as its announcement
// and B notices a lost lease only at its next renewal after it expired:
// until then B still serves the link, and the old tenant on B reads what
// the node prints after the acknowledgement and types into it. (B cuts
// its sessions only after db_grace, 30 s.)
func TestAttackPartitionedHolderOutlivesAck(t *testing.T) {
	dsn := dbtest.MySQLDSN(t)
	ipmisim.Require(t, "ipmitool")
	bmc := ipmisim.Start(t)
	bin, vars := obmdtest.ReplicaEnv(t)
	dbPipe := dbtest.StartProxy(t, dsn)
	peerPipe := obmdtest.StartPipe(t)
	a := obmdtest.StartReplica(t, bin, "rep-a", vars(dsn, ""))
	c := obmdtest.StartReplica(t, bin, "rep-c", vars(dsn, ""))
	b := obmdtest.StartReplica(t, bin, "rep-b", vars(dbPipe.DSN, peerPipe.Addr()))
	if a == nil || b == nil || c == nil {
		t.FailNow()
	}
	peerPipe.SetTarget(b.Listening["peer"])
	a.MustAPI(200, "PUT", "/node/n1", map[string]any{"type": "ipmi", "info": bmc.Info()})
	tok := a.Rotate("n1")
	st := obmdtest.OpenStore(t, dsn)

	// The old tenant attaches on B, which takes the node's SOL lease. B
	// renews the lease and its announcement once a second each, in phases
	// of their own (the lease's starts with the link): the attack waits for
	// a link whose renewal falls well after the announcement, then cuts B
	// off right after a renewal. (An attacker need not choose: the phase is
	// whatever it is, and half of them leak.)
	ctx := context.Background()
	var old *obmdtest.Client
	for attempt := 0; ; attempt++ {
		g := obmdtest.StartGoSession(t, b.Listening["ssh"], "n1", gossh.Password(tok), obmdtest.SessionOpts{PTY: true, Merge: true})
		obmdtest.SeeAll(t, bmc, fmt.Sprintf("held-by-b-%d", attempt), &g.Client)
		l0, err := st.Lease(ctx, "n1", db.LeaseSOL)
		if err != nil || l0.Owner != b.Name {
			t.Fatalf("SOL lease: got %+v, %v, want it held by %s", l0, err, b.Name)
		}
		var lease, ann time.Time
		obmdtest.WaitUntil(t, "a renewal of B's SOL lease", func() bool {
			l, err := st.Lease(ctx, "n1", db.LeaseSOL)
			lease = l.ExpiresAt
			return err == nil && l.ExpiresAt.After(l0.ExpiresAt)
		})
		reps, err := st.Replicas(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range reps {
			if r.ID == b.Name {
				ann = r.ExpiresAt
			}
		}
		lead := lease.Sub(ann)
		t.Logf("attempt %d: B's lease expires %v after its announcement", attempt, lead)
		if lead >= 400*time.Millisecond {
			old = &g.Client
			break
		}
		if attempt == 10 {
			t.Fatalf("no link renewed its lease 400 ms after B's announcement in %d attempts", attempt+1)
		}
		g.Conn.Close()
		obmdtest.WaitUntil(t, "no SOL lease of n1", func() bool {
			_, err := st.Lease(ctx, "n1", db.LeaseSOL)
			return errors.Is(err, db.ErrNotFound)
		})
	}

	// B loses the database and its peers; HIL rotates through A at once.
	dbPipe.Cut(true)
	peerPipe.Cut()
	start := time.Now()
	status, body := a.API("POST", "/node/n1/token", nil)
	acked := time.Now()
	if status != 200 {
		// Not acknowledged: the guarantee asks nothing more.
		t.Logf("rotation while B is cut off: %d %s", status, body)
		return
	}
	t.Logf("rotation acknowledged %v after B was cut off", acked.Sub(start).Round(time.Millisecond))
	seenFrom, typedFrom := old.Out.Len(), len(bmc.Serial())

	// From the acknowledgement on, the node prints and the old tenant types.
	const window = 3 * time.Second
	var wg sync.WaitGroup
	wg.Go(func() {
		for k := 0; time.Since(acked) < window; k++ {
			old.In.Write([]byte(fmt.Sprintf("oldkeys-%d\r", k))) // may fail once cut: the attempt is what counts
			time.Sleep(20 * time.Millisecond)
		}
	})
	for k := 0; time.Since(acked) < window; k++ {
		if err := bmc.WriteSerial([]byte(fmt.Sprintf("<after-%d>\r\n", k))); err != nil {
			t.Fatalf("print on the serial port: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	wg.Wait()
	time.Sleep(500 * time.Millisecond) // what is in flight arrives
	screen := old.Out.Bytes()[seenFrom:]
	if i := bytes.Index(screen, []byte("<after-")); i >= 0 {
		t.Errorf("the old tenant on %s read output printed after the rotation was acknowledged: %q",
			b.Name, obmdtest.Tail(string(screen[i:]), 300))
	}
	if typed := bmc.Serial()[typedFrom:]; bytes.Contains(typed, []byte("oldkeys-")) {
		i := bytes.Index(typed, []byte("oldkeys-"))
		t.Errorf("keys the old tenant typed after the acknowledgement reached the node: %q", obmdtest.Tail(string(typed[i:]), 300))
	}
}

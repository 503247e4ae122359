package daemon_test

// Tenant isolation across replicas (issue 11, item 1): once an access
// change has been acknowledged by one replica, no session from before it,
// on any replica, receives a byte the node printed after it or delivers a
// keystroke typed after it.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	gossh "golang.org/x/crypto/ssh"

	"github.com/obmd/obmd/db"
	"github.com/obmd/obmd/db/dbtest"
	"github.com/obmd/obmd/keys"
	"github.com/obmd/obmd/sol/soltest/ipmisim"
)

// isoRounds is how many rotations TestReplicaIsolation attacks.
const isoRounds = 20

// isoLeakWindow is how long, after a rotation, the test keeps printing and
// typing as the old tenant: longer than the epoch poll, so a replica that
// learns of the change only by polling is caught leaking.
const isoLeakWindow = 1500 * time.Millisecond

// rpCluster starts three obmd processes (rep-a, rep-b, rep-c) on dsn with
// shared keys and admin token, in cluster mode, with env added.
func rpCluster(t *testing.T, dsn string, env map[string]string) []*rpReplica {
	t.Helper()
	return rpClusterOn(t, []string{dsn, dsn, dsn}, env)
}

// sharedReplicaKeys makes the host key and sealing key every replica of
// one cluster shares, and returns their paths.
func sharedReplicaKeys(t *testing.T) (hostKey, sealKey string) {
	t.Helper()
	shared := t.TempDir()
	hostKey, sealKey = filepath.Join(shared, "host_key"), filepath.Join(shared, "seal.key")
	if _, err := keys.LoadOrCreateHostKey(hostKey); err != nil {
		t.Fatal(err)
	}
	if _, err := keys.LoadOrCreateSealer(sealKey); err != nil {
		t.Fatal(err)
	}
	return hostKey, sealKey
}

// rpClusterOn starts one replica per database in dsns (at most three),
// replica i on dsns[i] (the nodes of one Galera cluster, or one server).
func rpClusterOn(t *testing.T, dsns []string, env map[string]string) []*rpReplica {
	t.Helper()
	bin := obmdBinary(t)
	hostKey, sealKey := sharedReplicaKeys(t)
	vars := map[string]string{"OBMD_SSH_HOST_KEY": hostKey, "OBMD_DB_SEAL_KEY": sealKey,
		"OBMD_ADMIN_TOKEN": rpRandom(t), "OBMD_REPLICA_PEER_ADDR": "127.0.0.1:0"}
	for k, v := range env {
		vars[k] = v
	}
	names := []string{"rep-a", "rep-b", "rep-c"}[:len(dsns)]
	reps := make([]*rpReplica, len(names))
	var wg sync.WaitGroup
	for i, name := range names {
		wg.Add(1)
		go func() {
			defer wg.Done()
			own := maps.Clone(vars)
			own["OBMD_DB"] = dsns[i]
			reps[i] = rpStart(t, bin, name, own)
		}()
	}
	wg.Wait()
	for _, r := range reps {
		if r == nil {
			t.FailNow() // rpStart reported why
		}
	}
	return reps
}

// isoPartitionEvery: every isoPartitionEvery-th round of
// TestReplicaIsolation, the holder is cut off from the database and from
// the other replicas (not from its tenants nor its BMC) before the
// rotation.
const isoPartitionEvery = 5

// isoReplica is a replica of TestReplicaIsolation with its links to the
// database and to the other replicas, which a round can cut (nil for
// rep-a, which is never cut off).
type isoReplica struct {
	*rpReplica
	db   *dbtest.Proxy
	peer *atkPipe
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
	bin, vars := atkReplicaEnv(t)
	reps := []*isoReplica{{rpReplica: rpStart(t, bin, "rep-a", vars(dsn, ""))}}
	for _, name := range []string{"rep-b", "rep-c"} {
		r := &isoReplica{db: dbtest.StartProxy(t, dsn), peer: atkStartPipe(t)}
		if r.rpReplica = rpStart(t, bin, name, vars(r.db.DSN, r.peer.addr())); r.rpReplica == nil {
			t.FailNow()
		}
		r.peer.setTarget(r.listening["peer"])
		reps = append(reps, r)
	}
	if reps[0].rpReplica == nil {
		t.FailNow()
	}
	a := reps[0]
	a.mustAPI(200, "PUT", "/node/n1", map[string]any{"type": "ipmi", "info": bmc.Info()})
	tok := a.rotate("n1")
	st := rpStore(t, dsn)

	leaks := 0
	for round := range isoRounds {
		// The holder alternates between rep-b and rep-c.
		holder, relayer := reps[1+round%2], reps[2-round%2]
		partition := round%isoPartitionEvery == isoPartitionEvery-1
		name := fmt.Sprintf("round_%02d_holder_%s", round, holder.name)
		if partition {
			name += "_cut_off"
		}
		failed := !t.Run(name, func(t *testing.T) {
			tok = isoRound(t, bmc, st, a.rpReplica, holder, relayer.rpReplica, tok, round, partition)
		})
		if failed {
			leaks++
		}
	}
	if leaks > 0 {
		t.Errorf("the old tenant saw or typed past the change (or a round failed) in %d of %d rounds", leaks, isoRounds)
	}
}

// isoCut cuts r off from the database and the other replicas; the
// function it returns reconnects it and waits until it serves again.
func isoCut(t *testing.T, r *isoReplica) (heal func()) {
	r.db.Cut(true)
	r.peer.cut()
	return func() {
		r.db.Cut(false)
		r.peer.heal()
		waitUntil(t, r.name+" to serve again", func() bool {
			code, _ := r.on(t).request("GET", "/readyz", nil, "", "")
			return code == 200
		})
	}
}

// isoRound runs one round of TestReplicaIsolation (cutting the holder off
// before the rotation if partition) and returns the new token.
func isoRound(t *testing.T, bmc *ipmisim.Sim, st *db.Store, a *rpReplica, holder *isoReplica, relayer *rpReplica, tok string,
	round int, partition bool) string {
	// The previous round's link (held by a) must be gone, so that the old
	// tenant's first console makes holder the holder.
	waitUntil(t, "no SOL lease of n1", func() bool {
		_, err := st.Lease(context.Background(), "n1", db.LeaseSOL)
		return errors.Is(err, db.ErrNotFound)
	})
	onHolder := &goSession(t, holder.listening["ssh"], "n1", gossh.Password(tok), conOpts{pty: true, merge: true}).client
	rpSeeAll(t, bmc, fmt.Sprintf("r%d-held", round), onHolder)
	if l, err := st.Lease(context.Background(), "n1", db.LeaseSOL); err != nil || l.Owner != holder.name {
		t.Fatalf("SOL lease: got %+v, %v, want it held by %s", l, err, holder.name)
	}
	onRelayer := &sshPTY(t, relayer.listening["ssh"], "n1", tok, nil).client
	rpSeeAll(t, bmc, fmt.Sprintf("r%d-both", round), onHolder, onRelayer)
	olds := map[string]*client{"old tenant on " + holder.name: onHolder, "old tenant on " + relayer.name: onRelayer}
	seenFrom := map[string]int{}
	for what, v := range olds {
		seenFrom[what] = v.out.Len()
	}
	typedFrom := len(bmc.Serial())

	if partition {
		heal := isoCut(t, holder)
		defer heal()
	}
	newTok := a.on(t).rotate("n1")
	// Acknowledged: from now on the old tenant gets nothing and sends
	// nothing. It keeps trying, on both replicas, for isoLeakWindow.
	after := fmt.Sprintf("after-%d-", round)
	oldKeys := fmt.Sprintf("oldkeys-%d-", round)
	stop := time.Now().Add(isoLeakWindow)
	var wg sync.WaitGroup
	for _, v := range olds {
		wg.Add(1)
		go func() { // ends at stop
			defer wg.Done()
			for k := 0; time.Now().Before(stop); k++ {
				v.in.Write([]byte(fmt.Sprintf("%s%d\r", oldKeys, k))) // fails once cut: the attempt is what counts
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
	newSession := goSession(t, a.listening["ssh"], "n1", gossh.Password(newTok), conOpts{pty: true, merge: true})
	newTenant := &newSession.client
	wg.Wait()
	// The new tenant receives what the node prints after the change.
	printUntilSeen(t, bmc.WriteSerial, fmt.Sprintf("r%d-new", round), shows(newTenant.out))
	newKeys := fmt.Sprintf("newkeys-%d-%s\r", round, rpRandom(t)[:6])
	newTenant.typeKeys(newKeys)
	bmc.WaitSerial(t, []byte(newKeys), e2eWait)

	for what, v := range olds {
		v.end.wait(t, what)
		screen := v.out.Bytes()[seenFrom[what]:]
		for _, printed := range []string{"<" + after, fmt.Sprintf("<r%d-new", round)} { // all the node printed since
			if i := bytes.Index(screen, []byte(printed)); i >= 0 {
				t.Errorf("%s saw output printed after the rotation: %q", what, tailString(string(screen[i:]), 200))
			}
		}
		if !strings.Contains(string(screen), "access to n1 was revoked") {
			t.Errorf("%s: no reason given; screen %q", what, tailString(string(screen), 400))
		}
	}
	if typed := bmc.Serial()[typedFrom:]; bytes.Contains(typed, []byte(oldKeys)) {
		i := bytes.Index(typed, []byte(oldKeys))
		t.Errorf("keys the old tenant typed after the rotation reached the node: %q", tailString(string(typed[i:]), 200))
	}
	newSession.c.Close() // its console link lingers out and the lease is released
	return newTok
}

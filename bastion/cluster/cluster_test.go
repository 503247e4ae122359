package cluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	gossh "golang.org/x/crypto/ssh"

	"github.com/obmd/obmd/bastion/access/sessions"
	"github.com/obmd/obmd/commands"
	"github.com/obmd/obmd/db"
	"github.com/obmd/obmd/db/dbtest"
	"github.com/obmd/obmd/sol"
	"github.com/obmd/obmd/sol/sim"
)

func TestConfigValidates(t *testing.T) {
	key := newHostKey(t)
	lab := sim.NewLab()
	store := &killableStore{}
	acc := &testAccess{}
	ok := Config{ReplicaID: "a", PeerAddr: "127.0.0.1:1"}
	tests := []struct {
		name string
		cfg  Config
		key  gossh.Signer
		acc  Access
		ok   bool
	}{
		{"complete", ok, key, acc, true},
		{"no replica ID", Config{PeerAddr: "127.0.0.1:1"}, key, acc, false},
		{"no peer address", Config{ReplicaID: "a"}, key, acc, false},
		{"no host key", ok, nil, acc, false},
		{"no access state", ok, key, nil, false},
		{"long replica ID", Config{ReplicaID: strings.Repeat("a", 101), PeerAddr: "x:1"}, key, acc, false},
		{"renew not below TTL", Config{ReplicaID: "a", PeerAddr: "x:1", LeaseTTL: time.Second, Renew: time.Second}, key, acc, false},
		{"negative TTL", Config{ReplicaID: "a", PeerAddr: "x:1", LeaseTTL: -1}, key, acc, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := New(tt.cfg, tt.key, tt.acc, store, lab, quietLog())
			if got := err == nil; got != tt.ok {
				t.Errorf("got error %v, want ok %v", err, tt.ok)
			}
		})
	}
}

// TestOneLinkManyReplicas: viewers of one node on three replicas share one
// SOL payload: they all see the same output, the BMC was activated once,
// and the holder arbitrates one writer among all of them: only the
// writer's keys and breaks reach the BMC, from whichever replica it is
// on, and a takeover through a relay tells the previous writer.
func TestOneLinkManyReplicas(t *testing.T) {
	engines(t, func(t *testing.T, dsn string) {
		key, lab := newHostKey(t), sim.NewLab()
		b := lab.BMC("n1", sim.ModeNormal)
		var rs []*replica
		for i := range 3 {
			rs = append(rs, startReplica(t, fmt.Sprintf("r%d", i), openStore(t, dsn), lab, key))
		}
		v0 := attach(t, rs[0], "n1", "alice")
		waitFor(t, "the first link", func() bool { return rs[0].hub.Stats().LinksUp == 1 })
		v1, v2 := attach(t, rs[1], "n1", "bob"), attach(t, rs[2], "n1", "carol")
		rec := []*recorder{record(v0), record(v1), record(v2)}
		seeAll(t, b, "hello-1\n", rec...)
		for _, v := range []*sol.Viewer{v1, v2} {
			if !v.AwaitRole(context.Background()) {
				t.Fatalf("%s: role never decided", v.Name())
			}
		}

		if !rs[0].c.Holds("n1") || rs[1].c.Holds("n1") || rs[2].c.Holds("n1") {
			t.Errorf("holders: got %v %v %v, want r0 only", rs[0].c.Holds("n1"), rs[1].c.Holds("n1"), rs[2].c.Holds("n1"))
		}
		if _, opens, deacts := b.ConsoleStats(); opens != 1 || deacts != 0 {
			t.Errorf("BMC: got %d opens and %d deactivations, want 1 and 0", opens, deacts)
		}
		// The holder lists the relayed viewers themselves, not the relays.
		waitFor(t, "the holder listing every viewer", func() bool {
			var names []string
			for _, vi := range rs[0].hub.Viewers("n1") {
				names = append(names, fmt.Sprintf("%s/%v/%v", vi.Name, vi.Remote, vi.Writer))
			}
			slices.Sort(names)
			return fmt.Sprint(names) == "[alice/false/true bob/true/false carol/true/false]"
		})
		for i := 1; i < 3; i++ {
			if got := rs[i].hub.Writer("n1").Name; got != "alice" {
				t.Errorf("replica %d: writer %q, want alice", i, got)
			}
		}

		// Only the writer types, wherever it is.
		ctx, cancel := context.WithTimeout(context.Background(), wait)
		defer cancel()
		if _, err := v1.Write([]byte("no")); !errors.Is(err, sol.ErrReadOnly) {
			t.Errorf("bob (reading) writes: got %v, want %v", err, sol.ErrReadOnly)
		}
		if err := v2.Break(ctx); !errors.Is(err, sol.ErrReadOnly) {
			t.Errorf("carol (reading) breaks: got %v, want %v", err, sol.ErrReadOnly)
		}
		typeKeys := func(v *sol.Viewer, k string) {
			t.Helper()
			if _, err := v.Write([]byte(k)); err != nil {
				t.Fatalf("%s writes: %v", v.Name(), err)
			}
			waitFor(t, k+" on the serial side", func() bool { return strings.Contains(string(b.Typed()), k) })
		}
		typeKeys(v0, "k0")
		v2.TakeWrite()
		waitFor(t, "alice told of carol's takeover", func() bool {
			return rec[0].hasNotice("carol took over writing; you are read-only")
		})
		typeKeys(v2, "k2")
		if err := v2.Break(ctx); err != nil {
			t.Errorf("break through a relay: %v", err)
		}
		v1.TakeWrite()
		waitFor(t, "carol told of bob's takeover", func() bool {
			return rec[2].hasNotice("bob took over writing; you are read-only")
		})
		typeKeys(v1, "k1")
		if _, err := v2.Write([]byte("no")); !errors.Is(err, sol.ErrReadOnly) {
			t.Errorf("carol after bob's takeover: got %v, want %v", err, sol.ErrReadOnly)
		}
		if got := string(b.Typed()); got != "k0k2k1" {
			t.Errorf("typed on the serial side: got %q, want %q", got, "k0k2k1")
		}
		if got := b.Breaks(); got != 1 {
			t.Errorf("breaks: got %d, want 1", got)
		}
	})
}

// TestWriterWhoAcrossReplicas: a writer on a relaying replica is known by
// its session and its name on the holder too (the relay carries both), so
// that `sessions` there marks the session that writes.
func TestWriterWhoAcrossReplicas(t *testing.T) {
	key, lab := newHostKey(t), sim.NewLab()
	lab.BMC("n1", sim.ModeNormal)
	dsn := dbtest.SQLiteDSN(t)
	r0, r1 := startReplica(t, "r0", openStore(t, dsn), lab, key), startReplica(t, "r1", openStore(t, dsn), lab, key)
	attach(t, r0, "n1", "alice")
	waitFor(t, "the link", func() bool { return r0.hub.Stats().LinksUp == 1 })
	v1, err := r1.hub.Attach(ctxFor(t), "n1", sol.AttachOptions{Session: "r1-5", ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer v1.Close()
	if !v1.AwaitRole(ctxFor(t)) {
		t.Fatal("role never decided")
	}
	v1.TakeWrite()
	want := sol.Who{Session: "r1-5", Name: "#r1-5"}
	waitFor(t, "both replicas to know the writer", func() bool {
		return r0.hub.Writer("n1") == want && r1.hub.Writer("n1") == want
	})
	var remote []sol.Who
	for _, vi := range r0.hub.Viewers("n1") {
		if vi.Remote {
			remote = append(remote, vi.Who())
		}
	}
	if len(remote) != 1 || remote[0] != want {
		t.Errorf("holder's relayed viewers: got %+v, want [%+v]", remote, want)
	}
}

// TestHolderLeavesLinkStays: the holder's own viewers leaving does not end
// the link while relays use it; when the last viewer anywhere leaves, the
// link closes and the lease is released.
func TestHolderLeavesLinkStays(t *testing.T) {
	key, lab := newHostKey(t), sim.NewLab()
	b := lab.BMC("n1", sim.ModeNormal)
	dsn := dbtest.SQLiteDSN(t)
	r0, r1 := startReplica(t, "r0", openStore(t, dsn), lab, key), startReplica(t, "r1", openStore(t, dsn), lab, key)
	if r0.c.ConsoleHeld(ctxFor(t), "n1") || r1.c.ConsoleHeld(ctxFor(t), "n1") {
		t.Error("ConsoleHeld before any link: got true, want false")
	}
	v0 := attach(t, r0, "n1", "alice")
	waitFor(t, "the link", func() bool { return r0.hub.Stats().LinksUp == 1 })
	// Doctor on either replica sees obmd's link: r1 from the lease alone.
	if !r0.c.ConsoleHeld(ctxFor(t), "n1") || !r1.c.ConsoleHeld(ctxFor(t), "n1") || r1.c.ConsoleHeld(ctxFor(t), "n2") {
		t.Errorf("ConsoleHeld with r0 holding n1: got r0 %v, r1 %v, r1 of n2 %v; want true, true, false",
			r0.c.ConsoleHeld(ctxFor(t), "n1"), r1.c.ConsoleHeld(ctxFor(t), "n1"), r1.c.ConsoleHeld(ctxFor(t), "n2"))
	}
	v1 := attach(t, r1, "n1", "bob")
	rec1 := record(v1)
	seeAll(t, b, "one\n", rec1)
	v0.Close()
	time.Sleep(300 * time.Millisecond) // more than the linger
	seeAll(t, b, "two\n", rec1)
	if _, opens, _ := b.ConsoleStats(); opens != 1 {
		t.Errorf("opens: got %d, want 1", opens)
	}
	v1.Close()
	if err := b.WaitConsole(ctxFor(t), false); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the lease to be released", func() bool { return !r0.c.Holds("n1") })
	if _, err := openStore(t, dsn).Lease(context.Background(), "n1", db.LeaseSOL); !errors.Is(err, db.ErrNotFound) {
		t.Errorf("lease after the last viewer left: got %v, want ErrNotFound", err)
	}
	if r1.c.ConsoleHeld(ctxFor(t), "n1") {
		t.Error("ConsoleHeld after the lease was released: got true, want false")
	}
}

// TestTakeover: when the holder dies (no renewals, no peer server, its SOL
// payload left active), a survivor takes the lease once it expires,
// deactivates the stale payload and serves every surviving viewer.
func TestTakeover(t *testing.T) {
	engines(t, func(t *testing.T, dsn string) {
		key, lab := newHostKey(t), sim.NewLab()
		b := lab.BMC("n1", sim.ModeNormal)
		r0 := startReplica(t, "r0", openStore(t, dsn), lab, key)
		r1 := startReplica(t, "r1", openStore(t, dsn), lab, key)
		r2 := startReplica(t, "r2", openStore(t, dsn), lab, key)
		attach(t, r0, "n1", "alice")
		waitFor(t, "the link", func() bool { return r0.hub.Stats().LinksUp == 1 })
		rec1, rec2 := record(attach(t, r1, "n1", "bob")), record(attach(t, r2, "n1", "carol"))
		seeAll(t, b, "before\n", rec1, rec2)

		start := time.Now()
		r0.kill(t)
		seeAll(t, b, "after\n", rec1, rec2)
		t.Logf("takeover after %v (lease TTL %v)", time.Since(start).Round(time.Millisecond), testTTL)
		if r1.c.Holds("n1") == r2.c.Holds("n1") {
			t.Errorf("holders after takeover: r1 %v, r2 %v, want exactly one", r1.c.Holds("n1"), r2.c.Holds("n1"))
		}
		if _, opens, deacts := b.ConsoleStats(); opens != 2 || deacts != 1 {
			t.Errorf("BMC: got %d opens and %d deactivations, want 2 and 1", opens, deacts)
		}
		for _, r := range []*recorder{rec1, rec2} {
			if n := r.Notices(); len(n) == 0 || !strings.Contains(strings.Join(n, "|"), "console link lost") {
				t.Errorf("notices: got %q, want the gap marked", n)
			}
		}
	})
}

// TestLeaseLost: a holder whose lease is taken away (it could not renew in
// time) closes its console; its hub reconnects and relays to the new
// holder.
func TestLeaseLost(t *testing.T) {
	key, lab := newHostKey(t), sim.NewLab()
	b := lab.BMC("n1", sim.ModeNormal)
	dsn := dbtest.SQLiteDSN(t)
	store := openStore(t, dsn)
	r0 := startReplica(t, "r0", openStore(t, dsn), lab, key)
	rec := record(attach(t, r0, "n1", "alice"))
	waitFor(t, "the link", func() bool { return r0.hub.Stats().LinksUp == 1 })
	seeAll(t, b, "one\n", rec)

	// Someone takes the lease over r0's head (as after a long stall).
	l, err := store.Lease(context.Background(), "n1", db.LeaseSOL)
	if err != nil {
		t.Fatal(err)
	}
	if err := store.ReleaseLease(context.Background(), "n1", db.LeaseSOL, l.Token); err != nil {
		t.Fatal(err)
	}
	if _, err := store.AcquireLease(context.Background(), db.Lease{Node: "n1", Kind: db.LeaseSOL, Owner: "thief",
		Token: newToken(), Addr: "127.0.0.1:1"}, time.Minute); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "r0 to give up the link", func() bool { return !r0.c.Holds("n1") })
	if err := b.WaitConsole(ctxFor(t), false); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the viewer to be told", func() bool {
		return strings.Contains(strings.Join(rec.Notices(), "|"), "console link lost")
	})
}

// TestDeactivateNeedsLease: a replica that does not hold the SOL lease
// never deactivates the payload (it would cut the holder's link).
func TestDeactivateNeedsLease(t *testing.T) {
	key, lab := newHostKey(t), sim.NewLab()
	lab.BMC("n1", sim.ModeNormal)
	r0 := startReplica(t, "r0", openStore(t, dbtest.SQLiteDSN(t)), lab, key)
	b, err := r0.c.Resolve(context.Background(), "n1")
	if err != nil {
		t.Fatal(err)
	}
	if err := b.DeactivateConsole(context.Background()); err == nil {
		t.Error("deactivate without the lease: got nil, want an error")
	}
	if _, _, deacts := lab.BMC("n1", sim.ModeNormal).ConsoleStats(); deacts != 0 {
		t.Errorf("deactivations: got %d, want 0", deacts)
	}
}

// TestPowerBusyAcrossReplicas: while a power operation runs through one
// replica, another replica's operation on the node is ErrBusy at once;
// afterwards it goes through. power-status is never busy.
func TestPowerBusyAcrossReplicas(t *testing.T) {
	engines(t, func(t *testing.T, dsn string) {
		key, lab := newHostKey(t), sim.NewLab()
		b := lab.BMC("n1", sim.ModeNormal)
		r0 := startReplica(t, "r0", openStore(t, dsn), lab, key)
		r1 := startReplica(t, "r1", openStore(t, dsn), lab, key)
		b0, err := r0.c.ForCommands().Resolve(context.Background(), "n1")
		if err != nil {
			t.Fatal(err)
		}
		b1, err := r1.c.ForCommands().Resolve(context.Background(), "n1")
		if err != nil {
			t.Fatal(err)
		}
		b.SetDelay(time.Second)
		first := make(chan error, 1)
		go func() { first <- b0.PowerCycle(context.Background()) }()
		store := openStore(t, dsn)
		waitFor(t, "the power lease", func() bool {
			_, err := store.Lease(context.Background(), "n1", db.LeasePower)
			return err == nil
		})
		for name, op := range map[string]func(context.Context) error{
			"power on":  b1.PowerOn,
			"power off": func(ctx context.Context) error { return b1.PowerOff(ctx, true) },
			"reset":     b1.PowerReset,
			"bootdev":   func(ctx context.Context) error { return b1.SetBootDevice(ctx, sol.BootPXE, false) },
		} {
			err := op(context.Background())
			if !errors.Is(err, commands.ErrBusy) || commands.ExitCode(err) != commands.ExitBusy {
				t.Errorf("%s while r0 cycles: got %v, want ErrBusy", name, err)
			} else if !strings.Contains(err.Error(), "r0") {
				t.Errorf("%s: got %q, want the holder named", name, err)
			}
		}
		if _, err := b1.PowerStatus(context.Background()); err != nil {
			t.Errorf("power status while r0 cycles: %v", err)
		}
		if err := <-first; err != nil {
			t.Fatalf("power cycle: %v", err)
		}
		b.SetDelay(0)
		if err := b1.PowerOn(context.Background()); err != nil {
			t.Errorf("power on after the cycle: %v", err)
		}
		if _, err := store.Lease(context.Background(), "n1", db.LeasePower); !errors.Is(err, db.ErrNotFound) {
			t.Errorf("power lease after the operations: got %v, want released", err)
		}
	})
}

// TestPeerAuth: only a client with the shared host key gets a console, and
// only from a replica that holds the node's lease.
func TestPeerAuth(t *testing.T) {
	key, lab := newHostKey(t), sim.NewLab()
	lab.BMC("n1", sim.ModeNormal)
	r0 := startReplica(t, "r0", openStore(t, dbtest.SQLiteDSN(t)), lab, key)
	addr := r0.l.Addr().String()
	dial := func(k gossh.Signer, user string) (*gossh.Client, error) {
		return gossh.Dial("tcp", addr, &gossh.ClientConfig{User: user, Auth: []gossh.AuthMethod{gossh.PublicKeys(k)},
			HostKeyCallback: gossh.FixedHostKey(key.PublicKey()), Timeout: 5 * time.Second, ClientVersion: identFor(ProtocolVersion)})
	}
	if c, err := dial(newHostKey(t), peerUser); err == nil {
		c.Close()
		t.Error("stranger's key: got a connection, want refused")
	}
	if c, err := dial(key, "root"); err == nil {
		c.Close()
		t.Error("other user: got a connection, want refused")
	}
	c, err := dial(key, peerUser)
	if err != nil {
		t.Fatalf("shared key: %v", err)
	}
	defer c.Close()
	_, _, err = c.OpenChannel(consoleChannel, gossh.Marshal(consoleOpen{Label: "n1", From: "x", Epoch: 1}))
	var oce *gossh.OpenChannelError
	if !errors.As(err, &oce) || oce.Reason != gossh.Prohibited {
		t.Errorf("console of a node r0 does not hold: got %v, want prohibited", err)
	}
	if _, _, err := c.OpenChannel("session", nil); err == nil {
		t.Error("session channel: got accepted, want rejected")
	}
	// The key without the peer protocol's identification: refused.
	foreign, err := gossh.Dial("tcp", addr, &gossh.ClientConfig{User: peerUser, Auth: []gossh.AuthMethod{gossh.PublicKeys(key)},
		HostKeyCallback: gossh.FixedHostKey(key.PublicKey()), Timeout: 5 * time.Second})
	if err == nil {
		defer foreign.Close()
		if _, _, err := foreign.OpenChannel(consoleChannel, gossh.Marshal(consoleOpen{Label: "n1", From: "x", Epoch: 1})); err == nil {
			t.Error("a client that does not speak the peer protocol: got a console, want the connection closed")
		}
	}

	// A client refuses a server that lacks the shared key.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	impostor := startImpostor(t, l, newHostKey(t))
	_, err = r0.c.dialRelay(context.Background(), db.Lease{Owner: "imp", Addr: l.Addr().String()}, "n1", 1, false)
	if err == nil || !strings.Contains(err.Error(), "host key") {
		t.Errorf("relay to an impostor: got %v, want a host key mismatch", err)
	}
	<-impostor
}

// startImpostor serves one SSH handshake with the wrong host key.
func startImpostor(t *testing.T, l net.Listener, key gossh.Signer) <-chan struct{} {
	done := make(chan struct{})
	cfg := &gossh.ServerConfig{NoClientAuth: true}
	cfg.AddHostKey(key)
	go func() { // ends after one connection
		defer close(done)
		defer l.Close()
		conn, err := l.Accept()
		if err != nil {
			return
		}
		defer conn.Close()
		gossh.NewServerConn(conn, cfg)
	}()
	return done
}

func ctxFor(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	t.Cleanup(cancel)
	return ctx
}

// TestHolderUnreachable: while a live lease names a holder nobody can
// reach, opening waits (bounded by ctx) and then says whom it waited for;
// it never opens the BMC under the holder.
func TestHolderUnreachable(t *testing.T) {
	key, lab := newHostKey(t), sim.NewLab()
	b := lab.BMC("n1", sim.ModeNormal)
	dsn := dbtest.SQLiteDSN(t)
	store := openStore(t, dsn)
	dead, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := dead.Addr().String()
	dead.Close() // connections to it are refused
	if _, err := store.AcquireLease(context.Background(), db.Lease{Node: "n1", Kind: db.LeaseSOL, Owner: "ghost",
		Token: newToken(), Addr: addr}, time.Minute); err != nil {
		t.Fatal(err)
	}
	r0 := startReplica(t, "r0", openStore(t, dsn), lab, key)
	bmc, err := r0.c.Resolve(context.Background(), "n1")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	_, err = bmc.OpenConsole(ctx)
	if err == nil || !strings.Contains(err.Error(), "replica ghost") || errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("open under an unreachable holder: got %v, want a wait for ghost", err)
	}
	if attempts, _, _ := b.ConsoleStats(); attempts != 0 {
		t.Errorf("BMC open attempts: got %d, want 0", attempts)
	}
	if r0.c.Holds("n1") {
		t.Error("r0 holds the lease, want ghost")
	}
}

// TestMockOneReader: a mock node's console has one reader at a time
// through the cluster as it has without one: a new viewer, on the same
// replica or on another, displaces the current one and counts from 0.
func TestMockOneReader(t *testing.T) {
	key, lab := newHostKey(t), sim.NewLab()
	lab.BMC("m1", sim.ModeMock)
	dsn := dbtest.SQLiteDSN(t)
	r0, r1 := startReplica(t, "r0", openStore(t, dsn), lab, key), startReplica(t, "r1", openStore(t, dsn), lab, key)
	displaced := func(v *sol.Viewer, who string) {
		t.Helper()
		select {
		case <-v.Done():
		case <-time.After(wait):
			t.Fatalf("%s: still attached, want displaced by the new reader", who)
		}
		if !errors.Is(v.Err(), sol.ErrDisplaced) {
			t.Errorf("%s: ended with %v, want ErrDisplaced", who, v.Err())
		}
	}
	counts := func(r *recorder, who string) {
		t.Helper()
		waitFor(t, who+" to count", func() bool { return r.has("\n2\n") })
		if got := r.String(); !strings.HasPrefix(got, "0\n1\n2\n") {
			t.Errorf("%s: got %q, want a count from 0", who, tailString(got, 40))
		}
	}
	a := attach(t, r0, "m1", "alice")
	counts(record(a), "alice")
	b := attach(t, r0, "m1", "bob") // same replica
	counts(record(b), "bob")
	displaced(a, "alice")
	c := attach(t, r1, "m1", "carol") // another replica, through a relay
	counts(record(c), "carol")
	displaced(b, "bob")
	if !r0.c.Holds("m1") || r1.c.Holds("m1") {
		t.Errorf("holders: got r0 %v, r1 %v, want r0 only (carol reads through a relay)", r0.c.Holds("m1"), r1.c.Holds("m1"))
	}
}

func tailString(s string, n int) string {
	if len(s) > n {
		return "..." + s[len(s)-n:]
	}
	return s
}

// TestSessionsAcrossReplicas: a replica lists the other replicas'
// sessions, each marked with its replica, and kicks one on the replica
// holding it, which ends it with the reason given; a session no replica
// holds is not found.
func TestSessionsAcrossReplicas(t *testing.T) {
	engines(t, func(t *testing.T, dsn string) {
		key, lab := newHostKey(t), sim.NewLab()
		var rs []*replica
		for i := range 3 {
			rs = append(rs, startReplica(t, fmt.Sprintf("r%d", i), openStore(t, dsn), lab, key))
		}
		// Announced just before each fan-out: an announcement lives
		// testTTL (600 ms), less than three replicas take to start on a
		// loaded machine.
		announceAll := func() {
			for _, r := range rs {
				announce(t, r)
			}
		}
		type started struct {
			ctx context.Context
			id  string
		}
		var ss []started
		for i, r := range rs {
			ctx, info, end, err := r.reg.Start(context.Background(), sessions.Info{Node: "n1", Kind: sessions.KindConsole,
				User: "token", Remote: "127.0.0.1:1"}, "127.0.0.1")
			if err != nil {
				t.Fatal(err)
			}
			go func() { <-ctx.Done(); end() }() // a session ends when cut; ends at the latest at cleanup
			t.Cleanup(end)
			if want := fmt.Sprintf("r%d-1", i); info.ID != want {
				t.Errorf("session ID on r%d: got %q, want %q", i, info.ID, want)
			}
			ss = append(ss, started{ctx, info.ID})
		}
		ctx, cancel := context.WithTimeout(context.Background(), wait)
		defer cancel()
		announceAll()
		list, err := rs[2].c.RemoteSessions(ctx, "n1")
		if err != nil {
			t.Fatalf("remote sessions: %v", err)
		}
		var got []string
		for _, s := range list {
			got = append(got, s.Replica+":"+s.ID)
		}
		slices.Sort(got)
		if fmt.Sprint(got) != "[r0:r0-1 r1:r1-1]" {
			t.Errorf("r2's list of the others: got %v, want r0's and r1's", got)
		}
		if list, err := rs[2].c.RemoteSessions(ctx, "other"); err != nil || len(list) != 0 {
			t.Errorf("another node's sessions: got %v, %v, want none", list, err)
		}

		announceAll()
		node, err := rs[2].c.Kick(ctx, ss[0].id, "kicked by admin")
		if err != nil || node != "n1" {
			t.Fatalf("kick r0's session through r2: got %q, %v", node, err)
		}
		select {
		case <-ss[0].ctx.Done():
		default:
			t.Fatal("r0's session still runs after the kick was answered")
		}
		if cause := context.Cause(ss[0].ctx); cause == nil || cause.Error() != "your session on n1 was ended by an administrator; your access is unchanged" {
			t.Errorf("kicked session's cause: got %v", cause)
		}
		if ss[1].ctx.Err() != nil {
			t.Error("r1's session ended too")
		}
		for _, id := range []string{ss[0].id, "r1-99", "nobody-1", "17", ss[2].id} {
			if _, err := rs[2].c.Kick(ctx, id, "x"); !errors.Is(err, ErrNoSession) {
				t.Errorf("kick %q: got %v, want %v", id, err, ErrNoSession)
			}
		}
	})
}

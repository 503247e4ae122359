package replicas

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/obmd/obmd/bastion/e2e/obmdtest"

	gossh "golang.org/x/crypto/ssh"

	"github.com/obmd/obmd/bastion/daemon"
	"github.com/obmd/obmd/db"
	"github.com/obmd/obmd/db/dbtest"
)

// TestReplicaClockSkew (issue 14): two replicas on MariaDB (then on
// PostgreSQL), one whose
// clock is a minute off (behind, then ahead), holding a node's SOL link.
// Leases are on the database's clock: the honest replica does not take the
// skewed one's live lease (a replica behind would stamp its lease expired
// to the others' clocks), and takes it within about a lease TTL once the
// skewed one stops renewing (cut off its database), not a minute later (a
// replica ahead would stamp it valid for a minute more).
func TestReplicaClockSkew(t *testing.T) {
	for _, e := range dbtest.SharedEngines() {
		t.Run(e.Name, func(t *testing.T) {
			for _, skew := range []time.Duration{-time.Minute, time.Minute} {
				t.Run(skew.String(), func(t *testing.T) { testClockSkew(t, e.DSN(t), skew) })
			}
		})
	}
}

// testClockSkew is TestReplicaClockSkew with the skewed replica's clock
// skew off, on the database of dsn.
func testClockSkew(t *testing.T, dsn string, skew time.Duration) {
	const ttl = 2 * time.Second
	proxy := dbtest.StartProxy(t, dsn)
	state := t.TempDir() // shared: the same host key, seal key and admin token
	replica := func(id, dsn string, opts ...db.Option) *obmdtest.Daemon {
		return obmdtest.StartDB(t, opts, func(c *daemon.Config) {
			c.DB.DSN, c.Daemon.StateDir, c.Replica.ID, c.Replica.PeerAddr, c.Cluster.LeaseTTL = dsn, state, id, "127.0.0.1:0", ttl
		})
	}
	skewed := replica("skewed", proxy.DSN, db.WithClockSkew(skew))
	honest := replica("honest", dsn)
	// The database is back before they stop (cleanups run last
	// first): the skewed one flushes its console history then.
	t.Cleanup(func() { proxy.Cut(false) })
	tok := skewed.AddSimNode("n1")
	st := obmdtest.OpenStore(t, dsn)
	owner := func() string {
		l, err := st.Lease(context.Background(), "n1", db.LeaseSOL)
		if errors.Is(err, db.ErrNotFound) {
			return ""
		}
		if err != nil {
			t.Fatalf("SOL lease: %v", err)
		}
		return l.Owner
	}
	v := obmdtest.StartGoSession(t, skewed.SSHAddr(), "n1", gossh.Password(tok), obmdtest.SessionOpts{PTY: true, Merge: true})
	v.Out.Wait(t, "the console on the skewed replica", 0, "console of n1")
	obmdtest.WaitUntil(t, "the skewed replica's lease", func() bool { return owner() == "skewed" })
	r := obmdtest.StartGoSession(t, honest.SSHAddr(), "n1", gossh.Password(tok), obmdtest.SessionOpts{PTY: true, Merge: true})
	r.Out.Wait(t, "the console on the honest replica", 0, "console of n1")

	// Live: renewed by the skewed replica, never taken.
	for end := time.Now().Add(3 * ttl); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		if o := owner(); o != "skewed" {
			t.Fatalf("the live lease of the skewed replica is held by %q", o)
		}
	}
	// Dead: the honest replica takes it over within about a TTL.
	cut := time.Now()
	proxy.Cut(true)
	obmdtest.WaitUntil(t, "the honest replica taking the lease over", func() bool { return owner() == "honest" })
	took := time.Since(cut)
	if took < ttl/2 || took > ttl+5*time.Second {
		t.Errorf("the lease moved %v after its holder stopped renewing, want about the TTL (%v)", took, ttl)
	}
	t.Logf("clock %v: lease taken over %v after the skewed holder lost its database (TTL %v)", skew, took.Round(time.Millisecond), ttl)
}

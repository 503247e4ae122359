package replicas

// Zones (docs/replicas.md, Zones): a replica in a network namespace of
// its own, which really cannot reach the BMCs on the host's loopback,
// holds none of their links and relays their consoles from a replica that
// reaches them.

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math/big"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/obmd/obmd/bastion/e2e/obmdtest"
	"github.com/obmd/obmd/db"
	"github.com/obmd/obmd/db/dbtest"
	"github.com/obmd/obmd/sol/soltest"
	"github.com/obmd/obmd/sol/soltest/ipmisim"
)

// zoneNet is a network namespace joined to the host by a veth pair: the
// host's end HostIP, the namespace's NSIP (a /30 of 10.231.0.0/16). A
// process in it reaches the host at HostIP only; the host's loopback (and
// what listens there) it does not reach.
type zoneNet struct {
	name, HostIP, NSIP string
}

// newZoneNet makes a zoneNet, deleted when t ends.
func newZoneNet(t *testing.T) *zoneNet {
	t.Helper()
	if _, err := exec.LookPath("ip"); err != nil || os.Geteuid() != 0 {
		soltest.Missing(t, "network namespaces need root and iproute2's ip (euid %d): %v", os.Geteuid(), err)
	}
	ip := func(args ...string) error {
		out, err := exec.Command("ip", args...).CombinedOutput()
		if err != nil {
			return fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, out)
		}
		return nil
	}
	for range 10 { // another test may hold the subnet picked
		n, err := rand.Int(rand.Reader, big.NewInt(64*256))
		if err != nil {
			t.Fatal(err)
		}
		sub := n.Int64() * 4 // a /30 within 10.231.0.0/16
		z := &zoneNet{name: "obmdz" + obmdtest.Random(t)[:8],
			HostIP: fmt.Sprintf("10.231.%d.%d", sub/256, sub%256+1), NSIP: fmt.Sprintf("10.231.%d.%d", sub/256, sub%256+2)}
		host, peer := "vz"+z.name[5:], "vn"+z.name[5:]
		if err := ip("netns", "add", z.name); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ip("netns", "del", z.name) }) // and the veth pair with it
		steps := [][]string{
			{"link", "add", host, "type", "veth", "peer", "name", peer},
			{"link", "set", peer, "netns", z.name},
			{"addr", "add", z.HostIP + "/30", "dev", host},
			{"link", "set", host, "up"},
			{"-n", z.name, "addr", "add", z.NSIP + "/30", "dev", peer},
			{"-n", z.name, "link", "set", peer, "up"},
			{"-n", z.name, "link", "set", "lo", "up"},
		}
		err = nil
		for _, s := range steps {
			if err = ip(s...); err != nil {
				break
			}
		}
		if err == nil {
			return z
		}
		ip("link", "del", host)
		if !strings.Contains(err.Error(), "exists") {
			t.Fatal(err)
		}
	}
	t.Fatal("no free subnet in 10.231.0.0/16 after 10 tries")
	return nil
}

// wrap returns an executable that runs bin in the namespace.
func (z *zoneNet) wrap(t *testing.T, bin string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "obmd-in-"+z.name)
	script := fmt.Sprintf("#!/bin/sh\nexec ip netns exec %s %s \"$@\"\n", z.name, bin)
	if err := os.WriteFile(path, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestZones: rep-a (zone a) on the host reaches the two ipmi_sim BMCs of
// zone a on the host's loopback; rep-b (zone b) runs in a network
// namespace of its own and cannot. Both capture always. rep-a holds both
// links, rep-b none, ever; a console through rep-b is relayed from rep-a,
// and a node captured only while attached is opened by rep-a for a
// viewer on rep-b. A node of zone c, which no replica reaches, is held by
// no one and reported by /readyz, the metrics and doctor.
func TestZones(t *testing.T) {
	dsn := dbtest.MySQLDSN(t)
	ipmisim.Require(t, "ipmitool")
	zn := newZoneNet(t)
	bin, envOf := obmdtest.ReplicaEnv(t)
	bmc1, bmc2 := ipmisim.Start(t), ipmisim.Start(t)
	env := envOf(dsn, "")
	env["OBMD_CONSOLE_CAPTURE"] = "always"

	envA := maps.Clone(env)
	envA["OBMD_CLUSTER_ZONES"] = "a"
	envA["OBMD_REPLICA_PEER_ADDR"] = zn.HostIP + ":0" // where rep-b reaches it
	a := obmdtest.StartReplica(t, bin, "rep-a", envA)
	if a == nil {
		t.FailNow()
	}
	st := obmdtest.OpenStore(t, dsn)
	bad := bmc1.Info()
	bad.Port = 9 // zone c's BMC: nobody reaches it
	for label, node := range map[string]struct {
		bmc  any
		zone string
	}{"n1": {bmc1.Info(), "a"}, "n2": {bmc2.Info(), "a"}, "n3": {bad, "c"}} {
		a.MustAPI(200, "PUT", "/node/"+label, map[string]any{"type": "ipmi", "info": node.bmc})
		a.MustAPI(200, "PUT", "/v1/nodes/"+label+"/zone", map[string]string{"zone": node.zone})
	}
	// rep-b starts once the nodes have their zones.
	envB := maps.Clone(env)
	envB["OBMD_CLUSTER_ZONES"] = "b"
	envB["OBMD_DB"] = dbtest.StartProxyOn(t, dsn, zn.HostIP+":0").DSN
	for _, k := range []string{"OBMD_REPLICA_PEER_ADDR", "OBMD_SSH_ADDR", "OBMD_ADMIN_ADDR"} {
		envB[k] = zn.NSIP + ":0"
	}
	envB["OBMD_ADMIN_INSECURE_HTTP"] = "true" // on the veth pair between the test and rep-b only
	b := obmdtest.StartReplica(t, zn.wrap(t, bin), "rep-b", envB)
	if b == nil {
		t.FailNow()
	}
	// rep-b really cannot reach the BMCs: its loopback is its own.
	if out, err := exec.Command("ip", "netns", "exec", zn.name, "ipmitool", "-I", "lanplus", "-C", "3", "-N", "1", "-R", "1",
		"-H", "127.0.0.1", "-p", fmt.Sprint(bmc1.Port), "-U", ipmisim.User, "-P", ipmisim.Pass, "power", "status").CombinedOutput(); err == nil {
		t.Fatalf("ipmitool in rep-b's namespace reached bmc1: %s", out)
	}

	holder := func(label string) string {
		l, err := st.Lease(context.Background(), label, db.LeaseSOL)
		if errors.Is(err, db.ErrNotFound) {
			return ""
		}
		if err != nil {
			t.Fatal(err)
		}
		return l.Owner
	}
	obmdtest.WaitUntil(t, "rep-a holding n1 and n2", func() bool { return holder("n1") == "rep-a" && holder("n2") == "rep-a" })
	for end := time.Now().Add(3 * time.Second); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		for _, n := range []string{"n1", "n2", "n3"} {
			if h := holder(n); h == "rep-b" || n == "n3" && h != "" {
				t.Fatalf("%s held by %s", n, h)
			}
		}
	}
	if b.Count("console link state", "n1")+b.Count("console link state", "n2") > 0 {
		t.Errorf("rep-b opened a captured link of zone a:\n%s", obmdtest.Tail(b.Logs.String(), 3000))
	}

	t.Run("relayed_through_rep-b", func(t *testing.T) {
		tok := a.Rotate("n1")
		v := b.GoViewer(t, "n1", tok)
		v.Out.Wait(t, "the banner on rep-b", 0, "console of n1")
		obmdtest.SeeAll(t, bmc1, "zone-a", v)
		if holder("n1") != "rep-a" {
			t.Errorf("n1 held by %q, want rep-a", holder("n1"))
		}
	})

	t.Run("opened_by_rep-a_for_rep-b", func(t *testing.T) {
		a.MustAPI(200, "PUT", "/v1/nodes/n2/capture", map[string]string{"capture": "attached"})
		obmdtest.WaitUntil(t, "n2's link released", func() bool { return holder("n2") == "" })
		tok := a.Rotate("n2")
		v := b.GoViewer(t, "n2", tok)
		v.Out.Wait(t, "the banner on rep-b", 0, "console of n2")
		obmdtest.SeeAll(t, bmc2, "taken", v)
		if h := holder("n2"); h != "rep-a" {
			t.Errorf("n2 held by %q, want rep-a", h)
		}
		if b.Count("sol_relay_opened", "n2") == 0 {
			t.Error("rep-b did not relay n2")
		}
	})

	t.Run("zone_without_replica_reported", func(t *testing.T) {
		for _, r := range []*obmdtest.Replica{a, b} {
			obmdtest.WaitUntil(t, r.Name+"'s /readyz naming zone c", func() bool {
				code, body := r.Request("GET", "/readyz", nil, "", "")
				return code == 200 && strings.HasPrefix(string(body), "ok\n") &&
					strings.Contains(string(body), "zone c: no live replica reaches it")
			})
			_, m := r.API("GET", "/metrics", nil)
			for _, want := range []string{`obmd_cluster_zone_replicas{zone="a"} 1`, `obmd_cluster_zone_replicas{zone="c"} 0`} {
				if !strings.Contains(string(m), want) {
					t.Errorf("%s's metrics lack %s", r.Name, want)
				}
			}
			var doc struct {
				OK     bool
				Failed string
				Checks []struct {
					Name   string
					OK     bool
					Result string
				}
			}
			if err := json.Unmarshal(r.MustAPI(200, "GET", "/v1/nodes/n3/doctor", nil), &doc); err != nil {
				t.Fatal(err)
			}
			if doc.OK || doc.Failed != "zone" || len(doc.Checks) != 1 || !strings.Contains(doc.Checks[0].Result, "no live replica reaches it") {
				t.Errorf("doctor n3 through %s: %+v, want the zone check failed", r.Name, doc)
			}
		}
		if h := holder("n3"); h != "" {
			t.Errorf("n3 (zone c) held by %s", h)
		}
		if code, body := b.Request("GET", "/readyz", nil, "", ""); code != 200 || strings.Contains(string(body), "zone a") {
			t.Errorf("rep-b's /readyz: %d %q, want 200 without zone a", code, body)
		}
	})
}

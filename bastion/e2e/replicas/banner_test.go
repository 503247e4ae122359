package replicas

import (
	"strings"
	"testing"

	"github.com/obmd/obmd/bastion/e2e/obmdtest"

	"github.com/obmd/obmd/db/dbtest"
	"github.com/obmd/obmd/sol/soltest/ipmisim"
)

// TestAttackBannerNamesReplica: tenants never see "another party's
// address". On the replica holding a node's SOL link, the attach banner
// lists every viewer of the hub, the relay viewers other replicas attach
// included, by their names: "peer <replica ID>", and the replica ID is by
// default the replica's host name (defaultReplicaID). A tenant attaching
// on the holder learns the internal name of every replica relaying it.
func TestAttackBannerNamesReplica(t *testing.T) {
	dsn := dbtest.MySQLDSN(t)
	ipmisim.Require(t, "ipmitool")
	bmc := ipmisim.Start(t)
	bin, vars := obmdtest.ReplicaEnv(t)
	a := obmdtest.StartReplica(t, bin, "rep-a", vars(dsn, ""))
	b := obmdtest.StartReplica(t, bin, "internal-host-b7", vars(dsn, ""))
	if a == nil || b == nil {
		t.FailNow()
	}
	a.MustAPI(200, "PUT", "/node/n1", map[string]any{"type": "ipmi", "info": bmc.Info()})
	tok := a.Rotate("n1")
	first := a.GoViewer(t, "n1", tok) // a holds the link
	relayed := b.GoViewer(t, "n1", tok)
	obmdtest.SeeAll(t, bmc, "both", first, relayed)
	late := a.GoViewer(t, "n1", tok)
	late.Expect("console of n1")
	obmdtest.SeeAll(t, bmc, "late", late)
	if screen := late.Out.String(); strings.Contains(screen, b.Name) {
		i := strings.Index(screen, "[obmd: console of")
		t.Errorf("a tenant's banner names another replica: %q", obmdtest.Tail(screen[max(i, 0):], 300))
	}
}

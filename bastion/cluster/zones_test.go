package cluster

import (
	"context"
	"errors"
	"testing"

	"github.com/obmd/obmd/db"
	"github.com/obmd/obmd/sol/sim"
)

// TestZones: a replica that does not reach a node's zone never takes its
// SOL lease: a viewer there is relayed through a replica of the zone,
// which opens the link for it (and then holds it); with the link held, it
// relays from the holder; a node without a zone is opened where the viewer
// is; with no live replica of the zone, opening fails with
// ErrNoZoneReplica instead of taking the link.
func TestZones(t *testing.T) {
	engines(t, func(t *testing.T, dsn string) {
		key, lab := newHostKey(t), sim.NewLab()
		ba := lab.BMC("in-a", sim.ModeNormal)
		lab.BMC("no-zone", sim.ModeNormal)
		lab.BMC("in-c", sim.ModeNormal)
		st := openStore(t, dsn)
		for label, zone := range map[string]string{"in-a": "a", "no-zone": "", "in-c": "c"} {
			if _, err := st.CreateNode(context.Background(), db.Node{Label: label, Type: "sim", Zone: zone}); err != nil {
				t.Fatal(err)
			}
		}
		ra := startReplica(t, "ra", openStore(t, dsn), lab, key)
		ra.c.cfg.Zones = []string{"a"}
		rb := startReplica(t, "rb", openStore(t, dsn), lab, key)
		rb.c.cfg.Zones = []string{"b"}
		announce(t, ra)
		announce(t, rb)

		vb := attach(t, rb, "in-a", "on rb")
		waitFor(t, "ra holding in-a's link", func() bool { return ra.c.Holds("in-a") })
		va := attach(t, ra, "in-a", "on ra")
		seeAll(t, ba, "zoned;", record(vb), record(va))
		if rb.c.Holds("in-a") {
			t.Error("rb, outside zone a, holds in-a's link")
		}

		vn := attach(t, rb, "no-zone", "on rb")
		waitFor(t, "rb holding no-zone's link", func() bool { return rb.c.Holds("no-zone") })
		vn.Close()

		b, err := rb.c.Resolve(context.Background(), "in-c")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := b.OpenConsole(context.Background()); !errors.Is(err, ErrNoZoneReplica) {
			t.Errorf("in-c (zone c, no replica): got %v, want ErrNoZoneReplica", err)
		}
		if _, err := st.Lease(context.Background(), "in-c", db.LeaseSOL); !errors.Is(err, db.ErrNotFound) {
			t.Errorf("in-c's SOL lease: %v, want none", err)
		}
		ab, _ := ra.c.Resolve(context.Background(), "in-c")
		if _, err := ab.OpenConsole(context.Background()); !errors.Is(err, ErrNoZoneReplica) {
			t.Errorf("in-c through ra: got %v, want ErrNoZoneReplica", err)
		}
	})
}

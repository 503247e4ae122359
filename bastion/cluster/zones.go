package cluster

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"strings"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/obmd/obmd/db"
	"github.com/obmd/obmd/sol"
)

// Zones: a replica reaches the BMCs of the zones it declares
// (Config.Zones; none: every zone), and a node may name its BMC's zone
// (db.Node.Zone). Only a replica that reaches a node's zone opens its
// console link; any other relays it, from the holder, or, when no one
// holds it, through a live replica of the zone that it asks to open it
// (consoleOpen.Take). The captured links are shared zone by zone among
// the replicas that reach each (bastion/daemon's capture poll).

// ErrNoZoneReplica is the error of opening the console of a node whose
// zone no live replica reaches: nobody can open its link until one starts.
var ErrNoZoneReplica = errors.New("no live replica reaches the BMC's zone")

// Zones are the zones this replica reaches (none: every zone).
func (c *Cluster) Zones() []string { return c.cfg.Zones }

// reachNode returns label's zone and whether this replica reaches it. A
// node the database does not know is reachable (its BMC's resolution
// fails on its own).
func (c *Cluster) reachNode(ctx context.Context, label string) (zone string, reach bool, err error) {
	if len(c.cfg.Zones) == 0 {
		return "", true, nil // reaches every zone: no need to ask
	}
	zone, err = c.store.NodeZone(ctx, label)
	switch {
	case errors.Is(err, db.ErrNotFound):
		return "", true, nil
	case err != nil:
		return "", false, err
	}
	return zone, db.Reaches(c.cfg.Zones, zone), nil
}

// reaches reports whether this replica reaches label's zone (false if it
// cannot tell).
func (c *Cluster) reaches(ctx context.Context, label string) bool {
	_, ok, err := c.reachNode(ctx, label)
	return err == nil && ok
}

// openThroughZone relays label's console, in zone, which this replica
// does not reach: from the holder of its link if there is one, else
// through a live replica that reaches the zone, asked to open the link
// (the same one for a node as long as the zone's replicas stay: spread by
// the node's label).
func (c *Cluster) openThroughZone(ctx context.Context, label, zone string, log logrus.FieldLogger) (*relayConsole, error) {
	target, take := db.Lease{}, false
	held, err := c.store.Lease(ctx, label, db.LeaseSOL)
	switch {
	case err == nil && held.Owner != c.cfg.ReplicaID && held.Addr != "" && time.Now().Before(held.ExpiresAt):
		target = held
	case err == nil || errors.Is(err, db.ErrNotFound):
		reps, err := c.store.ReplicasWithin(ctx, 0)
		if err != nil {
			return nil, err
		}
		var in []db.Replica
		for _, r := range reps {
			if r.ID != c.cfg.ReplicaID && r.Addr != "" && db.Reaches(r.Zones, zone) {
				in = append(in, r)
			}
		}
		if len(in) == 0 {
			return nil, fmt.Errorf("%w (zone %s)", ErrNoZoneReplica, zone)
		}
		h := fnv.New32a()
		h.Write([]byte(label))
		r := in[h.Sum32()%uint32(len(in))]
		target, take = db.Lease{Owner: r.ID, Addr: r.Addr}, true
	default:
		return nil, err
	}
	epoch, err := c.access.Current(ctx, label)
	if err != nil {
		return nil, err
	}
	con, err := c.dialRelay(ctx, target, label, epoch, take)
	if err != nil {
		log.WithError(err).WithFields(logrus.Fields{"holder": target.Owner, "zone": zone}).Debug("sol_relay_failed")
		return nil, err
	}
	log.WithFields(logrus.Fields{"holder": target.Owner, "epoch": epoch, "zone": zone, "opened": take}).Info("sol_relay_opened")
	return con, nil
}

// zoneCheck is doctor's zone step for label (ok false: the node names no
// zone, or the cluster cannot be read): whether this replica reaches the
// BMC's zone, and if not, which live replicas do (none: the zone is not
// served). A replica that does not reach the zone stops the diagnosis
// there: its own probes of the BMC would fail for that reason alone.
func (c *Cluster) zoneCheck(ctx context.Context, label string) (sol.Check, bool) {
	zone, err := c.store.NodeZone(ctx, label)
	if err != nil || zone == "" {
		return sol.Check{}, false
	}
	if db.Reaches(c.cfg.Zones, zone) {
		msg := "zone " + zone + ": this replica reaches it"
		return sol.Check{Name: sol.CheckZone, OK: true, Detail: msg, Tenant: msg}, true
	}
	reps, err := c.store.ReplicasWithin(ctx, 0)
	if err != nil {
		return sol.Check{}, false
	}
	var in []string
	for _, r := range reps {
		if db.Reaches(r.Zones, zone) {
			in = append(in, r.ID)
		}
	}
	if len(in) == 0 {
		msg := "zone " + zone + ": no live replica reaches it, so its console is not served"
		return sol.Check{Name: sol.CheckZone, Detail: msg, Tenant: msg,
			Hint:       "start a replica whose cluster.zones lists " + zone + ", or correct the node's zone",
			TenantHint: "ask the operator to start a replica for this zone"}, true
	}
	msg := fmt.Sprintf("zone %s: this replica (%s) does not reach it; %d live replica(s) do: %s",
		zone, c.cfg.ReplicaID, len(in), strings.Join(in, ", "))
	return sol.Check{Name: sol.CheckZone, Detail: msg, Tenant: "zone " + zone + ": this replica does not reach the BMC",
		Hint:       "run doctor through a replica of the zone (consoles are relayed from one)",
		TenantHint: "consoles work through any replica; ask the operator for a diagnosis of the BMC"}, true
}

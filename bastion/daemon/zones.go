package daemon

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"

	"github.com/obmd/obmd/db"
)

// zoneStatus is what the capture poll last found of the zones the nodes
// name: how many live replicas reach each. A zone none reaches is
// reported (/readyz's body, obmd_cluster_zone_replicas, doctor) rather
// than tried by replicas that cannot reach its BMCs. Safe for concurrent
// use.
type zoneStatus struct {
	mu     sync.Mutex
	counts map[string]int // zone -> live replicas that reach it
}

// zoneLister is what update reads: the zones the nodes name.
type zoneLister interface {
	Zones(ctx context.Context) ([]string, error)
}

// update counts, for each zone the nodes name, the live replicas that
// reach it (reps, as just read).
func (z *zoneStatus) update(ctx context.Context, st zoneLister, reps []db.Replica) error {
	zones, err := st.Zones(ctx)
	if err != nil {
		return err
	}
	counts := make(map[string]int, len(zones))
	for _, zone := range zones {
		counts[zone] = 0
		for _, r := range reps {
			if db.Reaches(r.Zones, zone) {
				counts[zone]++
			}
		}
	}
	z.mu.Lock()
	z.counts = counts
	z.mu.Unlock()
	return nil
}

// replicas returns the count of live replicas of each zone, as of the
// last poll.
func (z *zoneStatus) replicas() map[string]int {
	z.mu.Lock()
	defer z.mu.Unlock()
	return maps.Clone(z.counts)
}

// orphans returns the zones no live replica reaches, sorted.
func (z *zoneStatus) orphans() []string {
	var out []string
	for zone, n := range z.replicas() {
		if n == 0 {
			out = append(out, zone)
		}
	}
	slices.Sort(out)
	return out
}

// readyNotes are /readyz's lines after "ok": one per zone no live replica
// reaches (the replica is ready; those BMCs' consoles are not served).
func (d *Daemon) readyNotes() []string {
	var out []string
	for _, zone := range d.rep.zones.orphans() {
		out = append(out, fmt.Sprintf("zone %s: no live replica reaches it; its nodes' consoles are not served", zone))
	}
	return out
}

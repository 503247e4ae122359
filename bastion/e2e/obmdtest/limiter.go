package obmdtest

import (
	"fmt"
)

// GhostsUnderAttack returns a probe of o's ?token= route with a wrong
// token from an address, once onReal and onGhost have failed once each on
// a name that is no node and four helpers (127.0.0.helpers and the next
// three) have put the shared limiter entry of such names under attack (20
// failures; AuthLimits PerSource 5, PerNode 20). A probe that met the
// database unable to answer (503: it counts against nobody, whatever the
// name) is made again, so that each probe is judged (judgedStatus): on a
// loaded machine a write held past access.WriteStall makes the database
// count as stuck for a moment.
func (o *Daemon) GhostsUnderAttack(onReal, onGhost string, helpers int) (probe func(src, label string) int) {
	probe = func(src, label string) int {
		return o.judgedStatus(src, "/node/"+label+"/power_status?token=wrong")
	}
	probe(onReal, "nothing-0")
	probe(onGhost, "nothing-1")
	for h := range 4 {
		for k := range 5 {
			if h*5+k < 18 {
				probe(fmt.Sprintf("127.0.0.%d", helpers+h), fmt.Sprintf("nothing-%d-%d", h, k))
			}
		}
	}
	return probe
}

package admindoor

import (
	"fmt"
	"testing"
	"time"

	"github.com/obmd/obmd/bastion/e2e/obmdtest"

	"github.com/obmd/obmd/bastion/access/authlimit"
	"github.com/obmd/obmd/bastion/daemon"
)

// TestAttackEnumerateNodesThroughLimiter: "the ?token= routes answer an
// unknown node and a wrong token alike" (issue 11, item 6) must hold for
// what follows an answer too. Every name that is no node shares one
// limiter entry; once that entry is under attack (20 failures from a few
// addresses), a source that failed on it is refused there before its token
// is checked, and that refusal is not counted against the source, while a
// wrong token on a node that exists is. So from such a source five probes
// of an existing name lock the source out (429), and five probes of a
// name that is no node never do: the sixth answer tells which names exist.
func TestAttackEnumerateNodesThroughLimiter(t *testing.T) {
	t.Parallel()
	o := obmdtest.Start(t, func(c *daemon.Config) {
		c.AuthLimits = authlimit.Config{PerSource: 5, PerNode: 20, Window: time.Minute, Lockout: time.Minute}
	})
	o.AddSimNode("real1")
	const onReal, onGhost = "127.0.0.20", "127.0.0.21"
	probe := o.GhostsUnderAttack(onReal, onGhost, 30)
	var real, ghost []int
	for range 6 {
		real = append(real, probe(onReal, "real1"))
		ghost = append(ghost, probe(onGhost, "ghost1"))
	}
	t.Logf("existing node: %v; no such node: %v", real, ghost)
	if fmt.Sprint(real) != fmt.Sprint(ghost) {
		t.Errorf("the answers tell an existing node from an unknown one: real1 %v, ghost1 %v", real, ghost)
	}
}

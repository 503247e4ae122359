package certs

import (
	"testing"
	"time"

	"github.com/obmd/obmd/bastion/e2e/obmdtest"

	gossh "golang.org/x/crypto/ssh"

	"github.com/obmd/obmd/bastion/access/authlimit"
	"github.com/obmd/obmd/bastion/daemon"
)

// TestAttackEnumerateNodesThroughCertLimiter: TestAttackEnumerateNodesThroughLimiter
// with certificate offers as the probes. Once the shared limiter entry of
// names that are no node is under attack, a certificate offered for such a
// name is refused there; that refusal must count against the source as a
// refused certificate on an existing node does, or the source's lockout
// (seen on any route, the limiter is shared) tells which names exist.
func TestAttackEnumerateNodesThroughCertLimiter(t *testing.T) {
	t.Parallel()
	obmdtest.OnEngines(t, func(t *testing.T, dsn string) {
		o, k, _ := certObmd(t, dsn, func(c *daemon.Config) {
			c.AuthLimits = authlimit.Config{PerSource: 5, PerNode: 20, Window: time.Minute, Lockout: time.Minute}
			c.SSH.FailDelay, c.Admin.FailDelay = failDelay, failDelay
		})
		o.AddSimNode("real1")
		const onReal, onGhost = "127.0.0.22", "127.0.0.23"
		probe := o.GhostsUnderAttack(onReal, onGhost, 40)
		// A certificate for no principal of either name: refused on real1
		// by the policy, on ghost1 by the limiter.
		cert := k.signer(k.sign("-I", "mallory", "-n", "nobody", "-V", "-5m:+1h"))
		for range 4 {
			for _, p := range [][2]string{{onReal, "real1"}, {onGhost, "ghost1"}} {
				o.JudgedLogin(p[0], p[1], func() error {
					c, err := o.DialFrom(p[0], p[1], gossh.PublicKeys(cert))
					if err == nil {
						c.Close()
						t.Fatalf("%s: a certificate for no principal of the node logged in", p[1])
					}
					return err
				})
			}
		}
		real, ghost := probe(onReal, "real1"), probe(onGhost, "real1")
		t.Logf("after certificates on an existing node: %d; on no such node: %d", real, ghost)
		if real != ghost {
			t.Errorf("the source's lockout tells an existing node from an unknown one: real1 %d, ghost1 %d", real, ghost)
		}
	})
}

package daemon_test

import (
	"strings"
	"testing"
	"time"

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
	onEngines(t, func(t *testing.T, dsn string) {
		o, k, _ := certObmd(t, dsn, func(c *daemon.Config) {
			c.AuthLimits = authlimit.Config{PerSource: 5, PerNode: 20, Window: time.Minute, Lockout: time.Minute}
			c.FailDelay = ckFailDelay
		})
		o.addSimNode("real1")
		const onReal, onGhost = "127.0.0.22", "127.0.0.23"
		probe := o.ghostsUnderAttack(onReal, onGhost, 40)
		// A certificate for no principal of either name: refused on real1
		// by the policy, on ghost1 by the limiter.
		cert := k.signer(k.sign("-I", "mallory", "-n", "nobody", "-V", "-5m:+1h"))
		for range 4 {
			for _, p := range [][2]string{{onReal, "real1"}, {onGhost, "ghost1"}} {
				o.judgedLogin(p[0], p[1], func() error {
					c, err := o.fdDialFrom(p[0], p[1], gossh.PublicKeys(cert))
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

// judgedLogin runs a login from src to label (try), again while
// obmd refused it because its database was unavailable: such a refusal
// counts against nobody, whatever the name (on a loaded machine a write
// held past access.WriteStall makes the database count as stuck for a
// moment), and the tests of what a source's failures lead to need each of
// theirs judged. obmd logs the refusal before it answers the client.
func (o *obmd) judgedLogin(src, label string, try func() error) {
	o.t.Helper()
	for deadline := time.Now().Add(e2eWait); ; {
		before := o.dbRefusals(src)
		err := try()
		if o.dbRefusals(src) == before {
			return
		}
		if time.Now().After(deadline) {
			o.t.Fatalf("login from %s to %s: the database stayed unavailable for %v (%v)", src, label, e2eWait, err)
		}
		o.t.Logf("login from %s to %s: refused while the database was unavailable; again", src, label)
	}
}

// dbRefusals counts the logins from src that obmd refused because its
// database was unavailable (auth_denied "database unavailable" in its log).
func (o *obmd) dbRefusals(src string) int {
	n := 0
	for _, line := range strings.Split(o.Logs.String(), "\n") {
		if strings.Contains(line, `"msg":"auth_denied"`) && strings.Contains(line, `"reason":"database unavailable`) &&
			strings.Contains(line, `"remote":"`+src+`:`) {
			n++
		}
	}
	return n
}

package sshdoor

import (
	"crypto/ed25519"
	"crypto/rand"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/obmd/obmd/bastion/e2e/obmdtest"

	gossh "golang.org/x/crypto/ssh"

	"github.com/obmd/obmd/bastion/access/authlimit"
	"github.com/obmd/obmd/bastion/daemon"
)

// TestLimiterNameFloodSSH: failed logins under distinct long user names,
// sent through the SSH door, leave the process's memory flat: its heap
// after a GC (obmd runs in it) grows by far less than the names (25 MiB)
// would take if the guessing limiter kept them, and the limiter tracks
// only the sources, one entry for all the names that are no node, and
// their pairs. Not parallel: it measures the process's heap.
func TestLimiterNameFloodSSH(t *testing.T) {
	o := obmdtest.Start(t)
	const names, size, sources, workers = 400, 64 << 10, 50, 8
	heap := func() uint64 {
		runtime.GC()
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	guess := func(i int) {
		name := fmt.Sprintf("%06d", i) + strings.Repeat("x", size)
		if c, err := obmdtest.DialFrom(o.SSHAddr(), fmt.Sprintf("127.0.1.%d", 1+i%sources), name, gossh.Password("guess")); err == nil {
			c.Close()
			t.Errorf("guess %d authenticated", i)
		}
	}
	obmdtest.Parallel(2*workers, workers, guess) // the first logins' allocations are in the baseline
	before := heap()
	obmdtest.Parallel(names, workers, func(i int) { guess(2*workers + i) })
	after := heap()
	const bound = 8 << 20
	if after > before && after-before > bound {
		t.Errorf("heap grew by %d KiB under %d failed logins with %d KiB names, want under %d KiB",
			(after-before)>>10, names, size>>10, bound>>10)
	}
	if got := o.Metric("obmd_auth_limiter_entries"); got > 2*sources+1 {
		t.Errorf("limiter entries: got %v, want at most %d (sources, their pairs with the unknown names, that one entry)", got, 2*sources+1)
	}
}

// TestLimiterEnumerationSSH: the SSH door's side of
// TestAttackEnumerateNodesThroughLimiter. Over SSH a lockout is silent,
// but a tenant sees it: its own node's token is refused from a locked-out
// address. Once the entry every name that is no node shares is under
// attack, probes of a name that is no node must count against the source
// as probes of a node do (wrong passwords, and connections that only
// offer keys), or the tenant's own login after them tells which names
// exist.
func TestLimiterEnumerationSSH(t *testing.T) {
	t.Parallel()
	o := obmdtest.Start(t, func(c *daemon.Config) {
		c.AuthLimits = authlimit.Config{PerSource: 5, PerNode: 20, Window: time.Minute, Lockout: time.Minute}
	})
	own := o.AddSimNode("own1")
	o.AddSimNode("real1")
	_, stray, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	strayKey, err := gossh.NewSignerFromKey(stray)
	if err != nil {
		t.Fatal(err)
	}
	probe := func(src, name string, keys bool) {
		auth := gossh.Password("wrong")
		if keys {
			auth = gossh.PublicKeys(strayKey)
		}
		if c, err := obmdtest.DialFrom(o.SSHAddr(), src, name, auth); err == nil {
			c.Close()
			t.Errorf("probe of %s from %s authenticated", name, src)
		}
	}
	// Helpers put the shared entry of names that are no node under attack.
	for h := range 5 {
		for k := range 4 {
			probe(fmt.Sprintf("127.0.3.%d", 100+h), fmt.Sprintf("nothing-%d-%d", h, k), false)
		}
	}
	for i, keys := range []bool{false, true} {
		onReal, onGhost := fmt.Sprintf("127.0.3.%d", 10+2*i), fmt.Sprintf("127.0.3.%d", 11+2*i)
		outcome := map[string]error{}
		for src, name := range map[string]string{onReal: "real1", onGhost: "ghost1"} {
			probe(src, "nothing-first", false) // a failure on the shared entry
			for range 4 {
				probe(src, name, keys)
			}
			outcome[name] = o.TryFrom(t, src, "own1", own)
		}
		t.Logf("keys %v: own login after probing real1: %v; after probing ghost1: %v", keys, outcome["real1"], outcome["ghost1"])
		if (outcome["real1"] == nil) != (outcome["ghost1"] == nil) {
			t.Errorf("keys %v: the tenant's own login tells an existing node from an unknown one: after real1 %v, after ghost1 %v",
				keys, outcome["real1"], outcome["ghost1"])
		}
	}
}

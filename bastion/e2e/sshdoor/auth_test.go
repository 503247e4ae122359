package sshdoor

// End to end through the SSH front door: authentication. Unknown node and
// wrong secret look alike (answer and time), removed keys and rotated tokens
// stop working, guessing is throttled per source and per node, and
// everything is audited.

import (
	"fmt"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/obmd/obmd/bastion/e2e/obmdtest"
	"github.com/obmd/obmd/sol/soltest/ipmisim"

	gossh "golang.org/x/crypto/ssh"

	"github.com/obmd/obmd/bastion/access/authlimit"
	"github.com/obmd/obmd/bastion/daemon"
	"github.com/obmd/obmd/sol"
)

// TestSSHAuthIndistinguishable: an unknown node, a node without a token and
// a wrong token give the client the same answer, through every method and
// both clients.
func TestSSHAuthIndistinguishable(t *testing.T) {
	t.Parallel()
	ipmisim.Require(t, "ssh", "sshpass") // its OpenSSH cases run on the test's daemon: checked before any starts
	o := obmdtest.Start(t, obmdtest.NoLimits)
	good := o.AddSimNode("a1")
	o.AddNode("notoken", "sim", sol.Info{Addr: "sim"})
	signer, keyPath := obmdtest.NewKey(t)
	stranger, strangerPath := obmdtest.NewKey(t)
	o.AddKey("a1", signer.PublicKey())

	goErr := func(user string, auth gossh.AuthMethod) string {
		c, err := o.Dial(user, auth)
		if err == nil {
			c.Close()
			return "authenticated"
		}
		return err.Error()
	}
	cases := []struct {
		name string
		try  func(user string) string
	}{
		{"go password", func(u string) string { return goErr(u, gossh.Password("wrong-token")) }},
		{"go keyboard-interactive", func(u string) string { return goErr(u, obmdtest.KeyboardInteractive("wrong-token")) }},
		{"go unregistered key", func(u string) string { return goErr(u, gossh.PublicKeys(stranger)) }},
		{"openssh password", func(u string) string { return o.OpenSSH(u, "wrong-token", nil, "power-status").String() }},
		{"openssh unregistered key", func(u string) string {
			return o.OpenSSH(u, "", []string{"-i", strangerPath}, "power-status").String()
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			// OpenSSH says "USER@HOST: Permission denied": the user it was given.
			try := func(user string) string { return strings.ReplaceAll(tc.try(user), user+"@", "USER@") }
			known := try("a1")
			if known == "authenticated" || strings.HasPrefix(known, "exit 0") {
				t.Fatalf("wrong secret on a1: got %q, want a failure", known)
			}
			for _, user := range []string{"ghost", "notoken", "a1-", "A1"} {
				if got := try(user); got != known {
					t.Errorf("as %s: got %q, want %q as for a wrong secret on a1", user, got, known)
				}
			}
		})
	}
	// The right secrets still work (the table above tried wrong ones only).
	if res := obmdtest.Must(t)(o.ExecGo("a1", good, "power-status")); res.Code != 0 {
		t.Errorf("right token: got %v", res)
	}
	if res := o.OpenSSH("a1", "", []string{"-i", keyPath}, "power-status"); res.Code != 0 {
		t.Errorf("registered key: got %v", res)
	}
	// Each failure was audited, with the reason for the operator only.
	var reasons []string
	for _, node := range []string{"a1", "ghost", "notoken"} {
		for _, e := range o.Audit(node) {
			if e.Action == "auth" && e.Result == "denied" {
				reasons = append(reasons, e.Detail)
			}
		}
	}
	for _, want := range []string{"wrong token", "unknown node", "no token issued"} {
		if !slices.Contains(reasons, want) {
			t.Errorf("audit reasons: got %q, want %q among them", reasons, want)
		}
	}
}

// TestSSHAuthTiming: a wrong token on a known node and any token on an
// unknown node take the same time (medians of interleaved tries within a
// generous ratio), and never less than the fail delay.
func TestSSHAuthTiming(t *testing.T) {
	t.Parallel()
	const failDelay = 100 * time.Millisecond
	o := obmdtest.Start(t, obmdtest.NoLimits, func(c *daemon.Config) { c.SSH.FailDelay, c.Admin.FailDelay = failDelay, failDelay })
	o.AddSimNode("t1")
	o.AddNode("t2", "sim", sol.Info{Addr: "sim"}) // no token issued
	users := []string{"t1", "ghost", "t2"}
	took := map[string][]time.Duration{}
	for range 10 {
		for _, u := range users {
			start := time.Now()
			c, err := o.Dial(u, gossh.Password("not-the-token"))
			took[u] = append(took[u], time.Since(start))
			if err == nil {
				c.Close()
				t.Fatalf("%s: wrong token authenticated", u)
			}
		}
	}
	medians := map[string]time.Duration{}
	for u, d := range took {
		slices.Sort(d)
		medians[u] = (d[4] + d[5]) / 2
		if d[0] < failDelay {
			t.Errorf("%s: fastest failure took %v, want at least the fail delay %v", u, d[0], failDelay)
		}
	}
	lo, hi := medians["t1"], medians["t1"]
	for _, m := range medians {
		lo, hi = min(lo, m), max(hi, m)
	}
	t.Logf("median failed-auth time: wrong token %v, unknown node %v, no token %v", medians["t1"], medians["ghost"], medians["t2"])
	if float64(hi) > 1.5*float64(lo) {
		t.Errorf("median failed-auth times differ too much: %v (want within 1.5x)", medians)
	}
}

// TestSSHKeyRemoved: a removed key no longer authenticates (both clients);
// the node's token is unaffected.
func TestSSHKeyRemoved(t *testing.T) {
	t.Parallel()
	obmdtest.OnEngines(t, func(t *testing.T, dsn string) {
		o := obmdtest.Start(t, func(c *daemon.Config) { c.DB.DSN = dsn })
		tok := o.AddSimNode("k1")
		signer, path := obmdtest.NewKey(t)
		other, otherPath := obmdtest.NewKey(t)
		fp := o.AddKey("k1", signer.PublicKey())
		o.AddKey("k1", other.PublicKey())
		if res := o.OpenSSH("k1", "", []string{"-i", path}, "power-status"); res.Code != 0 || res.Stdout != "k1: power on\n" {
			t.Fatalf("key before removal: got %v", res)
		}
		if res, err := o.Exec("k1", "power-status", gossh.PublicKeys(signer)); err != nil || res.Code != 0 {
			t.Fatalf("x/crypto key before removal: got %v, %v", res, err)
		}
		o.MustAPI(200, "DELETE", "/v1/nodes/k1/keys/"+url.PathEscape(fp), nil)
		if res := o.OpenSSH("k1", "", []string{"-i", path}, "power-status"); res.Code != 255 ||
			!strings.Contains(res.Stderr, "Permission denied") {
			t.Errorf("removed key, OpenSSH: got %v, want exit 255 permission denied", res)
		}
		if _, err := o.Exec("k1", "power-status", gossh.PublicKeys(signer)); err == nil {
			t.Errorf("removed key, x/crypto: authenticated, want a failure")
		}
		if res := o.OpenSSH("k1", "", []string{"-i", otherPath}, "power-status"); res.Code != 0 {
			t.Errorf("other key: got %v, want exit 0", res)
		}
		if res := obmdtest.Must(t)(o.ExecGo("k1", tok, "power-status")); res.Code != 0 {
			t.Errorf("token after key removal: got %v", res)
		}
	})
}

// TestSSHTokenRotated: after a rotation the old token fails and the new one
// works; after a revocation neither does.
func TestSSHTokenRotated(t *testing.T) {
	t.Parallel()
	obmdtest.OnEngines(t, func(t *testing.T, dsn string) {
		o := obmdtest.Start(t, func(c *daemon.Config) { c.DB.DSN = dsn })
		old := o.AddSimNode("r1")
		if res := o.OpenSSH("r1", old, nil, "power-status"); res.Code != 0 {
			t.Fatalf("first token: got %v", res)
		}
		fresh := o.Rotate("r1")
		if fresh == old {
			t.Fatal("rotation returned the same token")
		}
		if res := o.OpenSSH("r1", old, nil, "power-status"); res.Code == 0 {
			t.Errorf("old token, OpenSSH: got %v, want a failure", res)
		}
		if _, err := o.ExecGo("r1", old, "power-status"); err == nil {
			t.Errorf("old token, x/crypto: authenticated, want a failure")
		}
		if _, err := o.Exec("r1", "power-status", obmdtest.KeyboardInteractive(old)); err == nil {
			t.Errorf("old token, keyboard-interactive: authenticated, want a failure")
		}
		if res := o.OpenSSH("r1", fresh, nil, "power-status"); res.Code != 0 || res.Stdout != "r1: power on\n" {
			t.Errorf("new token, OpenSSH: got %v", res)
		}
		if res, err := o.Exec("r1", "power-status", obmdtest.KeyboardInteractive(fresh)); err != nil || res.Code != 0 {
			t.Errorf("new token, keyboard-interactive: got %v, %v", res, err)
		}
		o.MustAPI(200, "DELETE", "/node/r1/token", nil)
		if _, err := o.ExecGo("r1", fresh, "power-status"); err == nil {
			t.Errorf("revoked token: authenticated, want a failure")
		}
	})
}

// TestSSHBruteForce: wrong tokens from one address lock that address out
// (even the right token is refused during the lockout) while other
// addresses get in; a burst of parallel guesses gets no more tries than the
// limit; a node under a distributed attack refuses the addresses that
// failed on it but not others; every failure is audited, and of the tries
// a lockout refuses, the first.
func TestSSHBruteForce(t *testing.T) {
	t.Parallel()
	const perSource, perNode = 3, 6
	o := obmdtest.Start(t, func(c *daemon.Config) {
		c.AuthLimits = authlimit.Config{PerSource: perSource, PerNode: perNode, Window: time.Minute, Lockout: time.Minute}
	})
	tok1, tok2, tok3 := o.AddSimNode("b1"), o.AddSimNode("b2"), o.AddSimNode("b3")

	// One address guesses sequentially.
	for i := range perSource {
		if err := o.TryFrom(t, "127.0.0.2", "b1", "guess"); err == nil {
			t.Fatalf("guess %d authenticated", i)
		}
	}
	if err := o.TryFrom(t, "127.0.0.2", "b1", tok1); err == nil {
		t.Errorf("right token from a locked-out address: authenticated, want refused")
	}
	if err := o.TryFrom(t, "127.0.0.2", "b2", tok2); err == nil {
		t.Errorf("right token for another node from a locked-out address: authenticated, want refused")
	}
	if err := o.TryFrom(t, "127.0.0.1", "b1", tok1); err != nil {
		t.Errorf("right token from another address: %v, want success", err)
	}

	// Another address guesses in parallel: no more than perSource guesses
	// are judged, the rest are refused by the limit. Every connection
	// finishes its handshake, then all send their guess at once.
	const burst = 12
	var wg, ready sync.WaitGroup
	ready.Add(burst)
	fire := make(chan struct{})
	guess := gossh.PasswordCallback(func() (string, error) {
		ready.Done()
		<-fire
		return "guess", nil
	})
	for range burst {
		wg.Go(func() {
			if c, err := o.DialFrom("127.0.0.3", "b2", guess); err == nil {
				c.Close()
				t.Error("parallel guess authenticated")
			}
		})
	}
	ready.Wait()
	close(fire)
	wg.Wait()
	if err := o.TryFrom(t, "127.0.0.3", "b2", tok2); err == nil {
		t.Errorf("right token after a parallel burst: authenticated, want refused")
	}

	// A distributed attack on b3: each address fails once.
	for _, src := range []string{"127.0.0.4", "127.0.0.5", "127.0.0.6", "127.0.0.7", "127.0.0.8", "127.0.0.9"} {
		if err := o.TryFrom(t, src, "b3", "guess"); err == nil {
			t.Fatalf("guess from %s authenticated", src)
		}
	}
	if err := o.TryFrom(t, "127.0.0.4", "b3", tok3); err == nil {
		t.Errorf("right token on a node under attack from an address that failed on it: authenticated, want refused")
	}
	if err := o.TryFrom(t, "127.0.0.4", "b1", tok1); err != nil {
		t.Errorf("right token on another node from that address: %v, want success", err)
	}
	if err := o.TryFrom(t, "127.0.0.10", "b3", tok3); err != nil {
		t.Errorf("right token on a node under attack from a fresh address: %v, want success", err)
	}

	// Every failure is audited, with the reason; of the tries a lockout
	// refused, only the first (the others are counted, not written).
	// Repeats are counted into a row at the end of the aggregation window.
	count := func(node, src, detail string) int {
		n := 0
		for _, e := range o.Audit(node) {
			if e.Action == "auth" && e.Result == "denied" && obmdtest.FromAddr(e.Source, src) &&
				(detail == "" || e.Detail == detail) {
				n += int(e.Count)
			}
		}
		return n
	}
	checks := []struct {
		node, src, detail string
		want              int
	}{
		{"b1", "127.0.0.2", "wrong token", perSource},
		{"b1", "127.0.0.2", "rate limited (source)", 1},
		{"b2", "127.0.0.2", "rate limited (source)", 0}, // the same lockout's second refusal
		{"b2", "127.0.0.3", "", perSource + 1},
		{"b2", "127.0.0.3", "wrong token", perSource},
		{"b2", "127.0.0.3", "rate limited (source)", 1}, // of burst+1-perSource refused
		{"b3", "127.0.0.4", "wrong token", 1},
		{"b3", "127.0.0.4", "rate limited (node)", 1},
		{"b3", "127.0.0.9", "wrong token", 1},
		{"b1", "127.0.0.1", "", 0},
		{"b3", "127.0.0.10", "", 0},
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		var wrong []string
		for _, c := range checks {
			if got := count(c.node, c.src, c.detail); got != c.want {
				wrong = append(wrong, fmt.Sprintf("audit of %s from %s with detail %q: got %d denied, want %d",
					c.node, c.src, c.detail, got, c.want))
			}
		}
		if len(wrong) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Error(strings.Join(wrong, "\n"))
			break
		}
	}
}

// TestSSHKeyProof: offering a registered public key without its private
// key neither authenticates nor is recorded as a successful login (the key
// is only accepted once the client has signed with it).
func TestSSHKeyProof(t *testing.T) {
	t.Parallel()
	o := obmdtest.Start(t)
	o.AddSimNode("kp1")
	owner, _ := obmdtest.NewKey(t)
	other, _ := obmdtest.NewKey(t)
	o.AddKey("kp1", owner.PublicKey())
	if c, err := o.Dial("kp1", gossh.PublicKeys(obmdtest.Impostor{Key: owner.PublicKey(), Signer: other})); err == nil {
		c.Close()
		t.Fatal("impostor authenticated")
	}
	for _, e := range o.Audit("kp1") {
		if e.Action == "auth" && e.Result == "ok" {
			t.Errorf("audit: got %+v, want no successful login", e)
		}
	}
	if res, err := o.Exec("kp1", "power-status", gossh.PublicKeys(owner)); err != nil || res.Code != 0 {
		t.Errorf("owner: got %v, %v; want exit 0", res, err)
	}
	var ok []string
	for _, e := range o.Audit("kp1") {
		if e.Action == "auth" && e.Result == "ok" {
			ok = append(ok, e.Actor+" "+e.Detail)
		}
	}
	if len(ok) != 1 || !strings.HasPrefix(ok[0], "ssh:publickey key SHA256:") {
		t.Errorf("successful logins audited: got %q, want the owner's only", ok)
	}
}

// TestSSHParallelLogins: many correct logins at once from one address (a
// NAT, automation) all succeed; tries beyond the per-source budget wait for
// earlier ones instead of being refused.
func TestSSHParallelLogins(t *testing.T) {
	t.Parallel()
	o := obmdtest.Start(t, func(c *daemon.Config) {
		c.AuthLimits = authlimit.Config{PerSource: 1, PerNode: 4, Window: time.Minute, Lockout: time.Minute}
		// Each login runs power-status on the node: the caps on calls to
		// its BMC at once are not what this test is about.
		c.Sessions.MaxBMCPerNode, c.Sessions.MaxBMCPerSource = -1, -1
	})
	tok := o.AddSimNode("p1")
	const n = 24 // under the default 32 sessions per source
	errs := make(chan error, n)
	for range n {
		go func() { errs <- o.TryFrom(t, "127.0.0.4", "p1", tok) }()
	}
	for range n {
		if err := <-errs; err != nil {
			t.Errorf("parallel correct login: %v, want success", err)
		}
	}
}

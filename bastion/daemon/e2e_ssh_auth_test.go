package daemon_test

// End to end through the SSH front door: authentication. Unknown node and
// wrong secret look alike (answer and time), removed keys and rotated tokens
// stop working, guessing is throttled per source and per node, and
// everything is audited.

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/url"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	gossh "golang.org/x/crypto/ssh"

	"github.com/obmd/obmd/bastion/access/authlimit"
	"github.com/obmd/obmd/bastion/daemon"
	"github.com/obmd/obmd/sol"
)

// fdNoLimits lifts the guessing limits for tests that fail on purpose many
// times from one address.
func fdNoLimits(c *daemon.Config) {
	c.AuthLimits = authlimit.Config{PerSource: 1 << 20, PerNode: 1 << 20, Window: time.Minute, Lockout: time.Minute}
}

// fdAuditRow is one event of GET /v1/audit.
type fdAuditRow struct {
	ID     int64
	Node   string
	Actor  string
	Action string
	Source string
	Result string
	Detail string
	Count  int64 // repeats counted into one row (audit.aggregate_window)
}

// fromAddr reports whether an audit row's source is the address src: with
// the client's port, or without it for a row counting repeats.
func fromAddr(source, src string) bool {
	return source == src || strings.HasPrefix(source, src+":")
}

// fdAudit returns node's audit events, oldest first.
func (o *obmd) fdAudit(node string) []fdAuditRow {
	o.t.Helper()
	var out struct{ Events []fdAuditRow }
	if err := json.Unmarshal(o.mustAPI(200, "GET", "/v1/audit?node="+url.QueryEscape(node), nil), &out); err != nil {
		o.t.Fatalf("audit: %v", err)
	}
	sort.Slice(out.Events, func(i, j int) bool { return out.Events[i].ID < out.Events[j].ID })
	return out.Events
}

// fdDialFrom connects from the local address src (127.0.0.2, ...), so tests
// can act as several clients.
func (o *obmd) fdDialFrom(src, user string, auth ...gossh.AuthMethod) (*gossh.Client, error) {
	return dialFrom(o.SSHAddr(), src, user, auth...)
}

// dialFrom connects to addr from the local address src as user.
func dialFrom(addr, src, user string, auth ...gossh.AuthMethod) (*gossh.Client, error) {
	return dialWrapped(addr, src, user, func(c net.Conn) net.Conn { return c }, auth...)
}

// dialWrapped is dialFrom with the client's socket wrapped (a slow link).
func dialWrapped(addr, src, user string, wrap func(net.Conn) net.Conn, auth ...gossh.AuthMethod) (*gossh.Client, error) {
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: 10 * time.Second}
	raw, err := d.Dial("tcp", addr)
	if err != nil {
		return nil, err
	}
	nc := wrap(raw)
	nc.SetDeadline(time.Now().Add(30 * time.Second))
	conn, chans, reqs, err := gossh.NewClientConn(nc, addr, &gossh.ClientConfig{
		User: user, Auth: auth, HostKeyCallback: gossh.InsecureIgnoreHostKey(),
	})
	if err != nil {
		nc.Close()
		return nil, err
	}
	nc.SetDeadline(time.Time{})
	return gossh.NewClient(conn, chans, reqs), nil
}

// fdTryFrom authenticates from src with token and, if that works, runs
// power-status; it returns the authentication error.
func (o *obmd) fdTryFrom(t *testing.T, src, user, token string) error {
	t.Helper()
	c, err := o.fdDialFrom(src, user, gossh.Password(token))
	if err != nil {
		return err
	}
	defer c.Close()
	res, err := runSession(c, "power-status")
	if err != nil || res.Code != 0 {
		t.Errorf("power-status from %s on %s: got %v, %v; want exit 0", src, user, res, err)
	}
	return nil
}

// TestSSHAuthIndistinguishable: an unknown node, a node without a token and
// a wrong token give the client the same answer, through every method and
// both clients.
func TestSSHAuthIndistinguishable(t *testing.T) {
	t.Parallel()
	o := startObmd(t, fdNoLimits)
	good := o.addSimNode("a1")
	o.addNode("notoken", "sim", sol.Info{Addr: "sim"})
	signer, keyPath := newKey(t)
	stranger, strangerPath := newKey(t)
	o.addKey("a1", signer.PublicKey())

	goErr := func(user string, auth gossh.AuthMethod) string {
		c, err := o.dial(user, auth)
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
		{"go keyboard-interactive", func(u string) string { return goErr(u, fdKbd("wrong-token")) }},
		{"go unregistered key", func(u string) string { return goErr(u, gossh.PublicKeys(stranger)) }},
		{"openssh password", func(u string) string { return o.openssh(u, "wrong-token", nil, "power-status").String() }},
		{"openssh unregistered key", func(u string) string {
			return o.openssh(u, "", []string{"-i", strangerPath}, "power-status").String()
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
	if res := fdMust(t)(o.execGo("a1", good, "power-status")); res.Code != 0 {
		t.Errorf("right token: got %v", res)
	}
	if res := o.openssh("a1", "", []string{"-i", keyPath}, "power-status"); res.Code != 0 {
		t.Errorf("registered key: got %v", res)
	}
	// Each failure was audited, with the reason for the operator only.
	var reasons []string
	for _, node := range []string{"a1", "ghost", "notoken"} {
		for _, e := range o.fdAudit(node) {
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
	o := startObmd(t, fdNoLimits, func(c *daemon.Config) { c.SSH.FailDelay, c.Admin.FailDelay = failDelay, failDelay })
	o.addSimNode("t1")
	o.addNode("t2", "sim", sol.Info{Addr: "sim"}) // no token issued
	users := []string{"t1", "ghost", "t2"}
	took := map[string][]time.Duration{}
	for range 10 {
		for _, u := range users {
			start := time.Now()
			c, err := o.dial(u, gossh.Password("not-the-token"))
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
	onEngines(t, func(t *testing.T, dsn string) {
		o := startObmd(t, func(c *daemon.Config) { c.DB.DSN = dsn })
		tok := o.addSimNode("k1")
		signer, path := newKey(t)
		other, otherPath := newKey(t)
		fp := o.addKey("k1", signer.PublicKey())
		o.addKey("k1", other.PublicKey())
		if res := o.openssh("k1", "", []string{"-i", path}, "power-status"); res.Code != 0 || res.Stdout != "k1: power on\n" {
			t.Fatalf("key before removal: got %v", res)
		}
		if res, err := o.fdExec("k1", "power-status", gossh.PublicKeys(signer)); err != nil || res.Code != 0 {
			t.Fatalf("x/crypto key before removal: got %v, %v", res, err)
		}
		o.mustAPI(200, "DELETE", "/v1/nodes/k1/keys/"+url.PathEscape(fp), nil)
		if res := o.openssh("k1", "", []string{"-i", path}, "power-status"); res.Code != 255 ||
			!strings.Contains(res.Stderr, "Permission denied") {
			t.Errorf("removed key, OpenSSH: got %v, want exit 255 permission denied", res)
		}
		if _, err := o.fdExec("k1", "power-status", gossh.PublicKeys(signer)); err == nil {
			t.Errorf("removed key, x/crypto: authenticated, want a failure")
		}
		if res := o.openssh("k1", "", []string{"-i", otherPath}, "power-status"); res.Code != 0 {
			t.Errorf("other key: got %v, want exit 0", res)
		}
		if res := fdMust(t)(o.execGo("k1", tok, "power-status")); res.Code != 0 {
			t.Errorf("token after key removal: got %v", res)
		}
	})
}

// TestSSHTokenRotated: after a rotation the old token fails and the new one
// works; after a revocation neither does.
func TestSSHTokenRotated(t *testing.T) {
	t.Parallel()
	onEngines(t, func(t *testing.T, dsn string) {
		o := startObmd(t, func(c *daemon.Config) { c.DB.DSN = dsn })
		old := o.addSimNode("r1")
		if res := o.openssh("r1", old, nil, "power-status"); res.Code != 0 {
			t.Fatalf("first token: got %v", res)
		}
		fresh := o.rotate("r1")
		if fresh == old {
			t.Fatal("rotation returned the same token")
		}
		if res := o.openssh("r1", old, nil, "power-status"); res.Code == 0 {
			t.Errorf("old token, OpenSSH: got %v, want a failure", res)
		}
		if _, err := o.execGo("r1", old, "power-status"); err == nil {
			t.Errorf("old token, x/crypto: authenticated, want a failure")
		}
		if _, err := o.fdExec("r1", "power-status", fdKbd(old)); err == nil {
			t.Errorf("old token, keyboard-interactive: authenticated, want a failure")
		}
		if res := o.openssh("r1", fresh, nil, "power-status"); res.Code != 0 || res.Stdout != "r1: power on\n" {
			t.Errorf("new token, OpenSSH: got %v", res)
		}
		if res, err := o.fdExec("r1", "power-status", fdKbd(fresh)); err != nil || res.Code != 0 {
			t.Errorf("new token, keyboard-interactive: got %v, %v", res, err)
		}
		o.mustAPI(200, "DELETE", "/node/r1/token", nil)
		if _, err := o.execGo("r1", fresh, "power-status"); err == nil {
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
	o := startObmd(t, func(c *daemon.Config) {
		c.AuthLimits = authlimit.Config{PerSource: perSource, PerNode: perNode, Window: time.Minute, Lockout: time.Minute}
	})
	tok1, tok2, tok3 := o.addSimNode("b1"), o.addSimNode("b2"), o.addSimNode("b3")

	// One address guesses sequentially.
	for i := range perSource {
		if err := o.fdTryFrom(t, "127.0.0.2", "b1", "guess"); err == nil {
			t.Fatalf("guess %d authenticated", i)
		}
	}
	if err := o.fdTryFrom(t, "127.0.0.2", "b1", tok1); err == nil {
		t.Errorf("right token from a locked-out address: authenticated, want refused")
	}
	if err := o.fdTryFrom(t, "127.0.0.2", "b2", tok2); err == nil {
		t.Errorf("right token for another node from a locked-out address: authenticated, want refused")
	}
	if err := o.fdTryFrom(t, "127.0.0.1", "b1", tok1); err != nil {
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
			if c, err := o.fdDialFrom("127.0.0.3", "b2", guess); err == nil {
				c.Close()
				t.Error("parallel guess authenticated")
			}
		})
	}
	ready.Wait()
	close(fire)
	wg.Wait()
	if err := o.fdTryFrom(t, "127.0.0.3", "b2", tok2); err == nil {
		t.Errorf("right token after a parallel burst: authenticated, want refused")
	}

	// A distributed attack on b3: each address fails once.
	for _, src := range []string{"127.0.0.4", "127.0.0.5", "127.0.0.6", "127.0.0.7", "127.0.0.8", "127.0.0.9"} {
		if err := o.fdTryFrom(t, src, "b3", "guess"); err == nil {
			t.Fatalf("guess from %s authenticated", src)
		}
	}
	if err := o.fdTryFrom(t, "127.0.0.4", "b3", tok3); err == nil {
		t.Errorf("right token on a node under attack from an address that failed on it: authenticated, want refused")
	}
	if err := o.fdTryFrom(t, "127.0.0.4", "b1", tok1); err != nil {
		t.Errorf("right token on another node from that address: %v, want success", err)
	}
	if err := o.fdTryFrom(t, "127.0.0.10", "b3", tok3); err != nil {
		t.Errorf("right token on a node under attack from a fresh address: %v, want success", err)
	}

	// Every failure is audited, with the reason; of the tries a lockout
	// refused, only the first (the others are counted, not written).
	// Repeats are counted into a row at the end of the aggregation window.
	count := func(node, src, detail string) int {
		n := 0
		for _, e := range o.fdAudit(node) {
			if e.Action == "auth" && e.Result == "denied" && fromAddr(e.Source, src) &&
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

// fdImpostor offers a registered public key but signs with another key: it
// does not hold the registered key's private half.
type fdImpostor struct {
	pub  gossh.PublicKey
	sign gossh.Signer
}

func (i fdImpostor) PublicKey() gossh.PublicKey { return i.pub }
func (i fdImpostor) Sign(r io.Reader, data []byte) (*gossh.Signature, error) {
	return i.sign.Sign(r, data)
}

// TestSSHKeyProof: offering a registered public key without its private
// key neither authenticates nor is recorded as a successful login (the key
// is only accepted once the client has signed with it).
func TestSSHKeyProof(t *testing.T) {
	t.Parallel()
	o := startObmd(t)
	o.addSimNode("kp1")
	owner, _ := newKey(t)
	other, _ := newKey(t)
	o.addKey("kp1", owner.PublicKey())
	if c, err := o.dial("kp1", gossh.PublicKeys(fdImpostor{pub: owner.PublicKey(), sign: other})); err == nil {
		c.Close()
		t.Fatal("impostor authenticated")
	}
	for _, e := range o.fdAudit("kp1") {
		if e.Action == "auth" && e.Result == "ok" {
			t.Errorf("audit: got %+v, want no successful login", e)
		}
	}
	if res, err := o.fdExec("kp1", "power-status", gossh.PublicKeys(owner)); err != nil || res.Code != 0 {
		t.Errorf("owner: got %v, %v; want exit 0", res, err)
	}
	var ok []string
	for _, e := range o.fdAudit("kp1") {
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
	o := startObmd(t, func(c *daemon.Config) {
		c.AuthLimits = authlimit.Config{PerSource: 1, PerNode: 4, Window: time.Minute, Lockout: time.Minute}
		// Each login runs power-status on the node: the caps on calls to
		// its BMC at once are not what this test is about.
		c.Sessions.MaxBMCPerNode, c.Sessions.MaxBMCPerSource = -1, -1
	})
	tok := o.addSimNode("p1")
	const n = 24 // under the default 32 sessions per source
	errs := make(chan error, n)
	for range n {
		go func() { errs <- o.fdTryFrom(t, "127.0.0.4", "p1", tok) }()
	}
	for range n {
		if err := <-errs; err != nil {
			t.Errorf("parallel correct login: %v, want success", err)
		}
	}
}

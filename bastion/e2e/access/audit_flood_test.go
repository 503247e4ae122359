package access

// End to end: unauthenticated clients cannot flood the audit log. Every
// failed login is audited once, a locked-out source's further tries are
// only counted, and the limits hold across SSH and the admin API.

import (
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/obmd/obmd/bastion/e2e/obmdtest"

	gossh "golang.org/x/crypto/ssh"

	"github.com/obmd/obmd/bastion/access/authlimit"
	"github.com/obmd/obmd/bastion/daemon"
)

// denied returns the denied audit events whose source is the address src
// (any port), oldest first, over every node: a row counting repeats as
// many times as its count.
func denied(o *obmdtest.Daemon, src string) []obmdtest.AuditRow {
	o.T.Helper()
	var out struct{ Events []obmdtest.AuditRow }
	if err := json.Unmarshal(o.MustAPI(200, "GET", "/v1/audit", nil), &out); err != nil {
		o.T.Fatalf("audit: %v", err)
	}
	var rows []obmdtest.AuditRow
	for _, e := range out.Events {
		if e.Result == "denied" && obmdtest.FromAddr(e.Source, src) {
			for range e.Count {
				rows = append(rows, e)
			}
		}
	}
	return rows
}

// settled waits until at least want denied events from src are in the
// audit log (a connection's failure is written as it closes, after the
// client saw it fail, and repeats at the end of the aggregation window),
// then a little more for any beyond, and returns their details.
func settled(o *obmdtest.Daemon, src string, want int) []string {
	o.T.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for len(denied(o, src)) < want && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond)
	var details []string
	for _, e := range denied(o, src) {
		details = append(details, e.Actor+" "+e.Detail)
	}
	return details
}

// TestAuditFloodLockedOut: a source locked out by wrong tokens keeps
// trying, on any node name: the lockout's first refusal is audited, the
// others are counted (metrics) and written nowhere.
func TestAuditFloodLockedOut(t *testing.T) {
	t.Parallel()
	const perSource, flood = 3, 40
	o := obmdtest.Start(t, func(c *daemon.Config) {
		c.AuthLimits = authlimit.Config{PerSource: perSource, PerNode: 1000, Window: time.Minute, Lockout: time.Minute}
	})
	tok := o.AddSimNode("lo1")
	const src = "127.0.0.21"
	for i := range perSource {
		if err := o.TryFrom(t, src, "lo1", "guess"); err == nil {
			t.Fatalf("guess %d authenticated", i)
		}
	}
	before := o.Metric(`obmd_auth_attempts_total{method="password",result="denied"}`)
	users := []string{"lo1", "ghost", "lo1-", "another"}
	obmdtest.Parallel(flood, 8, func(i int) {
		if c, err := o.DialFrom(src, users[i%len(users)], gossh.Password("guess")); err == nil {
			c.Close()
			t.Error("a locked-out source authenticated")
		}
	})
	if err := o.TryFrom(t, src, "lo1", tok); err == nil {
		t.Errorf("right token from the locked-out source: authenticated, want refused")
	}
	details := settled(o, src, perSource+1)
	want := []string{"ssh:password wrong token", "ssh:password wrong token", "ssh:password wrong token",
		"ssh:password rate limited (source)"}
	if strings.Join(details, "|") != strings.Join(want, "|") {
		t.Errorf("denied audit rows from %s: got %d %q, want %q (one per failure, one per lockout)", src, len(details), details, want)
	}
	if got := o.Metric(`obmd_auth_attempts_total{method="password",result="denied"}`) - before; got < flood+1 {
		t.Errorf("denied attempts counted during the lockout: got %v, want at least %d", got, flood+1)
	}
}

// keys returns n fresh signers, registered nowhere.
func keys(t *testing.T, n int) []gossh.Signer {
	var out []gossh.Signer
	for range n {
		k, _ := obmdtest.NewKey(t)
		out = append(out, k)
	}
	return out
}

// TestAuditFloodKeyOffers: offering a key that is not registered is not a
// failed login (OpenSSH offers every key it holds); a connection that ends
// without authenticating is, once, however many keys it offered. Such
// failures count against the source like wrong tokens, so a key-offering
// flood is locked out, and then audited once per lockout.
func TestAuditFloodKeyOffers(t *testing.T) {
	t.Parallel()
	const perSource = 3
	o := obmdtest.Start(t, func(c *daemon.Config) {
		c.AuthLimits = authlimit.Config{PerSource: perSource, PerNode: 1000, Window: time.Minute, Lockout: time.Minute}
	})
	tok := o.AddSimNode("ko1")
	owner, _ := obmdtest.NewKey(t)
	o.AddKey("ko1", owner.PublicKey())
	stranger := keys(t, 12)

	// Three unregistered keys, then the token: a login, no failure.
	const user = "127.0.0.31"
	c, err := o.DialFrom(user, "ko1", gossh.PublicKeys(stranger[:3]...), gossh.Password(tok))
	if err != nil {
		t.Fatalf("keys then the token: %v, want a login", err)
	}
	c.Close()
	// The same with the registered key last.
	c, err = o.DialFrom(user, "ko1", gossh.PublicKeys(append(stranger[:3:3], owner)...))
	if err != nil {
		t.Fatalf("keys then the registered one: %v, want a login", err)
	}
	c.Close()
	if got := settled(o, user, 0); len(got) != 0 {
		t.Errorf("denied rows for two logins that offered other keys first: got %q, want none", got)
	}

	// A connection offering twelve keys, none registered: one failure.
	const scanner = "127.0.0.32"
	before := o.Metric(`obmd_auth_attempts_total{method="publickey",result="denied"}`)
	if c, err := o.DialFrom(scanner, "ko1", gossh.PublicKeys(stranger...)); err == nil {
		c.Close()
		t.Fatal("unregistered keys authenticated")
	}
	if got, want := settled(o, scanner, 1), []string{"ssh:publickey 12 key(s) offered, none registered"}; !slices.Equal(got, want) {
		t.Errorf("denied rows for one connection offering 12 keys: got %q, want %q", got, want)
	}
	if got := o.Metric(`obmd_auth_attempts_total{method="publickey",result="denied"}`) - before; got != 1 {
		t.Errorf("publickey denials counted for that connection: got %v, want 1", got)
	}
	// An impostor: the registered key offered, signed with another.
	if c, err := o.DialFrom(scanner, "ko1", gossh.PublicKeys(obmdtest.Impostor{Key: owner.PublicKey(), Signer: stranger[0]})); err == nil {
		c.Close()
		t.Fatal("impostor authenticated")
	}
	// Failed connections count against the source: one more locks it out.
	if c, err := o.DialFrom(scanner, "ghost", gossh.PublicKeys(stranger[:2]...)); err == nil {
		c.Close()
		t.Fatal("unregistered keys authenticated")
	}
	// Locked out: a flood of key-offering connections is refused, and
	// recorded once.
	obmdtest.Parallel(40, 8, func(i int) {
		if c, err := o.DialFrom(scanner, "ko1", gossh.PublicKeys(stranger...)); err == nil {
			c.Close()
			t.Error("a locked-out source authenticated")
		}
	})
	if c, err := o.DialFrom(scanner, "ko1", gossh.PublicKeys(owner)); err == nil {
		c.Close()
		t.Error("the registered key from a locked-out source: authenticated, want refused")
	}
	// A locked-out client offering keys, then a token: its lockout's first
	// refusal (of the keys) is recorded, and nothing else.
	const both = "127.0.0.33"
	for range perSource {
		if err := o.TryFrom(t, both, "ko1", "guess"); err == nil {
			t.Fatal("a guess authenticated")
		}
	}
	for range 3 {
		if c, err := o.DialFrom(both, "ko1", gossh.PublicKeys(stranger[:2]...), gossh.Password(tok)); err == nil {
			c.Close()
			t.Fatal("a locked-out source authenticated")
		}
	}
	if got, want := settled(o, both, perSource+1), []string{"ssh:password wrong token", "ssh:password wrong token",
		"ssh:password wrong token", "ssh:publickey rate limited (source)"}; !slices.Equal(got, want) {
		t.Errorf("denied rows from %s: got %q, want %q", both, got, want)
	}

	want := []string{
		"ssh:publickey 12 key(s) offered, none registered",
		"ssh:publickey 1 key(s) offered, 1 registered but not signed with",
		"ssh:publickey 2 key(s) offered, none registered",
		"ssh:publickey rate limited (source)",
	}
	if got := settled(o, scanner, len(want)); !slices.Equal(got, want) {
		t.Errorf("denied rows from %s: got %d %q, want %q", scanner, len(got), got, want)
	}
}

// statusFrom sends an admin-port request from the local address src with
// basic credentials user:pass ("" user: none); it returns the status.
func statusFrom(o *obmdtest.Daemon, src, method, path, user, pass string) int {
	o.T.Helper()
	code, _ := o.HTTPFrom(src, method, path, user, pass, nil)
	return code
}

// TestAuditFloodShared: SSH and the admin API share one guessing budget
// per source: a source locked out by SSH guesses is refused by the admin
// API's node-token routes, even with the right token (the right admin
// token is never refused), and one locked out by admin-API guesses is
// refused by SSH; a flood of unauthenticated
// admin-API requests writes one audit row per failure until the lockout,
// then one.
func TestAuditFloodShared(t *testing.T) {
	t.Parallel()
	const perSource = 3
	o := obmdtest.Start(t, func(c *daemon.Config) {
		c.AuthLimits = authlimit.Config{PerSource: perSource, PerNode: 1000, Window: time.Minute, Lockout: time.Minute}
	})
	tok := o.AddSimNode("sh1")
	tokenRoute := "/node/sh1/power_status?token="

	// SSH guesses lock the source out of the admin API.
	const sshGuesser = "127.0.0.41"
	for range perSource {
		if err := o.TryFrom(t, sshGuesser, "sh1", "guess"); err == nil {
			t.Fatal("a guess authenticated")
		}
	}
	if code := statusFrom(o, sshGuesser, "GET", "/v1/nodes", "admin", o.AdminToken()); code != http.StatusOK {
		t.Errorf("right admin token from a source locked out over SSH: got %d, want 200", code)
	}
	if code := statusFrom(o, sshGuesser, "GET", "/v1/nodes", "admin", "guess"); code != http.StatusTooManyRequests {
		t.Errorf("wrong admin token from a source locked out over SSH: got %d, want 429", code)
	}
	if code := statusFrom(o, sshGuesser, "GET", tokenRoute+tok, "", ""); code != http.StatusTooManyRequests {
		t.Errorf("node token from a source locked out over SSH: got %d, want 429", code)
	}

	// Admin-token guesses lock the source out of SSH.
	const apiGuesser = "127.0.0.42"
	for range perSource {
		if code := statusFrom(o, apiGuesser, "GET", "/v1/nodes", "admin", "guess"); code != http.StatusNotFound {
			t.Fatalf("wrong admin token: got %d, want 404", code)
		}
	}
	if err := o.TryFrom(t, apiGuesser, "sh1", tok); err == nil {
		t.Errorf("right token over SSH from a source locked out by admin-token guesses: authenticated, want refused")
	}
	if code := statusFrom(o, apiGuesser, "GET", tokenRoute+tok, "", ""); code != http.StatusTooManyRequests {
		t.Errorf("node token from a source locked out by admin-token guesses: got %d, want 429", code)
	}

	// Sixteen unauthenticated clients at once, on the admin and the token
	// routes.
	const flooder = "127.0.0.43"
	paths := []struct{ path, user, pass string }{
		{"/v1/nodes", "admin", "guess"}, {"/v1/audit", "", ""}, {"/node/sh1/token", "root", "x"},
		{tokenRoute + "guess", "", ""}, {"/node/ghost/power_on?token=guess", "", ""},
	}
	obmdtest.Parallel(400, 16, func(i int) {
		p := paths[i%len(paths)]
		method := "GET"
		if strings.Contains(p.path, "power_on") || strings.HasSuffix(p.path, "/token") {
			method = "POST"
		}
		switch code := statusFrom(o, flooder, method, p.path, p.user, p.pass); code {
		case http.StatusOK, http.StatusCreated:
			t.Errorf("%s %s from the flooder: got %d", method, p.path, code)
		}
	})

	for _, c := range []struct {
		src     string
		failure int // failures audited before the lockout
	}{{sshGuesser, perSource}, {apiGuesser, perSource}, {flooder, perSource}} {
		got := settled(o, c.src, c.failure+1)
		limited := 0
		for _, d := range got {
			if strings.Contains(d, "rate limited (source)") {
				limited++
			}
		}
		if len(got) != c.failure+1 || limited != 1 {
			t.Errorf("denied rows from %s: got %d %q, want %d failures and one refusal", c.src, len(got), got, c.failure)
		}
	}
}

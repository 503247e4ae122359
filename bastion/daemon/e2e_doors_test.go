package daemon_test

// What a cloud controller (HIL) needs from obmd's doors whatever others do
// from its address: its admin credential is never refused because of
// others' failures.

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/obmd/obmd/bastion"
	"github.com/obmd/obmd/bastion/daemon"
)

// drDefaults gives a test the shipped guessing and session limits (the
// harness lifts the guessing limits for tests that fail on purpose).
func drDefaults(dsn string) func(*daemon.Config) {
	return func(c *daemon.Config) {
		c.DB = dsn
		c.AuthLimits = bastion.LimitConfig{}
		c.MaxSessionsPerNode, c.MaxSessionsPerSource, c.MaxConnsPerSource = 0, 0, 0
	}
}

// TestDoorRotationNotLockedOut: behind one address (a NAT, HIL's host),
// five wrong SSH logins (two on a node that does not exist) and five
// admin requests without credentials (a monitoring probe) lock the
// address out at the default limits; HIL's correct admin credential from
// that address still rotates the token, and the rotation cuts the former
// tenant. Node tokens from the address stay refused (per-source limits
// stay; behind a balancer obmd sees the real client: TestProxy*).
func TestDoorRotationNotLockedOut(t *testing.T) {
	t.Parallel()
	onEngines(t, func(t *testing.T, dsn string) {
		o := startObmd(t, drDefaults(dsn))
		old := o.addSimNode("hil1")
		tenant := o.goConsole(t, "hil1", old, conOpts{})
		tenant.notice("console of hil1")

		const shared = "127.0.0.60"
		for i, user := range []string{"hil1", "hil1", "hil1", "no-such-node", "no-such-node"} {
			if err := o.fdTryFrom(t, shared, user, fmt.Sprintf("guess-%d", i)); err == nil {
				t.Fatalf("guess %d on %s authenticated", i, user)
			}
		}
		for i := range 5 {
			if code, _ := o.httpFrom(shared, "GET", "/v1/nodes", "", "", nil); code != http.StatusNotFound && code != http.StatusTooManyRequests {
				t.Errorf("probe %d without credentials: got %d, want 404 or 429", i, code)
			}
		}
		// The address is locked out: guesses and node tokens are refused.
		if code, _ := o.httpFrom(shared, "GET", "/v1/nodes", "admin", "guess", nil); code != http.StatusTooManyRequests {
			t.Fatalf("wrong admin credential from the locked-out address: got %d, want 429 (is it locked out?)", code)
		}
		if code, _ := o.httpFrom(shared, "GET", "/node/hil1/power_status?token="+old, "", "", nil); code != http.StatusTooManyRequests {
			t.Errorf("node token from the locked-out address: got %d, want 429", code)
		}

		code, body := o.httpFrom(shared, "POST", "/node/hil1/token", "admin", o.AdminToken(), nil)
		var rot struct{ Token string }
		if code != http.StatusOK || json.Unmarshal(body, &rot) != nil || rot.Token == "" {
			t.Fatalf("HIL's rotation from the locked-out address: got %d %s, want 200 and a token", code, body)
		}
		tenant.notice("access to hil1 was revoked (token rotated)")
		tenant.end.wait(t, "the former tenant's console")
		if code, _ := o.httpFrom(shared, "GET", "/v1/sessions?node=hil1", "admin", o.AdminToken(), nil); code != http.StatusOK {
			t.Errorf("HIL's session list from the locked-out address: got %d, want 200", code)
		}
		if err := o.fdTryFrom(t, "127.0.0.61", "hil1", rot.Token); err != nil {
			t.Errorf("the new tenant from its own address: %v, want in", err)
		}
		// Every failure is audited: the SSH ones, the probe's up to the
		// lockout's first refusal.
		var denied []string
		for _, e := range o.fdAudit("") {
			if e.Result == "denied" && strings.HasPrefix(e.Source, shared) {
				denied = append(denied, e.Detail)
			}
		}
		if len(denied) < 6 || !strings.Contains(strings.Join(denied, "|"), "rate limited (source)") {
			t.Errorf("denied audit rows from %s: got %q, want the 5 failures and the first refusal", shared, denied)
		}
	})
}

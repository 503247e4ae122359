package admindoor

// What a cloud controller (HIL) needs from obmd's doors whatever others do
// from its address: its admin credential is never refused because of
// others' failures, and its console streams and power calls fit the
// default session limits.

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/obmd/obmd/bastion/e2e/obmdtest"

	"github.com/obmd/obmd/bastion/access/authlimit"
	"github.com/obmd/obmd/bastion/daemon"
	"github.com/obmd/obmd/sol/sim"
)

// defaults gives a test the shipped guessing and session limits (the
// harness lifts the guessing limits for tests that fail on purpose).
func defaults(dsn string) func(*daemon.Config) {
	return func(c *daemon.Config) {
		c.DB.DSN = dsn
		c.AuthLimits = authlimit.Config{}
		c.Sessions.MaxPerNode, c.Sessions.MaxPerSource, c.Sessions.MaxPerSourceHTTP, c.SSH.MaxConnsPerSource = 0, 0, 0, 0
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
	obmdtest.OnEngines(t, func(t *testing.T, dsn string) {
		o := obmdtest.Start(t, defaults(dsn))
		old := o.AddSimNode("hil1")
		tenant := o.GoConsole(t, "hil1", old, obmdtest.SessionOpts{})
		tenant.Notice("console of hil1")

		const shared = "127.0.0.60"
		for i, user := range []string{"hil1", "hil1", "hil1", "no-such-node", "no-such-node"} {
			if err := o.TryFrom(t, shared, user, fmt.Sprintf("guess-%d", i)); err == nil {
				t.Fatalf("guess %d on %s authenticated", i, user)
			}
		}
		for i := range 5 {
			if code, _ := o.HTTPFrom(shared, "GET", "/v1/nodes", "", "", nil); code != http.StatusNotFound && code != http.StatusTooManyRequests {
				t.Errorf("probe %d without credentials: got %d, want 404 or 429", i, code)
			}
		}
		// The address is locked out: guesses and node tokens are refused.
		if code, _ := o.HTTPFrom(shared, "GET", "/v1/nodes", "admin", "guess", nil); code != http.StatusTooManyRequests {
			t.Fatalf("wrong admin credential from the locked-out address: got %d, want 429 (is it locked out?)", code)
		}
		if code, _ := o.HTTPFrom(shared, "GET", "/node/hil1/power_status?token="+old, "", "", nil); code != http.StatusTooManyRequests {
			t.Errorf("node token from the locked-out address: got %d, want 429", code)
		}

		code, body := o.HTTPFrom(shared, "POST", "/node/hil1/token", "admin", o.AdminToken(), nil)
		var rot struct{ Token string }
		if code != http.StatusOK || json.Unmarshal(body, &rot) != nil || rot.Token == "" {
			t.Fatalf("HIL's rotation from the locked-out address: got %d %s, want 200 and a token", code, body)
		}
		tenant.Notice("access to hil1 was revoked (token rotated)")
		tenant.End.Wait(t, "the former tenant's console")
		if code, _ := o.HTTPFrom(shared, "GET", "/v1/sessions?node=hil1", "admin", o.AdminToken(), nil); code != http.StatusOK {
			t.Errorf("HIL's session list from the locked-out address: got %d, want 200", code)
		}
		if err := o.TryFrom(t, "127.0.0.61", "hil1", rot.Token); err != nil {
			t.Errorf("the new tenant from its own address: %v, want in", err)
		}
		// Every failure is audited: the SSH ones, the probe's up to the
		// lockout's first refusal (repeats counted at the end of the
		// aggregation window).
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			var denied []string
			for _, e := range o.Audit("") {
				if e.Result == "denied" && obmdtest.FromAddr(e.Source, shared) {
					for range e.Count {
						denied = append(denied, e.Detail)
					}
				}
			}
			if len(denied) >= 6 && strings.Contains(strings.Join(denied, "|"), "rate limited (source)") {
				break
			}
			if time.Now().After(deadline) {
				t.Errorf("denied audit rows from %s: got %q, want the 5 failures and the first refusal", shared, denied)
				break
			}
		}
	})
}

// TestDoorControllerSessions: HIL streams every node's console through the
// HTTP route from one address and makes power calls meanwhile: 100 streams
// (each shows its node's output) and 200 power calls from one address all
// succeed at the default limits, however long their queue takes. A call
// answered 503 because the database could not verify access at that
// moment (on a loaded machine, a write of the streams' history held past
// access.WriteStall counts as a stuck database) is tried again, as a
// controller does; no limit may refuse one.
func TestDoorControllerSessions(t *testing.T) {
	t.Parallel()
	const nodes = 100
	o := obmdtest.Start(t, defaults(""))
	tokens := make([]string, nodes)
	for i := range nodes {
		tokens[i] = o.AddSimNode(fmt.Sprintf("hc%03d", i))
	}
	streams := make([]*obmdtest.HTTPConsole, nodes)
	for i := range nodes {
		streams[i] = o.ConsoleHTTP(t, fmt.Sprintf("hc%03d", i), tokens[i])
	}
	var wg sync.WaitGroup
	var retried atomic.Int32
	for i := range nodes {
		for _, call := range []struct{ method, route string }{{"POST", "power_cycle"}, {"GET", "power_status"}} {
			wg.Go(func() {
				path := fmt.Sprintf("/node/hc%03d/%s?token=%s", i, call.route, tokens[i])
				for deadline := time.Now().Add(obmdtest.Timeout); ; time.Sleep(100 * time.Millisecond) {
					code, body := o.Request(call.method, path, nil, "", "")
					if code == http.StatusServiceUnavailable && strings.Contains(string(body), "cannot verify access right now") &&
						time.Now().Before(deadline) {
						retried.Add(1)
						continue
					}
					if code != http.StatusOK {
						t.Errorf("%s %s with %d streams open: got %d %s, want 200", call.method, call.route, nodes, code, body)
					}
					return
				}
			})
		}
	}
	wg.Wait()
	if n := retried.Load(); n > 0 {
		t.Logf("%d calls answered 503 (the database could not verify access then) and tried again", n)
	}
	for i, s := range streams {
		bmc := o.Lab().BMC(fmt.Sprintf("hc%03d", i), sim.ModeNormal)
		obmdtest.PrintUntilSeen(t, obmdtest.Inject(bmc), fmt.Sprintf("hc%03d", i), obmdtest.Shows(s.Out))
	}
	if got := len(o.Sessions("")); got < nodes {
		t.Errorf("live sessions: got %d, want the %d streams", got, nodes)
	}
}

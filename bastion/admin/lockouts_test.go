package admin

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/obmd/obmd/bastion/access/authlimit"
	"github.com/obmd/obmd/bastion/admin/api"
	"github.com/obmd/obmd/db/dbtest"
)

// TestLockoutRoutes: GET /v1/lockouts shows the operator the address
// locked out (when it ends, the failures, the tries refused) and the
// limits; DELETE /v1/lockouts/{addr} lifts it, so the right token works at
// once, says whether it was locked, is idempotent and audited; a bad
// address is a 400 and both routes are the admin's.
func TestLockoutRoutes(t *testing.T) {
	forEngines(t, func(t *testing.T, eng dbtest.Engine) {
		e := newEnv(t, eng, nil)
		e.mustNode("n1")
		tok := e.mustToken("n1")
		e.limits = authlimit.Config{PerSource: 3, PerNode: 100, Window: time.Minute, Lockout: 10 * time.Minute}
		e.restart()
		lockouts := func() api.Lockouts {
			t.Helper()
			r := e.admin("GET", "/v1/lockouts", "")
			var lo api.Lockouts
			if err := json.Unmarshal([]byte(r.body), &lo); r.code != 200 || err != nil {
				t.Fatalf("GET /v1/lockouts: got %d %q (%v)", r.code, r.body, err)
			}
			return lo
		}
		if lo := lockouts(); len(lo.Sources) != 0 || len(lo.Nodes) != 0 ||
			lo.Limits != (api.LockoutLimits{PerSource: 3, PerNode: 100, Window: "1m0s", Lockout: "10m0s"}) {
			t.Errorf("before any failure: got %+v, want no lockouts and the limits", lo)
		}
		for i := range 3 {
			if r := e.do("GET", "/node/n1/power_status?token=guess", "", noAuth); r.code != 401 {
				t.Fatalf("failure %d: got %d %s, want 401", i, r.code, r.body)
			}
		}
		right := func() int { return e.do("GET", "/node/n1/power_status?token="+tok, "", noAuth).code }
		if code := right(); code != 429 {
			t.Fatalf("right token from the locked-out address: got %d, want 429", code)
		}
		lo := lockouts()
		if len(lo.Sources) != 1 || lo.Sources[0].Source != "127.0.0.1" || lo.Sources[0].Failures != 3 || lo.Sources[0].Refused != 1 ||
			time.Until(lo.Sources[0].Until) < 5*time.Minute || time.Until(lo.Sources[0].Until) > 10*time.Minute {
			t.Errorf("locked out: got %+v, want 127.0.0.1 with 3 failures, 1 refusal, until about 10 minutes from now", lo.Sources)
		}

		unlock := func(addr string, want api.Unlocked) {
			t.Helper()
			r := e.admin("DELETE", "/v1/lockouts/"+addr, "")
			var got api.Unlocked
			if err := json.Unmarshal([]byte(r.body), &got); r.code != 200 || err != nil || got != want {
				t.Errorf("DELETE /v1/lockouts/%s: got %d %q, want 200 %+v", addr, r.code, r.body, want)
			}
		}
		unlock("127.0.0.1", api.Unlocked{Source: "127.0.0.1", WasLocked: true})
		if code := right(); code != 200 {
			t.Errorf("right token after the unlock: got %d, want 200", code)
		}
		if lo := lockouts(); len(lo.Sources) != 0 {
			t.Errorf("after the unlock: got %+v, want none", lo.Sources)
		}
		unlock("127.0.0.1", api.Unlocked{Source: "127.0.0.1", WasLocked: false})
		unlock("2001:db8::7", api.Unlocked{Source: "2001:db8::/64"})
		unlock("2001:db8::/64", api.Unlocked{Source: "2001:db8::/64"})
		unlock("2001:db8::%2F64", api.Unlocked{Source: "2001:db8::/64"})

		var cleared []string
		for _, ev := range e.auditEvents("") {
			if ev.Action == "lockout.clear" && ev.Actor == "admin" && ev.Result == "ok" {
				cleared = append(cleared, ev.Detail)
			}
		}
		if len(cleared) != 5 || cleared[0] != "source 127.0.0.1 (was locked out)" || cleared[1] != "source 127.0.0.1 (was not locked out)" {
			t.Errorf("audit of the unlocks: got %q, want 5 rows, the first two for 127.0.0.1 locked then not", cleared)
		}

		for _, bad := range []string{"not-an-address", "10.0.0.0/8", "2001:db8::/48", "fe80::1%25eth0"} {
			if r := e.admin("DELETE", "/v1/lockouts/"+bad, ""); r.code != 400 {
				t.Errorf("DELETE /v1/lockouts/%s: got %d %q, want 400", bad, r.code, r.body)
			}
		}
		for _, m := range []string{"GET", "DELETE"} {
			if r := e.do(m, "/v1/lockouts/127.0.0.1", "", func(r *http.Request) { r.SetBasicAuth("admin", "guess") }); r.code != 404 {
				t.Errorf("%s without the admin credential: got %d, want 404", m, r.code)
			}
		}
	})
}

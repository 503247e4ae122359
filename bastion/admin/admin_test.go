package admin

import (
	"cmp"
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/obmd/obmd/bastion/access/authlimit"
	"github.com/obmd/obmd/bastion/internal/realip"
	"github.com/obmd/obmd/db"
	"github.com/obmd/obmd/db/dbtest"
)

// deniedRows lists the denied audit events of node ("" for every node),
// oldest first, as "actor action detail".
func (e *env) deniedRows(node string) []string {
	e.t.Helper()
	evs, err := e.store.AuditEvents(context.Background(), db.AuditQuery{Node: node})
	if err != nil {
		e.t.Fatalf("audit events: %v", err)
	}
	slices.SortFunc(evs, func(a, b db.AuditEvent) int { return cmp.Compare(a.ID, b.ID) })
	var out []string
	for _, ev := range evs {
		if ev.Result == "denied" {
			out = append(out, ev.Actor+" "+ev.Action+" "+ev.Detail)
		}
	}
	return out
}

// TestGuessingLimits: wrong admin credentials and wrong node tokens count
// against the source; once it is locked out every guess it sends is
// refused (429), and a right node token too, but never the right admin
// credential (others' failures from its address must not block HIL's
// rotation); only the lockout's first refusal is audited. Admin and token
// failures share the source's budget.
func TestGuessingLimits(t *testing.T) {
	forEngines(t, func(t *testing.T, eng dbtest.Engine) {
		for _, tt := range []struct {
			name string
			fail func(e *env) resp // one failure
			want string            // its audit row
		}{
			{"admin credential", func(e *env) resp {
				return e.do("GET", "/v1/nodes", "", func(r *http.Request) { r.SetBasicAuth("admin", "guess") })
			}, "admin admin.auth bad credential on GET /v1/nodes"},
			{"node token", func(e *env) resp { return e.do("GET", "/node/n1/power_status?token=guess", "", noAuth) },
				"http:token auth bad token"},
			{"unknown node", func(e *env) resp { return e.do("GET", "/node/ghost/power_status?token=guess", "", noAuth) },
				"http:token auth unknown node"},
		} {
			t.Run(tt.name, func(t *testing.T) {
				e := newEnv(t, eng, nil)
				e.mustNode("n1")
				tok := e.mustToken("n1")
				e.limits = authlimit.Config{PerSource: 3, PerNode: 100, Window: time.Minute, Lockout: time.Minute}
				e.restart()
				for i := range 3 {
					if r := tt.fail(e); r.code != 401 && r.code != 404 {
						t.Fatalf("failure %d: got %d %s, want 401 or 404", i, r.code, r.body)
					}
				}
				limited := errJSON("too many failed attempts from your address; try again later")
				for i := range 20 { // the flood, right secrets included
					for _, r := range []resp{tt.fail(e), e.do("GET", "/node/n1/power_status?token="+tok, "", noAuth)} {
						if r.code != 429 || r.body != limited {
							t.Fatalf("request %d from the locked-out source: got %d %q, want 429 %q", i, r.code, r.body, limited)
						}
					}
					if r := e.admin("GET", "/v1/nodes", ""); r.code != 200 {
						t.Fatalf("right admin credential %d from the locked-out source: got %d %q, want 200", i, r.code, r.body)
					}
				}
				var want []string
				for range 3 {
					want = append(want, tt.want)
				}
				got := e.deniedRows("")
				if len(got) != 4 || fmt.Sprint(got[:3]) != fmt.Sprint(want) || !strings.Contains(got[3], " rate limited (source)") {
					t.Errorf("denied audit rows: got %d %q, want the 3 failures and one refusal", len(got), got)
				}
				if calls := e.runner.take(); len(calls) != 0 {
					t.Errorf("runner calls from the locked-out source: got %+v, want none", calls)
				}
			})
		}
	})
}

// TestNodeUnderAttackLooksLikeWrongToken: every name that is no node
// shares one limiter state, so once unknown names are under attack a 429
// for a source that failed on them would tell an unknown name from a
// known one. The refusal answers as a wrong token does instead (status,
// body, least time), and its first occurrence is audited as a refusal.
func TestNodeUnderAttackLooksLikeWrongToken(t *testing.T) {
	forEngines(t, func(t *testing.T, eng dbtest.Engine) {
		e := newEnv(t, eng, nil)
		e.mustNode("n1")
		e.mustToken("n1")
		e.limits = authlimit.Config{PerSource: 1 << 20, PerNode: 3, Window: time.Minute, Lockout: time.Minute}
		e.failDelay = 50 * time.Millisecond
		trusted, err := realip.ParseTrusted([]string{"127.0.0.1"})
		if err != nil {
			t.Fatal(err)
		}
		e.trusted = trusted
		e.restart()
		from := func(src string) auth { return func(r *http.Request) { r.Header.Set("X-Forwarded-For", src) } }
		for i := range 3 { // three sources fail on unknown names: those are under attack
			src := fmt.Sprintf("10.0.0.%d", i+1)
			if r := e.do("GET", fmt.Sprintf("/node/ghost-%d/power_status?token=guess", i), "", from(src)); r.code != 401 {
				t.Fatalf("failure %d: got %d %s, want 401", i, r.code, r.body)
			}
		}
		want := errJSON(errBadToken)
		for _, path := range []string{"/node/ghost-9/power_status?token=guess", "/node/n1/power_status?token=guess"} {
			start := time.Now()
			r := e.do("GET", path, "", from("10.0.0.1"))
			if took := time.Since(start); r.code != 401 || r.body != want || took < e.failDelay {
				t.Errorf("GET %s from a source that failed on unknown names: got %d %q after %v, want 401 %q after at least %v",
					path, r.code, r.body, took, want, e.failDelay)
			}
		}
		var refusals int
		for _, row := range e.deniedRows("") {
			if strings.Contains(row, "rate limited (node)") {
				refusals++
			}
		}
		if refusals != 1 {
			t.Errorf("audited refusals by the node limit: got %d, want 1 (the lockout's first): %q", refusals, e.deniedRows(""))
		}
	})
}

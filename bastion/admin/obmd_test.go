package admin

import (
	"context"
	"encoding/json"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/obmd/obmd/db"
	"github.com/obmd/obmd/db/dbtest"
	"github.com/obmd/obmd/sol"
)

// adminRoutes is every admin route with a body that would succeed.
var adminRoutes = []struct{ method, path, body string }{
	{"PUT", "/node/n1", `{"type":"mock","info":{"addr":"10.0.0.4"}}`},
	{"DELETE", "/node/n1", ""},
	{"POST", "/node/n1/token", ""},
	{"DELETE", "/node/n1/token", ""},
	{"GET", "/v1/nodes", ""},
	{"GET", "/v1/nodes/n1", ""},
	{"PUT", "/v1/nodes/n2", `{"type":"mock","info":{"addr":"10.0.0.4"}}`},
	{"DELETE", "/v1/nodes/n1", ""},
	{"POST", "/v1/nodes/n1/token", ""},
	{"DELETE", "/v1/nodes/n1/token", ""},
	{"POST", "/v1/nodes/n1/keys", `{"key":"` + testKeyLine + `"}`},
	{"GET", "/v1/nodes/n1/keys", ""},
	{"DELETE", "/v1/nodes/n1/keys/SHA256:abc%2Fdef", ""},
	{"GET", "/v1/audit", ""},
	{"GET", "/v1/sessions", ""},
	{"DELETE", "/v1/sessions/1", ""},
}

const testKeyLine = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl user@host"

func TestAdminAuthHidesEverything(t *testing.T) {
	forEngines(t, func(t *testing.T, eng dbtest.Engine) {
		e := newEnv(t, eng, nil)
		e.mustNode("n1")
		tok := e.mustToken("n1")
		creds := []struct {
			name string
			auth auth
		}{
			{"none", noAuth},
			{"wrong token", func(r *http.Request) { r.SetBasicAuth("admin", testAdminToken+"x") }},
			{"wrong user", func(r *http.Request) { r.SetBasicAuth("root", testAdminToken) }},
			{"empty token", func(r *http.Request) { r.SetBasicAuth("admin", "") }},
			{"node token", func(r *http.Request) { r.SetBasicAuth("admin", tok) }},
			{"bearer", func(r *http.Request) { r.Header.Set("Authorization", "Bearer "+testAdminToken) }},
		}
		unknown := e.do("GET", "/no/such/route", "", noAuth)
		if unknown.code != 404 || unknown.body != errJSON("not found") {
			t.Fatalf("unknown route: got %d %q, want 404 %q", unknown.code, unknown.body, errJSON("not found"))
		}
		for _, rt := range adminRoutes {
			for _, c := range creds {
				t.Run(rt.method+" "+rt.path+" "+c.name, func(t *testing.T) {
					r := e.do(rt.method, rt.path, rt.body, c.auth)
					if r.code != 404 || r.body != unknown.body {
						t.Errorf("got %d %q, want 404 %q", r.code, r.body, unknown.body)
					}
				})
			}
		}
		if got, want := e.labels(), []string{"n1"}; !slices.Equal(got, want) {
			t.Errorf("nodes after refused requests: got %v, want %v", got, want)
		}
		if calls := e.rev.take(); len(calls) != 1 { // the one rotation above
			t.Errorf("revocations: got %v, want only the setup rotation", calls)
		}
		evs := e.auditEvents("")
		denied := 0
		for _, ev := range evs {
			if ev.Action == "admin.auth" {
				denied++
				if ev.Result != "denied" || ev.Source == "" {
					t.Errorf("admin.auth event: got %+v, want result denied with a source", ev)
				}
			}
			if strings.Contains(ev.Detail, testAdminToken) || strings.Contains(ev.Detail, tok) {
				t.Errorf("audit detail holds a secret: %+v", ev)
			}
		}
		if want := len(adminRoutes) * len(creds); denied != want {
			t.Errorf("admin.auth denied events: got %d, want %d", denied, want)
		}
		if logs := e.logs.String(); strings.Contains(logs, testAdminToken) || strings.Contains(logs, tok) {
			t.Errorf("logs hold a secret")
		}
	})
}

func TestPutNodeObmd(t *testing.T) {
	forEngines(t, func(t *testing.T, eng dbtest.Engine) {
		e := newEnv(t, eng, nil)
		ok := func(label, body string, want sol.Info, wantType string) {
			t.Helper()
			r := e.admin("PUT", "/node/"+label, body)
			if r.code != 200 || r.body != "" {
				t.Fatalf("PUT %s: got %d %q, want 200 and an empty body", label, r.code, r.body)
			}
			n, err := e.store.Node(context.Background(), label)
			if err != nil {
				t.Fatalf("stored %s: %v", label, err)
			}
			plain, err := e.sealer.Open(n.InfoSealed, label)
			if err != nil {
				t.Fatalf("open %s: %v", label, err)
			}
			var got sol.Info
			if err := json.Unmarshal(plain, &got); err != nil {
				t.Fatalf("decode %s: %v", label, err)
			}
			if n.Type != wantType || !reflect.DeepEqual(got, want) {
				t.Errorf("stored %s: got %s %+v, want %s %+v", label, n.Type, got, wantType, want)
			}
			if strings.Contains(string(n.InfoSealed), "10.0.0") {
				t.Errorf("stored info of %s is not sealed", label)
			}
		}
		three := 3
		// HIL's exact mock registration.
		ok("hil-mock", `{"type": "mock", "info": {"addr": "10.0.0.4", "NumWrites": 0}}`, sol.Info{Addr: "10.0.0.4"}, "mock")
		ok("ipmi-1", `{"type":"ipmi","info":{"addr":"10.0.0.5","user":"root","pass":"s3cret-pass"}}`,
			sol.Info{Addr: "10.0.0.5", User: "root", Pass: "s3cret-pass"}, "ipmi")
		ok("tool-1", `{"type":"ipmitool","info":{"addr":"bmc.example","user":"u","pass":"p","port":6230,"cipher":3,"interface":"lan","extra":1},"also":true}`,
			sol.Info{Addr: "bmc.example", User: "u", Pass: "p", Port: 6230, Cipher: &three, Interface: "lan"}, "ipmitool")
		// Unknown and inapplicable info fields are ignored on this route.
		ok("ipmi-2", `{"type":"ipmi","info":{"addr":"a","user":"u","pass":"p","interface":"lan","NumWrites":5}}`,
			sol.Info{Addr: "a", User: "u", Pass: "p"}, "ipmi")
		ok("mock-2", `{"type":"mock","info":{"addr":"m","user":"u","pass":"p"}}`, sol.Info{Addr: "m"}, "mock")
		ok("Node_7.rack-3", `{"type":"mock","info":{"addr":"m"}}`, sol.Info{Addr: "m"}, "mock")
		ok(strings.Repeat("a", 80), `{"type":"mock","info":{"addr":"m"}}`, sol.Info{Addr: "m"}, "mock")

		// Re-registration: identical (defaults folded) is 200, different 409.
		rePut := []struct {
			name, label, body string
			code              int
		}{
			{"identical mock", "hil-mock", `{"type":"mock","info":{"addr":"10.0.0.4","NumWrites":7}}`, 200},
			{"identical ipmi", "ipmi-1", `{"type":"ipmi","info":{"addr":"10.0.0.5","user":"root","pass":"s3cret-pass","port":623,"cipher":-1}}`, 200},
			{"identical ipmitool", "tool-1", `{"type":"ipmitool","info":{"addr":"bmc.example","user":"u","pass":"p","port":6230,"cipher":3,"interface":"lan"}}`, 200},
			{"other pass", "ipmi-1", `{"type":"ipmi","info":{"addr":"10.0.0.5","user":"root","pass":"other"}}`, 409},
			{"other addr", "hil-mock", `{"type":"mock","info":{"addr":"10.0.0.6"}}`, 409},
			{"other type", "hil-mock", `{"type":"ipmi","info":{"addr":"10.0.0.4","user":"u","pass":"p"}}`, 409},
			{"other cipher", "tool-1", `{"type":"ipmitool","info":{"addr":"bmc.example","user":"u","pass":"p","port":6230,"interface":"lan"}}`, 409},
		}
		for _, tt := range rePut {
			t.Run(tt.name, func(t *testing.T) {
				before, _ := e.store.Node(context.Background(), tt.label)
				r := e.admin("PUT", "/node/"+tt.label, tt.body)
				if r.code != tt.code {
					t.Fatalf("got %d %q, want %d", r.code, r.body, tt.code)
				}
				if tt.code == 200 && r.body != "" {
					t.Errorf("body: got %q, want empty", r.body)
				}
				if tt.code == 409 && !strings.Contains(r.body, `already exists with a different type or info`) {
					t.Errorf("body: got %q, want a JSON error saying it exists", r.body)
				}
				after, _ := e.store.Node(context.Background(), tt.label)
				if after.Epoch != before.Epoch || string(after.InfoSealed) != string(before.InfoSealed) {
					t.Errorf("stored node changed: got %+v, want %+v", after, before)
				}
			})
		}
		if calls := e.rev.take(); len(calls) != 0 {
			t.Errorf("revocations: got %v, want none", calls)
		}
		evs := e.auditEvents("ipmi-1")
		if !hasAudit(evs, "admin", "node.create", "ok") {
			t.Errorf("audit of ipmi-1: got %+v, want a node.create", evs)
		}
	})
}

func TestPutNodeRejects(t *testing.T) {
	forEngines(t, func(t *testing.T, eng dbtest.Engine) {
		e := newEnv(t, eng, nil)
		good := `{"type":"mock","info":{"addr":"10.0.0.4"}}`
		ipmi := func(info string) string { return `{"type":"ipmi","info":{` + info + `}}` }
		tests := []struct {
			name, path, body string
			code             int
			msg              string // substring of the error
		}{
			{"slash", "/node/a%2Fb", good, 400, `contains \"/\"`},
			{"dotdot escaped", "/node/%2E%2E", good, 400, `reserved`},
			{"dot escaped", "/node/%2E", good, 400, `reserved`},
			{"dotdot raw", "/node/x/../n1", good, 400, `not canonical`},
			{"double slash", "/node//n1", good, 400, `not canonical`},
			{"NUL", "/node/a%00b", good, 400, `control character`},
			{"control", "/node/a%01b", good, 400, `control character`},
			{"escape", "/node/a%1B%5B2J", good, 400, `control character`},
			{"DEL", "/node/a%7Fb", good, 400, `control character`},
			{"C1", "/node/a%C2%85b", good, 400, `control character`},
			{"bidi override", "/node/a%E2%80%AEb", good, 400, `non-printable`},
			{"bad UTF-8", "/node/a%FFb", good, 400, `not valid UTF-8`},
			{"81 bytes", "/node/" + strings.Repeat("a", 81), good, 400, `81 bytes long`},
			{"leading space", "/node/%20a", good, 400, `white space`},
			{"trailing tab", "/node/a%09", good, 400, `control character`},
			{"trailing nbsp", "/node/a%C2%A0", good, 400, `white space`},
			{"empty body", "/node/n1", "", 400, `body is empty`},
			{"malformed", "/node/n1", `{"type":"mock",`, 400, `truncated`},
			{"not JSON", "/node/n1", `type=mock`, 400, `not valid JSON`},
			{"array", "/node/n1", `[1]`, 400, `want an object`},
			{"trailing garbage", "/node/n1", good + `x`, 400, `unexpected data after`},
			{"two objects", "/node/n1", good + good, 400, `unexpected data after`},
			{"no type", "/node/n1", `{"info":{"addr":"a"}}`, 400, `"type\" is required`},
			{"unknown type", "/node/n1", `{"type":"bogus","info":{"addr":"a"}}`, 400, `unknown type \"bogus\"`},
			{"type not string", "/node/n1", `{"type":5,"info":{"addr":"a"}}`, 400, `field \"type\"`},
			{"no info", "/node/n1", `{"type":"mock"}`, 400, `"info\" is required`},
			{"null info", "/node/n1", `{"type":"mock","info":null}`, 400, `"info\" is required`},
			{"info string", "/node/n1", `{"type":"mock","info":"x"}`, 400, `want an object`},
			{"mock no addr", "/node/n1", `{"type":"mock","info":{}}`, 400, `info.addr is required`},
			{"addr with space", "/node/n1", `{"type":"mock","info":{"addr":"a b"}}`, 400, `info.addr`},
			{"addr option", "/node/n1", `{"type":"mock","info":{"addr":"-oProxy"}}`, 400, `must not start with`},
			{"addr control", "/node/n1", `{"type":"mock","info":{"addr":"a\u0007"}}`, 400, `"a\\a\"`},
			{"ipmi no user", "/node/n1", ipmi(`"addr":"a","pass":"p"`), 400, `info.user is required`},
			{"ipmi no pass", "/node/n1", ipmi(`"addr":"a","user":"u"`), 400, `info.pass is required`},
			{"ipmi empty pass", "/node/n1", ipmi(`"addr":"a","user":"u","pass":""`), 400, `info.pass is required`},
			{"ipmi no addr", "/node/n1", ipmi(`"user":"u","pass":"p"`), 400, `info.addr is required`},
			{"port 0", "/node/n1", ipmi(`"addr":"a","user":"u","pass":"p","port":0`), 400, `info.port 0 is out of range`},
			{"port 65536", "/node/n1", ipmi(`"addr":"a","user":"u","pass":"p","port":65536`), 400, `out of range`},
			{"port string", "/node/n1", ipmi(`"addr":"a","user":"u","pass":"p","port":"623"`), 400, `field \"port\"`},
			{"port float", "/node/n1", ipmi(`"addr":"a","user":"u","pass":"p","port":1.5`), 400, `field \"port\"`},
			{"cipher 18", "/node/n1", ipmi(`"addr":"a","user":"u","pass":"p","cipher":18`), 400, `info.cipher 18`},
			{"cipher -2", "/node/n1", ipmi(`"addr":"a","user":"u","pass":"p","cipher":-2`), 400, `info.cipher -2`},
			{"interface", "/node/n1", `{"type":"ipmitool","info":{"addr":"a","user":"u","pass":"p","interface":"open"}}`, 400, `info.interface \"open\"`},
			{"pass control", "/node/n1", ipmi(`"addr":"a","user":"u","pass":"p\n"`), 400, `info.pass must not contain`},
			{"long pass", "/node/n1", ipmi(`"addr":"a","user":"u","pass":"` + strings.Repeat("p", 256) + `"`), 400, `info.pass is longer`},
			{"oversized", "/node/n1", `{"type":"mock","info":{"addr":"a","x":"` + strings.Repeat("x", DefaultMaxBody) + `"}}`, 413, `larger than 65536 bytes`},
		}
		for _, tt := range tests {
			for _, prefix := range []string{"/node/", "/v1/nodes/"} {
				path := prefix + strings.TrimPrefix(tt.path, "/node/")
				t.Run(tt.name+" "+prefix, func(t *testing.T) {
					r := e.admin("PUT", path, tt.body)
					if r.code != tt.code || !strings.Contains(r.body, tt.msg) || !strings.HasPrefix(r.body, `{"error":"`) {
						t.Errorf("got %d %s, want %d and a JSON error containing %s", r.code, r.body, tt.code, tt.msg)
					}
					if strings.Contains(r.body, "\x00") || strings.Contains(r.body, "\x1b") || strings.Contains(r.body, "\u0085") {
						t.Errorf("body echoes raw control characters: %q", r.body)
					}
				})
			}
		}
		if got := e.labels(); len(got) != 0 {
			t.Errorf("nodes after rejected requests: got %v, want none", got)
		}
	})
}

func TestDeleteNode(t *testing.T) {
	forEngines(t, func(t *testing.T, eng dbtest.Engine) {
		e := newEnv(t, eng, nil)
		for _, prefix := range []string{"/node/", "/v1/nodes/"} {
			t.Run(prefix, func(t *testing.T) {
				e.mustNode("n1")
				e.rev.take()
				r := e.admin("DELETE", prefix+"n1", "")
				if r.code != 200 || r.body != "" {
					t.Fatalf("delete: got %d %q, want 200 and an empty body", r.code, r.body)
				}
				if got := e.labels(); len(got) != 0 {
					t.Errorf("nodes after delete: got %v, want none", got)
				}
				calls := e.rev.take()
				latest, _ := e.store.LatestChange(context.Background())
				if want := []revokeCall{{"n1", latest, WhyNodeDeleted}}; !reflect.DeepEqual(calls, want) {
					t.Errorf("revocations: got %v, want %v", calls, want)
				}
				// Idempotent.
				r = e.admin("DELETE", prefix+"n1", "")
				if r.code != 200 || r.body != "" {
					t.Errorf("delete again: got %d %q, want 200 and an empty body", r.code, r.body)
				}
				if calls := e.rev.take(); len(calls) != 0 {
					t.Errorf("revocations after a no-op delete: got %v, want none", calls)
				}
				if r := e.admin("DELETE", prefix+"a%2Fb", ""); r.code != 400 {
					t.Errorf("delete a bad label: got %d %q, want 400", r.code, r.body)
				}
			})
		}
		if !hasAudit(e.auditEvents("n1"), "admin", "node.delete", "ok") {
			t.Errorf("audit: want a node.delete")
		}
	})
}

func TestTokens(t *testing.T) {
	forEngines(t, func(t *testing.T, eng dbtest.Engine) {
		e := newEnv(t, eng, nil)
		for _, prefix := range []string{"/node/", "/v1/nodes/"} {
			t.Run(prefix, func(t *testing.T) {
				e.mustNode("n1")
				e.rev.take()
				r := e.admin("POST", prefix+"n1/token", "")
				var body map[string]string
				if r.code != 200 || json.Unmarshal([]byte(r.body), &body) != nil || len(body) != 1 || len(body["token"]) < 32 {
					t.Fatalf("rotate: got %d %q, want 200 {\"token\":\"...\"}", r.code, r.body)
				}
				if ct := r.header.Get("Content-Type"); ct != "application/json" {
					t.Errorf("content type: got %q, want application/json", ct)
				}
				tok1 := body["token"]
				if want := []revokeCall{{"n1", e.epoch("n1"), WhyTokenRotate}}; !reflect.DeepEqual(e.rev.take(), want) {
					t.Errorf("revocations after rotate: want %v", want)
				}
				if r := e.do("GET", "/node/n1/power_status?token="+tok1, "", noAuth); r.code != 200 {
					t.Errorf("use token: got %d %q, want 200", r.code, r.body)
				}
				tok2 := e.mustToken("n1")
				e.rev.take()
				if tok2 == tok1 {
					t.Fatalf("rotation returned the same token")
				}
				if r := e.do("GET", "/node/n1/power_status?token="+tok1, "", noAuth); r.code != 401 || r.body != errJSON(errBadToken) {
					t.Errorf("old token: got %d %q, want 401 %q", r.code, r.body, errJSON(errBadToken))
				}
				for i := 0; i < 2; i++ { // idempotent
					r := e.admin("DELETE", prefix+"n1/token", "")
					if r.code != 200 || r.body != "" {
						t.Fatalf("revoke #%d: got %d %q, want 200 and an empty body", i, r.code, r.body)
					}
					if want := []revokeCall{{"n1", e.epoch("n1"), WhyTokenRevoke}}; !reflect.DeepEqual(e.rev.take(), want) {
						t.Errorf("revocations after revoke #%d: want %v", i, want)
					}
				}
				if r := e.do("GET", "/node/n1/power_status?token="+tok2, "", noAuth); r.code != 401 {
					t.Errorf("revoked token: got %d %q, want 401", r.code, r.body)
				}
				for _, m := range []string{"POST", "DELETE"} {
					if r := e.admin(m, prefix+"nope/token", ""); r.code != 404 || r.body != errJSON(`node "nope" not found`) {
						t.Errorf("%s token of unknown node: got %d %q, want 404", m, r.code, r.body)
					}
				}
				e.admin("DELETE", prefix+"n1", "")
				e.rev.take()
			})
		}
		evs := e.auditEvents("n1")
		if !hasAudit(evs, "admin", "token.rotate", "ok") || !hasAudit(evs, "admin", "token.revoke", "ok") {
			t.Errorf("audit: got %+v, want token.rotate and token.revoke", evs)
		}
	})
}

func TestTokensSurviveRestart(t *testing.T) {
	forEngines(t, func(t *testing.T, eng dbtest.Engine) {
		e := newEnv(t, eng, nil)
		e.mustNode("n1")
		tok := e.mustToken("n1")
		e.restart()
		if r := e.do("GET", "/node/n1/power_status?token="+tok, "", noAuth); r.code != 200 || r.body != `{"power_status":"Mock Status"}`+"\n" {
			t.Errorf("token after restart: got %d %q, want 200", r.code, r.body)
		}
		r := e.admin("GET", "/v1/nodes/n1", "")
		if r.code != 200 || !strings.Contains(r.body, `"addr":"10.0.0.4"`) {
			t.Errorf("node after restart: got %d %q, want it with its unsealed addr", r.code, r.body)
		}
	})
}

// storeNodeExists reports whether label is stored.
func storeNodeExists(t *testing.T, s *db.Store, label string) bool {
	t.Helper()
	_, err := s.Node(context.Background(), label)
	return err == nil
}

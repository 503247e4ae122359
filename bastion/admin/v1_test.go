package admin

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"net/url"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/obmd/obmd/bastion/access/authlimit"
	"github.com/obmd/obmd/bastion/access/sessions"
	"github.com/obmd/obmd/bastion/admin/api"
	"github.com/obmd/obmd/db/dbtest"
	"github.com/obmd/obmd/keys"
	"github.com/sirupsen/logrus"
	gossh "golang.org/x/crypto/ssh"
)

const testPass = "Pa55-w0rd-not-shown" // 19 bytes: IPMI takes 20 at most

// testKey returns the n-th deterministic ed25519 authorized_keys line whose
// fingerprint contains want ("" for any), and that fingerprint.
func testKey(t *testing.T, n int, want string, comment string) (line, fp string) {
	t.Helper()
	for seed := 0; seed < 10000; seed++ {
		s := make([]byte, ed25519.SeedSize)
		copy(s, strconv.Itoa(n*10000+seed))
		pub, err := gossh.NewPublicKey(ed25519.NewKeyFromSeed(s).Public())
		if err != nil {
			t.Fatalf("public key: %v", err)
		}
		fp := keys.Fingerprint(pub)
		if strings.Contains(fp, want) {
			return strings.TrimSpace(string(gossh.MarshalAuthorizedKey(pub))) + " " + comment, fp
		}
	}
	t.Fatalf("no key with %q in its fingerprint", want)
	return "", ""
}

// nodeJSON is a node as GET /v1/nodes shows one of the IPMI types.
type nodeJSON struct {
	Label, Type, Addr, User, Pass, Interface string
	Port                                     int
	Cipher                                   *int
	CreatedAt                                time.Time `json:"created_at"`
	HasToken                                 *bool     `json:"has_token"`
	Keys                                     *int
	Sessions                                 *int
}

func TestV1Nodes(t *testing.T) {
	forEngines(t, func(t *testing.T, eng dbtest.Engine) {
		e := newEnv(t, eng, nil)
		body := `{"type":"ipmi","info":{"addr":"10.0.0.5","user":"root","pass":"` + testPass + `"}}`
		var v nodeJSON
		r := e.admin("PUT", "/v1/nodes/n1", body)
		if r.code != 201 || json.Unmarshal([]byte(r.body), &v) != nil {
			t.Fatalf("create: got %d %q, want 201 and the node", r.code, r.body)
		}
		if v.Label != "n1" || v.Type != "ipmi" || v.Addr != "10.0.0.5" || v.User != "root" || v.Port != 623 || v.CreatedAt.IsZero() {
			t.Errorf("created node: got %+v", v)
		}
		// Identical: 200, nothing changes.
		ep := e.epoch("n1")
		if r := e.admin("PUT", "/v1/nodes/n1", body); r.code != 200 {
			t.Errorf("identical: got %d %q, want 200", r.code, r.body)
		}
		if e.epoch("n1") != ep || len(e.rev.take()) != 0 {
			t.Errorf("identical re-PUT moved the epoch or revoked")
		}
		// Changed: 200, epoch moves, sessions cut with "node changed".
		r = e.admin("PUT", "/v1/nodes/n1", `{"type":"ipmitool","info":{"addr":"10.0.0.6","user":"root","pass":"`+testPass+`","port":6230,"cipher":17,"interface":"lan"}}`)
		if r.code != 200 || json.Unmarshal([]byte(r.body), &v) != nil || v.Type != "ipmitool" || v.Addr != "10.0.0.6" || v.Port != 6230 ||
			v.Cipher == nil || *v.Cipher != 17 || v.Interface != "lan" {
			t.Fatalf("update: got %d %q", r.code, r.body)
		}
		if want := []revokeCall{{"n1", e.epoch("n1"), WhyNodeChanged}}; !reflect.DeepEqual(e.rev.take(), want) || e.epoch("n1") <= ep {
			t.Errorf("update: want revocation %v and a moved epoch", want)
		}
		if !hasAudit(e.auditEvents("n1"), "admin", "node.update", "ok") {
			t.Errorf("audit: want node.update")
		}
		// Strictness (the obmd route ignores these).
		strict := []struct{ name, body, msg string }{
			{"unknown info field", `{"type":"mock","info":{"addr":"a","NumWrites":0}}`, `info: unknown field \"NumWrites\"`},
			{"unknown top field", `{"type":"mock","info":{"addr":"a"},"x":1}`, `body: unknown field \"x\"`},
			{"mock with user", `{"type":"mock","info":{"addr":"a","user":"u"}}`, `info.user does not apply to type mock`},
			{"interface on ipmi", `{"type":"ipmi","info":{"addr":"a","user":"u","pass":"p","interface":"lan"}}`, `info.interface does not apply to type ipmi`},
			{"control in field name", `{"type":"mock","info":{"addr":"a","\u001b[2J":0}}`, `unknown field \"\\x1b[2J\"`},
		}
		for _, tt := range strict {
			t.Run(tt.name, func(t *testing.T) {
				r := e.admin("PUT", "/v1/nodes/s1", tt.body)
				if r.code != 400 || !strings.Contains(r.body, tt.msg) {
					t.Errorf("got %d %s, want 400 containing %s", r.code, r.body, tt.msg)
				}
				if storeNodeExists(t, e.store, "s1") {
					t.Errorf("node stored")
				}
				if r := e.admin("PUT", "/node/s1", tt.body); r.code != 200 {
					t.Errorf("obmd route: got %d %s, want 200", r.code, r.body)
				}
				e.admin("DELETE", "/node/s1", "")
			})
		}

		e.mustNode("m1")
		e.mustToken("n1") // has_token
		line, _ := testKey(t, 1, "", "me@laptop")
		if r := e.admin("POST", "/v1/nodes/n1/keys", `{"key":"`+line+`"}`); r.code != 201 {
			t.Fatalf("add key: got %d %q", r.code, r.body)
		}
		r = e.admin("GET", "/v1/nodes", "")
		var list struct{ Nodes []nodeJSON }
		if r.code != 200 || json.Unmarshal([]byte(r.body), &list) != nil || len(list.Nodes) != 2 ||
			list.Nodes[0].Label != "m1" || list.Nodes[1].Label != "n1" || list.Nodes[0].Port != 0 || list.Nodes[0].Addr != "10.0.0.4" {
			t.Errorf("list: got %d %q", r.code, r.body)
		}
		if strings.Contains(r.body, "has_token") || strings.Contains(r.body, `"pass"`) {
			t.Errorf("list: got %q, want no detail fields and no pass", r.body)
		}
		r = e.admin("GET", "/v1/nodes/n1", "")
		var one map[string]any
		if r.code != 200 || json.Unmarshal([]byte(r.body), &one) != nil {
			t.Fatalf("get: got %d %q", r.code, r.body)
		}
		for k, want := range map[string]any{"label": "n1", "type": "ipmitool", "addr": "10.0.0.6", "user": "root",
			"port": 6230.0, "has_token": true, "keys": 1.0, "sessions": 0.0} {
			if one[k] != want {
				t.Errorf("get %s: got %v, want %v", k, one[k], want)
			}
		}
		if _, has := one["pass"]; has {
			t.Errorf("get: shows the password")
		}
		e.admin("DELETE", "/v1/nodes/n1/token", "")
		if r := e.admin("GET", "/v1/nodes/n1", ""); !strings.Contains(r.body, `"has_token":false`) {
			t.Errorf("get after revoke: got %q, want has_token false", r.body)
		}
		if r := e.admin("GET", "/v1/nodes/nope", ""); r.code != 404 || r.body != errJSON(`node "nope" not found`) {
			t.Errorf("get unknown: got %d %q", r.code, r.body)
		}
		if r := e.admin("GET", "/v1/nodes/a%7Fb", ""); r.code != 400 {
			t.Errorf("get bad label: got %d %q, want 400", r.code, r.body)
		}
	})
}

// TestV1ScreenSize: PUT .../screen_size sets a node's screen size (shown
// in its JSON, audited), moves no epoch and cuts nothing; a bad size, a
// missing field and an unknown node change nothing.
func TestV1ScreenSize(t *testing.T) {
	forEngines(t, func(t *testing.T, eng dbtest.Engine) {
		e := newEnv(t, eng, nil)
		e.mustNode("n1")
		ep := e.epoch("n1")
		r := e.admin("PUT", "/v1/nodes/n1/screen_size", `{"screen_size":"132x43"}`)
		if r.code != 200 || !strings.Contains(r.body, `"screen_size":"132x43"`) {
			t.Fatalf("set: got %d %q", r.code, r.body)
		}
		if r := e.admin("GET", "/v1/nodes/n1", ""); !strings.Contains(r.body, `"screen_size":"132x43"`) {
			t.Errorf("get: got %q, want the screen size", r.body)
		}
		if e.epoch("n1") != ep || len(e.rev.take()) != 0 {
			t.Error("setting the screen size moved the epoch or revoked")
		}
		if !hasAudit(e.auditEvents("n1"), "admin", "node.screen_size", "ok") {
			t.Error("audit: want node.screen_size")
		}
		for _, bad := range []string{`{"screen_size":"201x25"}`, `{"screen_size":"80x101"}`, `{"screen_size":"big"}`, `{}`, `{"screen_size":80}`, `{"screen_size":"80x25","x":1}`} {
			if r := e.admin("PUT", "/v1/nodes/n1/screen_size", bad); r.code != 400 {
				t.Errorf("%s: got %d %q, want 400", bad, r.code, r.body)
			}
		}
		if r := e.admin("GET", "/v1/nodes/n1", ""); !strings.Contains(r.body, `"screen_size":"132x43"`) {
			t.Errorf("after refused sizes: got %q, want 132x43 kept", r.body)
		}
		if r := e.admin("PUT", "/v1/nodes/nope/screen_size", `{"screen_size":"80x25"}`); r.code != 404 {
			t.Errorf("unknown node: got %d %q, want 404", r.code, r.body)
		}
		if r := e.admin("PUT", "/v1/nodes/n1/screen_size", `{"screen_size":""}`); r.code != 200 || strings.Contains(r.body, "screen_size") {
			t.Errorf("back to the default: got %d %q", r.code, r.body)
		}
	})
}

func TestV1Keys(t *testing.T) {
	forEngines(t, func(t *testing.T, eng dbtest.Engine) {
		e := newEnv(t, eng, nil)
		e.mustNode("n1")
		e.rev.take()
		slash, slashFP := testKey(t, 1, "/", "alice@laptop")
		plain, plainFP := testKey(t, 2, "", "")
		other, otherFP := testKey(t, 3, "/", "bob")
		add := []struct {
			name, node, body string
			code             int
			want             string
		}{
			{"add", "n1", `{"key":"` + slash + `"}`, 201, `{"fingerprint":"` + slashFP + `"}` + "\n"},
			{"add plain", "n1", `{"key":"` + plain + `"}`, 201, `{"fingerprint":"` + plainFP + `"}` + "\n"},
			{"add other", "n1", `{"key":"` + other + `"}`, 201, `{"fingerprint":"` + otherFP + `"}` + "\n"},
			{"again", "n1", `{"key":"` + slash + ` other comment"}`, 409, errJSON("key " + slashFP + ` is already registered on node "n1"`)},
			{"unknown node", "nope", `{"key":"` + slash + `"}`, 404, errJSON(`node "nope" not found`)},
			{"malformed", "n1", `{"key":"ssh-ed25519 nope"}`, 400, errJSON(keys.ErrKeyMalformed.Error())},
			{"options", "n1", `{"key":"command=\"sh\" ` + plain + `"}`, 400, errJSON(keys.ErrKeyOptions.Error())},
			{"two lines", "n1", `{"key":"` + plain + `\n` + slash + `"}`, 400, errJSON(keys.ErrKeyMultiLine.Error())},
			{"empty", "n1", `{"key":""}`, 400, errJSON(keys.ErrKeyMalformed.Error())},
			{"unknown field", "n1", `{"key":"` + plain + `","x":1}`, 400, errJSON(`body: unknown field "x"`)},
			{"trailing", "n1", `{"key":"` + plain + `"} {}`, 400, errJSON(`unexpected data after the JSON value in body`)},
			{"oversized", "n1", `{"key":"` + strings.Repeat("A", DefaultMaxBody) + `"}`, 413, errJSON("request body is larger than 65536 bytes")},
		}
		for _, tt := range add {
			t.Run(tt.name, func(t *testing.T) {
				r := e.admin("POST", "/v1/nodes/"+tt.node+"/keys", tt.body)
				if r.code != tt.code || r.body != tt.want {
					t.Errorf("got %d %q, want %d %q", r.code, r.body, tt.code, tt.want)
				}
			})
		}
		r := e.admin("GET", "/v1/nodes/n1/keys", "")
		var list struct {
			Keys []struct {
				Fingerprint, Key, Comment string
				CreatedAt                 time.Time `json:"created_at"`
			}
		}
		if r.code != 200 || json.Unmarshal([]byte(r.body), &list) != nil || len(list.Keys) != 3 {
			t.Fatalf("list: got %d %q", r.code, r.body)
		}
		if k := list.Keys[0]; k.Fingerprint != slashFP || k.Key != slash || k.Comment != "alice@laptop" || k.CreatedAt.IsZero() {
			t.Errorf("first key: got %+v, want %s %q", k, slashFP, slash)
		}
		if r := e.admin("GET", "/v1/nodes/nope/keys", ""); r.code != 404 {
			t.Errorf("list unknown node: got %d %q, want 404", r.code, r.body)
		}

		const removed, notThere = `{"removed":true}` + "\n", `{"removed":false}` + "\n"
		del := []struct {
			name, path string
			code       int
			want       string
		}{
			{"escaped slash", "/v1/nodes/n1/keys/" + url.PathEscape(slashFP), 200, removed},
			{"gone", "/v1/nodes/n1/keys/" + url.PathEscape(slashFP), 200, notThere},
			{"raw slash", "/v1/nodes/n1/keys/" + otherFP, 200, removed},
			{"plain", "/v1/nodes/n1/keys/" + strings.ReplaceAll(url.PathEscape(plainFP), "+", "%2B"), 200, removed},
			{"unknown node", "/v1/nodes/nope/keys/" + url.PathEscape(plainFP), 404, errJSON(`node "nope" not found`)},
			{"control", "/v1/nodes/n1/keys/SHA256:%00", 400, errJSON(`fingerprint "SHA256:\x00" is not valid (want SHA256:..., with "/" escaped as %2F)`)},
		}
		for _, tt := range del {
			t.Run("delete "+tt.name, func(t *testing.T) {
				r := e.admin("DELETE", tt.path, "")
				if r.code != tt.code || r.body != tt.want {
					t.Errorf("got %d %q, want %d %q", r.code, r.body, tt.code, tt.want)
				}
			})
		}
		calls := e.rev.take()
		if len(calls) != 3 {
			t.Fatalf("revocations: got %v, want 3", calls)
		}
		for _, c := range calls {
			if c.Label != "n1" || c.Why != WhyKeyRemoved || c.Epoch <= 0 {
				t.Errorf("revocation: got %+v, want n1 key removed", c)
			}
		}
		if last := calls[2]; last.Epoch != e.epoch("n1") {
			t.Errorf("last revocation epoch: got %d, want %d", last.Epoch, e.epoch("n1"))
		}
		evs := e.auditEvents("n1")
		for _, ev := range evs {
			if ev.Action == "key.add" && !strings.HasPrefix(ev.Detail, "SHA256:") {
				t.Errorf("key.add detail: got %q, want the fingerprint", ev.Detail)
			}
		}
		if !hasAudit(evs, "admin", "key.add", "ok") || !hasAudit(evs, "admin", "key.remove", "ok") {
			t.Errorf("audit: want key.add and key.remove")
		}
	})
}

func TestV1Audit(t *testing.T) {
	forEngines(t, func(t *testing.T, eng dbtest.Engine) {
		e := newEnv(t, eng, nil)
		e.mustNode("n1")
		e.mustNode("n2")
		e.mustToken("n1")
		type events struct {
			Events []api.AuditEvent
		}
		get := func(query string) (int, events) {
			t.Helper()
			r := e.admin("GET", "/v1/audit"+query, "")
			var ev events
			if r.code == 200 && json.Unmarshal([]byte(r.body), &ev) != nil {
				t.Fatalf("audit%s: bad body %q", query, r.body)
			}
			return r.code, ev
		}
		code, all := get("")
		if code != 200 || len(all.Events) != 3 {
			t.Fatalf("all: got %d %+v, want 3 events", code, all)
		}
		if code, ev := get("?node=n1"); code != 200 || len(ev.Events) != 2 || ev.Events[0].Action != "node.create" || ev.Events[1].Action != "token.rotate" {
			t.Errorf("node n1: got %d %+v", code, ev)
		}
		if code, ev := get("?limit=1"); code != 200 || len(ev.Events) != 1 {
			t.Errorf("limit 1: got %d %+v", code, ev)
		}
		future := time.Now().Add(time.Hour)
		for _, since := range []string{future.Format(time.RFC3339), strconv.FormatInt(future.Unix(), 10)} {
			if code, ev := get("?since=" + url.QueryEscape(since)); code != 200 || len(ev.Events) != 0 {
				t.Errorf("since %s: got %d %+v, want none", since, code, ev)
			}
		}
		if code, ev := get("?since=" + url.QueryEscape(time.Now().Add(-time.Hour).Format(time.RFC3339))); code != 200 || len(ev.Events) != 3 {
			t.Errorf("since an hour ago: got %d %+v, want 3", code, ev)
		}
		for _, q := range []string{"?limit=0", "?limit=1001", "?limit=x", "?since=yesterday", "?node=a%2Fb"} {
			if code, _ := get(q); code != 400 {
				t.Errorf("%s: got %d, want 400", q, code)
			}
		}
	})
}

func TestV1Sessions(t *testing.T) {
	forEngines(t, func(t *testing.T, eng dbtest.Engine) {
		e := newEnv(t, eng, nil)
		e.mustNode("n1")
		ctx, info, end, err := e.reg.Start(context.Background(), sessions.Info{Node: "n1", Kind: sessions.KindConsole, User: "token", Remote: "192.0.2.1:5555"}, "192.0.2.1")
		if err != nil {
			t.Fatalf("start session: %v", err)
		}
		go func() { <-ctx.Done(); end() }()
		_, other, endOther, _ := e.reg.Start(context.Background(), sessions.Info{Node: "n2", Kind: sessions.KindExec}, "x")
		defer endOther()

		var list struct{ Sessions []sessions.Info }
		r := e.admin("GET", "/v1/sessions?node=n1", "")
		if r.code != 200 || json.Unmarshal([]byte(r.body), &list) != nil || len(list.Sessions) != 1 || list.Sessions[0].ID != info.ID ||
			list.Sessions[0].Remote != "192.0.2.1:5555" || list.Sessions[0].Kind != sessions.KindConsole {
			t.Errorf("list n1: got %d %q", r.code, r.body)
		}
		if r := e.admin("GET", "/v1/sessions", ""); !strings.Contains(r.body, `"id":"`+other.ID+`"`) {
			t.Errorf("list all: got %q, want both", r.body)
		}
		if r := e.admin("GET", "/v1/sessions?node=zz", ""); r.code != 200 || r.body != `{"sessions":[]}`+"\n" {
			t.Errorf("list none: got %d %q", r.code, r.body)
		}
		if r := e.admin("DELETE", "/v1/sessions/"+info.ID, ""); r.code != 200 || r.body != "" {
			t.Errorf("kick: got %d %q, want 200", r.code, r.body)
		}
		if cause := context.Cause(ctx); cause == nil || cause.Error() != "your session on n1 was ended by an administrator; your access is unchanged" {
			t.Errorf("kicked session cause: got %v", cause)
		}
		if r := e.admin("DELETE", "/v1/sessions/"+info.ID, ""); r.code != 404 || r.body != errJSON(`no session "`+info.ID+`"`) {
			t.Errorf("kick again: got %d %q, want 404", r.code, r.body)
		}
		if !hasAudit(e.auditEvents("n1"), "admin", "session.kick", "ok") {
			t.Errorf("audit: want session.kick")
		}
	})
}

func TestProbes(t *testing.T) {
	forEngines(t, func(t *testing.T, eng dbtest.Engine) {
		e := newEnv(t, eng, nil)
		for _, p := range []string{"/healthz", "/readyz"} {
			if r := e.do("GET", p, "", noAuth); r.code != 200 || r.body != "ok" {
				t.Errorf("%s: got %d %q, want 200 ok", p, r.code, r.body)
			}
		}
		down := newEnv(t, eng, func(s Store) Store { return failingStore{s} })
		if r := down.do("GET", "/readyz", "", noAuth); r.code != 503 || r.body != errJSON("database not reachable") {
			t.Errorf("readyz with the database down: got %d %q, want 503", r.code, r.body)
		}
		if r := down.do("GET", "/healthz", "", noAuth); r.code != 200 {
			t.Errorf("healthz with the database down: got %d, want 200", r.code)
		}
	})
}

// TestNoPasswordAnywhere drives every route that shows a node and checks
// that the BMC password never appears in a response or a log line.
func TestNoPasswordAnywhere(t *testing.T) {
	forEngines(t, func(t *testing.T, eng dbtest.Engine) {
		e := newEnv(t, eng, nil)
		ipmi := `{"type":"ipmi","info":{"addr":"10.0.0.5","user":"root","pass":"` + testPass + `"}}`
		var bodies []string
		for _, rq := range []struct{ method, path, body string }{
			{"PUT", "/node/n1", ipmi},
			{"PUT", "/node/n1", ipmi},
			{"PUT", "/node/n1", strings.Replace(ipmi, "10.0.0.5", "10.0.0.9", 1)},
			{"PUT", "/v1/nodes/n2", ipmi},
			{"PUT", "/v1/nodes/n2", ipmi},
			{"PUT", "/v1/nodes/n2", strings.Replace(ipmi, "root", "admin", 1)},
			{"PUT", "/v1/nodes/n3", strings.Replace(ipmi, `"pass":"`, `"port":0,"pass":"`, 1)},
			{"PUT", "/v1/nodes/n3", strings.Replace(ipmi, `"pass":"`+testPass, `"pass":"`+testPass+`\n`, 1)},
			{"GET", "/v1/nodes", ""},
			{"GET", "/v1/nodes/n1", ""},
			{"GET", "/v1/nodes/n2", ""},
			{"GET", "/v1/audit", ""},
		} {
			r := e.admin(rq.method, rq.path, rq.body)
			bodies = append(bodies, r.body)
		}
		tok := e.mustToken("n1")
		bodies = append(bodies, e.do("GET", "/node/n1/power_status?token="+tok, "", noAuth).body)
		for i, b := range bodies {
			if strings.Contains(b, testPass) {
				t.Errorf("response %d holds the password: %q", i, b)
			}
		}
		logs := e.logs.String()
		for _, secret := range []string{testPass, tok, testAdminToken} {
			if strings.Contains(logs, secret) {
				t.Errorf("logs hold a secret")
			}
		}
		if strings.Contains(logs, "?token") || strings.Contains(logs, "token=") {
			t.Errorf("logs hold a query string")
		}
	})
}

func TestNew(t *testing.T) {
	sealer, _ := keys.NewSealer(make([]byte, 32))
	reg := sessions.New(sessions.Config{})
	log := logrus.New()
	var st Store = failingStore{}
	lim := authlimit.New(noLimits, time.Now)
	tests := []struct {
		name string
		cfg  Config
		st   Store
		ok   bool
	}{
		{"ok", Config{AdminToken: "t", Limiter: lim}, st, true},
		{"no admin token", Config{Limiter: lim}, st, false},
		{"negative body", Config{AdminToken: "t", MaxBody: -1, Limiter: lim}, st, false},
		{"no store", Config{AdminToken: "t", Limiter: lim}, nil, false},
		{"no limiter", Config{AdminToken: "t"}, st, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, err := New(tt.cfg, tt.st, testTypes(t, sealer), newFakeRunner(reg), newConsoles(t), &fakeRevoker{reg: reg}, reg, log)
			if (err == nil) != tt.ok {
				t.Fatalf("got %v, want ok %v", err, tt.ok)
			}
			if tt.ok && (a.cfg.MaxBody != DefaultMaxBody || a.cfg.Now == nil) {
				t.Errorf("defaults: got %+v", a.cfg)
			}
		})
	}
}

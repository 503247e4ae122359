package admindoor

// End-to-end tests of the admin HTTP API (issue 2) against a whole obmd in
// this process, on SQLite and on MariaDB: the obmd-compatible routes HIL's
// driver uses, the /v1 API, probes, and what survives a restart.

import (
	"encoding/json"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/obmd/obmd/bastion/e2e/obmdtest"

	gossh "golang.org/x/crypto/ssh"

	"github.com/obmd/obmd/bastion/daemon"
	"github.com/obmd/obmd/sol"
)

// apiMock is the info HIL's tests register mock nodes with.
var apiMock = sol.Info{Addr: "10.0.0.4"}

// apiErr decodes a {"error": "..."} body, failing the test if it is not one.
func apiErr(t testing.TB, body []byte) string {
	t.Helper()
	var e struct {
		Error string `json:"error"`
	}
	if err := json.Unmarshal(body, &e); err != nil || e.Error == "" {
		t.Errorf("error body: got %q, want {\"error\": \"...\"}", body)
	}
	return e.Error
}

// apiQ is the ?token= query of tok.
func apiQ(tok string) string { return "?token=" + url.QueryEscape(tok) }

// TestAPIRegistration covers PUT /node/{label}: idempotent re-PUT, 409 for a
// different node, and 400 with an error naming the problem (never the
// password) for bad bodies and labels.
func TestAPIRegistration(t *testing.T) {
	t.Parallel()
	obmdtest.OnEngines(t, func(t *testing.T, dsn string) {
		o := obmdtest.Start(t, func(c *daemon.Config) { c.DB.DSN = dsn })
		const pass = "reg-secret-pw-0x5a"
		ipmi := `{"type":"ipmi","info":{"addr":"192.0.2.5","user":"root","pass":"` + pass + `"}}`
		o.MustAPI(200, "PUT", "/node/r1", ipmi)
		o.MustAPI(200, "PUT", "/node/r1", ipmi)
		// Defaults folded in: port 623 is the same node.
		o.MustAPI(200, "PUT", "/node/r1", `{"type":"ipmi","info":{"addr":"192.0.2.5","user":"root","pass":"`+pass+`","port":623}}`)
		for _, body := range []string{
			`{"type":"ipmi","info":{"addr":"192.0.2.5","user":"root","pass":"other-pw"}}`,
			`{"type":"ipmitool","info":{"addr":"192.0.2.5","user":"root","pass":"` + pass + `"}}`,
			`{"type":"mock","info":{"addr":"192.0.2.5"}}`,
		} {
			status, got := o.API("PUT", "/node/r1", body)
			if status != 409 || strings.Contains(string(got), pass) || strings.Contains(string(got), "other-pw") {
				t.Errorf("re-PUT %s: got %d %s, want 409 without a password", body, status, got)
			}
			apiErr(t, got)
		}

		long := strings.Repeat("a", 81)
		tests := []struct {
			name, path, body string
			want             string // in the error text
		}{
			{"bad JSON", "/node/b1", `{"type":`, "JSON"},
			{"not an object", "/node/b1", `[1]`, "want an object"},
			{"unknown type", "/node/b1", `{"type":"idrac","info":{"addr":"x"}}`, "idrac"},
			{"no type", "/node/b1", `{"info":{"addr":"x"}}`, "type"},
			{"no info", "/node/b1", `{"type":"mock"}`, "info"},
			{"no addr", "/node/b1", `{"type":"mock","info":{}}`, "addr"},
			{"ipmi without pass", "/node/b1", `{"type":"ipmi","info":{"addr":"x","user":"root"}}`, "pass"},
			{"ipmi without user", "/node/b1", `{"type":"ipmi","info":{"addr":"x","pass":"` + pass + `"}}`, "user"},
			{"bad port", "/node/b1", `{"type":"ipmi","info":{"addr":"x","user":"u","pass":"` + pass + `","port":70000}}`, "port"},
			{"label too long", "/node/" + long, `{"type":"mock","info":{"addr":"x"}}`, "80"},
			{"label with a control character", "/node/a%01b", `{"type":"mock","info":{"addr":"x"}}`, "control"},
			{"label with a slash", "/node/a%2Fb", `{"type":"mock","info":{"addr":"x"}}`, "/"},
		}
		for _, tt := range tests {
			status, got := o.API("PUT", tt.path, tt.body)
			if status != 400 {
				t.Errorf("%s: got %d %s, want 400", tt.name, status, got)
				continue
			}
			if msg := apiErr(t, got); !strings.Contains(msg, tt.want) || strings.Contains(msg, pass) {
				t.Errorf("%s: got error %q, want it to name %q (and no password)", tt.name, msg, tt.want)
			}
		}
		// The longest label is fine; nothing refused above was stored.
		o.MustAPI(200, "PUT", "/node/"+long[:80], `{"type":"mock","info":{"addr":"x"}}`)
		var list struct{ Nodes []struct{ Label string } }
		if err := json.Unmarshal(o.MustAPI(200, "GET", "/v1/nodes", nil), &list); err != nil || len(list.Nodes) != 2 {
			t.Errorf("GET /v1/nodes: got %+v (%v), want r1 and the 80-byte label", list, err)
		}
		if strings.Contains(o.Logs.String(), pass) {
			t.Errorf("the BMC password is in the daemon's log")
		}
	})
}

// TestAPINodeTokenRoutes covers the node-token routes on the simulator: the
// answers HIL's client parses, one 401 for every refusal, and revocation.
func TestAPINodeTokenRoutes(t *testing.T) {
	t.Parallel()
	obmdtest.OnEngines(t, func(t *testing.T, dsn string) {
		o := obmdtest.Start(t, func(c *daemon.Config) { c.DB.DSN = dsn })
		tok := o.AddSimNode("s1")
		q := apiQ(tok)
		status := func(want string) {
			t.Helper()
			if code, got := o.Request("GET", "/node/s1/power_status"+q, nil, "", ""); code != 200 || string(got) != `{"power_status":"`+want+`"}`+"\n" {
				t.Errorf("power_status: got %d %q, want %q", code, got, want)
			}
		}
		status("on")
		for _, c := range []struct {
			method, route, body string
			then                string // power afterwards
		}{
			{"POST", "power_off", "", "off"},
			{"POST", "power_on", "", "on"},
			{"POST", "power_cycle", `{"force":false}`, "on"},
			{"POST", "power_cycle", `{"force":true}`, "on"},
			{"PUT", "boot_device", `{"bootdev":"pxe"}`, "on"},
			{"PUT", "boot_device", `{"bootdev":"disk"}`, "on"},
			{"PUT", "boot_device", `{"bootdev":"none"}`, "on"},
		} {
			if code, got := o.Request(c.method, "/node/s1/"+c.route+q, c.body, "", ""); code != 200 || len(got) != 0 {
				t.Errorf("%s %s: got %d %q, want 200 and an empty body", c.route, c.body, code, got)
			}
			status(c.then)
		}
		for _, c := range []struct{ name, method, path, body, want string }{
			{"bad bootdev", "PUT", "/node/s1/boot_device" + q, `{"bootdev":"floppy"}`, "unsupported boot device; valid: pxe, disk, bios, cdrom, none"},
			{"bad power_cycle body", "POST", "/node/s1/power_cycle" + q, `{"force":"yes"}`, ""},
		} {
			if code, got := o.Request(c.method, c.path, c.body, "", ""); code != 400 || !strings.Contains(string(got), c.want) {
				t.Errorf("%s: got %d %q, want 400 with %q", c.name, code, got, c.want)
			} else {
				apiErr(t, got)
			}
		}
		// Every refusal looks the same and takes at least FailDelay, as
		// over SSH: nothing tells an unknown node from a wrong token.
		o.AddNode("bare", "sim", sol.Info{Addr: "sim"}) // no token issued
		var first string
		for _, c := range []struct{ name, path string }{
			{"wrong token", "/node/s1/power_status?token=nope"},
			{"no token", "/node/s1/power_status"},
			{"admin's token", "/node/s1/power_status" + apiQ(o.AdminToken())},
			{"unknown node", "/node/ghost/power_status" + q},
			{"no token issued", "/node/bare/power_status" + q},
			{"unknown node, console", "/node/ghost/console" + q},
			{"wrong token, console", "/node/s1/console?token=nope"},
		} {
			start := time.Now()
			code, body := o.Request("GET", c.path, nil, "", "")
			if took := time.Since(start); took < o.Cfg.Admin.FailDelay {
				t.Errorf("%s: answered after %v, want at least the fail delay %v", c.name, took, o.Cfg.Admin.FailDelay)
			}
			if first == "" {
				first = string(body)
			}
			if code != 401 || string(body) != first {
				t.Errorf("%s: got %d %q, want 401 %q", c.name, code, body, first)
			}
		}
		// Rotation invalidates the old token at once; revocation leaves none.
		tok2 := o.Rotate("s1")
		if code, _ := o.Request("POST", "/node/s1/power_on"+q, nil, "", ""); code != 401 {
			t.Errorf("old token after rotation: got %d, want 401", code)
		}
		if code, _ := o.Request("POST", "/node/s1/power_on"+apiQ(tok2), nil, "", ""); code != 200 {
			t.Errorf("new token: got %d, want 200", code)
		}
		o.MustAPI(200, "DELETE", "/node/s1/token", nil)
		o.MustAPI(200, "DELETE", "/node/s1/token", nil)
		if code, _ := o.Request("POST", "/node/s1/power_on"+apiQ(tok2), nil, "", ""); code != 401 {
			t.Errorf("token after revocation: got %d, want 401", code)
		}
		if strings.Contains(o.Logs.String(), tok2) || strings.Contains(o.Logs.String(), tok) {
			t.Errorf("a node token is in the daemon's log")
		}
	})
}

// TestAPIAdminAuth checks that every admin route answers a missing or wrong
// credential with the same 404 as an unknown route, and that the admin
// routes answer 404 for an unknown node.
func TestAPIAdminAuth(t *testing.T) {
	t.Parallel()
	o := obmdtest.Start(t)
	o.AddNode("a1", "mock", apiMock)
	routes := []struct{ method, path, body string }{
		{"PUT", "/node/a2", `{"type":"mock","info":{"addr":"x"}}`},
		{"DELETE", "/node/a1", ""},
		{"POST", "/node/a1/token", ""},
		{"DELETE", "/node/a1/token", ""},
		{"GET", "/v1/nodes", ""},
		{"GET", "/v1/nodes/a1", ""},
		{"PUT", "/v1/nodes/a1", `{"type":"mock","info":{"addr":"y"}}`},
		{"GET", "/v1/nodes/a1/keys", ""},
		{"GET", "/v1/audit", ""},
		{"GET", "/v1/sessions", ""},
	}
	_, unknownRoute := o.Request("GET", "/no/such/route", nil, "", "")
	for _, r := range routes {
		for _, c := range []struct{ user, pass string }{{"", ""}, {"admin", "wrong"}, {"admin", ""}, {"root", o.AdminToken()}} {
			code, got := o.Request(r.method, r.path, r.body, c.user, c.pass)
			if code != 404 || string(got) != string(unknownRoute) {
				t.Errorf("%s %s as %q:%q: got %d %q, want 404 %q", r.method, r.path, c.user, c.pass, code, got, unknownRoute)
			}
		}
	}
	// Nothing was changed by the refused requests.
	if code, _ := o.API("GET", "/v1/nodes/a2", nil); code != 404 {
		t.Errorf("refused PUT created a node: got %d, want 404", code)
	}
	for _, r := range []struct{ method, path string }{
		{"POST", "/node/ghost/token"}, {"DELETE", "/node/ghost/token"}, {"GET", "/v1/nodes/ghost"},
		{"GET", "/v1/nodes/ghost/keys"},
	} {
		if code, got := o.API(r.method, r.path, nil); code != 404 {
			t.Errorf("%s %s: got %d %s, want 404", r.method, r.path, code, got)
		}
	}
	// Deleting an unknown node is fine (idempotent).
	o.MustAPI(200, "DELETE", "/node/ghost", nil)
}

// TestAPIV1 covers the /v1 API: nodes (never a password), keys, audit.
func TestAPIV1(t *testing.T) {
	t.Parallel()
	obmdtest.OnEngines(t, func(t *testing.T, dsn string) {
		o := obmdtest.Start(t, func(c *daemon.Config) { c.DB.DSN = dsn })
		const pass = "v1-secret-pw-77"
		before := time.Now().Add(-time.Second)
		o.MustAPI(201, "PUT", "/v1/nodes/v1", `{"type":"ipmi","info":{"addr":"192.0.2.9","user":"admin","pass":"`+pass+`","port":624}}`)
		got := o.MustAPI(200, "GET", "/v1/nodes/v1", nil)
		var node struct {
			Label, Type, Addr, User string
			Port                    int
			HasToken                *bool `json:"has_token"`
			Keys                    *int
		}
		if err := json.Unmarshal(got, &node); err != nil {
			t.Fatalf("GET /v1/nodes/v1: %v", err)
		}
		if node.Label != "v1" || node.Type != "ipmi" || node.Addr != "192.0.2.9" || node.User != "admin" || node.Port != 624 ||
			node.HasToken == nil || *node.HasToken {
			t.Errorf("GET /v1/nodes/v1: got %s", got)
		}
		// Update in place (200), strictly validated.
		o.MustAPI(200, "PUT", "/v1/nodes/v1", `{"type":"ipmi","info":{"addr":"192.0.2.10","user":"admin","pass":"`+pass+`"}}`)
		if status, body := o.API("PUT", "/v1/nodes/v1", `{"type":"ipmi","info":{"addr":"x","user":"a","pass":"b","color":"red"}}`); status != 400 {
			t.Errorf("unknown info field on /v1: got %d %s, want 400", status, body)
		}
		if status, body := o.API("PUT", "/v1/nodes/m1", `{"type":"mock","info":{"addr":"x","NumWrites":0}}`); status != 400 {
			t.Errorf("obmd's extra mock field on /v1: got %d %s, want 400", status, body)
		}
		for _, path := range []string{"/v1/nodes", "/v1/nodes/v1"} {
			if body := o.MustAPI(200, "GET", path, nil); strings.Contains(string(body), pass) || strings.Contains(string(body), "pass") {
				t.Errorf("GET %s shows a password: %s", path, body)
			}
		}

		// Keys: add (201), list, refuse a duplicate, delete by fingerprint
		// with "/" escaped, then 404.
		signer, _ := obmdtest.NewKey(t)
		fp := o.AddKey("v1", signer.PublicKey())
		if fp != gossh.FingerprintSHA256(signer.PublicKey()) {
			t.Errorf("fingerprint: got %s, want %s", fp, gossh.FingerprintSHA256(signer.PublicKey()))
		}
		line := strings.TrimSpace(string(gossh.MarshalAuthorizedKey(signer.PublicKey())))
		if status, _ := o.API("POST", "/v1/nodes/v1/keys", map[string]string{"key": line}); status != 409 {
			t.Errorf("duplicate key: got %d, want 409", status)
		}
		if status, body := o.API("POST", "/v1/nodes/v1/keys", map[string]string{"key": "ssh-ed25519 AAAAnotakey"}); status != 400 {
			t.Errorf("bad key: got %d %s, want 400", status, body)
		}
		if keys := o.MustAPI(200, "GET", "/v1/nodes/v1/keys", nil); !strings.Contains(string(keys), fp) {
			t.Errorf("GET keys: got %s, want %s", keys, fp)
		}
		keyPath := "/v1/nodes/v1/keys/" + url.PathEscape(fp)
		if body := o.MustAPI(200, "DELETE", keyPath, nil); string(body) != `{"removed":true}`+"\n" {
			t.Errorf("DELETE key: got %s, want removed", body)
		}
		if body := o.MustAPI(200, "DELETE", keyPath, nil); string(body) != `{"removed":false}`+"\n" { // idempotent
			t.Errorf("DELETE key again: got %s, want not removed", body)
		}

		// Audit: what was done to v1, filtered by node and time.
		o.Rotate("v1")
		var audit struct {
			Events []struct{ Node, Actor, Action, Result string }
		}
		q := "/v1/audit?node=v1&since=" + url.QueryEscape(before.UTC().Format(time.RFC3339))
		if err := json.Unmarshal(o.MustAPI(200, "GET", q, nil), &audit); err != nil {
			t.Fatalf("GET audit: %v", err)
		}
		actions := map[string]bool{}
		for _, e := range audit.Events {
			if e.Node != "v1" {
				t.Errorf("audit ?node=v1 returned an event of %q", e.Node)
			}
			actions[e.Action] = true
		}
		for _, want := range []string{"token.rotate", "key.add", "key.remove"} {
			if !actions[want] {
				t.Errorf("audit of v1: got actions %v, want %s among them", actions, want)
			}
		}
		if err := json.Unmarshal(o.MustAPI(200, "GET", "/v1/audit?node=v1&since="+fmt.Sprint(time.Now().Add(time.Hour).Unix()), nil), &audit); err != nil || len(audit.Events) != 0 {
			t.Errorf("audit since the future: got %+v (%v), want none", audit.Events, err)
		}
		if status, _ := o.API("GET", "/v1/audit?since=yesterday", nil); status != 400 {
			t.Errorf("audit with a bad since: got %d, want 400", status)
		}

		// Probes need no credential.
		for _, p := range []string{"/healthz", "/readyz"} {
			if status, body := o.Request("GET", p, nil, "", ""); status != 200 {
				t.Errorf("GET %s: got %d %s, want 200", p, status, body)
			}
		}
	})
}

// TestAPIRestart stops obmd and starts it again on the same state and
// database: nodes, tokens (hashed in the database), keys and the admin
// token survive, and the SSH host key is the same.
func TestAPIRestart(t *testing.T) {
	t.Parallel()
	obmdtest.OnEngines(t, func(t *testing.T, dsn string) {
		o := obmdtest.Start(t, func(c *daemon.Config) { c.DB.DSN = dsn })
		tok := o.AddSimNode("k1")
		o.AddNode("m1", "mock", apiMock)
		mockTok := o.Rotate("m1")
		signer, _ := obmdtest.NewKey(t)
		fp := o.AddKey("k1", signer.PublicKey())
		admin, hostKey := o.AdminToken(), o.HostKeyFingerprint()
		if err := o.Stop(); err != nil {
			t.Fatalf("stop: %v", err)
		}

		o2 := obmdtest.StartWith(t, o.Cfg)
		if o2.AdminToken() != admin || o2.HostKeyFingerprint() != hostKey {
			t.Errorf("after restart: got admin token/host key changed, want both kept")
		}
		if o2.NewAdminToken() != "" {
			t.Errorf("after restart: NewAdminToken is set, want the token shown on the first start only")
		}
		if code, got := o2.Request("GET", "/node/m1/power_status"+apiQ(mockTok), nil, "", ""); code != 200 || string(got) != `{"power_status":"Mock Status"}`+"\n" {
			t.Errorf("mock power_status with the old token: got %d %q", code, got)
		}
		if res, err := o2.ExecGo("k1", tok, "power-status"); err != nil || res.Code != 0 {
			t.Errorf("ssh with the old token: got %v, %v; want exit 0", res, err)
		}
		c, err := o2.Dial("k1", gossh.PublicKeys(signer))
		if err != nil {
			t.Fatalf("ssh with the registered key after restart: %v", err)
		}
		res, err := obmdtest.RunSession(c, "power-status")
		c.Close()
		if err != nil || res.Code != 0 {
			t.Errorf("ssh key power-status: got %v, %v", res, err)
		}
		if keys := o2.MustAPI(200, "GET", "/v1/nodes/k1/keys", nil); !strings.Contains(string(keys), fp) {
			t.Errorf("keys after restart: got %s, want %s", keys, fp)
		}
	})
}

// TestAPIConsoleStream checks GET console on a mock node: chunked, live,
// the counter one number per line with no banner.
func TestAPIConsoleStream(t *testing.T) {
	t.Parallel()
	o := obmdtest.Start(t)
	o.AddNode("c1", "mock", apiMock)
	tok := o.Rotate("c1")
	web := o.ConsoleHTTP(t, "c1", tok)
	if te := web.Resp.TransferEncoding; len(te) == 0 || te[0] != "chunked" {
		t.Fatalf("GET console: got transfer encoding %v, want chunked", te)
	}
	web.CountsFrom0(t, "console", 3)
}

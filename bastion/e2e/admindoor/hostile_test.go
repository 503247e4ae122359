package admindoor

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"strings"
	"testing"

	"github.com/obmd/obmd/bastion/e2e/obmdtest"

	"github.com/sirupsen/logrus"
	gossh "golang.org/x/crypto/ssh"

	"github.com/obmd/obmd/bastion/daemon"
	"github.com/obmd/obmd/db"
)

// snapshot is everything the admin API shows of nodes and keys, plus the
// database's access epoch (any access change moves it).
func snapshot(o *obmdtest.Daemon, t *testing.T) string {
	t.Helper()
	var b strings.Builder
	nodes := o.MustAPI(200, "GET", "/v1/nodes", nil)
	b.Write(nodes)
	var list struct{ Nodes []struct{ Label string } }
	if err := json.Unmarshal(nodes, &list); err != nil {
		t.Fatalf("nodes: %v", err)
	}
	for _, n := range list.Nodes {
		b.Write(o.MustAPI(200, "GET", "/v1/nodes/"+url.PathEscape(n.Label), nil))
		b.Write(o.MustAPI(200, "GET", "/v1/nodes/"+url.PathEscape(n.Label)+"/keys", nil))
	}
	quiet := logrus.New()
	quiet.SetOutput(io.Discard)
	dsn := o.Cfg.DB.DSN
	if dsn == "" {
		dsn = daemon.DefaultDB(o.Cfg.Daemon.StateDir)
	}
	st, err := db.Open(context.Background(), dsn, quiet)
	if err != nil {
		t.Fatalf("open the database: %v", err)
	}
	defer st.Close()
	epoch, err := st.LatestChange(context.Background())
	if err != nil {
		t.Fatalf("latest change: %v", err)
	}
	fmt.Fprintf(&b, "\nepoch %d", epoch)
	return b.String()
}

// TestHostileHTTP sends each hostile request to the admin API and checks
// the status, the error text, that no control character comes back raw,
// and that the database is unchanged.
func TestHostileHTTP(t *testing.T) {
	o := obmdtest.Start(t)
	token := o.AddSimNode("n1")
	signer, _ := obmdtest.NewKey(t)
	o.AddKey("n1", signer.PublicKey())
	keyLine := strings.TrimSpace(string(gossh.MarshalAuthorizedKey(signer.PublicKey())))
	long := strings.Repeat("x", 81)
	huge := `{"type":"sim","info":{"addr":"` + strings.Repeat("a", 70<<10) + `"}}`
	sim := map[string]any{"type": "sim", "info": map[string]string{"addr": "sim"}}
	for _, tc := range []struct {
		name, method, path string
		body               any
		status             int
		want               string // in the error text
	}{
		{"oversized obmd body", "PUT", "/node/n2", huge, 413, "larger than"},
		{"oversized v1 body", "PUT", "/v1/nodes/n2", huge, 413, "larger than"},
		{"oversized key body", "POST", "/v1/nodes/n1/keys", `{"key":"` + strings.Repeat("A", 70<<10) + `"}`, 413, "larger than"},
		{"truncated JSON", "PUT", "/node/n2", `{"type":"sim","info":{"addr":`, 400, "truncated"},
		{"not JSON", "PUT", "/v1/nodes/n2", "type=sim", 400, "not valid JSON"},
		{"JSON list", "PUT", "/node/n2", `[{"type":"sim"}]`, 400, "want an object"},
		{"trailing data", "PUT", "/node/n2", `{"type":"sim","info":{"addr":"a"}} {}`, 400, "after the JSON value"},
		{"wrong field type", "PUT", "/v1/nodes/n2", `{"type":"ipmi","info":{"addr":"a","user":"u","pass":"p","port":"623"}}`, 400, "port"},
		{"empty body", "PUT", "/node/n2", "", 400, "empty"},
		{"invalid UTF-8", "PUT", "/node/n2", "{\"type\":\"sim\",\"info\":{\"addr\":\"\xff\"}}", 400, "not valid UTF-8"},
		{"NUL in info", "PUT", "/node/n2", `{"type":"sim","info":{"addr":"a\u0000b"}}`, 400, "control characters"},
		{"control sequence in info", "PUT", "/node/n2", `{"type":"sim","info":{"addr":"\u001b[2J"}}`, 400, "control characters"},
		{"unknown type", "PUT", "/node/n2", `{"type":"\u001b]0;x\u0007","info":{"addr":"a"}}`, 400, "unknown type"},
		{"unknown field v1", "PUT", "/v1/nodes/n2", `{"type":"sim","info":{"addr":"a"},"owner":"x"}`, 400, `unknown field "owner"`},
		{"unknown info field v1", "PUT", "/v1/nodes/n2", `{"type":"sim","info":{"addr":"a","color":"red"}}`, 400, `unknown field "color"`},
		{"unknown field on key body", "POST", "/v1/nodes/n1/keys", `{"key":"` + keyLine + `","from":"*"}`, 400, `unknown field "from"`},
		{"label with slash", "PUT", "/node/a%2Fb", sim, 400, `contains "/"`},
		{"label with slash v1", "PUT", "/v1/nodes/a%2Fb", sim, 400, `contains "/"`},
		{"label dot-dot", "PUT", "/node/..", sim, 400, "not canonical"},
		{"label escaped dot-dot", "PUT", "/node/%2E%2E", sim, 400, "reserved"},
		{"label NUL", "PUT", "/node/a%00b", sim, 400, "control character"},
		{"label escape sequence", "PUT", "/node/%1B%5B31mred", sim, 400, "control character"},
		{"label bidi override", "PUT", "/v1/nodes/a%E2%80%AEb", sim, 400, "non-printable"},
		{"label over 80 bytes", "PUT", "/node/" + long, sim, 400, "81 bytes"},
		{"label invalid UTF-8", "PUT", "/node/%FF", sim, 400, "UTF-8"},
		{"rotate bad label", "POST", "/node/%1B%5B2J/token", nil, 400, "control character"},
		{"delete bad label", "DELETE", "/v1/nodes/" + long, nil, 400, "81 bytes"},
		{"key on bad label", "POST", "/v1/nodes/a%00/keys", map[string]string{"key": keyLine}, 400, "control character"},
		{"huge key line", "POST", "/v1/nodes/n1/keys", map[string]string{"key": "ssh-ed25519 " + strings.Repeat("A", 20<<10)}, 400, "longer than"},
		{"key with options", "POST", "/v1/nodes/n1/keys", map[string]string{"key": `command="/bin/sh" ` + keyLine}, 400, "options"},
		{"two keys", "POST", "/v1/nodes/n1/keys", map[string]string{"key": keyLine + "\n" + keyLine}, 400, "exactly one"},
		{"garbage key", "POST", "/v1/nodes/n1/keys", map[string]string{"key": "\x1b[31mnot a key"}, 400, "not an authorized key"},
		{"duplicate key", "POST", "/v1/nodes/n1/keys", map[string]string{"key": keyLine}, 409, "already registered"},
		{"bad fingerprint", "DELETE", "/v1/nodes/n1/keys/SHA256:%1B%5B2J", nil, 400, "not valid"},
		{"key of an unknown node", "DELETE", "/v1/nodes/ghost/keys/SHA256:nope", nil, 404, "not found"},
		{"rotate unknown node", "POST", "/node/ghost/token", nil, 404, "not found"},
		{"different re-PUT", "PUT", "/node/n1", map[string]any{"type": "mock", "info": map[string]string{"addr": "x"}}, 409, "already exists"},
		{"audit bad limit", "GET", "/v1/audit?limit=%1B", nil, 400, "limit"},
		{"sessions bad node", "GET", "/v1/sessions?node=%00", nil, 400, "control character"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := snapshot(o, t)
			status, body := o.API(tc.method, tc.path, tc.body)
			if status != tc.status {
				t.Errorf("got %d %s, want %d", status, obmdtest.Tail(string(body), 300), tc.status)
			}
			var eb struct{ Error string }
			if err := json.Unmarshal(body, &eb); err != nil || eb.Error == "" {
				t.Errorf("body %q: want a JSON {\"error\": ...}", obmdtest.Tail(string(body), 300))
			}
			if !strings.Contains(eb.Error, tc.want) {
				t.Errorf("error %q: want it to say %q", eb.Error, tc.want)
			}
			if len(eb.Error) > 600 {
				t.Errorf("error is %d bytes long: it echoes too much", len(eb.Error))
			}
			if c := obmdtest.RawControl(eb.Error); c != "" {
				t.Errorf("error %q holds a raw control character %s", eb.Error, c)
			}
			if after := snapshot(o, t); after != before {
				t.Errorf("the database changed:\nbefore %s\nafter  %s", before, after)
			}
		})
	}
	// Nothing moved the access epoch: the token still works.
	if res, err := o.ExecGo("n1", token, "power-status"); err != nil || res.Code != 0 {
		t.Errorf("the token stopped working: %v (%v)", res, err)
	}
	// Nothing logged a raw control character either.
	obmdtest.NoRawInLogs(t, o)
}

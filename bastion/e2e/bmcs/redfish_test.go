package bmcs

import (
	"encoding/json"
	"encoding/pem"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/obmd/obmd/bastion/e2e/obmdtest"

	"github.com/obmd/obmd/bastion/daemon"
	"github.com/obmd/obmd/sol/redfish/redfishtest"
)

// redfishCA writes the certificate of b's TLS front to a PEM file, for
// the redfish section's ca_file.
func redfishCA(t *testing.T, b *redfishtest.BMC) string {
	p := filepath.Join(t.TempDir(), "bmc-ca.pem")
	if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: b.Cert.Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestRedfishRegistration: a redfish node registers through both routes
// like any type (re-PUT of the same BMC is idempotent, another is 409),
// every field the driver would refuse is refused with 400 naming it, and
// the API never shows its password.
func TestRedfishRegistration(t *testing.T) {
	t.Parallel()
	o := obmdtest.Start(t)
	const pass = "rf-secret-0x7e"
	info := map[string]any{"addr": "https://bmc-7.example:8443", "user": "obmd", "pass": pass,
		"system": "System.Embedded.1", "sol": map[string]any{"cipher": 17}}
	node := map[string]any{"type": "redfish", "info": info}
	o.MustAPI(201, "PUT", "/v1/nodes/rf1", node)
	o.MustAPI(200, "PUT", "/v1/nodes/rf1", node)
	// A second node on that BMC is refused, naming the first, unless said
	// to be intended.
	if code, body := o.API("PUT", "/node/rf2", node); code != 409 || !strings.Contains(string(body), `node \"rf1\" already uses this BMC (Redfish https://bmc-7.example:8443 system System.Embedded.1)`) {
		t.Errorf("a second node on rf1's BMC: got %d %s, want 409 naming rf1", code, body)
	}
	o.MustAPI(200, "PUT", "/node/rf2?allow_shared_bmc=1", node)
	// The documented defaults fold: the same BMC.
	same := map[string]any{"addr": "https://BMC-7.example:8443/", "user": "obmd", "pass": pass,
		"system": "/redfish/v1/Systems/System.Embedded.1", "sol": map[string]any{"cipher": 17, "port": 623}}
	o.MustAPI(200, "PUT", "/node/rf2", map[string]any{"type": "redfish", "info": same})
	other := map[string]any{"addr": "https://bmc-8.example", "user": "obmd", "pass": pass}
	o.MustAPI(409, "PUT", "/node/rf2", map[string]any{"type": "redfish", "info": other})

	for _, tt := range []struct {
		name  string
		info  map[string]any
		field string
	}{
		{"plain http", map[string]any{"addr": "http://bmc", "user": "u", "pass": pass}, "info.addr"},
		{"no password", map[string]any{"addr": "https://bmc", "user": "u"}, "info.pass"},
		{"password over IPMI's 20 bytes with sol", map[string]any{"addr": "https://bmc", "user": "u",
			"pass": pass + "-too-long-for-ipmi", "sol": map[string]any{}}, "info.pass"},
		{"bad system", map[string]any{"addr": "https://bmc", "user": "u", "pass": pass, "system": "a/b"}, "info.system"},
		{"cipher the IPMI driver lacks", map[string]any{"addr": "https://bmc", "user": "u", "pass": pass,
			"sol": map[string]any{"cipher": 4}}, "info.sol.cipher"},
		{"unknown field", map[string]any{"addr": "https://bmc", "user": "u", "pass": pass, "port": 623}, "unknown field"},
	} {
		status, body := o.API("PUT", "/v1/nodes/bad", map[string]any{"type": "redfish", "info": tt.info})
		if status != 400 || !strings.Contains(string(body), tt.field) || strings.Contains(string(body), pass) {
			t.Errorf("%s: got %d %s, want 400 naming %s, never the password", tt.name, status, body, tt.field)
		}
	}
	if status, _ := o.API("GET", "/v1/nodes/bad", nil); status != 404 {
		t.Errorf("a refused node was stored: GET got %d, want 404", status)
	}

	for _, path := range []string{"/v1/nodes", "/v1/nodes/rf1"} {
		body := o.MustAPI(200, "GET", path, nil)
		if strings.Contains(string(body), pass) || strings.Contains(string(body), `"pass"`) {
			t.Errorf("GET %s shows the password: %s", path, body)
		}
	}
	var v struct {
		Type, Addr, User, System string
		SOL                      struct{ Cipher *int } `json:"sol"`
	}
	if err := json.Unmarshal(o.MustAPI(200, "GET", "/v1/nodes/rf1", nil), &v); err != nil || v.Type != "redfish" ||
		v.Addr != "https://bmc-7.example:8443" || v.User != "obmd" || v.System != "System.Embedded.1" || v.SOL.Cipher == nil || *v.SOL.Cipher != 17 {
		t.Errorf("GET /v1/nodes/rf1: got %+v (%v)", v, err)
	}
}

// TestRedfishPower: power and boot-device commands over SSH reach
// metal-operator's mock Redfish BMC, whose certificate the redfish
// section's CA file vouches for; its console, without "sol" details, says
// plainly that the node has none and ends.
func TestRedfishPower(t *testing.T) {
	t.Parallel()
	b := redfishtest.Start(t, nil)
	o := obmdtest.Start(t, func(c *daemon.Config) {
		c.Redfish.CAFile, c.Redfish.PollInterval = redfishCA(t, b), 20*time.Millisecond
	})
	o.MustAPI(201, "PUT", "/v1/nodes/rf1", map[string]any{"type": "redfish",
		"info": map[string]any{"addr": b.URL, "user": redfishtest.User, "pass": redfishtest.Pass}})
	tok := o.Rotate("rf1")
	for _, step := range []struct{ cmd, out, power string }{
		{"power-status", "rf1: power on", "On"},
		{"power-off", "rf1: powered off", "Off"},
		{"power-status", "rf1: power off", "Off"},
		{"power-on", "rf1: powered on", "On"},
		{"bootdev pxe", "rf1: next boot from pxe", "On"},
	} {
		res, err := o.ExecGo("rf1", tok, step.cmd)
		if err != nil || res.Code != 0 || strings.TrimSpace(res.Stdout) != step.out {
			t.Fatalf("%s: got %v (%v), want exit 0 and %q", step.cmd, res, err, step.out)
		}
		if got := b.Settled(t)["PowerState"]; got != step.power {
			t.Errorf("after %s: the BMC's system is %v, want %s", step.cmd, got, step.power)
		}
	}
	if sys := b.System(t); !strings.Contains(mustJSON(t, sys["Boot"]), `"BootSourceOverrideTarget":"Pxe"`) {
		t.Errorf("boot override: got %v, want Pxe", sys["Boot"])
	}
	if live, created, _ := b.Counts(); live != 0 || created == 0 {
		t.Errorf("Redfish sessions: %d of %d left open, want every one logged out", live, created)
	}

	res, err := o.ExecGo("rf1", tok, "console")
	if err != nil || res.Code != 1 || !strings.Contains(res.Stderr, "[obmd: this node has no serial console]") {
		t.Errorf("console: got %v (%v), want exit 1 saying the node has no serial console", res, err)
	}
	if strings.Count(o.Logs.String(), `"state":"open_failed"`) != 1 {
		t.Errorf("console opens: want exactly one attempt, not retries; log:\n%s", obmdtest.Tail(o.Logs.String(), 4000))
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

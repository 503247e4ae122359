package bmcs

// Issue 15's Redfish node end to end: registered through HIL's route,
// power and boot device through the real OpenSSH client and HIL's HTTP
// routes (checked on metal-operator's mock BMC's own state), its console
// over IPMI SOL on a goipmi-server that shares the Redfish account, and
// doctor for each failure a Redfish node can name.

import (
	"encoding/json"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/obmd/obmd/bastion/e2e/obmdtest"

	"github.com/obmd/obmd/bastion/daemon"
	"github.com/obmd/obmd/sol"
	"github.com/obmd/obmd/sol/ipmicheck"
	"github.com/obmd/obmd/sol/redfish/redfishtest"
	"github.com/obmd/obmd/sol/soltest/goipmisrv"
	"github.com/obmd/obmd/sol/soltest/ipmisim"
)

// redfishSteps is a healthy Redfish node's diagnosis without a console;
// with one, the console's IPMI steps follow.
var redfishSteps = []string{sol.CheckAddress, sol.CheckServiceRoot, sol.CheckAuth, sol.CheckSystem, sol.CheckResetActions}

// consoleSteps are the IPMI steps of a Redfish node's console.
func consoleSteps(n int) []string {
	var s []string
	for _, c := range ipmiSteps[:n] {
		s = append(s, "console "+c)
	}
	return s
}

// redfishE2E is what TestRedfishDoors's subtests share.
type redfishE2E struct {
	b    *redfishtest.BMC
	gis  *goipmisrv.Server // the node's SOL, with the Redfish account's password
	o    *obmdtest.Daemon  // trusts b's certificate
	safe sol.Info          // what a tenant must never see
}

// TestRedfishDoors: a Redfish node through OpenSSH and the HTTP routes:
// power, boot device, console and doctor.
func TestRedfishDoors(t *testing.T) {
	t.Parallel()
	ipmisim.Require(t, "ssh", "sshpass", "ipmitool")
	b := redfishtest.Start(t, nil)
	e := &redfishE2E{b: b, gis: goipmisrv.Start(t, goipmisrv.Options{Pass: redfishtest.Pass}),
		o: obmdtest.Start(t, func(c *daemon.Config) {
			c.Redfish.CAFile, c.Redfish.PollInterval = redfishCA(t, b), 20*time.Millisecond
		}),
		safe: sol.Info{Addr: "127.0.0.1", Port: frontPort(t, b), Pass: redfishtest.Pass}}
	t.Run("power", e.power)
	t.Run("console", e.console)
	t.Run("doctor", e.doctor)
}

func frontPort(t *testing.T, b *redfishtest.BMC) int {
	u, err := url.Parse(b.URL)
	if err != nil {
		t.Fatal(err)
	}
	var p int
	if err := json.Unmarshal([]byte(u.Port()), &p); err != nil {
		t.Fatal(err)
	}
	return p
}

// addRedfish registers label through HIL's route with info and returns
// its token. The tests put several nodes on one mock BMC, on purpose.
func addRedfish(o *obmdtest.Daemon, label string, info map[string]any) string {
	o.T.Helper()
	o.MustAPI(200, "PUT", "/node/"+url.PathEscape(label)+"?allow_shared_bmc=1", map[string]any{"type": "redfish", "info": info})
	return o.Rotate(label)
}

// redfishInfo is the mock BMC's node info, with the console on e.gis.
func (e *redfishE2E) redfishInfo() map[string]any {
	return map[string]any{"addr": e.b.URL, "user": redfishtest.User, "pass": redfishtest.Pass,
		"sol": map[string]any{"port": e.gis.Port}}
}

// power: every power command and the boot device over OpenSSH, then HIL's
// routes; after each, the mock's own system says what was asked, and the
// resets it received are the ones each command maps to.
func (e *redfishE2E) power(t *testing.T) {
	const label = "rf-power"
	tok := addRedfish(e.o, label, e.redfishInfo())
	for _, step := range []struct {
		cmd   []string
		out   string
		power string
	}{
		{[]string{"power-status"}, label + ": power on", "On"},
		{[]string{"power-off"}, label + ": powered off", "Off"},
		{[]string{"power-status"}, label + ": power off", "Off"},
		{[]string{"power-on"}, label + ": powered on", "On"},
		{[]string{"power-cycle"}, label + ": power cycled", "On"},
		{[]string{"power-cycle", "--force"}, label + ": reset", "On"},
		{[]string{"power-reset"}, label + ": reset", "On"},
		{[]string{"power-off", "--soft"}, label + ": soft power-off requested", "Off"},
		{[]string{"power-on"}, label + ": powered on", "On"},
		{[]string{"bootdev", "disk", "--persistent"}, label + ": next boot from disk (persistent)", "On"},
	} {
		res := e.o.OpenSSH(label, tok, nil, step.cmd...)
		if res.Code != 0 || strings.TrimSpace(res.Stdout) != step.out {
			t.Errorf("%q over OpenSSH: got %v, want exit 0 and %q", step.cmd, res, step.out)
		}
		if got := e.b.Settled(t)["PowerState"]; got != step.power {
			t.Errorf("after %q: the mock's system is %v, want %s", step.cmd, got, step.power)
		}
		tenantSafe(t, strings.Join(step.cmd, " "), res.Stdout+res.Stderr, e.safe)
	}
	boot := mustJSON(t, e.b.System(t)["Boot"])
	if !strings.Contains(boot, `"BootSourceOverrideTarget":"Hdd"`) || !strings.Contains(boot, `"BootSourceOverrideEnabled":"Continuous"`) {
		t.Errorf("boot override after bootdev disk --persistent: got %s, want Hdd, Continuous", boot)
	}
	res := e.o.OpenSSH(label, tok, nil, "power-status", "--json")
	if res.Code != 0 || strings.TrimSpace(res.Stdout) != `{"node":"`+label+`","command":"power-status","ok":true,"power":"on"}` {
		t.Errorf("power-status --json over OpenSSH: got %v", res)
	}

	q := "?token=" + url.QueryEscape(tok)
	for _, step := range []struct {
		method, route, body string
		want                string // the body, trimmed
		power               string
	}{
		{"POST", "power_off", "", "", "Off"},
		{"GET", "power_status", "", `{"power_status":"off"}`, "Off"},
		{"POST", "power_on", "", "", "On"},
		{"POST", "power_cycle", `{"force":true}`, "", "On"},
		{"PUT", "boot_device", `{"bootdev":"pxe"}`, "", "On"},
		{"GET", "power_status", "", `{"power_status":"on"}`, "On"},
	} {
		var body any
		if step.body != "" {
			body = json.RawMessage(step.body)
		}
		code, got := e.o.Request(step.method, "/node/"+label+"/"+step.route+q, body, "", "")
		if code != 200 || strings.TrimSpace(string(got)) != step.want {
			t.Errorf("%s %s: got %d %s, want 200 %s", step.method, step.route, code, got, step.want)
		}
		if p := e.b.Settled(t)["PowerState"]; p != step.power {
			t.Errorf("after %s: the mock's system is %v, want %s", step.route, p, step.power)
		}
	}
	if boot := mustJSON(t, e.b.System(t)["Boot"]); !strings.Contains(boot, `"BootSourceOverrideTarget":"Pxe"`) {
		t.Errorf("boot override after PUT boot_device pxe: got %s", boot)
	}
	want := []string{"ForceOff", "On", "ForceOff", "On", "ForceRestart", "ForceRestart", "GracefulShutdown", "On",
		"ForceOff", "On", "ForceRestart"}
	if resets, _ := e.b.Recorded(); !slices.Equal(resets, want) {
		t.Errorf("resets the mock received: got %q, want %q", resets, want)
	}
	if live, _, _ := e.b.Counts(); live != 0 {
		t.Errorf("Redfish sessions left open: %d, want every one logged out", live)
	}
	for _, a := range []string{"power.off ok", "power.on ok", "power.cycle ok", "power.reset ok"} {
		if acts := e.o.ConsoleAudit(label); !slices.Contains(acts, a) {
			t.Errorf("audit %q, want %q", acts, a)
		}
	}
}

// console: the node's console is IPMI SOL on goipmi-server, with the
// Redfish account and a negotiated cipher suite (17), which GET
// /v1/nodes/{label} then shows; through OpenSSH and HIL's HTTP console.
// SOL starts off on the BMC: the console switches it on and obmd audits
// sol.enable on the Redfish node.
func (e *redfishE2E) console(t *testing.T) {
	const label = "rf-console"
	tok := addRedfish(e.o, label, e.redfishInfo())
	setSOLOn(t, e.gis, false)
	p := obmdtest.SSHPTY(t, e.o.SSHAddr(), label, tok, nil)
	obmdtest.PrintUntilSeen(t, e.gis.WriteSerial, "rf", func(mk string) bool { return strings.Contains(p.Out.String(), mk) })
	p.Detach()
	if !solOn(t, e.gis) || !slices.Contains(e.o.ConsoleAudit(label), "sol.enable ok") {
		t.Errorf("SOL after the console opened: on %v, audit %q; want on and sol.enable", solOn(t, e.gis), e.o.ConsoleAudit(label))
	}
	payloadFree(t, e.gis)
	h := e.o.ConsoleHTTP(t, label, tok)
	obmdtest.PrintUntilSeen(t, e.gis.WriteSerial, "http", func(mk string) bool { return strings.Contains(h.Out.String(), mk) })
	h.Stop()
	pinned, inUse := nodeCipher(e.o, t, label)
	if pinned != nil || inUse == nil || *inUse != 17 {
		t.Errorf("GET /v1/nodes/%s: got cipher %v, cipher_in_use %v; want none and 17", label, pinned, inUse)
	}
	payloadFree(t, e.gis)
}

// doctor: a healthy node passes every Redfish step and its console's; then
// each failure a Redfish node names stops the run at its step, says what
// to do, and never shows a tenant the BMC's address or password: a system
// the BMC lacks, a wrong password, a certificate obmd does not trust, a
// console port nothing answers on. No doctor run resets the system.
func (e *redfishE2E) doctor(t *testing.T) {
	resets, _ := e.b.Recorded()
	full := append(slices.Clone(redfishSteps), consoleSteps(4)...)
	t.Run("healthy", func(t *testing.T) {
		const label = "rf-dr"
		rep := checkDoctor(e.o, t, label, addRedfish(e.o, label, e.redfishInfo()), e.safe,
			doctorWant{steps: full, ok: true, tenant: "SOL is enabled; its payload is free"})
		if got := rep.Checks[3].Tenant; got != "system "+redfishtest.SystemID+", power on" && got != "system "+redfishtest.SystemID+", power On" {
			t.Errorf("system step: got %q, want the system and its power", got)
		}
		if a := rep.Checks[2].Result; !strings.Contains(a, e.b.URL) {
			t.Errorf("authentication for the admin: got %q, want the BMC's URL", a)
		}
	})
	t.Run("system missing", func(t *testing.T) {
		const label = "rf-dr-nosys"
		info := e.redfishInfo()
		info["system"] = "NoSuchSystem"
		checkDoctor(e.o, t, label, addRedfish(e.o, label, info), e.safe, doctorWant{steps: redfishSteps[:4],
			tenant: "system not found on the BMC", hint: "check info.system against the BMC's systems (/redfish/v1/Systems)",
			tenant2: "ask obmd's operator to check the Redfish system registered for this node"})
	})
	t.Run("wrong password", func(t *testing.T) {
		const label = "rf-dr-pw"
		info := e.redfishInfo()
		info["pass"] = "not-the-password"
		checkDoctor(e.o, t, label, addRedfish(e.o, label, info), e.safe, doctorWant{steps: redfishSteps[:3],
			tenant: "BMC refused the credentials", hint: "check the user and password registered for the node (info.user, info.pass) " +
				"and that the account may log in to Redfish", tenant2: "ask obmd's operator to check the BMC user and password registered for this node"})
	})
	t.Run("certificate not trusted", func(t *testing.T) {
		// Without the redfish section's ca_file, httptest's certificate
		// is not one the system roots vouch for.
		o := obmdtest.Start(t)
		const label = "rf-dr-cert"
		tok := addRedfish(o, label, e.redfishInfo())
		checkDoctor(o, t, label, tok, e.safe, doctorWant{steps: redfishSteps[:2],
			tenant: "BMC TLS certificate not trusted", hint: `give obmd the CA that signed the BMC's certificate, or register the node with "insecure": true`,
			tenant2: "ask obmd's operator to check the BMC's certificate for this node"})
		// A power command says so too, on both doors.
		want := "power status of " + label + ": the BMC's TLS certificate is not trusted"
		if res := o.OpenSSH(label, tok, nil, "power-status"); res.Code != 1 || res.Stderr != "obmd: "+want+"\n" {
			t.Errorf("power-status over OpenSSH: got %v, want exit 1 and %q", res, want)
		}
		code, body := o.Request("GET", "/node/"+label+"/power_status?token="+url.QueryEscape(tok), nil, "", "")
		if code != 500 || !strings.Contains(string(body), want) || strings.Contains(string(body), "127.0.0.1") {
			t.Errorf("GET power_status: got %d %s, want 500 saying %q", code, body, want)
		}
	})
	t.Run("console unreachable", func(t *testing.T) {
		const label = "rf-dr-nosol"
		info := e.redfishInfo()
		closed := ipmisim.Closed(t)
		info["sol"] = map[string]any{"port": closed.Port}
		checkDoctor(e.o, t, label, addRedfish(e.o, label, info), e.safe, doctorWant{steps: append(slices.Clone(redfishSteps), consoleSteps(1)...),
			tenant: "the BMC is unreachable", hint: ipmicheck.AddressHint(closed.Port), tenant2: ipmicheck.TenantHintAddress})
	})
	if after, _ := e.b.Recorded(); !slices.Equal(after, resets) {
		t.Errorf("resets during the doctor runs: got %q, want none", after[len(resets):])
	}
	if live, _, _ := e.b.Counts(); live != 0 {
		t.Errorf("Redfish sessions left open after doctor: %d", live)
	}
}

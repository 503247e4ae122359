package bmcs

// doctor end to end (issue 15): `ssh node doctor` through the real
// OpenSSH client (text and --json, the tenant's words) and GET
// /v1/nodes/{label}/doctor (the administrator's detail), for each failure
// doctor names, on both IPMI BMCs and both drivers; a doctor run changes
// nothing on the BMC.

import (
	"encoding/json"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"testing"

	"github.com/obmd/obmd/bastion/e2e/obmdtest"

	"github.com/obmd/obmd/sol"
	"github.com/obmd/obmd/sol/ipmicheck"
	"github.com/obmd/obmd/sol/soltest"
	"github.com/obmd/obmd/sol/soltest/ipmisim"
)

// doctorReport is GET /v1/nodes/{label}/doctor.
type doctorReport struct {
	Node   string `json:"node"`
	OK     bool   `json:"ok"`
	Failed string `json:"failed"`
	Checks []struct {
		Name, Result, Tenant, Hint string
		OK                         bool
	} `json:"checks"`
}

// tenantDoctor is `doctor --json`.
type tenantDoctor struct {
	OK     bool   `json:"ok"`
	Error  string `json:"error"`
	Checks []struct {
		Name, Result, Hint string
		OK                 bool
	} `json:"checks"`
}

// doctorWant is what a doctor run must show: the steps run, whether all
// passed, and what the last step's tenant text and hint say.
type doctorWant struct {
	steps   []string
	ok      bool
	tenant  string // in the last step's tenant text
	hint    string // the last step's hint, on failure (the administrator's)
	tenant2 string // the last step's hint for tenants, if not hint
	detail  string // in the last step's administrator's detail, if set
}

// ipmiSteps is a healthy IPMI node's diagnosis.
var ipmiSteps = []string{sol.CheckAddress, sol.CheckAuth, sol.CheckPower, sol.CheckSOL}

// checkDoctor runs doctor on label through OpenSSH (text, then --json) and
// the admin API, and checks each against want; tenants' outputs must not
// name the BMC of info. It returns the admin report.
func checkDoctor(o *obmdtest.Daemon, t *testing.T, label, tok string, info sol.Info, want doctorWant) doctorReport {
	t.Helper()
	code := 0
	if !want.ok {
		code = 1
	}
	last := want.steps[len(want.steps)-1]

	res := o.OpenSSH(label, tok, nil, "doctor")
	lines := strings.Split(strings.TrimSuffix(res.Stdout, "\n"), "\n")
	if res.Code != code || len(lines) != len(want.steps)+1 {
		t.Fatalf("doctor over OpenSSH: got %v, want exit %d and %d steps", res, code, len(want.steps))
	}
	for i, step := range want.steps {
		mark := "ok"
		if i == len(want.steps)-1 && !want.ok {
			mark = "FAIL"
		}
		if f := strings.Fields(lines[i]); len(f) < 2 || f[0] != mark || !strings.HasPrefix(strings.Join(f[1:], " "), step+" ") {
			t.Errorf("doctor line %d: got %q, want %s %s ...", i, lines[i], mark, step)
		}
	}
	lastLine := lines[len(want.steps)-1]
	tenantHint := want.hint
	if want.tenant2 != "" {
		tenantHint = want.tenant2
	}
	if !strings.Contains(lastLine, want.tenant) || !want.ok && !strings.HasSuffix(lastLine, "; what to do: "+tenantHint) {
		t.Errorf("doctor's last step: got %q, want it to say %q (and what to do: %q)", lastLine, want.tenant, tenantHint)
	}
	// A tenant is never told to change what only the operator can.
	if _, todo, _ := strings.Cut(res.Stdout, "what to do: "); strings.Contains(todo, "info.") || strings.Contains(todo, "sol_enable") {
		t.Errorf("doctor over OpenSSH: got %q, want no registration field or setting to change", res.Stdout)
	}
	summary := fmt.Sprintf("%s: doctor: all %d checks passed", label, len(want.steps))
	if !want.ok {
		summary = fmt.Sprintf("%s: doctor: %s failed (doctor stops at the first failure)", label, last)
		if !strings.HasPrefix(res.Stderr, "obmd: doctor "+label+": "+last+": ") {
			t.Errorf("doctor's stderr: got %q, want the failed step", res.Stderr)
		}
	}
	if lines[len(lines)-1] != summary {
		t.Errorf("doctor's summary: got %q, want %q", lines[len(lines)-1], summary)
	}
	tenantSafe(t, "doctor", res.Stdout+res.Stderr, info)

	res = o.OpenSSH(label, tok, nil, "doctor", "--json")
	var j tenantDoctor
	if err := json.Unmarshal([]byte(res.Stdout), &j); err != nil || res.Code != code || j.OK != want.ok || len(j.Checks) != len(want.steps) ||
		j.Checks[len(j.Checks)-1].Name != last || !strings.Contains(j.Checks[len(j.Checks)-1].Result, want.tenant) {
		t.Errorf("doctor --json over OpenSSH: got %v (%v), want exit %d, ok %v, %d steps", res, err, code, want.ok, len(want.steps))
	}
	tenantSafe(t, "doctor --json", res.Stdout+res.Stderr, info)

	rep := fetchDoctorReport(o, t, label)
	var names []string
	for _, c := range rep.Checks {
		names = append(names, c.Name)
	}
	failed := ""
	if !want.ok {
		failed = last
	}
	if rep.OK != want.ok || rep.Failed != failed || !slices.Equal(names, want.steps) {
		t.Fatalf("GET doctor: got %+v, want ok %v, failed %q, steps %q", rep, want.ok, failed, want.steps)
	}
	c := rep.Checks[len(rep.Checks)-1]
	if !strings.Contains(c.Tenant, want.tenant) || c.Hint != want.hint || !strings.Contains(c.Result, want.detail) {
		t.Errorf("GET doctor, step %s: got %+v, want tenant %q, hint %q, detail with %q", c.Name, c, want.tenant, want.hint, want.detail)
	}
	// One line a step: no library's line breaks, raw or escaped.
	for _, c := range rep.Checks {
		if strings.ContainsAny(c.Result, "\r\n") || strings.Contains(c.Result, `\n`) {
			t.Errorf("GET doctor, step %s: result %q is more than one line", c.Name, c.Result)
		}
	}
	return rep
}

// doctorReport runs GET /v1/nodes/{label}/doctor.
func fetchDoctorReport(o *obmdtest.Daemon, t *testing.T, label string) doctorReport {
	t.Helper()
	var rep doctorReport
	if err := json.Unmarshal(o.Admin.On(t).MustAPI(200, "GET", "/v1/nodes/"+url.PathEscape(label)+"/doctor", nil), &rep); err != nil {
		t.Fatal(err)
	}
	return rep
}

// doctor: each failure doctor names, on both BMCs and both drivers, and
// that doctor runs leave the BMC as they found it: no chassis action, SOL
// left off, another's console left running.
func (e *bmcE2E) doctor(t *testing.T) {
	for _, m := range e.both {
		t.Run(e.short[m.Kind()], func(t *testing.T) {
			if err := m.Reset(); err != nil {
				t.Fatal(err)
			}
			for _, typ := range obmdtest.IPMIDrivers {
				t.Run(typ, func(t *testing.T) { e.doctorOn(t, m, typ) })
			}
			if got := m.Actions(); len(got) != 0 {
				t.Errorf("chassis actions during the doctor runs: got %q, want none", got)
			}
		})
	}
	for _, typ := range obmdtest.IPMIDrivers {
		t.Run("cipher refused "+typ, func(t *testing.T) {
			label := "dr-pin3-" + typ
			info := soltest.Pinned(e.only17.Info(), 3)
			checkDoctor(e.o, t, label, register(e.o, label, typ, info), info, doctorWant{steps: ipmiSteps[:2],
				tenant: "the BMC refused IPMI cipher suite 3", hint: ipmicheck.HintCipher, tenant2: ipmicheck.TenantHintCipher,
				detail: "suite 3: the BMC refused the cipher suite ("})
		})
		t.Run("unreachable "+typ, func(t *testing.T) {
			label := "dr-closed-" + typ
			info := ipmisim.Closed(t)
			checkDoctor(e.o, t, label, register(e.o, label, typ, info), info, doctorWant{steps: ipmiSteps[:1],
				tenant: "the BMC is unreachable", hint: ipmicheck.AddressHint(info.Port), tenant2: ipmicheck.TenantHintAddress, detail: info.Addr})
		})
	}
	if got := e.only17.Actions(); len(got) != 0 {
		t.Errorf("chassis actions on goipmi-server during the doctor runs: got %q, want none", got)
	}
	if code, body := e.o.API("GET", "/v1/nodes/no-such-node/doctor", nil); code != 404 || !strings.Contains(string(body), "not found") {
		t.Errorf("doctor of an unknown node: got %d %s, want 404", code, body)
	}
	if code, _ := e.o.Request("GET", "/v1/nodes/dr-sim-ipmi/doctor", nil, "admin", "wrong-admin-token"); code != 404 {
		t.Errorf("doctor with a wrong admin credential: got %d, want 404", code)
	}
	for _, c := range []struct{ label, want string }{{"dr-pin3-ipmi", "doctor error"}, {"dr-sim-ipmi", "doctor ok"}, {"dr-sim-ipmi", "doctor error"}} {
		if acts := e.o.ConsoleAudit(c.label); !slices.Contains(acts, c.want) {
			t.Errorf("%s: audit %q, want %q", c.label, acts, c.want)
		}
	}
}

// doctorOn runs the IPMI cases on m with driver typ.
func (e *bmcE2E) doctorOn(t *testing.T, m soltest.Machine, typ string) {
	info := soltest.Unpinned(m.Info())
	label := fmt.Sprintf("dr-%s-%s", e.short[m.Kind()], typ)
	tok, ntok := register(e.o, label, typ, info), register(e.never, label, typ, info)
	// The first session negotiates (ipmi_sim refuses 17); later ones start
	// with the suite remembered.
	auth, refused := "logged in with cipher suite 17, privilege administrator", ""
	if m.Kind() == soltest.IPMISim {
		auth, refused = "logged in with cipher suite 3, privilege administrator", " (suite 17 refused)"
	}
	t.Run("healthy", func(t *testing.T) {
		if rep := fetchDoctorReport(e.o, t, label); !rep.OK || len(rep.Checks) != 4 || rep.Checks[1].Tenant != auth+refused {
			t.Fatalf("first doctor run: got %+v, want every step passed, the authentication saying %q", rep, auth+refused)
		}
		rep := checkDoctor(e.o, t, label, tok, info, doctorWant{steps: ipmiSteps, ok: true, tenant: "SOL is enabled; its payload is free"})
		if got := rep.Checks[1].Tenant; got != auth {
			t.Errorf("authentication with the suite remembered: got %q, want %q", got, auth)
		}
		if a := rep.Checks[1].Result; !strings.Contains(a, info.Addr) || !strings.Contains(a, info.User) {
			t.Errorf("authentication for the admin: got %q, want the BMC's address and user", a)
		}
		if got := rep.Checks[2].Tenant; got != "power is on" {
			t.Errorf("power: got %q, want on", got)
		}
		if _, inUse := nodeCipher(e.o, t, label); inUse == nil {
			t.Error("cipher_in_use after a doctor run: none, want the negotiated suite")
		}
	})
	t.Run("wrong password", func(t *testing.T) {
		bad := soltest.Unpinned(m.WrongPassword())
		rep := checkDoctor(e.o, t, label+"-pw", register(e.o, label+"-pw", typ, bad), bad, doctorWant{steps: ipmiSteps[:2],
			tenant: sol.FaultCredentials.String(), hint: ipmicheck.HintCredentials, tenant2: ipmicheck.TenantHintCredentials,
			detail: "the BMC refused obmd's credentials (as " + bad.User + " at "})
		// Each suite tried and what the BMC said to it: ipmi_sim refuses
		// suite 17 before any credential is checked, so that one is not
		// blamed on the credentials; suite 3 is.
		want := []string{"): suite 17: the BMC refused obmd's credentials ("}
		if m.Kind() == soltest.IPMISim {
			want = []string{"): suite 17: the BMC refused the cipher suite (", "); suite 3: the BMC refused obmd's credentials ("}
		}
		for _, w := range want {
			if got := rep.Checks[1].Result; !strings.Contains(got, w) {
				t.Errorf("authentication for the admin: got %q, want %q in it", got, w)
			}
		}
	})
	t.Run("SOL disabled", func(t *testing.T) {
		setSOLOn(t, m, false)
		defer setSOLOn(t, m, true)
		checkDoctor(e.never, t, label, ntok, info, doctorWant{steps: ipmiSteps, tenant: ipmicheck.OffDisabled,
			hint: ipmicheck.HintSOLDisabled, tenant2: ipmicheck.TenantHintSOLDisabled, detail: "(sol_enable: never)"})
		checkDoctor(e.o, t, label, tok, info, doctorWant{steps: ipmiSteps, ok: true, tenant: "obmd switches it on when a console opens"})
		if solOn(t, m) {
			t.Error("SOL after the doctor runs: on, want left off")
		}
	})
	t.Run("payload held by obmd", func(t *testing.T) {
		h := e.o.ConsoleHTTP(t, label, tok)
		obmdtest.PrintUntilSeen(t, m.WriteSerial, "mine", func(mk string) bool { return strings.Contains(h.Out.String(), mk) })
		checkDoctor(e.o, t, label, tok, info, doctorWant{steps: ipmiSteps, ok: true, tenant: "held by obmd's console"})
		h.Stop()
		payloadFree(t, m)
	})
	t.Run("payload held by another session", func(t *testing.T) {
		// Another obmd (its own database) is, to this one, any other
		// SOL client: its console holds the payload.
		other := e.never.ConsoleHTTP(t, label, ntok)
		obmdtest.PrintUntilSeen(t, m.WriteSerial, "other", func(mk string) bool { return strings.Contains(other.Out.String(), mk) })
		rep := checkDoctor(e.o, t, label, tok, info, doctorWant{steps: ipmiSteps, tenant: "SOL payload held by BMC session 0x",
			hint: ipmicheck.HintSOLHeld, detail: "SOL payload held by"})
		t.Logf("%s: %s", label, rep.Checks[3].Result)
		// The other console never lost its link: nothing deactivated it.
		from := other.Out.Len()
		obmdtest.PrintUntilSeen(t, m.WriteSerial, "still", func(mk string) bool { return strings.Contains(other.Out.String()[from:], mk) })
		if lost := e.never.LogLinesWith(`"state":"lost"`, `"node":"`+label+`"`); len(lost) != 0 {
			t.Errorf("the other console's link was lost during the doctor runs: %q", lost)
		}
		other.Stop()
		payloadFree(t, m)
	})
}

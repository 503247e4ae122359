package bmcs

// Issue 15 end to end, on both real IPMI implementations (OpenIPMI's
// ipmi_sim and go-ipmi's goipmi-server) and both IPMI drivers, through the
// real OpenSSH client and the HTTP routes: cipher suite negotiation, SOL
// switched on, and doctor. One set of BMC processes serves every subtest.

import (
	"encoding/json"
	"fmt"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/obmd/obmd/bastion/e2e/obmdtest"

	"github.com/obmd/obmd/bastion/daemon"
	"github.com/obmd/obmd/sol"
	"github.com/obmd/obmd/sol/soltest"
	"github.com/obmd/obmd/sol/soltest/goipmisrv"
	"github.com/obmd/obmd/sol/soltest/ipmisim"
)

// bmcE2E is what the subtests of TestIPMIBMCs share: the BMCs, and two
// obmds, one with sol_enable auto (the default) and one with never.
type bmcE2E struct {
	sim    *ipmisim.Sim      // ipmi_sim: suites 0-3 and 6, not 17
	gis    *goipmisrv.Server // goipmi-server: suites 3 and 17
	only17 *goipmisrv.Server // goipmi-server restricted to suite 17
	both   []soltest.Machine // sim, gis
	o      *obmdtest.Daemon  // sol_enable auto
	never  *obmdtest.Daemon  // sol_enable never
	short  map[soltest.Kind]string
}

// TestIPMIBMCs: cipher suites, SOL enable and doctor on both IPMI BMCs and
// both drivers, through OpenSSH and the HTTP routes.
func TestIPMIBMCs(t *testing.T) {
	t.Parallel()
	ipmisim.Require(t, "ipmi_sim", "socat", "ipmitool", "ssh", "sshpass")
	e := &bmcE2E{sim: ipmisim.Start(t), gis: goipmisrv.Start(t, goipmisrv.Options{}),
		only17: goipmisrv.Start(t, goipmisrv.Options{CipherSuites: []int{17}}),
		o:      obmdtest.Start(t),
		never:  obmdtest.Start(t, func(c *daemon.Config) { c.IPMIOptions.SOLEnable = sol.SOLEnableNever }),
		short:  map[soltest.Kind]string{soltest.IPMISim: "sim", soltest.GoIPMIServer: "gis"}}
	e.both = []soltest.Machine{e.sim, e.gis}
	t.Run("cipher", e.cipher)
	t.Run("sol_enable", e.solEnable)
	t.Run("doctor", e.doctor)
}

// add registers label with driver typ at info on o and returns its token.
func register(o *obmdtest.Daemon, label, typ string, info sol.Info) string {
	o.T.Helper()
	o.AddNode(label, typ, info)
	return o.Rotate(label)
}

// nodeCipher is GET /v1/nodes/{label}'s cipher fields: the pinned suite
// and the one in use.
func nodeCipher(o *obmdtest.Daemon, t *testing.T, label string) (pinned, inUse *int) {
	t.Helper()
	var v struct {
		Cipher      *int `json:"cipher"`
		CipherInUse *int `json:"cipher_in_use"`
	}
	if err := json.Unmarshal(o.Admin.On(t).MustAPI(200, "GET", "/v1/nodes/"+url.PathEscape(label), nil), &v); err != nil {
		t.Fatal(err)
	}
	return v.Cipher, v.CipherInUse
}

// tenantSafe fails t if out, which a tenant received, names the BMC of
// info (its address or port) or holds its password.
func tenantSafe(t *testing.T, what, out string, info sol.Info) {
	t.Helper()
	for _, leak := range []string{info.Addr, ":" + strconv.Itoa(info.Port), info.Pass} {
		if strings.Contains(out, leak) {
			t.Errorf("%s: a tenant's output holds %q: %q", what, leak, out)
		}
	}
}

// cipher: a node that pins no suite gets 17 from goipmi-server restricted
// to it and falls back to 3 on ipmi_sim, through OpenSSH and HIL's
// power_status route, on both drivers; the suite in use is shown in GET
// /v1/nodes/{label} and logged once. A pinned suite the BMC refuses is an
// error that names it, on both doors.
func (e *bmcE2E) cipher(t *testing.T) {
	for _, typ := range obmdtest.IPMIDrivers {
		for _, tc := range []struct {
			m    soltest.Machine
			want int
		}{{e.only17, 17}, {e.sim, 3}} {
			label := fmt.Sprintf("ci-%s-%d-%s", e.short[tc.m.Kind()], tc.want, typ)
			t.Run(label, func(t *testing.T) {
				info := soltest.Unpinned(tc.m.Info())
				tok := register(e.o, label, typ, info)
				res := e.o.OpenSSH(label, tok, nil, "power-status")
				if res.Code != 0 || res.Stdout != label+": power on\n" {
					t.Errorf("power-status over OpenSSH: got %v, want exit 0 and power on", res)
				}
				code, body := e.o.Request("GET", "/node/"+label+"/power_status?token="+url.QueryEscape(tok), nil, "", "")
				if code != 200 || strings.TrimSpace(string(body)) != `{"power_status":"on"}` {
					t.Errorf("GET power_status: got %d %s, want 200 on", code, body)
				}
				pinned, inUse := nodeCipher(e.o, t, label)
				if pinned != nil || inUse == nil || *inUse != tc.want {
					t.Errorf("GET /v1/nodes/%s: got cipher %v, cipher_in_use %v; want none and %d", label, pinned, inUse, tc.want)
				}
				if n := len(e.o.LogLinesWith(`"msg":"`+typ+`_cipher_selected"`, `"node":"`+label+`"`)); n != 1 {
					t.Errorf("the suite choice was logged %d times, want once", n)
				}
			})
		}
		for _, tc := range []struct {
			m     soltest.Machine
			suite int
		}{{e.only17, 3}, {e.sim, 17}} {
			label := fmt.Sprintf("ci-%s-pin%d-%s", e.short[tc.m.Kind()], tc.suite, typ)
			t.Run(label, func(t *testing.T) {
				info := soltest.Pinned(tc.m.Info(), tc.suite)
				tok := register(e.o, label, typ, info)
				want := fmt.Sprintf("power status of %s: the BMC refused IPMI cipher suite %d", label, tc.suite)
				res := e.o.OpenSSH(label, tok, nil, "power-status")
				if res.Code != 1 || res.Stderr != "obmd: "+want+"\n" {
					t.Errorf("power-status over OpenSSH: got %v, want exit 1 and %q", res, want)
				}
				tenantSafe(t, "power-status", res.Stdout+res.Stderr, info)
				code, body := e.o.Request("GET", "/node/"+label+"/power_status?token="+url.QueryEscape(tok), nil, "", "")
				if code != 500 || !strings.Contains(string(body), want) {
					t.Errorf("GET power_status: got %d %s, want 500 saying %q", code, body, want)
				}
				if _, inUse := nodeCipher(e.o, t, label); inUse != nil {
					t.Errorf("cipher_in_use: got %d, want none (no suite worked)", *inUse)
				}
			})
		}
	}
}

var solEnabledRE = regexp.MustCompile(`(?m)^Enabled\s*:\s*(true|false)`)

// solOn reads SOL Enable with the real ipmitool.
func solOn(t *testing.T, m soltest.Machine) bool {
	t.Helper()
	got := solEnabledRE.FindStringSubmatch(soltest.IPMITool(t, m.Info(), "sol", "info"))
	if got == nil {
		t.Fatal("ipmitool sol info: no Enabled line")
	}
	return got[1] == "true"
}

// setSOLOn switches SOL on or off behind obmd's back, as an operator (or
// a factory default) would.
func setSOLOn(t *testing.T, m soltest.Machine, on bool) {
	t.Helper()
	soltest.IPMITool(t, m.Info(), "sol", "set", "enabled", strconv.FormatBool(on))
	if solOn(t, m) != on {
		t.Fatalf("SOL enabled after `sol set enabled %v`: no", on)
	}
}

// payloadFree waits until no SOL payload is active on m (a console obmd
// closed has deactivated it).
func payloadFree(t *testing.T, m soltest.Machine) {
	t.Helper()
	obmdtest.WaitUntil(t, "the SOL payload to be free", func() bool {
		f := strings.Fields(soltest.IPMITool(t, m.Info(), "raw", "0x06", "0x4a", "0x01"))
		return len(f) >= 2 && f[1] == "00"
	})
}

// solEnable: on a BMC with SOL switched off, a console opens anyway, through
// HIL's HTTP console (native driver) and OpenSSH (ipmitool driver), on both
// BMCs: the driver switched SOL on, and obmd audited sol.enable.
func (e *bmcE2E) solEnable(t *testing.T) {
	for _, m := range e.both {
		t.Run(e.short[m.Kind()], func(t *testing.T) {
			for _, typ := range obmdtest.IPMIDrivers {
				label := fmt.Sprintf("se-%s-%s", e.short[m.Kind()], typ)
				setSOLOn(t, m, false)
				tok := register(e.o, label, typ, soltest.Unpinned(m.Info()))
				if typ == "ipmi" {
					h := e.o.ConsoleHTTP(t, label, tok)
					obmdtest.PrintUntilSeen(t, m.WriteSerial, "http", func(mk string) bool { return strings.Contains(h.Out.String(), mk) })
					h.Stop()
				} else {
					p := obmdtest.SSHPTY(t, e.o.SSHAddr(), label, tok, nil)
					obmdtest.PrintUntilSeen(t, m.WriteSerial, "ssh", func(mk string) bool { return strings.Contains(p.Out.String(), mk) })
					p.Detach()
				}
				if !solOn(t, m) {
					t.Errorf("%s: SOL after the console opened: off, want on", label)
				}
				if !slices.Contains(e.o.ConsoleAudit(label), "sol.enable ok") {
					t.Errorf("%s: no sol.enable in the audit: %q", label, e.o.ConsoleAudit(label))
				}
				payloadFree(t, m)
			}
		})
	}
}

package bmcs

// The BMC's address never reaches a tenant: each way a BMC fails (it
// refuses obmd's password, it does not answer, its port is closed), with
// each driver (native ipmi and ipmitool against ipmi_sim and loopback
// ports; the simulator with the same faults injected), through every power
// command over the real OpenSSH client (text and --json), the HTTP
// node-token routes and the console. Everything the tenant receives is
// searched for the BMC's address and port; it must hold the stable text of
// the fault instead, while obmd's log keeps the address.

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/obmd/obmd/bastion/e2e/obmdtest"

	"github.com/obmd/obmd/bastion/daemon"
	"github.com/obmd/obmd/sol"
	"github.com/obmd/obmd/sol/sim"
	"github.com/obmd/obmd/sol/soltest/ipmisim"
)

// leakPowerTimeout bounds each power call, so that a silent BMC costs little.
const leakPowerTimeout = 2 * time.Second

// leakCommand is one power command and how its errors name it.
type leakCommand struct {
	line, verb string
	method     string // its HTTP node-token route ("" if none)
	route      string
	body       string
}

var leakCommands = []leakCommand{
	{"power-status", "power status of", "GET", "power_status", ""},
	{"power-on", "power on", "POST", "power_on", ""},
	{"power-off", "power off", "POST", "power_off", ""},
	{"power-off --soft", "soft power off", "", "", ""},
	{"power-cycle", "power cycle", "POST", "power_cycle", `{"force":false}`},
	{"power-cycle --force", "reset", "", "", ""},
	{"power-reset", "reset", "", "", ""},
	{"bootdev pxe", "set boot device of", "PUT", "boot_device", `{"bootdev":"pxe"}`},
}

// leakCase is one failing BMC: the driver type, how it is reached, the
// fault a tenant must be told, and the strings that must never reach one.
type leakCase struct {
	name   string
	typ    string
	info   sol.Info
	fault  sol.Fault
	detail string   // what obmd's log must hold (the BMC's host:port)
	secret []string // what no tenant may see
}

// leakTenant collects everything tenants received.
type leakTenant struct {
	mu   sync.Mutex
	seen []string // "where: text"
}

func (r *leakTenant) add(where, text string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.seen = append(r.seen, where+": "+text)
}

func leakCases(t *testing.T, s *ipmisim.Sim) []leakCase {
	secret := func(info sol.Info) (string, []string) {
		hp := net.JoinHostPort(info.Addr, strconv.Itoa(info.Port))
		return hp, []string{hp, strconv.Itoa(info.Port)}
	}
	var cases []leakCase
	for _, typ := range obmdtest.IPMIDrivers {
		for _, fc := range ipmisim.FaultCases(t, s) {
			hp, sec := secret(fc.Info)
			if fc.Info.Addr != "127.0.0.1" {
				sec = append(sec, fc.Info.Addr)
			}
			cases = append(cases, leakCase{typ + " " + fc.Name, typ, fc.Info, fc.Want, hp, sec})
		}
	}
	// The simulator with the same faults injected: its detail names an
	// address as a real driver's would.
	for i, f := range []sol.Fault{sol.FaultCredentials, sol.FaultNoAnswer, sol.FaultUnreachable} {
		hp := fmt.Sprintf("10.20.30.%d:%d", 40+i, 6620+i)
		cases = append(cases, leakCase{"sim " + f.String(), "sim", sol.Info{Addr: "sim"}, f, hp,
			[]string{hp, fmt.Sprintf("10.20.30.%d", 40+i), strconv.Itoa(6620 + i)}})
	}
	return cases
}

func TestBMCAddressNeverReachesTenants(t *testing.T) {
	t.Parallel()
	ipmisim.Require(t, "ssh", "sshpass", "ipmitool")
	s := ipmisim.Start(t)
	o := obmdtest.Start(t, func(c *daemon.Config) { c.Commands.Timeout = leakPowerTimeout })
	var got leakTenant
	slots := make(chan struct{}, 12) // clients running at once
	cases := leakCases(t, s)
	for i, bc := range cases {
		t.Run(bc.name, func(t *testing.T) {
			t.Parallel()
			register := func(label string) string {
				o.AddNode(label, bc.typ, bc.info)
				if bc.typ == "sim" {
					o.Lab().BMC(label, sim.ModeNormal).SetFail(sol.NewError(bc.fault,
						fmt.Errorf("connect to BMC %s: simulated failure", bc.detail)))
				}
				return o.Rotate(label)
			}
			var wg sync.WaitGroup
			for j, cmd := range leakCommands {
				label := fmt.Sprintf("bl%d-%d", i, j)
				tok := register(label)
				wg.Add(1)
				go func() {
					defer wg.Done()
					slots <- struct{}{}
					defer func() { <-slots }()
					leakPower(t, o, &got, bc, cmd, label, tok)
				}()
			}
			label := fmt.Sprintf("bl%d-con", i)
			tok := register(label)
			leakConsole(t, o, &got, bc, label, tok)
			wg.Wait()
			if logs := o.Logs.String(); !strings.Contains(logs, bc.detail) {
				t.Errorf("obmd's log does not name the BMC (%s)", bc.detail)
			}
		})
	}
	t.Cleanup(func() {
		for _, text := range got.seen {
			for _, bc := range cases {
				for _, sec := range bc.secret {
					if strings.Contains(text, sec) {
						t.Errorf("a tenant saw %q (the BMC of %s) in %q", sec, bc.name, text)
					}
				}
			}
		}
		if len(got.seen) < len(cases)*(len(leakCommands)*2+2) {
			t.Errorf("collected %d tenant texts, want every command, route and console", len(got.seen))
		}
	})
}

// leakPower runs cmd on label over OpenSSH (text, then --json) and its HTTP
// route, and checks that each failed with the fault's text.
func leakPower(t *testing.T, o *obmdtest.Daemon, got *leakTenant, bc leakCase, cmd leakCommand, label, tok string) {
	want := cmd.verb + " " + label + ": " + bc.fault.String()
	for _, line := range []string{cmd.line, cmd.line + " --json"} {
		args := append([]string{"-p", tok, "ssh"}, o.SSHArgs(label, "-o", "PubkeyAuthentication=no")...)
		res, err := obmdtest.RunClient(60*time.Second, "sshpass", append(args, line)...)
		got.add("ssh "+line, res.Stdout+res.Stderr)
		switch {
		case err != nil:
			t.Errorf("%s: %v", line, err)
		case res.Code != 1 || !strings.Contains(res.Stderr, "obmd: "+want):
			t.Errorf("%s: got %v, want exit 1 and %q", line, res, want)
		case strings.HasSuffix(line, "--json"):
			var out struct {
				OK    *bool
				Error string
			}
			if err := json.Unmarshal([]byte(res.Stdout), &out); err != nil || out.OK == nil || *out.OK || !strings.HasPrefix(out.Error, want) {
				t.Errorf("%s: got stdout %q, want ok false and error %q", line, res.Stdout, want)
			}
		}
	}
	if cmd.route == "" {
		return
	}
	status, body, err := leakHTTP(o, cmd.method, "/node/"+label+"/"+cmd.route+"?token="+url.QueryEscape(tok), cmd.body, 0)
	got.add("HTTP "+cmd.route, body)
	var e struct{ Error string }
	switch {
	case err != nil:
		t.Errorf("%s %s: %v", cmd.method, cmd.route, err)
	case status != 500 && status != 504, json.Unmarshal([]byte(body), &e) != nil, !strings.HasPrefix(e.Error, want):
		t.Errorf("%s %s: got %d %s, want 500 or 504 and %q", cmd.method, cmd.route, status, body, want)
	}
}

// leakConsole opens label's console over OpenSSH with a PTY and waits for
// the notice that names the fault; then streams it over HTTP for a moment.
func leakConsole(t *testing.T, o *obmdtest.Daemon, got *leakTenant, bc leakCase, label, tok string) {
	p := obmdtest.SSHPTY(t, o.SSHAddr(), label, tok, nil)
	p.Out.Wait(t, "console notice", 0, "cannot open console: "+bc.fault.String()+"; retrying")
	got.add("ssh console", p.Out.String())
	_, body, err := leakHTTP(o, "GET", "/node/"+label+"/console?token="+url.QueryEscape(tok), "", time.Second)
	if err != nil {
		t.Errorf("GET console: %v", err)
	}
	got.add("HTTP console", body)
}

// leakHTTP sends one request to the admin port; with limit, the body read
// so far when limit passes is the answer (a console stream never ends).
func leakHTTP(o *obmdtest.Daemon, method, path, body string, limit time.Duration) (int, string, error) {
	req, err := http.NewRequest(method, "http://"+o.AdminAddr()+path, strings.NewReader(body))
	if err != nil {
		return 0, "", err
	}
	c := &http.Client{Timeout: 30 * time.Second}
	if limit > 0 {
		c.Timeout = limit
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	var ne net.Error
	if limit > 0 && errors.As(err, &ne) && ne.Timeout() {
		err = nil
	}
	return resp.StatusCode, string(data), err
}

package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/obmd/obmd/bastion/admin/api"
	"github.com/obmd/obmd/sol/soltest/ipmisim"
)

// ctlFunc runs obmctl against d with stdin "", returning stdout, stderr
// and the exit code.
type ctlFunc func(args ...string) (string, string, int)

func newCtl(t *testing.T) ctlFunc { return ctlFor(startDaemon(t)) }

func writePass(t *testing.T, pass string) string {
	p := filepath.Join(t.TempDir(), "pass")
	if err := os.WriteFile(p, []byte(pass+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestObmctlNodeTypes: node add takes each type's fields (a Redfish
// node's system, TLS choice and console) and refuses a flag the type does
// not take; node show says what it registered, the cipher suite pinned or
// negotiated, never the password.
func TestObmctlNodeTypes(t *testing.T) {
	ctl := newCtl(t)
	const secret = "rf-secret-0x51"
	pw := writePass(t, secret)
	steps := []struct {
		name     string
		args     []string
		wantCode int
		wantOut  []string // substrings of stdout
		wantErr  string   // substring of stderr
	}{
		{"add redfish", []string{"node", "add", "rf1", "--type", "redfish", "--addr", "https://bmc-7.example:8443", "--user", "obmd",
			"--system", "System.Embedded.1", "--insecure", "--sol-port", "6230", "--sol-cipher", "17", "--capture", "attached", "--pass-file", pw}, 0, []string{"rf1: registered"}, ""},
		{"show redfish", []string{"node", "show", "rf1"}, 0, []string{"type:     redfish\n", "bmc:      https://bmc-7.example:8443\n",
			"system:   System.Embedded.1\n", "tls:      not verified (insecure)\n", "console:  IPMI SOL on port 6230\n", "cipher:   17 (pinned)\n", "capture:  attached\n"}, ""},
		{"add redfish, no console", []string{"node", "add", "rf2", "--type", "redfish", "--addr", "https://bmc-8.example", "--user", "obmd",
			"--pass-file", pw}, 0, []string{"rf2: registered"}, ""},
		{"show redfish, no console", []string{"node", "show", "rf2"}, 0, []string{"system:   the BMC's only one\n", "tls:      verified\n",
			"console:  none (no sol details)\n"}, ""},
		{"add redfish, console on 623", []string{"node", "add", "rf3", "--type", "redfish", "--addr", "https://bmc-9.example", "--user", "obmd",
			"--sol", "--pass-file", pw}, 0, []string{"rf3: registered"}, ""},
		{"show redfish, console on 623", []string{"node", "show", "rf3"}, 0, []string{"console:  IPMI SOL on port 623\n",
			"cipher:   negotiated, none yet\n"}, ""},
		{"redfish over http refused", []string{"node", "add", "rf4", "--type", "redfish", "--addr", "http://bmc", "--user", "u",
			"--pass-file", pw}, 1, nil, "--addr must use https"},
		{"add ipmi pinned", []string{"node", "add", "n1", "--addr", "10.0.0.5", "--user", "root", "--cipher", "3", "--pass-file", pw},
			0, []string{"n1: registered"}, ""},
		{"show ipmi pinned", []string{"node", "show", "n1"}, 0, []string{"bmc:      10.0.0.5:623\n", "cipher:   3 (pinned)\n"}, ""},
		{"add ipmitool negotiated", []string{"node", "add", "n2", "--type", "ipmitool", "--addr", "10.0.0.6", "--user", "root",
			"--interface", "lan", "--pass-file", pw}, 0, []string{"n2: registered"}, ""},
		{"show ipmitool negotiated", []string{"node", "show", "n2"}, 0, []string{"cipher:   negotiated, none yet\n", "iface:    lan\n"}, ""},
		{"system on ipmi refused", []string{"node", "add", "n3", "--addr", "10.0.0.7", "--system", "1", "--pass-file", pw}, 2, nil,
			"a ipmi node does not take --system"},
		{"interface on redfish refused", []string{"node", "add", "rf5", "--type", "redfish", "--addr", "https://bmc", "--interface", "lan",
			"--insecure"}, 2, nil, "a redfish node does not take --interface"},
		{"user on sim refused", []string{"node", "add", "s1", "--type", "sim", "--addr", "sim", "--user", "u"}, 2, nil,
			"a sim node does not take --user"},
		{"unknown type", []string{"node", "add", "x1", "--type", "idrac", "--addr", "x"}, 2, nil, `unknown node type "idrac"`},
	}
	for _, s := range steps {
		out, errOut, code := ctl(s.args...)
		ok := code == s.wantCode && strings.Contains(errOut, s.wantErr)
		for _, w := range s.wantOut {
			ok = ok && strings.Contains(out, w)
		}
		if !ok {
			t.Errorf("%s: got exit %d, stdout %q, stderr %q; want exit %d, stdout with %q, stderr ~%q",
				s.name, code, out, errOut, s.wantCode, s.wantOut, s.wantErr)
		}
		if strings.Contains(out+errOut, secret) {
			t.Errorf("%s: the BMC password was printed", s.name)
		}
	}
	for _, label := range []string{"n3", "rf4", "rf5", "s1", "x1"} {
		if _, _, code := ctl("node", "show", label); code != 1 {
			t.Errorf("refused node %s: stored (node show exit %d)", label, code)
		}
	}
}

// TestObmctlDoctor: doctor against a real ipmi_sim passes every step and
// then node show names the suite negotiated; a BMC that does not answer
// fails its first step with what to do and exit 1 (with --json too); a
// simulated node passes; an unknown node is an error.
func TestObmctlDoctor(t *testing.T) {
	sim := ipmisim.Start(t)
	ctl := newCtl(t)
	info := sim.Info()
	add := func(label string, port int) {
		t.Helper()
		if out, errOut, code := ctl("node", "add", label, "--addr", info.Addr, "--port", strconv.Itoa(port), "--user", info.User,
			"--pass-file", writePass(t, info.Pass)); code != 0 {
			t.Fatalf("node add %s: exit %d %q %q", label, code, out, errOut)
		}
	}
	add("live", sim.Port)
	add("dead", ipmisim.Closed(t).Port)
	if out, errOut, code := ctl("node", "add", "s1", "--type", "sim", "--addr", "sim"); code != 0 {
		t.Fatalf("node add s1: exit %d %q %q", code, out, errOut)
	}

	out, errOut, code := ctl("doctor", "live")
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if code != 0 || errOut != "" || len(lines) != 5 || lines[4] != "live: doctor: all 4 checks passed" ||
		!strings.HasPrefix(lines[0], "ok  address  ") || !strings.Contains(lines[1], "cipher suite 3") || !strings.Contains(lines[0], "127.0.0.1") {
		t.Errorf("doctor live: got exit %d, %q, %q; want 4 steps passed with the admin's detail", code, out, errOut)
	}
	if out, _, _ := ctl("node", "show", "live"); !strings.Contains(out, "cipher:   negotiated, in use: 3\n") {
		t.Errorf("node show after doctor: got %q, want the suite in use", out)
	}

	out, errOut, code = ctl("doctor", "dead")
	if code != 1 || !strings.HasPrefix(out, "FAIL  address") || !strings.Contains(out, "\n               what to do: check the node's BMC address") ||
		!strings.HasSuffix(out, "dead: doctor: address failed (doctor stops at the first failure)\n") ||
		errOut != "obmctl: doctor dead: address failed\n" {
		t.Errorf("doctor dead: got exit %d, %q, %q; want exit 1, the failed step and what to do", code, out, errOut)
	}
	out, _, code = ctl("--json", "doctor", "dead")
	var rep api.Doctor
	if err := json.Unmarshal([]byte(out), &rep); err != nil || code != 1 || rep.OK || rep.Failed != "address" || len(rep.Checks) != 1 {
		t.Errorf("doctor --json dead: got exit %d, %q (%v)", code, out, err)
	}
	if out, _, code := ctl("doctor", "s1"); code != 0 || !strings.HasSuffix(out, "s1: doctor: all 4 checks passed\n") {
		t.Errorf("doctor s1: got exit %d, %q", code, out)
	}
	if _, errOut, code := ctl("doctor", "nope"); code != 1 || !strings.Contains(errOut, "not found") {
		t.Errorf("doctor of an unknown node: got exit %d, %q", code, errOut)
	}
	if _, errOut, code := ctl("doctor"); code != 2 || !strings.Contains(errOut, "doctor needs LABEL") {
		t.Errorf("doctor without a label: got exit %d, %q", code, errOut)
	}
	if got := sim.Actions(); len(got) != 0 {
		t.Errorf("chassis actions during the doctor runs: %q, want none", got)
	}
}

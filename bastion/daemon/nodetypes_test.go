package daemon

import (
	"bytes"
	"encoding/json"
	"io"
	"strings"
	"testing"

	"github.com/sirupsen/logrus"

	"github.com/obmd/obmd/bastion/nodes"
	"github.com/obmd/obmd/db"
	"github.com/obmd/obmd/keys"
	"github.com/obmd/obmd/sol"
	"github.com/obmd/obmd/sol/sim"
	"github.com/obmd/obmd/sol/soltest/sshbmc"
	"github.com/obmd/obmd/sol/sshconsole"
	"github.com/obmd/obmd/sol/transport"
)

// The password of these registrations: no error may show it.
const typesPass = "Pw-9f3c"

func testNodeTypes(t testing.TB) *nodes.Table {
	t.Helper()
	sealer, err := keys.NewSealer(make([]byte, 32))
	if err != nil {
		t.Fatal(err)
	}
	table, err := nodeTypes(Config{}, sol.IPMIOptions{Ciphers: sol.NewCiphers()}, sim.NewLab(), sealer, testConsoles(t))
	if err != nil {
		t.Fatal(err)
	}
	return table
}

// testConsoles is the console transports over host keys pinned in memory.
func testConsoles(t testing.TB) *consoles {
	t.Helper()
	quiet := logrus.New()
	quiet.SetOutput(io.Discard)
	c := &consoles{mem: transport.NewMemory()}
	var err error
	if c.ssh, err = sshconsole.NewClient(sshconsole.Config{}, sshbmc.NewKeys(), nil, quiet); err != nil {
		t.Fatal(err)
	}
	if c.tr, err = transport.New(c.ssh, c.mem, nil, quiet); err != nil {
		t.Fatal(err)
	}
	return c
}

// parseInfo registers info as the admin API does (strict: the /v1 API).
func parseInfo(table *nodes.Table, typ nodes.Type, info string, strict bool) (nodes.Info, error) {
	return table.Parse(string(typ), strict, func(v any) error {
		dec := json.NewDecoder(strings.NewReader(info))
		if strict {
			dec.DisallowUnknownFields()
		}
		return dec.Decode(v)
	})
}

// TestNodeTypesRefuseAtRegistration: what a driver would refuse is refused
// when the node is registered, by an error naming the field and never
// showing the password, for every type.
func TestNodeTypesRefuseAtRegistration(t *testing.T) {
	table := testNodeTypes(t)
	long := func(n int) string { return typesPass + strings.Repeat("x", n-len(typesPass)) }
	tests := []struct {
		typ   nodes.Type
		info  string
		field string // what the error must name
	}{
		{TypeIPMI, `{"addr":"a","user":"u","pass":"` + long(21) + `"}`, "info.pass"},
		{TypeIPMI, `{"addr":"a","user":"` + strings.Repeat("u", 17) + `","pass":"` + typesPass + `"}`, "info.user"},
		{TypeIPMI, `{"addr":"a","user":"u","pass":"` + typesPass + `","cipher":4}`, "info.cipher"},
		{TypeIPMI, `{"addr":"a","user":"u","pass":"` + typesPass + `","interface":"lan"}`, "info.interface"},
		{TypeIPMI, `{"addr":"a","user":"u"}`, "info.pass"},
		{TypeIPMITool, `{"addr":"-oProxyCommand=x","user":"u","pass":"` + typesPass + `"}`, "info.addr"},
		{TypeIPMITool, `{"addr":"a","user":"u","pass":"` + typesPass + `","interface":"open"}`, "info.interface"},
		{TypeIPMITool, `{"addr":"a","user":"u","pass":"` + typesPass + `\u0000"}`, "info.pass"},
		{TypeIPMITool, `{"addr":"a","user":"u","pass":"` + typesPass + `","port":70000}`, "info.port"},
		{TypeMock, `{"addr":"a","pass":"` + typesPass + `"}`, "info.pass"},
		{TypeSim, `{}`, "info.addr"},
		{TypeRedfish, `{"addr":"http://bmc","user":"u","pass":"` + typesPass + `"}`, "info.addr"},
		{TypeRedfish, `{"addr":"https://u:` + typesPass + `@bmc","user":"u","pass":"` + typesPass + `"}`, "info.addr"},
		{TypeRedfish, `{"addr":"https://bmc","user":"u"}`, "info.pass"},
		{TypeRedfish, `{"addr":"https://bmc","user":"u","pass":"` + long(21) + `","sol":{}}`, "info.pass"},
		{TypeRedfish, `{"addr":"https://bmc","user":"u","pass":"` + typesPass + `","system":"../x"}`, "info.system"},
		{TypeRedfish, `{"addr":"https://bmc","user":"u","pass":"` + typesPass + `","sol":{"cipher":4}}`, "info.sol.cipher"},
		{TypeRedfish, `{"addr":"https://bmc","user":"u","pass":"` + typesPass + `","sol":{"port":70000}}`, "info.sol.port"},
		// The console fields (ipmi, ipmitool and redfish nodes).
		{TypeIPMI, `{"addr":"a","user":"u","pass":"` + typesPass + `","console":"telnet"}`, "info.console"},
		{TypeIPMI, `{"addr":"a","user":"u","pass":"` + typesPass + `","ssh_port":22}`, "info.ssh_port"},
		{TypeIPMITool, `{"addr":"a","user":"u","pass":"` + typesPass + `","console":"ssh","ssh_vendor":"hpe"}`, "info.ssh_vendor"},
		{TypeIPMITool, `{"addr":"a","user":"u","pass":"` + typesPass + `","console":"ssh","ssh_pass":"` + typesPass + `\u0007"}`, "info.ssh_pass"},
		{TypeIPMI, `{"addr":"a","user":"u","pass":"` + typesPass + `","console":"auto","ssh_port":0,"ssh_command":"vsp\r"}`, "info.ssh_command"},
		{TypeRedfish, `{"addr":"https://bmc","user":"u","pass":"` + typesPass + `","console":"ssh","ssh_host_key":"ssh-rsa x"}`, "info.ssh_host_key"},
		{TypeRedfish, `{"addr":"https://bmc","user":"u","pass":"` + typesPass + `","console":"ssh","sol":{}}`, "info.sol"},
		{TypeRedfish, `{"addr":"https://bmc","user":"u","pass":"` + long(21) + `","console":"auto"}`, "info.pass"},
		// An IPMI node's Redfish service, asked which console is on.
		{TypeIPMI, `{"addr":"a","user":"u","pass":"` + typesPass + `","redfish":"https://bmc"}`, "info.redfish"},
		{TypeIPMI, `{"addr":"a","user":"u","pass":"` + typesPass + `","console":"ssh","redfish":"https://bmc"}`, "info.redfish"},
		{TypeIPMI, `{"addr":"a","user":"u","pass":"` + typesPass + `","console":"auto","redfish":"http://bmc"}`, "info.redfish"},
		{TypeIPMITool, `{"addr":"a","user":"u","pass":"` + typesPass + `","console":"auto","redfish":"https://u:` + typesPass + `@bmc"}`, "info.redfish"},
		{TypeIPMITool, `{"addr":"a","user":"u","pass":"` + typesPass + `","console":"auto","redfish":"https://bmc/redfish/v1"}`, "info.redfish"},
		{TypeIPMI, `{"addr":"a","user":"u","pass":"` + typesPass + `","console":"auto","redfish_insecure":true}`, "info.redfish_insecure"},
		{TypeRedfish, `{"addr":"https://bmc","user":"u","pass":"` + typesPass + `","console":"auto","redfish":"https://bmc"}`, "info.redfish"},
		{TypeSim, `{"addr":"a","redfish":"https://bmc"}`, "info.redfish"},
		{TypeMock, `{"addr":"a","console":"ssh"}`, "info.console"},
		{TypeSim, `{"addr":"a","ssh_vendor":"idrac"}`, "info.ssh_vendor"},
	}
	for _, tt := range tests {
		_, err := parseInfo(table, tt.typ, tt.info, true)
		switch {
		case err == nil:
			t.Errorf("%s %s: accepted, want refused naming %s", tt.typ, tt.info, tt.field)
		case !strings.Contains(err.Error(), tt.field):
			t.Errorf("%s %s: got %q, want it to name %s", tt.typ, tt.info, err, tt.field)
		case strings.Contains(err.Error(), typesPass):
			t.Errorf("%s %s: error %q shows the password", tt.typ, tt.info, err)
		}
	}
}

// FuzzNodeTypesCheckAsDrivers: whatever info a type accepts at
// registration, its driver accepts too: no node is stored that fails
// later, when its BMC is used, with a 500 or a console that never opens.
func FuzzNodeTypesCheckAsDrivers(f *testing.F) {
	for _, s := range []struct{ typ, info string }{
		{"ipmi", `{"addr":"10.0.0.5","user":"root","pass":"p","port":623,"cipher":17}`},
		{"ipmi", `{"addr":"h","user":"u","pass":"12345678901234567890","cipher":-1,"interface":"lanplus"}`},
		{"ipmitool", `{"addr":"bmc.example","user":"u","pass":"p","port":6230,"cipher":3,"interface":"lan"}`},
		{"ipmitool", `{"addr":"é","user":"ü","pass":"p p"}`},
		{"mock", `{"addr":"10.0.0.4","NumWrites":0}`},
		{"sim", `{"addr":"simulator"}`},
		{"redfish", `{"addr":"https://bmc:8443/","user":"u","pass":"p","system":"/redfish/v1/Systems/1","insecure":true}`},
		{"redfish", `{"addr":"https://[::1]","user":"u","pass":"p","sol":{"port":623,"cipher":17}}`},
		{"redfish", `{"addr":"https://bmc","user":"u","pass":"p","console":"ssh","ssh_vendor":"idrac","ssh_pass":"q"}`},
		{"ipmi", `{"addr":"h","user":"u","pass":"p","console":"auto","ssh_port":2200,"ssh_vendor":"openbmc"}`},
		{"ipmitool", `{"addr":"h","user":"u","pass":"p","console":"ssh","ssh_user":"admin","ssh_command":"console 1"}`},
		{"ipmi", `{"addr":"h","user":"u","pass":"p","console":"auto","redfish":"https://bmc:8443","redfish_insecure":true}`},
	} {
		f.Add(s.typ, s.info)
	}
	table := testNodeTypes(f)
	quiet := logrus.New()
	quiet.SetOutput(io.Discard)
	f.Fuzz(func(t *testing.T, typ, info string) {
		for _, strict := range []bool{false, true} {
			parsed, err := parseInfo(table, nodes.Type(typ), info, strict)
			if err != nil {
				continue
			}
			if _, err := table.New("n1", parsed, quiet); err != nil {
				t.Fatalf("%s %s (strict %v): registration accepted it, the driver refuses it: %v", typ, info, strict, err)
			}
			sealed, err := table.Seal("n1", parsed)
			if err != nil {
				t.Fatalf("seal: %v", err)
			}
			if stored, err := table.Open(db.Node{Label: "n1", Type: typ, InfoSealed: sealed}); err != nil || !stored.Equal(parsed) {
				t.Fatalf("%s %s: stored, it opens as %v (%v), want %v", typ, info, stored.View(), err, parsed.View())
			}
			if v, _ := json.Marshal(parsed.View()); bytes.Contains(v, []byte(`"pass"`)) || bytes.Contains(v, []byte(`"ssh_pass"`)) {
				t.Fatalf("view %s shows the password", v)
			}
		}
	})
}

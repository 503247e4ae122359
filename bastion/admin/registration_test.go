package admin

// What a registration refuses because it could never work, on both API
// shapes (obmd's PUT /node/{label} and PUT /v1/nodes/{label}), over real
// HTTP and a real store: labels an SSH client refuses or a shell reads, an
// IPMI address with a port in it, and a second node on a BMC another node
// uses. A refusal changes nothing.

import (
	"context"
	"encoding/json"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/obmd/obmd/db"
	"github.com/obmd/obmd/db/dbtest"
)

// routes are the two API shapes that register a node, and the status each
// answers a creation with.
var routes = []struct {
	name, prefix string
	created      int
}{{"obmd", "/node/", 200}, {"v1", "/v1/nodes/", 201}}

func TestRegisterLabelRule(t *testing.T) {
	forEngines(t, func(t *testing.T, eng dbtest.Engine) {
		e := newEnv(t, eng, nil)
		const body = `{"type":"mock","info":{"addr":"10.0.0.4"}}`
		refused := []string{"-oProxyCommand=touch%20x", "a;b", "a%20b", "a@b", "a$b", "a%60id%60", "a|b", "a&b", "(a)",
			"a'b", "a%22b", "a%5Cb", "a:b", "a+ro", ".hidden", "_a", "-a", "n%C5%93ud", "a%09b", "a*", "a~b", "a=b"}
		for _, rt := range routes {
			for _, l := range refused {
				r := e.admin("PUT", rt.prefix+l, body)
				if r.code != 400 || !strings.Contains(r.body, "ASCII letters, digits") || !strings.Contains(r.body, "starting with a letter or a digit") {
					t.Errorf("PUT %s%s: got %d %s, want 400 stating the label rule", rt.prefix, l, r.code, r.body)
				}
			}
			for _, l := range []string{"n1", "node-17", "Rack3_node.4", "HIL-node_2.a", strings.Repeat("a", 76)} {
				l := l + "-" + rt.name[:2] // 80 characters at most
				if r := e.admin("PUT", rt.prefix+l, body); r.code != rt.created {
					t.Errorf("PUT %s%s: got %d %s, want %d", rt.prefix, l, r.code, r.body, rt.created)
				}
			}
		}
		if got := e.labels(); len(got) != 10 || slices.ContainsFunc(got, func(l string) bool { return strings.ContainsAny(l, ";@ $") }) {
			t.Errorf("stored labels: got %q, want the 10 accepted ones", got)
		}

		// Labels registered before the rule stay usable on every route.
		for _, l := range []string{"rack 3 node 4", "nœud@b"} {
			sealed, err := e.sealer.Seal([]byte(`{"addr":"10.0.0.4","user":"","pass":""}`), l)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := e.store.CreateNode(context.Background(), db.Node{Label: l, Type: string(TypeMock), InfoSealed: sealed}); err != nil {
				t.Fatal(err)
			}
			p := url.PathEscape(l)
			for _, c := range []struct {
				method, path, body string
				code               int
			}{
				{"GET", "/v1/nodes/" + p, "", 200},
				{"PUT", "/node/" + p, body, 200},
				{"PUT", "/v1/nodes/" + p, `{"type":"mock","info":{"addr":"10.0.0.9"}}`, 200},
				{"POST", "/node/" + p + "/token", "", 200},
				{"DELETE", "/node/" + p + "/token", "", 200},
				{"DELETE", "/v1/nodes/" + p, "", 200},
			} {
				if r := e.admin(c.method, c.path, c.body); r.code != c.code {
					t.Errorf("%s %s (a label from before the rule): got %d %s, want %d", c.method, c.path, r.code, r.body, c.code)
				}
			}
		}
	})
}

func TestValidNewLabel(t *testing.T) {
	for _, l := range []string{"a", "Z", "0", "node-17", "n_1.b-2", strings.Repeat("a", 80)} {
		if err := ValidNewLabel(l); err != nil {
			t.Errorf("%q: got %v, want valid", l, err)
		}
	}
	for _, l := range []string{"", "-a", ".a", "_a", "a b", "a;b", "a@b", "a/b", "a:b", "a+b", "nœud", "a\x00", strings.Repeat("a", 81)} {
		if err := ValidNewLabel(l); err == nil || !strings.Contains(err.Error(), LabelRule) {
			t.Errorf("%q: got %v, want an error stating the rule", l, err)
		}
	}
}

func TestRegisterBMCAddr(t *testing.T) {
	forEngines(t, func(t *testing.T, eng dbtest.Engine) {
		e := newEnv(t, eng, nil)
		ipmi := func(addr string) string {
			return `{"type":"ipmi","info":{"addr":"` + addr + `","user":"admin","pass":"pw","cipher":3}}`
		}
		for _, rt := range routes {
			for _, c := range []struct{ addr, want string }{
				{"127.0.0.1:9623", `info.addr \"127.0.0.1:9623\" has a port: give the host alone in info.addr (\"127.0.0.1\") and the port in info.port (9623)`},
				{"[::1]:623", `info.addr \"[::1]:623\" has a port: give the host alone in info.addr (\"::1\") and the port in info.port (623)`},
				{"bmc-17.example:6230", `and the port in info.port (6230)`},
				{"[10.0.0.5]", `brackets hold an IPv6 address`},
				{"https://bmc-17", `is not a host name or an IP address (the port goes in info.port)`},
				{"root@bmc-17", `is not a host name or an IP address`},
			} {
				r := e.admin("PUT", rt.prefix+"bad-"+rt.name, ipmi(c.addr))
				if r.code != 400 || !strings.Contains(r.body, c.want) {
					t.Errorf("PUT %s with addr %s: got %d %s, want 400 with %s", rt.prefix, c.addr, r.code, r.body, c.want)
				}
			}
			// IPv6 literals, bracketed or not, are stored bare.
			for i, addr := range []string{"[::1]", "fd00::5", "[fd00:0:0::6]"} {
				label := "v6-" + rt.name + "-" + string(rune('a'+i))
				if r := e.admin("PUT", rt.prefix+label, ipmi(addr)); r.code != rt.created {
					t.Fatalf("PUT %s with addr %s: got %d %s, want %d", rt.prefix, addr, r.code, r.body, rt.created)
				}
				var v struct{ Addr string }
				json.Unmarshal([]byte(e.admin("GET", "/v1/nodes/"+label, "").body), &v)
				if want := strings.Trim(strings.Replace(addr, ":0:0::", "::", 1), "[]"); v.Addr != want {
					t.Errorf("stored addr of %s: got %q, want %q", addr, v.Addr, want)
				}
				e.admin("DELETE", "/v1/nodes/"+label, "") // the next route registers the same BMCs
			}
		}
		if got := e.labels(); len(got) != 0 {
			t.Errorf("stored: got %q, want nothing", got)
		}
		// obmd's mock and the simulator take any address, as obmd did.
		if r := e.admin("PUT", "/node/hil-mock", `{"type":"mock","info":{"addr":"10.0.0.4:80"}}`); r.code != 200 {
			t.Errorf("mock with a port in addr: got %d %s, want 200", r.code, r.body)
		}
	})
}

func TestRegisterSharedBMC(t *testing.T) {
	forEngines(t, func(t *testing.T, eng dbtest.Engine) {
		e := newEnv(t, eng, nil)
		ipmi := func(typ, addr string, port int) string {
			p := ""
			if port != 0 {
				p = `,"port":` + strconv.Itoa(port)
			}
			return `{"type":"` + typ + `","info":{"addr":"` + addr + `","user":"admin","pass":"pw"` + p + `}}`
		}
		for n, rt := range routes {
			// Each route on BMCs of its own.
			v4, v6, name := "10.0.0."+strconv.Itoa(5+n), "fd00::"+strconv.Itoa(1+n), "bmc-"+strconv.Itoa(9+n)+".example"
			first := "first-" + rt.name
			for _, c := range []struct{ label, addr string }{{first, v4}, {"v6-" + rt.name, "[" + v6 + "]"}, {"name-" + rt.name, strings.ToUpper(name)}} {
				if r := e.admin("PUT", rt.prefix+c.label, ipmi("ipmi", c.addr, 0)); r.code != rt.created {
					t.Fatalf("register %s: got %d %s", c.label, r.code, r.body)
				}
			}
			// The same BMC in other words: the default port, another
			// driver, IPv6 forms, the case of a host name.
			for i, c := range []struct{ body, other, bmc string }{
				{ipmi("ipmi", v4, 623), first, "IPMI " + v4 + " port 623"},
				{ipmi("ipmitool", v4, 0), first, "IPMI " + v4 + " port 623"},
				{ipmi("ipmi", "::ffff:"+v4, 0), first, "IPMI " + v4 + " port 623"},
				{ipmi("ipmi", strings.Replace(v6, "::", ":0:0::", 1), 0), "v6-" + rt.name, "IPMI " + v6 + " port 623"},
				{ipmi("ipmi", name+".", 0), "name-" + rt.name, "IPMI " + name + " port 623"},
			} {
				label := "second-" + rt.name + "-" + strconv.Itoa(i)
				r := e.admin("PUT", rt.prefix+label, c.body)
				want := `node \"` + c.other + `\" already uses this BMC (` + c.bmc + `)`
				if r.code != 409 || !strings.Contains(r.body, want) || !strings.Contains(r.body, "?allow_shared_bmc=1") {
					t.Errorf("PUT %s%s %s: got %d %s, want 409 with %s", rt.prefix, label, c.body, r.code, r.body, want)
				}
			}
			// Another port is another BMC.
			if r := e.admin("PUT", rt.prefix+"port-"+rt.name, ipmi("ipmi", v4, 624)); r.code != rt.created {
				t.Errorf("another port: got %d %s, want %d", r.code, r.body, rt.created)
			}
			// Said to be intended: accepted; a bad value is refused.
			shared := "shared-" + rt.name
			if r := e.admin("PUT", rt.prefix+shared+"?allow_shared_bmc=maybe", ipmi("ipmi", v4, 0)); r.code != 400 ||
				!strings.Contains(r.body, "allow_shared_bmc") {
				t.Errorf("allow_shared_bmc=maybe: got %d %s, want 400", r.code, r.body)
			}
			if r := e.admin("PUT", rt.prefix+shared+"?allow_shared_bmc=1", ipmi("ipmi", v4, 0)); r.code != rt.created {
				t.Errorf("allow_shared_bmc=1: got %d %s, want %d", r.code, r.body, rt.created)
			}
			// Registering it again (idempotent) asks nothing more.
			if r := e.admin("PUT", rt.prefix+shared, ipmi("ipmi", v4, 0)); r.code != 200 {
				t.Errorf("the shared node again: got %d %s, want 200", r.code, r.body)
			}
		}
		// /v1 changes: keeping its own BMC (shared or not) is fine; moving
		// onto another node's is not.
		if r := e.admin("PUT", "/v1/nodes/shared-v1", ipmi("ipmi", "10.0.0.6", 0)[:len(ipmi("ipmi", "10.0.0.6", 0))-3]+`w2"}}`); r.code != 200 {
			t.Errorf("change of the shared node keeping its BMC: got %d %s, want 200", r.code, r.body)
		}
		if r := e.admin("PUT", "/v1/nodes/port-v1", ipmi("ipmi", "10.0.0.5", 624)); r.code != 409 ||
			!strings.Contains(r.body, `node \"port-obmd\" already uses this BMC (IPMI 10.0.0.5 port 624)`) {
			t.Errorf("change onto port-obmd's BMC: got %d %s, want 409", r.code, r.body)
		}
		e.admin("DELETE", "/v1/nodes/port-obmd", "")
		if r := e.admin("PUT", "/v1/nodes/port-v1", ipmi("ipmi", "10.0.0.5", 624)); r.code != 200 {
			t.Errorf("change onto a BMC nobody uses any more: got %d %s, want 200", r.code, r.body)
		}
		for _, l := range e.labels() {
			if strings.HasPrefix(l, "second-") {
				t.Errorf("stored: %q, a refused node", l)
			}
		}
	})
}

package nodes

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/sirupsen/logrus"

	"github.com/obmd/obmd/bastion/admin/api"
	"github.com/obmd/obmd/db"
	"github.com/obmd/obmd/keys"
	"github.com/obmd/obmd/sol"
)

// testInfo is a type's own info shape, unlike sol.Info: the table takes any.
type testInfo struct {
	URL  string `json:"url"`
	Pass string `json:"pass"`
	Slot int    `json:"slot,omitempty"`
}

func testTable(t *testing.T, sealer *keys.Sealer) (*Table, *[]string) {
	t.Helper()
	var forgot []string
	build := func(label string, _ sol.Info, _ logrus.FieldLogger) (sol.BMC, error) { return nil, nil }
	table, err := NewTable(sealer,
		Define("ip", SolKind("ip", SolSpec{Credentials: true, New: build,
			Check: func(i sol.Info) error {
				if len(i.Pass) > 20 {
					return errors.New("info.pass is longer than 20 bytes")
				}
				return nil
			}})),
		Define("own", Kind[testInfo]{
			Check: func(i testInfo) error {
				if !strings.HasPrefix(i.URL, "https://") {
					return errors.New("info.url must be https")
				}
				return nil
			},
			Canonical: func(i testInfo) testInfo { i.URL = strings.TrimSuffix(i.URL, "/"); return i },
			View:      func(i testInfo) api.BMC { return api.BMC{Addr: i.URL} },
			New:       func(string, testInfo, logrus.FieldLogger) (sol.BMC, error) { return nil, nil },
			Forget:    func(label string) { forgot = append(forgot, label) },
		}))
	if err != nil {
		t.Fatal(err)
	}
	return table, &forgot
}

func parse(table *Table, typ, info string, strict bool) (Info, error) {
	return table.Parse(typ, strict, func(v any) error {
		dec := json.NewDecoder(strings.NewReader(info))
		if strict {
			dec.DisallowUnknownFields()
		}
		return dec.Decode(v)
	})
}

// TestTable: a registration is decoded, checked and folded by its type;
// sealed, it opens as it was, only as its label's and under the same key;
// equal registrations compare equal; the view has no password.
func TestTable(t *testing.T) {
	key := make([]byte, 32)
	sealer, _ := keys.NewSealer(key)
	key[0] = 1
	other, _ := keys.NewSealer(key)
	table, forgot := testTable(t, sealer)

	for _, tt := range []struct{ name, typ, info, want string }{
		{"no type", "", `{}`, `field "type" is required (ip or own)`},
		{"unknown type", "\x1b[2J", `{}`, `unknown type "\x1b[2J" (want ip or own)`},
		{"shared rule", "ip", `{"addr":"a","user":"u"}`, "info.pass is required"},
		{"driver's check", "ip", `{"addr":"a","user":"u","pass":"` + strings.Repeat("p", 21) + `"}`, "info.pass is longer than 20 bytes"},
		{"own type's check", "own", `{"url":"http://x"}`, "info.url must be https"},
	} {
		if _, err := parse(table, tt.typ, tt.info, true); err == nil || err.Error() != tt.want {
			t.Errorf("%s: got %v, want %q", tt.name, err, tt.want)
		}
	}

	a, err := parse(table, "own", `{"url":"https://bmc/","pass":"secret-pw","slot":2}`, true)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := parse(table, "own", `{"url":"https://bmc","pass":"secret-pw","slot":2}`, true)
	c, _ := parse(table, "own", `{"url":"https://bmc","pass":"other-pw","slot":2}`, true)
	if !a.Equal(b) || a.Equal(c) || a.Type() != "own" {
		t.Errorf("equality: a=b %v (want true), a=c %v (want false)", a.Equal(b), a.Equal(c))
	}
	if view, _ := json.Marshal(a.View()); string(view) != `{"addr":"https://bmc"}` {
		t.Errorf("view: got %s", view)
	}
	sealed, err := table.Seal("n1", a)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(sealed), "secret-pw") {
		t.Errorf("sealed info holds the password in clear")
	}
	got, err := table.Open(db.Node{Label: "n1", Type: "own", InfoSealed: sealed})
	if err != nil || !got.Equal(a) {
		t.Fatalf("open: got %v (%v), want %v", got.View(), err, a.View())
	}
	if _, err := table.Open(db.Node{Label: "n2", Type: "own", InfoSealed: sealed}); err == nil {
		t.Errorf("open as another label: got nil error, want one")
	}
	otherTable, _ := testTable(t, other)
	if _, err := otherTable.Open(db.Node{Label: "n1", Type: "own", InfoSealed: sealed}); err == nil {
		t.Errorf("open under another key: got nil error, want one")
	}
	if _, err := table.Open(db.Node{Label: "n1", Type: "gone", InfoSealed: sealed}); err == nil {
		t.Errorf("open a type the table does not know: got nil error, want one")
	}
	table.Forget("n1")
	if len(*forgot) != 1 || (*forgot)[0] != "n1" {
		t.Errorf("forget: got %v, want [n1]", *forgot)
	}
}

// TestSolKind: the rules every sol.Info type shares, and the fields a type
// does not take (refused when strict, ignored otherwise).
func TestSolKind(t *testing.T) {
	sealer, _ := keys.NewSealer(make([]byte, 32))
	build := func(string, sol.Info, logrus.FieldLogger) (sol.BMC, error) { return nil, nil }
	table, err := NewTable(sealer,
		Define("tool", SolKind("tool", SolSpec{Credentials: true, Interface: true, New: build})),
		Define("sim", SolKind("sim", SolSpec{New: build})))
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name, typ, info string
		strict          bool
		want            string // "" = accepted
	}{
		{"minimal", "tool", `{"addr":"a","user":"u","pass":"p"}`, true, ""},
		{"addr with space", "tool", `{"addr":"a b","user":"u","pass":"p"}`, false, "info.addr"},
		{"addr like a flag", "tool", `{"addr":"-oProxy","user":"u","pass":"p"}`, false, `must not start with "-"`},
		{"port 0", "tool", `{"addr":"a","user":"u","pass":"p","port":0}`, false, "info.port 0 is out of range"},
		{"cipher 18", "tool", `{"addr":"a","user":"u","pass":"p","cipher":18}`, false, "info.cipher 18"},
		{"interface", "tool", `{"addr":"a","user":"u","pass":"p","interface":"open"}`, false, "info.interface"},
		{"pass with control", "tool", `{"addr":"a","user":"u","pass":"p\n"}`, false, "info.pass must not contain"},
		{"sim with user, strict", "sim", `{"addr":"a","user":"u"}`, true, "info.user does not apply to type sim"},
		{"sim with user, obmd route", "sim", `{"addr":"a","user":"u"}`, false, ""},
	} {
		_, err := parse(table, tt.typ, tt.info, tt.strict)
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("%s: got %v, want accepted", tt.name, err)
		case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
			t.Errorf("%s: got %v, want an error containing %q", tt.name, err, tt.want)
		}
	}
	// Documented defaults fold: the same BMC compares equal.
	a, _ := parse(table, "tool", `{"addr":"a","user":"u","pass":"p","port":623,"cipher":-1,"interface":"lanplus"}`, true)
	b, _ := parse(table, "tool", `{"addr":"a","user":"u","pass":"p"}`, true)
	if !a.Equal(b) {
		t.Errorf("defaults: %v and %v differ", a.View(), b.View())
	}
}

// FuzzBMCHost: what bmcHost accepts is stored without brackets, accepted
// again unchanged (so it holds no port: that is refused), and has the
// endpoint of what was sent.
func FuzzBMCHost(f *testing.F) {
	for _, s := range []string{"10.0.0.5", "[::1]", "::1", "fd00:0::5", "bmc-17.example", "127.0.0.1:9623", "[::1]:623",
		"[10.0.0.5]", "https://bmc", "a@b", "fe80::1%eth0", "::ffff:10.0.0.5", "BMC.Example."} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, addr string) {
		host, err := bmcHost(addr)
		if err != nil {
			return
		}
		if strings.ContainsAny(host, "[]/@") {
			t.Fatalf("bmcHost(%q) = %q: brackets or a URL's characters", addr, host)
		}
		if again, err := bmcHost(host); err != nil || again != host {
			t.Fatalf("bmcHost(%q) = %q, then %q, %v: want it unchanged", addr, host, again, err)
		}
		if sol.IPMIEndpoint(host, 0) != sol.IPMIEndpoint(addr, 623) {
			t.Fatalf("endpoints of %q and %q differ: %q, %q", addr, host, sol.IPMIEndpoint(addr, 623), sol.IPMIEndpoint(host, 0))
		}
	})
}

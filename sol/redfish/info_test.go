package redfish

import (
	"strings"
	"testing"

	"github.com/sirupsen/logrus"
)

func intp(n int) *int { return &n }

// TestCheck: every bad field is refused with an error that names it, and no
// error shows the password or the address.
func TestCheck(t *testing.T) {
	ok := Info{Addr: "https://10.0.0.5", User: "obmd", Pass: "bmc-secret-1"}
	with := func(edit func(*Info)) Info { i := ok; edit(&i); return i }
	long := strings.Repeat("a", 256)
	tests := []struct {
		name  string
		info  Info
		field string // "" = valid
	}{
		{"minimal", ok, ""},
		{"port", with(func(i *Info) { i.Addr = "https://bmc-17.example:8443" }), ""},
		{"trailing slash", with(func(i *Info) { i.Addr = "https://bmc-17.example/" }), ""},
		{"IPv6", with(func(i *Info) { i.Addr = "https://[fd00::5]:443" }), ""},
		{"system id", with(func(i *Info) { i.System = "System.Embedded.1" }), ""},
		{"system path", with(func(i *Info) { i.System = "/redfish/v1/Systems/1" }), ""},
		{"sol", with(func(i *Info) { i.SOL = &SOLInfo{Port: 623, Cipher: intp(17)} }), ""},
		{"sol defaults", with(func(i *Info) { i.SOL = &SOLInfo{Cipher: intp(-1)} }), ""},
		{"insecure", with(func(i *Info) { i.Insecure = true }), ""},

		{"no addr", with(func(i *Info) { i.Addr = "" }), "info.addr"},
		{"http", with(func(i *Info) { i.Addr = "http://10.0.0.5" }), "info.addr"},
		{"bare host", with(func(i *Info) { i.Addr = "10.0.0.5" }), "info.addr"},
		{"other scheme", with(func(i *Info) { i.Addr = "ftp://10.0.0.5" }), "info.addr"},
		{"credentials in URL", with(func(i *Info) { i.Addr = "https://root:bmc-secret-1@10.0.0.5" }), "info.addr"},
		{"user in URL", with(func(i *Info) { i.Addr = "https://root@10.0.0.5" }), "info.addr"},
		{"path", with(func(i *Info) { i.Addr = "https://10.0.0.5/redfish/v1" }), "info.addr"},
		{"query", with(func(i *Info) { i.Addr = "https://10.0.0.5/?x=1" }), "info.addr"},
		{"empty query", with(func(i *Info) { i.Addr = "https://10.0.0.5?" }), "info.addr"},
		{"fragment", with(func(i *Info) { i.Addr = "https://10.0.0.5#x" }), "info.addr"},
		{"no host", with(func(i *Info) { i.Addr = "https://:443" }), "info.addr"},
		{"port 0", with(func(i *Info) { i.Addr = "https://10.0.0.5:0" }), "info.addr"},
		{"port too big", with(func(i *Info) { i.Addr = "https://10.0.0.5:65536" }), "info.addr"},
		{"empty port", with(func(i *Info) { i.Addr = "https://10.0.0.5:" }), "info.addr"},
		{"space", with(func(i *Info) { i.Addr = "https://10.0.0.5 " }), "info.addr"},
		{"control", with(func(i *Info) { i.Addr = "https://10.0.0.5\n" }), "info.addr"},
		{"bad host", with(func(i *Info) { i.Addr = "https://bmc$17.example" }), "info.addr"},
		{"host with dash", with(func(i *Info) { i.Addr = "https://-bmc.example" }), "info.addr"},
		{"IPv6 zone", with(func(i *Info) { i.Addr = "https://[fe80::1%25eth0]" }), "info.addr"},
		{"IPv4 in brackets", with(func(i *Info) { i.Addr = "https://[10.0.0.5]" }), "info.addr"},
		{"long addr", with(func(i *Info) { i.Addr = "https://" + long + ".example" }), "info.addr"},
		{"no user", with(func(i *Info) { i.User = "" }), "info.user"},
		{"long user", with(func(i *Info) { i.User = long }), "info.user"},
		{"user control", with(func(i *Info) { i.User = "ro\x00ot" }), "info.user"},
		{"user not UTF-8", with(func(i *Info) { i.User = "ro\xffot" }), "info.user"},
		{"no pass", with(func(i *Info) { i.Pass = "" }), "info.pass"},
		{"long pass", with(func(i *Info) { i.Pass = long }), "info.pass"},
		{"pass control", with(func(i *Info) { i.Pass = "bmc-secret-1\r" }), "info.pass"},
		{"system path elsewhere", with(func(i *Info) { i.System = "/redfish/v1/Chassis/1" }), "info.system"},
		{"system path nested", with(func(i *Info) { i.System = "/redfish/v1/Systems/1/Bios" }), "info.system"},
		{"system collection", with(func(i *Info) { i.System = "/redfish/v1/Systems/" }), "info.system"},
		{"system dots", with(func(i *Info) { i.System = ".." }), "info.system"},
		{"system query", with(func(i *Info) { i.System = "1?$expand=*" }), "info.system"},
		{"system space", with(func(i *Info) { i.System = "System 1" }), "info.system"},
		{"long system", with(func(i *Info) { i.System = long }), "info.system"},
		{"sol port", with(func(i *Info) { i.SOL = &SOLInfo{Port: 70000} }), "info.sol.port"},
		{"sol negative port", with(func(i *Info) { i.SOL = &SOLInfo{Port: -1} }), "info.sol.port"},
		{"sol cipher", with(func(i *Info) { i.SOL = &SOLInfo{Cipher: intp(4)} }), "info.sol.cipher"},
		{"sol cipher range", with(func(i *Info) { i.SOL = &SOLInfo{Cipher: intp(99)} }), "info.sol.cipher"},
		{"sol long user", with(func(i *Info) { i.User = strings.Repeat("u", 17); i.SOL = &SOLInfo{} }), "info.user"},
		{"sol long pass", with(func(i *Info) { i.Pass = strings.Repeat("p", 21); i.SOL = &SOLInfo{} }), "info.pass"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := Check(tt.info)
			if tt.field == "" {
				if err != nil {
					t.Fatalf("Check: got %v, want nil", err)
				}
				if _, err := New("n", tt.info, Config{}, logrus.New()); err != nil {
					t.Fatalf("New: got %v, want nil", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Check: got nil, want an error naming %s", tt.field)
			}
			msg := err.Error()
			if !strings.HasPrefix(msg, tt.field+" ") {
				t.Errorf("Check: got %q, want an error naming %s", msg, tt.field)
			}
			if strings.Contains(msg, "bmc-secret-1") || strings.Contains(msg, "10.0.0.5") {
				t.Errorf("error %q shows the password or the address", msg)
			}
			if _, err := New("n", tt.info, Config{}, logrus.New()); err == nil {
				t.Errorf("New: got nil error, want Check's")
			}
		})
	}
}

// TestCanonical: registrations that differ only by documented defaults are
// equal; others are not.
func TestCanonical(t *testing.T) {
	base := Info{Addr: "https://bmc-17.example", User: "u", Pass: "p", System: "1", SOL: &SOLInfo{}}
	same := []Info{
		{Addr: "https://BMC-17.example:443/", User: "u", Pass: "p", System: "/redfish/v1/Systems/1", SOL: &SOLInfo{Port: 623}},
		{Addr: "HTTPS://bmc-17.example", User: "u", Pass: "p", System: "/redfish/v1/Systems/1/", SOL: &SOLInfo{Cipher: intp(-1)}},
	}
	for _, s := range same {
		if err := Check(s); err != nil {
			t.Fatalf("Check(%+v): %v", s, err)
		}
		if !base.Equal(s) {
			t.Errorf("%+v: got not equal, want equal to %+v", s.Canonical(), base.Canonical())
		}
	}
	differ := []func(*Info){
		func(i *Info) { i.Addr = "https://bmc-17.example:8443" },
		func(i *Info) { i.Pass = "q" },
		func(i *Info) { i.System = "" },
		func(i *Info) { i.Insecure = true },
		func(i *Info) { i.SOL = nil },
		func(i *Info) { i.SOL = &SOLInfo{Cipher: intp(3)} },
	}
	for n, edit := range differ {
		other := base
		edit(&other)
		if base.Equal(other) {
			t.Errorf("change %d: got equal, want different", n)
		}
	}
	if base.SOL.Port != 0 || base.Canonical().SOL == base.SOL {
		t.Errorf("Canonical changed or shared its receiver's SOL")
	}
}

// TestNewNoIO: New resolves nothing and connects nowhere (a name that
// cannot resolve is fine), and keeps the endpoint it will use.
func TestNewNoIO(t *testing.T) {
	b, err := New("n", Info{Addr: "https://bmc.invalid:8443/", User: "u", Pass: "p", SOL: &SOLInfo{}}, Config{}, logrus.New())
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	if b.endpoint != "https://bmc.invalid:8443" || !b.HasConsole() {
		t.Errorf("endpoint %q, console %v: want https://bmc.invalid:8443 and a console", b.endpoint, b.HasConsole())
	}
	if b.cfg.RequestTimeout != DefaultRequestTimeout || b.cfg.PollInterval != DefaultPollInterval ||
		b.cfg.StateTimeout != DefaultStateTimeout || b.cfg.LogoutTimeout != DefaultLogoutTimeout {
		t.Errorf("config defaults: got %+v", b.cfg)
	}
	if _, err := New("n", Info{Addr: "https://h", User: "u", Pass: "p"}, Config{}, nil); err == nil {
		t.Errorf("New without a logger: got nil error")
	}
	v6, err := New("n", Info{Addr: "https://[::1]", User: "u", Pass: "p"}, Config{}, logrus.New())
	if err != nil || v6.endpoint != "https://[::1]:443" {
		t.Errorf("IPv6: got %v, %v; want https://[::1]:443", v6, err)
	}
}

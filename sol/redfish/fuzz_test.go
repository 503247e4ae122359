package redfish

import (
	"strings"
	"testing"

	"github.com/sirupsen/logrus"
)

// FuzzCheck: Check never panics; what it accepts New accepts, and its
// canonical form is accepted, stable and equal; its errors never show the
// password (marked "P@ss" here) or a long address.
func FuzzCheck(f *testing.F) {
	for _, s := range []struct{ addr, user, system string }{
		{"https://10.0.0.5", "root", ""},
		{"https://BMC-17.example:443/", "obmd", "/redfish/v1/Systems/1/"},
		{"https://[fd00::5]:8443", "u", "System.Embedded.1"},
		{"https://root:secret@10.0.0.5", "root", "1"},
		{"http://10.0.0.5", "root", ".."},
		{"https://b%6dc:0443", "ro\x00ot", "/redfish/v1/Systems"},
	} {
		f.Add(s.addr, s.user, "x", s.system, false, 623, 3)
	}
	f.Fuzz(func(t *testing.T, addr, user, pass, system string, withSOL bool, port, cipher int) {
		info := Info{Addr: addr, User: user, Pass: "P@ss" + pass, System: system}
		if withSOL {
			info.SOL = &SOLInfo{Port: port, Cipher: &cipher}
		}
		err := Check(info)
		if err != nil {
			msg := err.Error()
			if strings.Contains(msg, "P@ss") || (len(addr) >= 16 && strings.Contains(msg, addr)) {
				t.Fatalf("error %q shows the password or the address", msg)
			}
			if !strings.HasPrefix(msg, "info.") {
				t.Fatalf("error %q names no field", msg)
			}
			return
		}
		if _, err := New("n", info, Config{}, logrus.New()); err != nil {
			t.Fatalf("Check accepted %+v, New refused: %v", info, err)
		}
		c := info.Canonical()
		if err := Check(c); err != nil {
			t.Fatalf("canonical %+v refused: %v", c, err)
		}
		if cc := c.Canonical(); !cc.Equal(c) || !info.Equal(c) || cc.Addr != c.Addr {
			t.Fatalf("canonical form not stable: %+v then %+v", c, cc)
		}
	})
}

package bmcs

// Registration end to end (the daemon's admin API over HTTP, then the BMC
// over IPMI): an IPv6 BMC registered bracketed or not is reached at that
// address by both IPMI drivers; an address with a port in it and a second
// node on a BMC another node uses are refused with what to do instead.

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/obmd/obmd/bastion/e2e/obmdtest"

	"github.com/obmd/obmd/sol/soltest/ipmisim"
)

func TestRegisterIPv6BMC(t *testing.T) {
	t.Parallel()
	ipmisim.Require(t, "ipmitool")
	s := ipmisim.StartOn(t, "::1")
	o := obmdtest.Start(t)
	body := func(typ, addr string) string {
		return fmt.Sprintf(`{"type":%q,"info":{"addr":%q,"port":%d,"user":%q,"pass":%q,"cipher":3}}`, typ, addr, s.Port, ipmisim.User, ipmisim.Pass)
	}

	// A port in addr: refused, saying where it goes.
	code, resp := o.API("PUT", "/node/v6-port", body("ipmi", fmt.Sprintf("[::1]:%d", s.Port)))
	if want := fmt.Sprintf(`and the port in info.port (%d)`, s.Port); code != 400 || !strings.Contains(string(resp), want) {
		t.Errorf("addr with a port: got %d %s, want 400 with %s", code, resp, want)
	}

	// Bracketed through obmd's route (native driver), bare through /v1
	// (ipmitool): the second is the same BMC, so it must say so.
	o.MustAPI(200, "PUT", "/node/v6-native", body("ipmi", "[::1]"))
	code, resp = o.API("PUT", "/v1/nodes/v6-tool", body("ipmitool", "::1"))
	if code != 409 || !strings.Contains(string(resp), `node \"v6-native\" already uses this BMC (IPMI ::1 port `) {
		t.Errorf("a second node on the BMC: got %d %s, want 409 naming v6-native", code, resp)
	}
	o.MustAPI(201, "PUT", "/v1/nodes/v6-tool?allow_shared_bmc=1", body("ipmitool", "::1"))

	for _, label := range []string{"v6-native", "v6-tool"} {
		var v struct{ Addr string }
		if err := json.Unmarshal(o.MustAPI(200, "GET", "/v1/nodes/"+label, nil), &v); err != nil || v.Addr != "::1" {
			t.Errorf("%s's stored addr: got %q (%v), want ::1", label, v.Addr, err)
		}
		res, err := o.ExecGo(label, o.Rotate(label), "power-status")
		if err != nil || res.Code != 0 || res.Stdout != label+": power on\n" {
			t.Errorf("%s power-status over IPv6: got %v, %v; want power on", label, res, err)
		}
		if rep := fetchDoctorReport(o, t, label); !rep.OK || !strings.Contains(rep.Checks[0].Result, fmt.Sprintf("[::1]:%d", s.Port)) {
			t.Errorf("%s doctor: got %+v, want every step passed at [::1]:%d", label, rep, s.Port)
		}
	}
}

package ipmisim

import (
	"os"
	"os/exec"
	"strconv"
	"testing"
)

// TestSimulator checks the harness itself with ipmitool: power actions reach
// the hook, and the simulator survives a kill and restart on its port.
func TestSimulator(t *testing.T) {
	Require(t, "ipmitool")
	s := Start(t)
	ipmitool := func(args ...string) string {
		t.Helper()
		base := []string{"-I", "lanplus", "-C", "3", "-H", "127.0.0.1", "-p", itoa(s.Port), "-U", User, "-E"}
		cmd := exec.Command("ipmitool", append(base, args...)...)
		cmd.Env = append(os.Environ(), "IPMI_PASSWORD="+Pass)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("ipmitool %v: %v: %s", args, err, out)
		}
		return string(out)
	}
	if got := ipmitool("power", "status"); got != "Chassis Power is on\n" {
		t.Errorf("power status: got %q, want on", got)
	}
	ipmitool("power", "off")
	if s.PowerOn() {
		t.Errorf("power after off: got on, want off")
	}
	if got, want := s.Actions(), []string{"power 0"}; len(got) != 1 || got[0] != want[0] {
		t.Errorf("actions: got %q, want %q", got, want)
	}
	s.Kill()
	if s.Alive() {
		t.Fatal("alive after Kill")
	}
	if err := s.Restart(); err != nil {
		t.Fatalf("restart: %v", err)
	}
	if got := ipmitool("power", "status"); got != "Chassis Power is off\n" {
		t.Errorf("power status after restart: got %q, want off", got)
	}
}

func itoa(i int) string { return strconv.Itoa(i) }

package goipmisrv

import (
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/obmd/obmd/sol"
	"github.com/obmd/obmd/sol/soltest"
)

// TestServer checks the harness itself with the real ipmitool, through the
// relay: power actions reach the machine and the trace, boot flags read
// back in-band, and the offered cipher suites hold.
func TestServer(t *testing.T) {
	if _, err := exec.LookPath("ipmitool"); err != nil {
		soltest.Missing(t, "missing ipmitool")
	}
	s := Start(t, Options{})
	info := s.Info()
	if got := soltest.IPMITool(t, info, "power", "status"); got != "Chassis Power is on\n" {
		t.Errorf("power status: got %q, want on", got)
	}
	soltest.IPMITool(t, info, "power", "off")
	if s.PowerOn() {
		t.Error("power after off: got on, want off")
	}
	if got, want := s.Actions(), []string{"Chassis Control"}; !slices.Equal(got, want) {
		t.Errorf("actions: got %q, want %q", got, want)
	}
	soltest.IPMITool(t, info, "chassis", "bootdev", "pxe", "options=persistent")
	if dev, persistent, err := s.Boot(); err != nil || dev != sol.BootPXE || !persistent {
		t.Errorf("boot flags: got %q persistent %v (%v), want pxe persistent", dev, persistent, err)
	}
	if err := s.Reset(); err != nil {
		t.Fatal(err)
	}
	if !s.PowerOn() || len(s.Actions()) != 0 {
		t.Errorf("after Reset: power on %v, actions %q; want on, none", s.PowerOn(), s.Actions())
	}
	if dev, _, err := s.Boot(); err != nil || dev != "" {
		t.Errorf("boot flags after Reset: got %q (%v), want none", dev, err)
	}

	only17 := Start(t, Options{CipherSuites: []int{17}})
	three := only17.Info()
	c := 3
	three.Cipher = &c
	_, err := soltest.RunIPMITool(three, "power", "status")
	if err == nil || !strings.Contains(err.Error(), "open session") {
		t.Errorf("suite 3 on a BMC that offers only 17: got %v, want an open session refusal", err)
	}
	soltest.IPMITool(t, only17.Info(), "power", "status")
}

// recorder is a testing.TB that records Fatal and Skip instead of ending
// the test.
type recorder struct {
	testing.TB
	fatal, skip string
}

func (r *recorder) Fatal(args ...any) { r.fatal = fmt.Sprint(args...) }
func (r *recorder) Skip(args ...any)  { r.skip = fmt.Sprint(args...) }

// TestBinaryMissing: a goipmi-server that cannot be had skips the test, or
// fails it under OBMD_REQUIRE_INTEGRATION=1.
func TestBinaryMissing(t *testing.T) {
	t.Setenv(EnvBinary, "/nonexistent/goipmi-server")
	for _, require := range []string{"1", ""} {
		t.Setenv(soltest.RequireEnv, require)
		r := &recorder{TB: t}
		Binary(r)
		if got := r.fatal != ""; got != (require == "1") || got == (r.skip != "") {
			t.Errorf("%s=%q: got fatal %q, skip %q; want a failure exactly when required", soltest.RequireEnv, require, r.fatal, r.skip)
		}
	}
}

// TestThreadsGoHome: the thread that entered a server's network namespace
// is back in the test process's own once the server stops, and alive: a
// thread left to end would take with it every child started with
// Pdeathsig from it (an ipmi_sim, another goipmi-server).
func TestThreadsGoHome(t *testing.T) {
	home, err := os.Readlink("/proc/self/ns/net")
	if err != nil {
		t.Fatal(err)
	}
	s := Start(t, Options{})
	tid := s.ns.tid
	if d := s.stop(); d != "" {
		t.Fatalf("server died: %s", d)
	}
	ns, err := os.Readlink(fmt.Sprintf("/proc/self/task/%d/ns/net", tid))
	if err != nil {
		t.Fatalf("the namespace thread %d: %v (it ended)", tid, err)
	}
	if ns != home {
		t.Errorf("the namespace thread is in %s, want %s", ns, home)
	}
}

package commands

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/obmd/obmd/sol"
)

// diagBMC is a BMC that explains itself with checks.
type diagBMC struct {
	fakeBMC
	checks []sol.Check
}

func (d *diagBMC) Diagnose(ctx context.Context) []sol.Check {
	if err := d.do(ctx, "diagnose"); err != nil {
		return nil
	}
	return d.checks
}

// TestDoctor: doctor prints one line per step with the tenant's text, a
// summary, and exits 0 only when every step passed; a failed step adds
// what to do, the error on stderr and exit 1; --json carries the steps
// either way; the run is audited with the administrator's detail; a BMC
// that cannot diagnose says so; the BMC's address never reaches the
// tenant.
func TestDoctor(t *testing.T) {
	const addr = "10.9.8.7:623"
	healthy := []sol.Check{
		sol.PassDetail(sol.CheckAddress, addr+" answers RMCP ping", "the BMC answers"),
		sol.Pass(sol.CheckPower, "power is on"),
	}
	failed := append(healthy[:1:1], sol.Fail(sol.CheckSOL, "SOL payload held by BMC session 0x00000042 (user 2 from 10.1.1.1:5000)",
		"SOL payload held by BMC session 0x00000042, not obmd", "end the other session"))
	env := newEnv(t, Config{})
	env.bmcs["ok-1"] = &diagBMC{checks: healthy}
	env.bmcs["bad-1"] = &diagBMC{checks: failed}

	out, errOut, code := run(t, env.r, context.Background(), "ok-1", "doctor")
	want := "ok  address  the BMC answers\nok  power    power is on\nok-1: doctor: all 2 checks passed\n"
	if code != ExitOK || out != want || errOut != "" {
		t.Errorf("healthy: got %d %q %q, want 0 %q", code, out, errOut, want)
	}
	out, errOut, code = run(t, env.r, context.Background(), "bad-1", "doctor")
	want = "ok    address  the BMC answers\nFAIL  sol      SOL payload held by BMC session 0x00000042, not obmd; what to do: end the other session\n" +
		"bad-1: doctor: sol failed (doctor stops at the first failure)\n"
	wantErr := "obmd: doctor bad-1: sol: SOL payload held by BMC session 0x00000042, not obmd\n"
	if code != ExitFailed || out != want || errOut != wantErr {
		t.Errorf("failed:\ngot  %d %q %q\nwant 1 %q %q", code, out, errOut, want, wantErr)
	}
	out, _, code = run(t, env.r, context.Background(), "bad-1", "doctor --json")
	var j struct {
		OK     bool
		Error  string
		Checks []struct {
			Name, Result, Hint string
			OK                 bool
		}
	}
	if err := json.Unmarshal([]byte(out), &j); err != nil || code != ExitFailed || j.OK || len(j.Checks) != 2 ||
		j.Checks[1].Name != sol.CheckSOL || j.Checks[1].OK || j.Checks[1].Hint != "end the other session" || !j.Checks[0].OK ||
		j.Error != "doctor bad-1: sol: SOL payload held by BMC session 0x00000042, not obmd" {
		t.Errorf("failed --json: got %d %s (%v)", code, out, err)
	}
	out, _, code = run(t, env.r, context.Background(), "ok-1", "doctor --json")
	if code != ExitOK || !strings.HasPrefix(out, `{"node":"ok-1","command":"doctor","ok":true,"checks":[{"name":"address","ok":true,"result":"the BMC answers"}`) {
		t.Errorf("healthy --json: got %d %s", code, out)
	}
	for _, o := range []string{out, errOut} {
		if strings.Contains(o, "10.") {
			t.Errorf("a tenant's output names an address: %q", o)
		}
	}

	res, err := env.r.Do(context.Background(), req("bad-1"), Command{Name: CmdDoctor})
	var ce *CheckError
	if !errors.As(err, &ce) || ce.Check.Name != sol.CheckSOL || len(res.Checks) != 2 || ExitCode(err) != ExitFailed {
		t.Errorf("Do: got %+v, %v; want the checks and a *CheckError", res, err)
	}
	events := env.audit.Events()
	if len(events) != 5 {
		t.Fatalf("audit: got %d events, want 5", len(events))
	}
	if e := events[0]; e.Action != ActionDoctor || e.Result != ResultOK || !strings.HasPrefix(e.Detail, "2 checks passed; took") {
		t.Errorf("audit of a healthy run: got %+v", e)
	}
	if e := events[1]; e.Action != ActionDoctor || e.Result != ResultError || !strings.Contains(e.Detail, "user 2 from 10.1.1.1:5000") {
		t.Errorf("audit of a failed run: got %+v, want the administrator's detail", e)
	}

	// The plain fake has no Diagnose: not supported.
	_, errOut, code = run(t, env.r, context.Background(), "node-17", "doctor")
	if code != ExitFailed || errOut != "obmd: doctor node-17: "+sol.ErrNotSupported.Error()+"\n" {
		t.Errorf("no diagnosis: got %d %q", code, errOut)
	}
	// A BMC that returns no step cannot diagnose either.
	env.bmcs["empty-1"] = &diagBMC{}
	if _, err := env.r.Do(context.Background(), req("empty-1"), Command{Name: CmdDoctor}); !errors.Is(err, sol.ErrNotSupported) {
		t.Errorf("no steps: got %v, want ErrNotSupported", err)
	}
	for _, c := range env.bmcs["ok-1"].(*diagBMC).Calls() {
		if c != "diagnose" {
			t.Errorf("doctor called %s on the BMC", c)
		}
	}
}

// TestDoctorOnePerNode: while a doctor run is in flight on a node, another
// on the same node is refused at once as busy (exit 4, audited), one on
// another node and power operations on the same node are not held up, and
// once the first has finished the node can be diagnosed again.
func TestDoctorOnePerNode(t *testing.T) {
	env := newEnv(t, Config{})
	slow := &diagBMC{checks: []sol.Check{sol.Pass(sol.CheckPower, "power is on")}}
	slow.gate, slow.started, slow.slow = make(chan struct{}), make(chan string, 1), "diagnose"
	env.bmcs["n1"] = slow
	env.bmcs["n2"] = &diagBMC{checks: slow.checks}
	first := make(chan int, 1)
	go func() {
		_, _, code := run(t, env.r, context.Background(), "n1", "doctor")
		first <- code
	}()
	<-slow.started
	_, errOut, code := run(t, env.r, context.Background(), "n1", "doctor")
	if code != ExitBusy || errOut != "obmd: doctor n1: "+ErrDoctorBusy.Error()+"\n" {
		t.Errorf("a second doctor run: got %d %q, want 4 and %q", code, errOut, ErrDoctorBusy.Error())
	}
	if _, _, code := run(t, env.r, context.Background(), "n2", "doctor"); code != ExitOK {
		t.Errorf("doctor on another node: got %d, want 0", code)
	}
	if _, _, code := run(t, env.r, context.Background(), "n1", "power-on"); code != ExitOK {
		t.Errorf("power-on during a doctor run: got %d, want 0", code)
	}
	close(slow.gate)
	if code := <-first; code != ExitOK {
		t.Errorf("the first doctor run: got %d, want 0", code)
	}
	if _, _, code := run(t, env.r, context.Background(), "n1", "doctor"); code != ExitOK {
		t.Errorf("doctor after the first ended: got %d, want 0", code)
	}
	var busy int
	for _, e := range env.audit.Events() {
		if e.Action == ActionDoctor && e.Result == ResultBusy {
			busy++
		}
	}
	if busy != 1 {
		t.Errorf("audited %d busy doctor runs, want 1", busy)
	}
}

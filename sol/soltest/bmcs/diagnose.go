package bmcs

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/obmd/obmd/sol"
	"github.com/obmd/obmd/sol/ipmicheck"
	"github.com/obmd/obmd/sol/soltest"
	"github.com/obmd/obmd/sol/soltest/goipmisrv"
	"github.com/obmd/obmd/sol/soltest/ipmisim"
)

// allSteps is a healthy IPMI node's diagnosis.
var allSteps = []string{sol.CheckAddress, sol.CheckAuth, sol.CheckPower, sol.CheckSOL}

// diagnose runs b's diagnosis within a generous bound.
func diagnose(t *testing.T, b sol.BMC) []sol.Check {
	t.Helper()
	d, ok := b.(sol.Diagnoser)
	if !ok {
		t.Fatalf("%T is no sol.Diagnoser", b)
	}
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	return d.Diagnose(ctx)
}

// want checks a diagnosis: the steps run are steps, every one but the last
// passed, the last passed when ok, its tenant text holds tenant and, on
// failure, its hint is hint; no tenant text or hint names the BMC's
// address or password; a failed step's detail names what it failed on.
func want(t *testing.T, checks []sol.Check, info sol.Info, steps []string, ok bool, tenant, hint string) {
	t.Helper()
	var names []string
	for _, c := range checks {
		names = append(names, c.Name)
	}
	if !slices.Equal(names, steps) {
		t.Fatalf("steps: got %q, want %q (%+v)", names, steps, checks)
	}
	for i, c := range checks {
		last := i == len(checks)-1
		if c.OK != (ok || !last) {
			t.Errorf("%s: got OK %v, want %v (%+v)", c.Name, c.OK, ok || !last, c)
		}
		for _, text := range []string{c.Tenant, c.Hint} {
			for _, leak := range []string{info.Addr, ":" + strconv.Itoa(info.Port), info.Pass} {
				if strings.Contains(text, leak) {
					t.Errorf("%s: tenant text %q holds %q", c.Name, text, leak)
				}
			}
		}
		if strings.Contains(c.Detail, info.Pass) {
			t.Errorf("%s: detail holds the password", c.Name)
		}
		if strings.ContainsAny(c.Detail, "\r\n") {
			t.Errorf("%s: detail %q is more than one line", c.Name, c.Detail)
		}
		// A tenant can change neither the registration nor the settings.
		if th := c.HintFor(true); strings.Contains(th, "info.") || strings.Contains(th, "sol_enable") {
			t.Errorf("%s: tenant hint %q tells the tenant to change what only the operator can", c.Name, th)
		}
		if c.Tenant == "" || c.Detail == "" || (!c.OK && c.Hint == "") || (c.OK && c.Hint != "") {
			t.Errorf("%s: incomplete check %+v", c.Name, c)
		}
	}
	lastCheck := checks[len(checks)-1]
	if !strings.Contains(lastCheck.Tenant, tenant) {
		t.Errorf("%s: tenant text %q, want it to say %q", lastCheck.Name, lastCheck.Tenant, tenant)
	}
	if !ok && lastCheck.Hint != hint {
		t.Errorf("%s: hint %q, want %q", lastCheck.Name, lastCheck.Hint, hint)
	}
	if !ok && lastCheck.Name == sol.CheckAddress && !strings.Contains(lastCheck.Detail, info.Addr) {
		t.Errorf("address detail %q does not name the BMC", lastCheck.Detail)
	}
	if got := sol.Passed(checks); got != ok {
		t.Errorf("Passed: got %v, want %v", got, ok)
	}
}

// RunDiagnose checks a driver's half of doctor (sol.Diagnoser) on both BMCs
// and on each failure it can name: wrong password, unreachable address
// (closed port, silent BMC), cipher suite refused, SOL disabled with
// sol_enable never, payload held by another session. It also checks that a
// diagnosis changes nothing: no chassis action, SOL left off, another's
// console left running.
func RunDiagnose(t *testing.T, newDriver Driver) {
	driver := func(t *testing.T, info sol.Info, opts sol.IPMIOptions) sol.BMC {
		log, _ := logs(t)
		return newDriver(t, info, opts, log)
	}
	Each(t, func(t *testing.T, m soltest.Machine) {
		if err := m.Reset(); err != nil {
			t.Fatal(err)
		}
		info := m.Info()
		t.Run("healthy, negotiated suite", func(t *testing.T) {
			suite := "cipher suite 17"
			if m.Kind() == soltest.IPMISim {
				suite = "cipher suite 3, privilege administrator (suite 17 refused)"
			}
			checks := diagnose(t, driver(t, soltest.Unpinned(info), sol.IPMIOptions{}))
			want(t, checks, info, allSteps, true, "SOL is enabled; its payload is free", "")
			if !strings.Contains(checks[1].Tenant, suite) {
				t.Errorf("authentication: got %q, want it to say %q", checks[1].Tenant, suite)
			}
			if checks[2].Tenant != "power is on" {
				t.Errorf("power: got %q, want on", checks[2].Tenant)
			}
		})
		t.Run("wrong password", func(t *testing.T) {
			checks := diagnose(t, driver(t, m.WrongPassword(), sol.IPMIOptions{}))
			want(t, checks, info, allSteps[:2], false, sol.FaultCredentials.String(), ipmicheck.HintCredentials)
		})
		t.Run("SOL disabled", func(t *testing.T) {
			setSOL(t, info, false)
			defer setSOL(t, info, true)
			checks := diagnose(t, driver(t, info, sol.IPMIOptions{SOLEnable: sol.SOLEnableNever}))
			want(t, checks, info, allSteps, false, ipmicheck.OffDisabled, ipmicheck.HintSOLDisabled)
			checks = diagnose(t, driver(t, info, sol.IPMIOptions{}))
			want(t, checks, info, allSteps, true, "obmd switches it on when a console opens", "")
			if solEnabled(t, info) {
				t.Error("SOL after a diagnosis: got enabled, want left off")
			}
		})
		t.Run("payload held by another session", func(t *testing.T) {
			m.ResetSerial()
			other := soltest.Open(t, driver(t, info, sol.IPMIOptions{}))
			checks := diagnose(t, driver(t, info, sol.IPMIOptions{}))
			want(t, checks, info, allSteps, false, "SOL payload held by BMC session 0x", ipmicheck.HintSOLHeld)
			t.Logf("held: %s", checks[3].Detail)
			held := func(_ context.Context, label string) bool { return label == Label }
			checks = diagnose(t, driver(t, info, sol.IPMIOptions{ConsoleHeld: held}))
			want(t, checks, info, allSteps, true, "held by obmd's console", "")
			line := []byte("the other console still runs\r\n")
			m.WriteSerial(line)
			other.WaitOutput(t, line, 10*time.Second)
			other.Close(t)
		})
		if got := m.Actions(); len(got) != 0 {
			t.Errorf("chassis actions during diagnoses: got %q, want none", got)
		}
	})

	t.Run("cipher refused", func(t *testing.T) {
		only17 := goipmisrv.Start(t, goipmisrv.Options{CipherSuites: []int{17}})
		info := soltest.Pinned(only17.Info(), 3)
		checks := diagnose(t, driver(t, info, sol.IPMIOptions{}))
		want(t, checks, info, allSteps[:2], false, "the BMC refused IPMI cipher suite 3", ipmicheck.HintCipher)
	})
	for _, tc := range []struct {
		name   string
		info   sol.Info
		tenant string
	}{
		{"closed port", ipmisim.Closed(t), "the BMC is unreachable"},
		{"silent BMC", ipmisim.Silent(t), sol.FaultNoAnswer.String()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			checks := diagnose(t, driver(t, tc.info, sol.IPMIOptions{}))
			want(t, checks, tc.info, allSteps[:1], false, tc.tenant, ipmicheck.AddressHint(tc.info.Port))
		})
	}
}

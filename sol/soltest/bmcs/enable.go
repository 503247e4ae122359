package bmcs

import (
	"context"
	"errors"
	"regexp"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/obmd/obmd/sol"
	"github.com/obmd/obmd/sol/soltest"
	"github.com/obmd/obmd/sol/soltest/goipmisrv"
)

// events records what a driver reported through IPMIOptions.OnSOLEnable.
type events struct {
	mu         sync.Mutex
	list       []sol.SOLEnabled
	noDeadline bool // a report came without the opening's deadline
}

func (e *events) hook(ctx context.Context, ev sol.SOLEnabled) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if _, ok := ctx.Deadline(); !ok {
		e.noDeadline = true
	}
	e.list = append(e.list, ev)
}

// got returns the reports, failing t if one came without a deadline.
func (e *events) got(t *testing.T) []sol.SOLEnabled {
	t.Helper()
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.noDeadline {
		t.Error("OnSOLEnable was called without the console opening's deadline")
	}
	return slices.Clone(e.list)
}

var (
	solEnabledLine = regexp.MustCompile(`(?m)^Enabled\s*:\s*(true|false)`)
	payloadLine    = regexp.MustCompile(`is (enabled|disabled)`)
)

// solEnabled reads SOL Enable with the real ipmitool.
func solEnabled(t *testing.T, info sol.Info) bool {
	t.Helper()
	m := solEnabledLine.FindStringSubmatch(soltest.IPMITool(t, info, "sol", "info"))
	if m == nil {
		t.Fatal("ipmitool sol info: no Enabled line")
	}
	return m[1] == "true"
}

// setSOL switches SOL on or off behind the driver's back, as an operator
// (or a factory default) would, and checks it took.
func setSOL(t *testing.T, info sol.Info, on bool) {
	t.Helper()
	v := "false"
	if on {
		v = "true"
	}
	soltest.IPMITool(t, info, "sol", "set", "enabled", v)
	if got := solEnabled(t, info); got != on {
		t.Fatalf("SOL enabled after `sol set enabled %s`: got %v", v, got)
	}
}

// RunSOLEnable checks what a driver does when SOL is switched off at the
// BMC (`ipmitool sol set enabled false`), on both BMCs: with sol_enable
// never the console fails with sol.ErrSOLDisabled and the BMC is left
// alone; with auto (the default) the driver switches SOL on, reports it
// once through OnSOLEnable (the caller audits sol.enable), logs it, and the
// console works. On goipmi-server, which keeps per-user SOL payload access
// (ipmi_sim has no such commands), a user whose access is off gets it back
// the same way.
func RunSOLEnable(t *testing.T, newDriver Driver) {
	Each(t, func(t *testing.T, m soltest.Machine) {
		info := m.Info()
		open := func(t *testing.T, opts sol.IPMIOptions) (sol.Console, error) {
			log, _ := logs(t)
			b := newDriver(t, info, opts, log)
			ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
			defer cancel()
			return b.OpenConsole(ctx)
		}
		t.Run("never", func(t *testing.T) {
			setSOL(t, info, false)
			var ev events
			c, err := open(t, sol.IPMIOptions{SOLEnable: sol.SOLEnableNever, OnSOLEnable: ev.hook})
			if err == nil {
				c.Close()
				t.Fatal("OpenConsole with SOL off and sol_enable never: got a console, want ErrSOLDisabled")
			}
			if !errors.Is(err, sol.ErrSOLDisabled) || sol.TenantText(err) != sol.ErrSOLDisabled.Error() {
				t.Errorf("OpenConsole: got %v (tenant text %q), want ErrSOLDisabled", err, sol.TenantText(err))
			}
			if solEnabled(t, info) || len(ev.got(t)) != 0 {
				t.Errorf("sol_enable never: SOL enabled %v, reports %v; want left off, none", solEnabled(t, info), ev.got(t))
			}
		})
		t.Run("auto", func(t *testing.T) {
			setSOL(t, info, false)
			var ev events
			log, hook := logs(t)
			b := newDriver(t, info, sol.IPMIOptions{OnSOLEnable: ev.hook}, log)
			m.ResetSerial()
			r := soltest.Open(t, b)
			want := []sol.SOLEnabled{{Node: Label, Changes: []string{sol.SOLChangeEnable}}}
			if got := ev.got(t); !slices.EqualFunc(got, want, sameEvent) {
				t.Errorf("reports: got %+v, want %+v", got, want)
			}
			if !solEnabled(t, info) {
				t.Error("SOL after the console opened: got disabled, want enabled")
			}
			if count(hook, "sol_enabled") != 1 {
				t.Error("the switch was not logged once (sol_enabled)")
			}
			line := []byte("console after SOL was switched on\r\n")
			m.WriteSerial(line)
			r.WaitOutput(t, line, 10*time.Second)
			r.Close(t)
		})
		if m.Kind() != soltest.GoIPMIServer {
			return // ipmi_sim keeps no per-user payload access
		}
		t.Run("user payload access", func(t *testing.T) {
			soltest.IPMITool(t, info, "sol", "payload", "disable", "1", goipmisrv.UserID)
			var ev events
			log, _ := logs(t)
			soltest.Open(t, newDriver(t, info, sol.IPMIOptions{OnSOLEnable: ev.hook}, log)).Close(t)
			want := []sol.SOLEnabled{{Node: Label, Changes: []string{sol.SOLChangeUserAccess}}}
			if got := ev.got(t); !slices.EqualFunc(got, want, sameEvent) {
				t.Errorf("reports: got %+v, want %+v", got, want)
			}
			if m := payloadLine.FindStringSubmatch(soltest.IPMITool(t, info, "sol", "payload", "status", "1", goipmisrv.UserID)); m == nil || m[1] != "enabled" {
				t.Errorf("payload access of obmd's user afterwards: got %v, want enabled", m)
			}
		})
	})
}

func sameEvent(a, b sol.SOLEnabled) bool {
	return a.Node == b.Node && slices.Equal(a.Changes, b.Changes)
}

package admindoor

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/obmd/obmd/bastion/e2e/obmdtest"

	"github.com/obmd/obmd/bastion/daemon"
	"github.com/obmd/obmd/sol/sim"
)

// TestMetrics: /metrics (no auth, no node names) counts power operations,
// authentication results, sessions and console traffic.
func TestMetrics(t *testing.T) {
	t.Parallel()
	o := obmdtest.Start(t)
	tok := o.AddSimNode("secret-node-name")
	if res, err := o.ExecGo("secret-node-name", tok, "power-off"); err != nil || res.Code != 0 {
		t.Fatalf("power-off: %v %v", res, err)
	}
	if _, err := o.ExecGo("secret-node-name", "wrong", "power-status"); err == nil {
		t.Fatal("wrong token authenticated")
	}
	_, s := o.NewSession(t, "secret-node-name", tok)
	out, _ := s.StdoutPipe()
	if err := s.Shell(); err != nil {
		t.Fatal(err)
	}
	bmc := o.Lab().BMC("secret-node-name", sim.ModeNormal)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := bmc.WaitConsole(ctx, true); err != nil {
		t.Fatalf("console never opened: %v", err)
	}
	bmc.Inject([]byte("hello\r\n"))
	got := make(chan bool, 1)
	go func() { // ends when the session closes (deferred c.Close)
		buf, seen := make([]byte, 256), ""
		for !strings.Contains(seen, "hello") {
			n, err := out.Read(buf)
			if err != nil {
				got <- false
				return
			}
			seen += string(buf[:n])
		}
		got <- true
	}()
	select {
	case ok := <-got:
		if !ok {
			t.Fatal("console ended before its output arrived")
		}
	case <-ctx.Done():
		t.Fatal("console output never arrived")
	}

	status, body := o.Request("GET", "/metrics", nil, "", "")
	if status != 200 {
		t.Fatalf("GET /metrics: got %d, want 200", status)
	}
	m := string(body)
	for _, want := range []string{
		`obmd_power_operation_seconds_count{action="power.off",result="ok"} 1`,
		`obmd_auth_attempts_total{method="password",result="ok"} 2`,
		`obmd_sessions_open{kind="console"} 1`,
		`obmd_console_links{state="up"} 1`,
		`obmd_console_viewers 1`,
	} {
		if !strings.Contains(m, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	// Samples whose value depends on timing: at least what this test did.
	for _, want := range []struct {
		series string
		least  float64
	}{
		{`obmd_auth_attempts_total{method="password",result="denied"}`, 1},
		{`obmd_console_bytes_total{direction="out"}`, float64(len("hello\r\n"))},
		{`obmd_db_conflict_retries_total`, 0},     // present (counted in db's Galera tests)
		{`obmd_console_screen_rebuilds_total`, 0}, // present (counted in sol's tests)
	} {
		if got, ok := obmdtest.MetricSample(m, want.series); !ok || got < want.least {
			t.Errorf("/metrics %s: got %v (present %v), want at least %v", want.series, got, ok, want.least)
		}
	}
	if strings.Contains(m, "secret-node-name") {
		t.Errorf("/metrics names a node")
	}
	if t.Failed() {
		t.Logf("metrics:\n%s", m)
	}
}

// TestMetricsCaptured: /metrics counts the links held for capture by
// state: a node whose BMC answers is up, one whose BMC fails keeps
// retrying and is down; the history's counters move as output is recorded.
func TestMetricsCaptured(t *testing.T) {
	t.Parallel()
	o := obmdtest.Start(t, func(c *daemon.Config) { c.Console.Capture = "always" })
	o.Lab().BMC("broken", sim.ModeNormal).SetFail(errors.New("BMC unreachable"))
	o.AddSimNode("broken")
	tok := o.AddSimNode("fine")
	obmdtest.PrintUntilSeen(t, obmdtest.Inject(o.Lab().BMC("fine", sim.ModeNormal)), "counted", o.LogShows("fine", tok))
	var m string
	obmdtest.WaitUntil(t, "one captured link up, one down", func() bool {
		_, body := o.Request("GET", "/metrics", nil, "", "")
		m = string(body)
		return strings.Contains(m, `obmd_console_captured_links{state="up"} 1`) &&
			strings.Contains(m, `obmd_console_captured_links{state="down"} 1`)
	})
	if got, ok := obmdtest.MetricSample(m, "obmd_history_written_bytes_total"); !ok || got < float64(len("<counted-1>\r\n")) {
		t.Errorf("obmd_history_written_bytes_total: got %v (present %v), want the bytes recorded", got, ok)
	}
}

package commands

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"
)

// patience bounds waits for things that must happen promptly; it is generous
// so that only a real hang (not a slow CI machine) fails a test.
const patience = 10 * time.Second

func waitStarted(t *testing.T, started <-chan string) string {
	t.Helper()
	select {
	case call := <-started:
		return call
	case <-time.After(patience):
		t.Fatal("the BMC call never started")
		return ""
	}
}

type runOutcome struct {
	code           int
	stdout, stderr string
}

// runAsync runs line on node in a goroutine the caller waits for by
// receiving from the returned channel.
func runAsync(t *testing.T, r *Runner, ctx context.Context, node, line string) <-chan runOutcome {
	done := make(chan runOutcome, 1)
	go func() {
		stdout, stderr, code := run(t, r, ctx, node, line)
		done <- runOutcome{code, stdout, stderr}
	}()
	return done
}

func receive(t *testing.T, ch <-chan runOutcome) runOutcome {
	t.Helper()
	select {
	case o := <-ch:
		return o
	case <-time.After(patience):
		t.Fatal("the command never returned")
		return runOutcome{}
	}
}

func TestBusy(t *testing.T) {
	env := newEnv(t, Config{})
	b := env.bmcs["node-17"].(*fakeBMC)
	b.gate, b.slow, b.started = make(chan struct{}), "cycle", make(chan string, 1)
	first := runAsync(t, env.r, context.Background(), "node-17", "power-cycle")
	waitStarted(t, b.started)

	for _, line := range []string{"power-on", "power-off --soft", "power-reset", "bootdev pxe", "power-cycle --force"} {
		stdout, stderr, code := run(t, env.r, context.Background(), "node-17", line)
		if code != ExitBusy || stdout != "" || !strings.Contains(stderr, "another power operation on this node is in flight") {
			t.Errorf("%s: got exit %d, stdout %q, stderr %q, want %d and a busy message", line, code, stdout, stderr, ExitBusy)
		}
	}
	stdout, _, code := run(t, env.r, context.Background(), "node-17", "power-on --json")
	var got map[string]any
	if err := json.Unmarshal([]byte(stdout), &got); err != nil || code != ExitBusy || got["ok"] != false ||
		!strings.Contains(got["error"].(string), "in flight") {
		t.Errorf("got %d %q (%v), want exit 4 and a JSON busy error", code, stdout, err)
	}
	_, err := env.r.Do(context.Background(), req("node-17"), Command{Name: CmdPowerOn})
	if !errors.Is(err, ErrBusy) {
		t.Errorf("got %v, want ErrBusy from Do", err)
	}
	// power-status is a read: never busy.
	if stdout, stderr, code := run(t, env.r, context.Background(), "node-17", "power-status"); code != ExitOK {
		t.Errorf("power-status while busy: got %d %q %q, want 0", code, stdout, stderr)
	}

	close(b.gate)
	if o := receive(t, first); o.code != ExitOK || o.stdout != "node-17: power cycled\n" {
		t.Errorf("first: got %+v, want exit 0", o)
	}
	// The slot is free again.
	if _, stderr, code := run(t, env.r, context.Background(), "node-17", "power-on"); code != ExitOK {
		t.Errorf("after the first op: got %d %q, want 0", code, stderr)
	}
	if got := b.Calls(); strings.Join(got, ",") != "cycle,status,on" {
		t.Errorf("got BMC calls %q, want only cycle, status, on (busy calls never reach the BMC)", got)
	}
	var busy int
	for _, e := range env.audit.Events() {
		if e.Result == ResultBusy {
			busy++
		}
	}
	if busy != 7 {
		t.Errorf("got %d busy audit events, want 7", busy)
	}
}

func TestTimeout(t *testing.T) {
	env := newEnv(t, Config{Timeout: 20 * time.Millisecond})
	b := env.bmcs["node-17"].(*fakeBMC)
	b.gate = make(chan struct{}) // never closed: the BMC hangs
	defer close(b.gate)
	for i := 0; i < 2; i++ { // the second proves the busy slot was released
		var out, errb bytes.Buffer
		done := make(chan int, 1)
		go func() {
			done <- env.r.Run(context.Background(), req("node-17"), Command{Name: CmdPowerCycle, JSON: true}, &out, &errb)
		}()
		var code int
		select {
		case code = <-done:
		case <-time.After(patience):
			t.Fatal("a hung BMC call was not bounded by the timeout")
		}
		if code != ExitFailed || !strings.Contains(errb.String(), "power cycle node-17: the BMC did not answer within 20ms") {
			t.Errorf("got exit %d, stderr %q, want 1 and a timeout message", code, errb.String())
		}
		if !strings.Contains(out.String(), `"ok":false`) {
			t.Errorf("got stdout %q, want a JSON error", out.String())
		}
	}
	_, err := env.r.Do(context.Background(), req("node-17"), Command{Name: CmdPowerStatus})
	if !errors.Is(err, ErrTimeout) || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("got %v, want ErrTimeout wrapping context.DeadlineExceeded", err)
	}
	ev := env.audit.Events()
	if len(ev) != 3 || ev[0].Result != ResultError || !strings.Contains(ev[0].Detail, "did not answer") {
		t.Errorf("got audit %+v, want three error events naming the timeout", ev)
	}
}

func TestCancelEndsCall(t *testing.T) {
	env := newEnv(t, Config{}) // default 20 s timeout: only ctx can end the call
	b := env.bmcs["node-17"].(*fakeBMC)
	b.gate, b.started = make(chan struct{}), make(chan string, 1)
	defer close(b.gate)
	ctx, cancel := context.WithCancel(context.Background())
	done := runAsync(t, env.r, ctx, "node-17", "power-off")
	waitStarted(t, b.started)
	cancel()
	o := receive(t, done)
	if o.code != ExitFailed || !strings.Contains(o.stderr, "power off node-17: cancelled") {
		t.Errorf("got %+v, want exit 1 and the cancellation", o)
	}
	if strings.Contains(o.stderr, "did not answer") {
		t.Errorf("got %q, want a cancellation, not a timeout", o.stderr)
	}
	ev := env.audit.Events()
	if len(ev) != 1 || ev[0].Result != ResultError || ev[0].Detail == "AUDIT CONTEXT DONE" {
		t.Errorf("got audit %+v, want one error event recorded with a live context", ev)
	}
}

func TestSlowNodeDoesNotBlockOthers(t *testing.T) {
	env := newEnv(t, Config{})
	slow := &fakeBMC{gate: make(chan struct{}), started: make(chan string, 1)}
	env.bmcs["node-a"] = slow
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := runAsync(t, env.r, ctx, "node-a", "power-cycle")
	waitStarted(t, slow.started)

	// node-a's call hangs; node-17 answers every command promptly.
	for _, line := range []string{"power-status", "power-on", "power-cycle", "bootdev pxe", "sessions", "console-log"} {
		o := receive(t, runAsync(t, env.r, context.Background(), "node-17", line))
		if o.code != ExitOK {
			t.Errorf("%s on node-17 while node-a hangs: got %+v, want exit 0", line, o)
		}
	}
	select {
	case o := <-done:
		t.Fatalf("node-a returned early: %+v", o)
	default:
	}
	cancel()
	if o := receive(t, done); o.code != ExitFailed {
		t.Errorf("node-a: got %+v, want exit 1 after cancel", o)
	}
	close(slow.gate)
}

func TestAuditEvents(t *testing.T) {
	env := newEnv(t, Config{})
	lines := []string{"power-status", "power-on", "power-off", "power-off --soft", "power-cycle",
		"power-cycle --force", "power-reset", "bootdev pxe --persistent", "bootdev disk",
		"console-log", "sessions", "help", "version"}
	for _, line := range lines {
		if _, stderr, code := run(t, env.r, context.Background(), "node-17", line); code != ExitOK {
			t.Fatalf("%s: got %d %q, want 0", line, code, stderr)
		}
	}
	env.bmcs["node-17"].(*fakeBMC).err = errors.New("bmc says \x1bno")
	run(t, env.r, context.Background(), "node-17", "power-on")

	want := []struct{ action, result, detail string }{
		{ActionPowerStatus, ResultOK, "on; took 0s"},
		{ActionPowerOn, ResultOK, "took 0s"},
		{ActionPowerOff, ResultOK, "took 0s"},
		{ActionPowerSoftOff, ResultOK, "took 0s"},
		{ActionPowerCycle, ResultOK, "took 0s"},
		{ActionPowerReset, ResultOK, "took 0s"},
		{ActionPowerReset, ResultOK, "took 0s"},
		{ActionBootdev, ResultOK, "pxe (persistent); took 0s"},
		{ActionBootdev, ResultOK, "disk; took 0s"},
		{ActionPowerOn, ResultError, `bmc says \x1bno; took 0s`},
	}
	got := env.audit.Events()
	if len(got) != len(want) {
		t.Fatalf("got %d events %+v, want %d (one per power or boot action, none for the rest)", len(got), got, len(want))
	}
	for i, w := range want {
		g := got[i]
		if g.Action != w.action || g.Result != w.result || g.Detail != w.detail ||
			g.Node != "node-17" || g.Actor != "ssh:password" || g.Source != "10.0.0.2:5000" {
			t.Errorf("event %d: got %+v, want %+v", i, g, w)
		}
	}
}

func TestTookUsesClock(t *testing.T) {
	now := t0
	env := newEnv(t, Config{Now: func() time.Time { now = now.Add(1500 * time.Millisecond); return now }})
	res, err := env.r.Do(context.Background(), req("node-17"), Command{Name: CmdPowerOn})
	if err != nil || res.Took != 1500*time.Millisecond {
		t.Errorf("got %v %v, want took 1.5s", res.Took, err)
	}
	if ev := env.audit.Events(); len(ev) != 1 || ev[0].Detail != "took 1.5s" {
		t.Errorf("got %+v, want detail took 1.5s", ev)
	}
}

package access

// Per-tenant budgets for work: automation sessions and sessions calling
// the BMC have caps of their own, below the session caps, per node, per
// source and per key or certificate; over one, a command is refused as
// busy (exit 4) with the reason, and other work goes on.

import (
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/obmd/obmd/bastion/e2e/obmdtest"

	gossh "golang.org/x/crypto/ssh"

	"github.com/obmd/obmd/bastion/access/authlimit"
	"github.com/obmd/obmd/bastion/daemon"
	"github.com/obmd/obmd/sol/sim"
)

// refused checks that res is a refusal as busy for want.
func refused(t *testing.T, what string, res obmdtest.Result, want string) {
	t.Helper()
	if res.Code != 4 || !strings.Contains(res.Stderr, "obmd: "+want+"; try again when one ends") {
		t.Errorf("%s: got %v, want exit 4 and %q", what, res, want)
	}
}

// TestAutomationCaps: at the defaults, a node holds 8 automation sessions
// (wait-for, console-log --follow, ...), an address 8 across nodes, and a
// key 8 across nodes and addresses; the next one is refused as busy
// through the real OpenSSH client, while the node's other commands, the
// address's other nodes and other addresses go on.
func TestAutomationCaps(t *testing.T) {
	t.Parallel()
	o := obmdtest.Start(t)
	var ended sync.WaitGroup
	t.Cleanup(ended.Wait) // after the connections close (cleanups run last first)
	tokA := o.AddSimNode("ac1")
	tokB := o.AddSimNode("ac2")
	obmdtest.RunMany(t, o, "127.0.0.1", "ac1", gossh.Password(tokA), "wait-for never-printed --timeout 1h", 7, &ended)
	obmdtest.RunMany(t, o, "127.0.0.1", "ac1", gossh.Password(tokA), "console-log --follow", 1, &ended)
	obmdtest.WaitUntil(t, "8 sessions", func() bool { return len(o.Sessions("ac1")) == 8 })

	refused(t, "a ninth on the node", o.OpenSSH("ac1", tokA, []string{"-b", "127.0.0.2"}, "wait-for", "x"),
		"too many automation sessions on node ac1 (limit 8)")
	refused(t, "the address's ninth", o.OpenSSH("ac2", tokB, nil, "send", "x"),
		"too many automation sessions from your address (limit 8)")
	if res := o.OpenSSH("ac1", tokA, nil, "power-status"); res.Code != 0 {
		t.Errorf("another command on the node: got %v, want exit 0", res)
	}
	if res := o.OpenSSH("ac2", tokB, []string{"-b", "127.0.0.2"}, "wait-for", "x", "--timeout", "100ms"); res.Code != 5 {
		t.Errorf("automation from another address: got %v, want it to run (exit 5: timed out)", res)
	}

	// A key registered on several nodes: 8 automation sessions whatever
	// the addresses.
	signer, keyFile := obmdtest.NewKey(t)
	for _, label := range []string{"ak1", "ak2", "ak3"} {
		o.AddSimNode(label)
		o.AddKey(label, signer.PublicKey())
	}
	obmdtest.RunMany(t, o, "127.0.0.3", "ak1", gossh.PublicKeys(signer), "wait-for never-printed --timeout 1h", 4, &ended)
	obmdtest.RunMany(t, o, "127.0.0.4", "ak2", gossh.PublicKeys(signer), "wait-for never-printed --timeout 1h", 4, &ended)
	obmdtest.WaitUntil(t, "the key's 8 sessions", func() bool { return len(o.Sessions("ak1"))+len(o.Sessions("ak2")) == 8 })
	refused(t, "the key's ninth, from a third address",
		o.OpenSSH("ak3", "", []string{"-b", "127.0.0.5", "-i", keyFile}, "wait-for", "x"),
		"too many automation sessions with your key or certificate (limit 8)")
}

// TestBMCCaps: at the defaults, 4 sessions call a node's BMC at once; the
// fifth (power, bootdev or doctor) is refused as busy, over SSH (exit 4)
// and the HTTP power routes (409), while the node's other commands go on.
func TestBMCCaps(t *testing.T) {
	t.Parallel()
	o := obmdtest.Start(t)
	tok := o.AddSimNode("bc1")
	bmc := o.Lab().BMC("bc1", sim.ModeNormal)
	release := bmc.Hang()
	var ended sync.WaitGroup
	defer ended.Wait()
	defer release()
	obmdtest.RunMany(t, o, "127.0.0.1", "bc1", gossh.Password(tok), "power-status", 4, &ended)
	obmdtest.WaitUntil(t, "4 stuck BMC calls", func() bool { return bmc.Hung() == 4 })
	for _, cmd := range []string{"power-on", "bootdev pxe", "doctor"} {
		refused(t, cmd, o.OpenSSH("bc1", tok, []string{"-b", "127.0.0.2"}, cmd),
			"too many sessions calling the BMC on node bc1 (limit 4)")
	}
	code, body := o.Request("GET", "/node/bc1/power_status?token="+tok, nil, "", "")
	if want := "too many sessions calling the BMC on node bc1 (limit 4)"; code != 409 || !strings.Contains(string(body), want) {
		t.Errorf("HTTP power_status: got %d %s, want 409 %q", code, body, want)
	}
	if res := o.OpenSSH("bc1", tok, nil, "sessions"); res.Code != 0 {
		t.Errorf("another command on the node: got %v, want exit 0", res)
	}
}

// TestRotationWithBudgetsExhausted, on SQLite and MariaDB: a tenant
// spends every budget it has on its node at the defaults (the node's 64
// sessions from three addresses: 4 calling its BMC, stuck there, a power
// operation and a doctor run among them, 8 automation sessions, consoles
// over SSH and HTTP; its address's 32 sessions and 64 connections; 32
// unauthenticated connections; its address locked out by wrong tokens),
// and HIL's rotation still answers, within the bound of a cut, and cuts
// it all: every old client is told, and the next tenant gets every kind of
// place at once, while the stuck calls still run.
func TestRotationWithBudgetsExhausted(t *testing.T) {
	t.Parallel()
	obmdtest.OnEngines(t, func(t *testing.T, dsn string) {
		o := obmdtest.Start(t, func(c *daemon.Config) {
			c.DB.DSN = dsn
			c.AuthLimits = authlimit.Config{PerSource: 5, PerNode: 1 << 20}
		})
		const label = "rx1"
		tok := o.AddSimNode(label)
		auth := gossh.Password(tok)
		var ended sync.WaitGroup // the old tenant's sessions
		obmdtest.RunMany(t, o, "127.0.0.1", label, auth, "wait-for never-printed --timeout 1h", 8, &ended)
		obmdtest.RunMany(t, o, "127.0.0.1", label, auth, "", 20, &ended)
		obmdtest.RunMany(t, o, "127.0.0.2", label, auth, "", 28, &ended)
		for range 4 {
			streamFrom(t, o, "127.0.0.3", label, tok)
		}
		obmdtest.WaitUntil(t, "60 sessions", func() bool { return len(o.Sessions(label)) == 60 })
		bmc := o.Lab().BMC(label, sim.ModeNormal)
		release := bmc.Hang() // the console link is up: only new BMC calls hang
		var stuck sync.WaitGroup
		defer stuck.Wait()
		defer release()
		for _, cmd := range []string{"power-on", "doctor", "power-status", "power-status"} {
			obmdtest.RunMany(t, o, "127.0.0.1", label, auth, cmd, 1, &ended)
		}
		obmdtest.WaitUntil(t, "4 stuck BMC calls", func() bool { return bmc.Hung() == 4 })
		// The address's 64 connections: 11 hold its sessions (2 automation,
		// 5 consoles, 4 BMC calls); 53 more, idle.
		for range 53 {
			c, err := o.DialFrom("127.0.0.1", label, auth)
			if err != nil {
				t.Fatalf("an idle connection: %v", err)
			}
			t.Cleanup(func() { c.Close() })
		}
		for range 32 {
			obmdtest.DialPreauth(t, o, "127.0.0.4").Admitted(t)
		}
		for range 5 {
			o.Request("GET", "/node/"+label+"/power_status?token=wrong", nil, "", "")
		}

		// Every budget is spent.
		if res := o.OpenSSH(label, tok, []string{"-b", "127.0.0.5"}, "sessions"); res.Code != 3 ||
			!strings.Contains(res.Stderr, "too many sessions on node rx1 (limit 64)") {
			t.Errorf("a 65th session: got %v, want refused (too many sessions)", res)
		}
		if c, err := o.DialFrom("127.0.0.1", label, auth); err == nil {
			c.Close()
			t.Error("a 65th connection from the address: logged in, want refused")
		}
		if code, _ := o.Request("GET", "/node/"+label+"/power_status?token="+tok, nil, "", ""); code != 429 {
			t.Errorf("the locked-out address's right token: got %d, want 429", code)
		}

		began := time.Now()
		next := o.Rotate(label)
		took := time.Since(began)
		t.Logf("the rotation answered in %v (cut_wait 2s)", took.Round(time.Millisecond))
		if took > 15*time.Second {
			t.Errorf("the rotation took %v, beyond the bound of a change (change_timeout, 5s) and a margin", took)
		}
		oldEnded := make(chan struct{})
		go func() { ended.Wait(); close(oldEnded) }() // the stuck calls' clients are told too
		select {
		case <-oldEnded:
		case <-time.After(obmdtest.Timeout):
			t.Fatal("old sessions still running after the rotation")
		}
		if n := bmc.Hung(); n != 4 {
			t.Errorf("stuck calls: got %d, want the 4 still stuck (the test proves nothing otherwise)", n)
		}
		// The next tenant, from a fresh address: its own session alone, and
		// places for automation and for calls on the BMC.
		res := o.OpenSSH(label, next, []string{"-b", "127.0.0.5"}, "sessions")
		if rows := strings.Split(strings.TrimSpace(res.Stdout), "\n"); res.Code != 0 || len(rows) != 2 {
			t.Errorf("the next tenant's sessions: got %v, want its own session alone", res)
		}
		if res := o.OpenSSH(label, next, []string{"-b", "127.0.0.5"}, "wait-for", "x", "--timeout", "100ms"); res.Code != 5 {
			t.Errorf("the next tenant's wait-for: got %v, want it to run (exit 5: timed out)", res)
		}
		obmdtest.RunMany(t, o, "127.0.0.5", label, gossh.Password(next), "power-status", 1, &stuck)
		obmdtest.WaitUntil(t, "the next tenant's BMC call", func() bool { return bmc.Hung() == 5 })
	})
}

// TestStdinBounded: what send --stdin and expect --stdin read is bounded
// (64 KiB): one byte more is a usage error (exit 2), whatever follows, and
// nothing reaches the console.
func TestStdinBounded(t *testing.T) {
	t.Parallel()
	o := obmdtest.Start(t)
	tok := o.AddSimNode("sb1")
	bmc := o.Lab().BMC("sb1", sim.ModeNormal)
	over := strings.Repeat("x", 64<<10+1)
	for _, cmd := range []string{"send --stdin", "expect --stdin"} {
		res := o.OpenSSHIn("sb1", tok, strings.NewReader(over+strings.Repeat("y", 1<<20)), []string{"-T"}, cmd)
		if res.Code != 2 || !strings.Contains(res.Stderr, "stdin holds more than 65536 bytes") {
			t.Errorf("%s with 64 KiB + 1: got exit %d, stderr %q; want 2 and the bound", cmd, res.Code, res.Stderr)
		}
	}
	if typed := bmc.Typed(); len(typed) != 0 {
		t.Errorf("typed on the console: %d bytes, want none", len(typed))
	}
}

// TestHostileSessionLimits: the N+1th session of a node, or from one source
// address, is refused with a message that says which limit; HTTP console
// streams count against the node's limit, and against the address's HTTP
// budget apart from its SSH one.
func TestHostileSessionLimits(t *testing.T) {
	o := obmdtest.Start(t, func(c *daemon.Config) {
		c.Sessions.MaxPerNode, c.Sessions.MaxPerSource, c.Sessions.MaxPerSourceHTTP = 2, 2, 1
	})
	t1, t2 := o.AddSimNode("n1"), o.AddSimNode("n2")
	a := o.GoConsole(t, "n1", t1, obmdtest.SessionOpts{PTY: true}) // escapes need a PTY
	a.Stderr.Wait(t, "first console", 0, "console of n1")
	web := o.ConsoleHTTP(t, "n1", t1)
	res, err := o.ExecGo("n1", t1, "power-status")
	if err != nil || res.Code != 3 || !strings.Contains(res.Stderr, "too many sessions on node n1 (limit 2)") {
		t.Errorf("third session of n1: got %v (%v), want exit 3 and the per-node limit", res, err)
	}
	status, body := o.Request("GET", "/node/n1/console?token="+t1, nil, "", "")
	if status != 429 || !strings.Contains(string(body), "too many sessions on node n1") {
		t.Errorf("third HTTP console of n1: got %d %s, want 429 and the per-node limit", status, body)
	}
	status, body = o.Request("GET", "/node/n2/power_status?token="+t2, nil, "", "")
	if status != 429 || !strings.Contains(string(body), "too many sessions from your address (limit 1)") {
		t.Errorf("second HTTP session from 127.0.0.1: got %d %s, want 429 and the HTTP per-source limit", status, body)
	}
	b := o.GoConsole(t, "n2", t2, obmdtest.SessionOpts{})
	b.Stderr.Wait(t, "console of n2", 0, "console of n2")
	res, err = o.ExecGo("n2", t2, "power-status")
	if err != nil || res.Code != 3 || !strings.Contains(res.Stderr, "too many sessions from your address (limit 2)") {
		t.Errorf("third SSH session from 127.0.0.1: got %v (%v), want exit 3 and the per-source limit", res, err)
	}
	// Ending one frees its place.
	a.In.Write([]byte("\x05c."))
	a.End.Wait(t, "detach")
	web.Stop()
	obmdtest.WaitUntil(t, "the sessions to end", func() bool { return len(o.Sessions("n1")) == 0 })
	if res, err := o.ExecGo("n1", t1, "power-status"); err != nil || res.Code != 0 {
		t.Errorf("after the others ended: got %v (%v), want exit 0", res, err)
	}
}

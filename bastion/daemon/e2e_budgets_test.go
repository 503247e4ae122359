package daemon_test

// Per-tenant budgets for work: automation sessions and sessions calling
// the BMC have caps of their own, below the session caps, per node, per
// source and per key or certificate; over one, a command is refused as
// busy (exit 4) with the reason, and other work goes on.

import (
	"strings"
	"sync"
	"testing"

	gossh "golang.org/x/crypto/ssh"

	"github.com/obmd/obmd/sol/sim"
)

// bgRefused checks that res is a refusal as busy for want.
func bgRefused(t *testing.T, what string, res execResult, want string) {
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
	o := startObmd(t)
	var ended sync.WaitGroup
	t.Cleanup(ended.Wait) // after the connections close (cleanups run last first)
	tokA := o.addSimNode("ac1")
	tokB := o.addSimNode("ac2")
	runMany(t, o, "127.0.0.1", "ac1", gossh.Password(tokA), "wait-for never-printed --timeout 1h", 7, &ended)
	runMany(t, o, "127.0.0.1", "ac1", gossh.Password(tokA), "console-log --follow", 1, &ended)
	waitUntil(t, "8 sessions", func() bool { return len(o.rvSessions("ac1")) == 8 })

	bgRefused(t, "a ninth on the node", o.openssh("ac1", tokA, []string{"-b", "127.0.0.2"}, "wait-for", "x"),
		"too many automation sessions on node ac1 (limit 8)")
	bgRefused(t, "the address's ninth", o.openssh("ac2", tokB, nil, "send", "x"),
		"too many automation sessions from your address (limit 8)")
	if res := o.openssh("ac1", tokA, nil, "power-status"); res.Code != 0 {
		t.Errorf("another command on the node: got %v, want exit 0", res)
	}
	if res := o.openssh("ac2", tokB, []string{"-b", "127.0.0.2"}, "wait-for", "x", "--timeout", "100ms"); res.Code != 5 {
		t.Errorf("automation from another address: got %v, want it to run (exit 5: timed out)", res)
	}

	// A key registered on several nodes: 8 automation sessions whatever
	// the addresses.
	signer, keyFile := newKey(t)
	for _, label := range []string{"ak1", "ak2", "ak3"} {
		o.addSimNode(label)
		o.addKey(label, signer.PublicKey())
	}
	runMany(t, o, "127.0.0.3", "ak1", gossh.PublicKeys(signer), "wait-for never-printed --timeout 1h", 4, &ended)
	runMany(t, o, "127.0.0.4", "ak2", gossh.PublicKeys(signer), "wait-for never-printed --timeout 1h", 4, &ended)
	waitUntil(t, "the key's 8 sessions", func() bool { return len(o.rvSessions("ak1"))+len(o.rvSessions("ak2")) == 8 })
	bgRefused(t, "the key's ninth, from a third address",
		o.openssh("ak3", "", []string{"-b", "127.0.0.5", "-i", keyFile}, "wait-for", "x"),
		"too many automation sessions with your key or certificate (limit 8)")
}

// TestBMCCaps: at the defaults, 4 sessions call a node's BMC at once; the
// fifth (power, bootdev or doctor) is refused as busy, over SSH (exit 4)
// and the HTTP power routes (409), while the node's other commands go on.
func TestBMCCaps(t *testing.T) {
	t.Parallel()
	o := startObmd(t)
	tok := o.addSimNode("bc1")
	bmc := o.Lab().BMC("bc1", sim.ModeNormal)
	release := bmc.Hang()
	var ended sync.WaitGroup
	defer ended.Wait()
	defer release()
	runMany(t, o, "127.0.0.1", "bc1", gossh.Password(tok), "power-status", 4, &ended)
	waitUntil(t, "4 stuck BMC calls", func() bool { return bmc.Hung() == 4 })
	for _, cmd := range []string{"power-on", "bootdev pxe", "doctor"} {
		bgRefused(t, cmd, o.openssh("bc1", tok, []string{"-b", "127.0.0.2"}, cmd),
			"too many sessions calling the BMC on node bc1 (limit 4)")
	}
	code, body := o.request("GET", "/node/bc1/power_status?token="+tok, nil, "", "")
	if want := "too many sessions calling the BMC on node bc1 (limit 4)"; code != 409 || !strings.Contains(string(body), want) {
		t.Errorf("HTTP power_status: got %d %s, want 409 %q", code, body, want)
	}
	if res := o.openssh("bc1", tok, nil, "sessions"); res.Code != 0 {
		t.Errorf("another command on the node: got %v, want exit 0", res)
	}
}

package daemon_test

import (
	"strings"
	"testing"

	"github.com/obmd/obmd/bastion/e2e/obmdtest"
)

// TestSmoke is the shortest path through everything: register a node on the
// simulator, issue a token, run a power command over SSH.
func TestSmoke(t *testing.T) {
	o := obmdtest.Start(t)
	tok := o.AddSimNode("n1")
	res, err := o.ExecGo("n1", tok, "power-status")
	if err != nil {
		t.Fatalf("exec: %v", err)
	}
	if res.Code != 0 || strings.TrimSpace(res.Stdout) != "n1: power on" {
		t.Errorf("power-status: got %v, want exit 0 and %q", res, "n1: power on")
	}
	if _, err := o.ExecGo("n1", "wrong", "power-status"); err == nil {
		t.Errorf("wrong token: got a session, want an authentication failure")
	}
}

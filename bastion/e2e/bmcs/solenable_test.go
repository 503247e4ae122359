package bmcs

import (
	"slices"
	"strings"
	"testing"

	"github.com/obmd/obmd/bastion/e2e/obmdtest"

	"github.com/obmd/obmd/sol/soltest"
	"github.com/obmd/obmd/sol/soltest/ipmisim"
)

// TestSOLEnableAudited: a console on a BMC whose SOL is switched off
// opens anyway (the driver switches it on), and the change is in the
// node's audit log as sol.enable: the node-type table wires the drivers'
// shared options to obmd's audit.
func TestSOLEnableAudited(t *testing.T) {
	t.Parallel()
	ipmisim.Require(t, "ipmitool")
	s := ipmisim.Start(t)
	soltest.IPMITool(t, s.Info(), "sol", "set", "enabled", "false")
	o := obmdtest.Start(t)
	tok := o.AddIPMINode("sol-off", "ipmi", s)
	g := o.GoConsole(t, "sol-off", tok, obmdtest.SessionOpts{})
	obmdtest.PrintUntilSeen(t, s.WriteSerial, "on", func(m string) bool { return strings.Contains(g.Out.String(), m) })
	obmdtest.WaitUntil(t, "the sol.enable audit event", func() bool { return slices.Contains(o.ConsoleAudit("sol-off"), "sol.enable ok") })
}

package sim

import (
	"context"

	"github.com/obmd/obmd/sol"
)

var _ sol.Diagnoser = (*BMC)(nil)

// hintSim: what to do when a simulated BMC fails (a test injected it).
const hintSim = "the simulated BMC was told to fail (SetFail): clear it"

// Diagnose checks the simulated BMC as sol.Diagnoser asks, read-only: it
// has no address and no credentials (both steps pass, saying so), then
// its power status and its console, whose payload is free or held by
// obmd's own console (the simulator lives inside obmd). A delay or an
// injected failure (SetDelay, SetFail) shows in the power step.
func (b *BMC) Diagnose(ctx context.Context) []sol.Check {
	checks := []sol.Check{
		sol.Pass(sol.CheckAddress, "simulated BMC ("+b.mode.String()+" mode): no address"),
		sol.Pass(sol.CheckAuth, "simulated BMC: no credentials"),
	}
	st, err := b.PowerStatus(ctx)
	if err != nil {
		return append(checks, sol.FailErr(sol.CheckPower, err, hintSim))
	}
	checks = append(checks, sol.Pass(sol.CheckPower, "power is "+st))
	if b.ConsoleActive() {
		return append(checks, sol.Pass(sol.CheckSOL, "console held by obmd's console"))
	}
	return append(checks, sol.Pass(sol.CheckSOL, "console free"))
}

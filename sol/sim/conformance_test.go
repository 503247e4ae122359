package sim_test

import (
	"testing"

	"github.com/obmd/obmd/sol"
	"github.com/obmd/obmd/sol/sim"
	"github.com/obmd/obmd/sol/soltest"
)

// serial is the node's side of a simulated BMC's serial line.
type serial struct{ b *sim.BMC }

func (s serial) WriteSerial(p []byte) error { s.b.Inject(p); return nil }
func (s serial) Serial() []byte             { return s.b.Typed() }

// The sim passes the console table every driver passes. (The power table
// expects ipmi_sim's chassis words; the sim's own actions are tested in
// sim_test.go.)
func TestConsoleConformance(t *testing.T) {
	soltest.RunConsole(t, func(t *testing.T) (sol.BMC, soltest.SerialObserver) {
		b := sim.NewLab().BMC("n1", sim.ModeNormal)
		return b, serial{b}
	})
}

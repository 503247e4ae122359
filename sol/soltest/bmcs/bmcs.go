// Package bmcs starts the real BMCs the driver conformance tables run on,
// one of each per call.
//
// They are OpenIPMI's ipmi_sim (sol/soltest/ipmisim) and go-ipmi's
// goipmi-server (sol/soltest/goipmisrv). (The console table runs over the
// SSH transport too, against sol/soltest/sshbmc: sol/sshconsole's
// TestConformance.)
package bmcs

import (
	"testing"

	"github.com/obmd/obmd/sol/soltest"
	"github.com/obmd/obmd/sol/soltest/goipmisrv"
	"github.com/obmd/obmd/sol/soltest/ipmisim"
)

// Each runs fn as two subtests, "ipmi_sim" and "goipmi-server", each with a
// BMC of that kind started for it (and ended with the subtest). fn's cases
// share the BMC: they reset it between them (soltest.Shared).
func Each(t *testing.T, fn func(t *testing.T, m soltest.Machine)) {
	t.Run(string(soltest.IPMISim), func(t *testing.T) { fn(t, ipmisim.Start(t)) })
	t.Run(string(soltest.GoIPMIServer), func(t *testing.T) { fn(t, goipmisrv.Start(t, goipmisrv.Options{})) })
}

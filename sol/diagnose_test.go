package sol_test

import (
	"errors"
	"testing"

	"github.com/obmd/obmd/sol"
)

// TestPassed: a diagnosis passes only when it has steps and all passed.
func TestPassed(t *testing.T) {
	ok := sol.Pass(sol.CheckAddress, "the BMC answers")
	bad := sol.Fail(sol.CheckAuth, "detail", "tenant", "hint")
	if sol.Passed(nil) || !sol.Passed([]sol.Check{ok}) || sol.Passed([]sol.Check{ok, bad}) {
		t.Error("Passed: want true only for a non-empty list of passed checks")
	}
	if c := sol.FailErr(sol.CheckAuth, sol.NewError(sol.FaultCredentials, errors.New("BMC 192.0.2.5:623: RAKP")), "h"); c.Tenant != sol.FaultCredentials.String() || c.Detail == c.Tenant {
		t.Errorf("FailErr: got %+v, want the tenant text without the detail", c)
	}
}

// Package bmcs tests the BMC drivers end to end: IPMI, Redfish, the BMCs' own SSH consoles, registration and doctor.
package bmcs

import (
	"os"
	"testing"

	"github.com/obmd/obmd/bastion/e2e/obmdtest"
)

func TestMain(m *testing.M) {
	os.Exit(obmdtest.Main(m))
}

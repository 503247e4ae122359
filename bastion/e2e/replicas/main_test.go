// Package replicas tests obmd replicas on a shared database end to end, Galera included: leases, outages and isolation.
package replicas

import (
	"os"
	"testing"

	"github.com/obmd/obmd/bastion/e2e/obmdtest"
)

// TestMain stops the test binary's Galera cluster (galeraCluster) after
// the tests: it is started once, by the first test that needs it.
func TestMain(m *testing.M) {
	code := obmdtest.Main(m)
	galeraCluster.Close()
	os.Exit(code)
}

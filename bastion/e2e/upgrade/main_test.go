// Package upgrade tests rolling upgrades end to end: the previous release's obmd, built from its tag, and this one serving one cluster.
package upgrade

import (
	"os"
	"testing"

	"github.com/obmd/obmd/bastion/e2e/obmdtest"
)

// TestMain removes the previous release's build (previousDir) after the
// tests.
func TestMain(m *testing.M) {
	code := obmdtest.Main(m)
	if previousDir != "" {
		os.RemoveAll(previousDir)
	}
	os.Exit(code)
}

// Package admindoor tests the admin HTTP door end to end: its API, connection caps, limiter, proxies and metrics.
package admindoor

import (
	"os"
	"testing"

	"github.com/obmd/obmd/bastion/e2e/obmdtest"
)

func TestMain(m *testing.M) {
	os.Exit(obmdtest.Main(m))
}

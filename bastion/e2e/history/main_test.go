// Package history tests the console history end to end: capture, tenancies, formats, restarts and replicas.
package history

import (
	"os"
	"testing"

	"github.com/obmd/obmd/bastion/e2e/obmdtest"
)

func TestMain(m *testing.M) {
	os.Exit(obmdtest.Main(m))
}

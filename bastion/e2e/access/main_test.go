// Package access tests access changes end to end: revocation, cuts, audit, budgets, secrets and sessions.
package access

import (
	"os"
	"testing"

	"github.com/obmd/obmd/bastion/e2e/obmdtest"
)

func TestMain(m *testing.M) {
	os.Exit(obmdtest.Main(m))
}

// Package automation tests the automation commands end to end: wait-for, send and expect, their budgets, across replicas.
package automation

import (
	"os"
	"testing"

	"github.com/obmd/obmd/bastion/e2e/obmdtest"
)

func TestMain(m *testing.M) {
	os.Exit(obmdtest.Main(m))
}

// Package sshdoor tests the SSH door end to end: authentication, commands, exit codes, algorithms, audit and hostile input.
package sshdoor

import (
	"os"
	"testing"

	"github.com/obmd/obmd/bastion/e2e/obmdtest"
)

func TestMain(m *testing.M) {
	os.Exit(obmdtest.Main(m))
}

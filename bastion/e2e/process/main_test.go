// Package process tests the obmd binary as a process under a low file-descriptor limit, end to end.
package process

import (
	"os"
	"testing"

	"github.com/obmd/obmd/bastion/e2e/obmdtest"
)

func TestMain(m *testing.M) {
	os.Exit(obmdtest.Main(m))
}

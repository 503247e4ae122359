// Package console tests interactive consoles end to end: viewers, escapes, the mock type and real IPMI.
package console

import (
	"os"
	"testing"

	"github.com/obmd/obmd/bastion/e2e/obmdtest"
)

func TestMain(m *testing.M) {
	if u := os.Getenv(cliEnv); u != "" {
		os.Exit(runConsoleCLI(u)) // a child process of TestConsoleMockBufferedPipe
	}
	os.Exit(obmdtest.Main(m))
}

package db

import (
	"fmt"
	"os"
	"testing"

	"github.com/obmd/obmd/db/dbtest/galera"
)

// galeraCluster is this test binary's Galera cluster, started by the first
// test that needs it (about 20 s) and shared by the others.
var galeraCluster galera.Shared

func TestMain(m *testing.M) {
	code := m.Run()
	if err := galeraCluster.Close(); err != nil {
		fmt.Fprintf(os.Stderr, "stop the galera cluster: %v\n", err)
		code = max(code, 1)
	}
	os.Exit(code)
}

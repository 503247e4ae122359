// Package screen tests the node's screen end to end: a terminal's redraw, screen, wait-for --screen, the admin route.
package screen

import (
	"os"
	"testing"

	"github.com/obmd/obmd/bastion/e2e/obmdtest"
)

func TestMain(m *testing.M) { os.Exit(obmdtest.Main(m)) }

// Package web tests the web console end to end: its protocol through a Go WebSocket client, refusals, tickets, headers, and Chromium.
package web

import (
	"os"
	"testing"

	"github.com/obmd/obmd/bastion/e2e/obmdtest"
)

func TestMain(m *testing.M) {
	os.Exit(obmdtest.Main(m))
}

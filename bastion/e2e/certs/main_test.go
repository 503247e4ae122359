// Package certs tests OpenSSH certificate logins end to end: what they permit, revocations, limits and idle connections.
package certs

import (
	"os"
	"testing"

	"github.com/obmd/obmd/bastion/e2e/obmdtest"
)

func TestMain(m *testing.M) {
	os.Exit(obmdtest.Main(m))
}

// Package testenv decides what a test does when a program or server it
// needs is missing: skip, or fail in CI.
//
// A missing dependency fails the test under OBMD_REQUIRE_INTEGRATION=1
// (CI), where nothing may be skipped silently. sol/soltest and db/dbtest give it to their callers (Missing, External);
// it imports nothing of obmd's, so any test helper may.
package testenv

import (
	"fmt"
	"os"
	"testing"
)

// RequireEnv set to 1 turns a skip for a missing dependency into a
// failure (CI sets it).
const RequireEnv = "OBMD_REQUIRE_INTEGRATION"

// Missing skips t for want of what the message names, or fails it when
// RequireEnv is 1.
func Missing(t testing.TB, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	if os.Getenv(RequireEnv) == "1" {
		t.Fatal(msg + " and " + RequireEnv + "=1")
		return // a recorder's Fatal (tests of helpers) returns
	}
	t.Skip(msg)
}

// External marks t as needing what, a program or server outside Go (the
// real OpenSSH client, ipmi_sim, MariaDB, ...): go test -short, the fast
// tier, skips it. Without -short, a missing one is Missing's business.
func External(t testing.TB, what string) {
	t.Helper()
	if testing.Short() {
		t.Skipf("needs %s: skipped by -short (the fast tier)", what)
	}
}

package soltest

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/obmd/obmd/internal/testenv"
	"github.com/obmd/obmd/sol"
)

// RequireEnv is the variable that turns a missing dependency from a skip
// into a failure (CI sets it to 1).
const RequireEnv = testenv.RequireEnv

// Missing skips t because a dependency is missing, or fails it when
// RequireEnv is 1 (testenv.Missing).
func Missing(t testing.TB, format string, args ...any) {
	t.Helper()
	testenv.Missing(t, format, args...)
}

// External marks t as needing what, a program or server outside Go (the
// real OpenSSH client, ipmi_sim, ...): go test -short, the fast tier,
// skips it (testenv.External).
func External(t testing.TB, what string) {
	t.Helper()
	testenv.External(t, what)
}

// Unpinned is info with no cipher suite: the driver negotiates one.
func Unpinned(info sol.Info) sol.Info {
	info.Cipher = nil
	return info
}

// Pinned is info pinned to cipher suite suite.
func Pinned(info sol.Info, suite int) sol.Info {
	info.Cipher = &suite
	return info
}

// IPMITool runs the real ipmitool against the BMC of info (lanplus, info's
// cipher suite or 3, the password in the environment only) and returns its
// standard output, or fails t with what it printed. Tests use it to set a
// BMC up behind a driver's back (`sol set enabled false`) and to check what
// a driver did.
func IPMITool(t testing.TB, info sol.Info, args ...string) string {
	t.Helper()
	out, err := RunIPMITool(info, args...)
	if err != nil {
		t.Fatalf("ipmitool %v: %v", args, err)
	}
	return out
}

// RunIPMITool is IPMITool for callers that expect a failure: the error
// holds everything ipmitool printed.
func RunIPMITool(info sol.Info, args ...string) (string, error) {
	cipher := 3
	if info.Cipher != nil && *info.Cipher >= 0 {
		cipher = *info.Cipher
	}
	port := info.Port
	if port == 0 {
		port = 623
	}
	base := []string{"-I", "lanplus", "-C", strconv.Itoa(cipher), "-H", info.Addr, "-p", strconv.Itoa(port), "-U", info.User, "-E"}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "ipmitool", append(base, args...)...)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "IPMI_PASSWORD=" + info.Pass}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("%w: %s%s", err, stdout.Bytes(), stderr.Bytes())
	}
	return stdout.String(), nil
}

package daemon_test

// What the end-to-end tests share beyond the in-process daemon
// (harness_test.go): how a test waits for what a client shows, the
// clients, and the obmd binary for the tests that run it as a process.

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"sync"
	"testing"
	"time"
)

func TestMain(m *testing.M) {
	code := m.Run()
	if builtDir != "" {
		os.RemoveAll(builtDir)
	}
	os.Exit(code)
}

// obmdBuild builds cmd/obmd once per test binary, into builtDir (removed
// by TestMain).
var (
	obmdBuild = sync.OnceValues(buildObmd)
	builtDir  string
)

// obmdBinary returns the path of cmd/obmd, built once per test binary.
func obmdBinary(t testing.TB) string {
	t.Helper()
	path, err := obmdBuild()
	if err != nil {
		t.Fatal(err)
	}
	return path
}

// buildObmd builds cmd/obmd with -race when these tests run with it, so
// that a test run compiles one set of dependencies (the build cache of the
// test binary serves most of it).
func buildObmd() (string, error) {
	dir, err := os.MkdirTemp("", "obmd-e2e-")
	if err != nil {
		return "", err
	}
	builtDir = dir
	path := filepath.Join(dir, "obmd")
	args := []string{"build", "-o", path}
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			if s.Key == "-race" && s.Value == "true" {
				args = append(args, "-race")
			}
		}
	}
	goTool, err := exec.LookPath("go")
	if err != nil {
		goTool = filepath.Join(os.Getenv("GOROOT"), "bin", "go")
	}
	out, err := exec.Command(goTool, append(args, "github.com/obmd/obmd/cmd/obmd")...).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("go build ./cmd/obmd: %v\n%s", err, out)
	}
	return path, nil
}

// e2eWait bounds every wait of these tests for something that must happen
// soon: generous, since CI has two cores and runs them under -race.
const e2eWait = 20 * time.Second

// waitUntil polls cond, less and less often (5 ms to 50 ms apart), until it
// holds; it fails t after e2eWait.
func waitUntil(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(e2eWait)
	for pause := 5 * time.Millisecond; !cond(); pause = min(2*pause, 50*time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, e2eWait)
		}
		time.Sleep(pause)
	}
}

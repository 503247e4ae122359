package goipmisrv

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/obmd/obmd/sol/soltest"
)

// EnvBinary names a goipmi-server built beforehand (.ci/run builds it once
// per CI run and sets it). When it is unset, Binary builds one.
const EnvBinary = "OBMD_GOIPMI_SERVER"

// serverPkg is goipmi-server's package, in the go-ipmi module obmd's
// go.mod requires: the BMC runs the very version of go-ipmi obmd uses.
const (
	serverPkg = "github.com/bougou/go-ipmi/cmd/goipmi-server"
	ipmiMod   = "github.com/bougou/go-ipmi"
)

// Binary returns the path of a goipmi-server executable: $OBMD_GOIPMI_SERVER
// if set, else one built with `go build` from the module cache into the
// user's cache directory, under a name that holds the go-ipmi version and
// the Go version, so that it is built once per machine and version rather
// than once per test (a second test binary finds it there). Nothing is
// downloaded beyond what the Go module proxy serves for obmd's go.mod. A
// binary that cannot be had skips t, or fails it when
// OBMD_REQUIRE_INTEGRATION=1.
func Binary(t testing.TB) string {
	t.Helper()
	soltest.External(t, "goipmi-server")
	if p := os.Getenv(EnvBinary); p != "" {
		if fi, err := os.Stat(p); err != nil || !fi.Mode().IsRegular() || fi.Mode()&0o111 == 0 {
			soltest.Missing(t, "%s=%s is not an executable goipmi-server (%v)", EnvBinary, p, err)
		}
		return p
	}
	p, err := build()
	if err != nil {
		soltest.Missing(t, "build goipmi-server: %v", err)
	}
	return p
}

// build builds goipmi-server unless the cache already has this version.
// Concurrent builds (test binaries of several packages) each write a file
// of their own and rename it into place, so none sees a partial binary.
func build() (string, error) {
	dir, err := os.UserCacheDir()
	if err != nil {
		dir = os.TempDir()
	}
	dir = filepath.Join(dir, "obmd-test")
	version := moduleVersion()
	path := filepath.Join(dir, fmt.Sprintf("goipmi-server-%s-%s", version, runtime.Version()))
	if fi, err := os.Stat(path); err == nil && fi.Mode().IsRegular() && version != "unknown" {
		return path, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	suffix := make([]byte, 6)
	rand.Read(suffix)
	tmp := path + ".tmp-" + hex.EncodeToString(suffix)
	defer os.Remove(tmp)
	goTool, err := exec.LookPath("go")
	if err != nil {
		goTool = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	cmd := exec.Command(goTool, "build", "-o", tmp, serverPkg)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build %s: %w: %s", serverPkg, err, out)
	}
	if err := os.Rename(tmp, path); err != nil {
		return "", err
	}
	return path, nil
}

// moduleVersion is the go-ipmi version obmd's go.mod requires (test
// binaries carry no dependency versions in their build info), read from
// the go.mod above the working directory (a package directory under go
// test); "unknown" if there is none.
func moduleVersion() string {
	dir, err := os.Getwd()
	if err != nil {
		return "unknown"
	}
	for {
		if data, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil {
			for _, line := range strings.Split(string(data), "\n") {
				if f := strings.Fields(line); len(f) >= 2 && f[0] == ipmiMod {
					return f[1]
				} else if len(f) >= 3 && f[0] == "require" && f[1] == ipmiMod {
					return f[2]
				}
			}
			return "unknown"
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "unknown"
		}
		dir = parent
	}
}

// errExited: goipmi-server exited while starting.
var errExited = errors.New("goipmi-server exited during start")

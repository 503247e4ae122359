// Package casttest checks asciicast output with Debian's asciinema, for
// the tests of sol/history and of the daemon. It imports nothing of obmd,
// so sol/history's own tests can use it.
package casttest

import (
	"bytes"
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/creack/pty"
)

// AsciinemaCat runs Debian's `asciinema cat` on cast and returns what it
// prints. It reads /dev/tty, so it runs on a pty of its own (its
// controlling terminal), with stdout to a pipe: what it writes arrives
// untouched by a terminal's line discipline.
func AsciinemaCat(t testing.TB, cast []byte) []byte {
	t.Helper()
	if testing.Short() {
		t.Skip("needs asciinema: skipped by -short (the fast tier)")
	}
	bin, err := exec.LookPath("asciinema")
	if err != nil {
		if os.Getenv("OBMD_REQUIRE_INTEGRATION") == "1" {
			t.Fatalf("asciinema is not installed and OBMD_REQUIRE_INTEGRATION=1")
		}
		t.Skip("asciinema is not installed")
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "out.cast")
	if err := os.WriteFile(path, cast, 0o600); err != nil {
		t.Fatal(err)
	}
	ptmx, tty, err := pty.Open()
	if err != nil {
		t.Fatalf("open pty: %v", err)
	}
	defer ptmx.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "cat", path)
	cmd.Env = []string{"HOME=" + dir, "PATH=" + os.Getenv("PATH"), "LANG=C.UTF-8", "PYTHONIOENCODING=utf-8"}
	var stdout, stderr bytes.Buffer
	cmd.Stdin, cmd.Stdout, cmd.Stderr = tty, &stdout, &stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	drained := make(chan struct{})
	go func() { // nothing is echoed, but a full pty would block the child
		defer close(drained)
		_, _ = io.Copy(io.Discard, ptmx)
	}()
	err = cmd.Run()
	tty.Close()
	ptmx.Close()
	<-drained
	if err != nil {
		t.Fatalf("asciinema cat: %v; stderr: %s", err, stderr.Bytes())
	}
	return stdout.Bytes()
}

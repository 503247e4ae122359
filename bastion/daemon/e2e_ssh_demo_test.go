package daemon_test

// `make run`'s demo, end to end: the obmd binary with --demo prints an ssh
// command line with a fresh token, and that line works.

import (
	"errors"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/obmd/obmd/sol/soltest/ipmisim"
)

// demoLine matches the printed one-shot command.
var demoLine = regexp.MustCompile(`(?m)^\s*sshpass -p (\S+) ssh -p (\d+) demo@(\S+) power-status\s*$`)

// TestDemoCommandLine runs `obmd serve --demo` on port 0, runs the sshpass
// line it prints (with the real port), and stops it with SIGTERM.
func TestDemoCommandLine(t *testing.T) {
	t.Parallel()
	ipmisim.Require(t, "ssh", "sshpass")
	bin := obmdBinary(t)
	cmd := exec.Command(bin, "serve", "--demo", "--ssh-addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0",
		"--state-dir", t.TempDir(), "--log-format", "json")
	cmd.Env = append(os.Environ(), "OBMD_CONFIG=")
	logs := &syncBuffer{} // exec copies obmd's stderr here; Wait waits for the copy
	cmd.Stderr = logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			cmd.Process.Kill()
			<-exited
		}
		if t.Failed() {
			t.Logf("obmd stderr:\n%s", tailString(logs.String(), 6000))
		}
	})
	go func() { exited <- cmd.Wait() }() // read by the test or its cleanup

	var token, port, host string
	for deadline := time.Now().Add(60 * time.Second); token == ""; {
		if m := demoLine.FindStringSubmatch(logs.String()); m != nil {
			token, port, host = m[1], m[2], m[3]
			break
		}
		select {
		case err := <-exited:
			stopped = true
			t.Fatalf("obmd exited (%v) without printing the demo line", err)
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatal("no demo line within 60 s")
		}
	}
	if port == "0" || host != "127.0.0.1" {
		t.Fatalf("demo line: got port %s host %s, want the bound port on 127.0.0.1", port, host)
	}
	if !strings.Contains(logs.String(), "ssh -p "+port+" demo@127.0.0.1 ") {
		t.Errorf("interactive demo line: want ssh -p %s demo@127.0.0.1 in\n%s", port, logs.String())
	}

	// The printed line, with options that keep it off this user's ssh config
	// and known_hosts.
	args := []string{"-p", token, "ssh", "-F", "/dev/null", "-o", "StrictHostKeyChecking=no",
		"-o", "UserKnownHostsFile=/dev/null", "-o", "LogLevel=ERROR", "-o", "PubkeyAuthentication=no",
		"-o", "ConnectTimeout=10", "-p", port, "demo@" + host, "power-status"}
	start := time.Now()
	out, err := exec.Command("sshpass", args...).Output()
	took := time.Since(start)
	if err != nil || string(out) != "demo: power on\n" {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			t.Errorf("printed line: got %q, exit %d, stderr %q; want demo: power on", out, ee.ExitCode(), ee.Stderr)
		} else {
			t.Errorf("printed line: got %q, %v; want demo: power on", out, err)
		}
	}
	t.Logf("sshpass+ssh power-status round trip against the binary: %v", took.Round(time.Millisecond))

	// Secrets are only on the terminal banner, never in a log line.
	for _, l := range strings.Split(logs.String(), "\n") {
		if strings.HasPrefix(l, "{") && strings.Contains(l, token) {
			t.Errorf("log line holds the demo token: %s", l)
		}
	}

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	stopped = true
	select {
	case err := <-exited:
		if err != nil {
			t.Errorf("obmd after SIGTERM: %v, want exit 0", err)
		}
	case <-time.After(20 * time.Second):
		cmd.Process.Kill()
		<-exited
		t.Fatal("obmd did not exit within 20 s of SIGTERM")
	}
	if !slices.ContainsFunc(strings.Split(logs.String(), "\n"), func(l string) bool {
		return strings.Contains(l, `"msg":"obmd_stopped"`)
	}) {
		t.Errorf("no obmd_stopped log line after SIGTERM")
	}
}

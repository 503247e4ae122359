package docs

// The examples name fixed ports (obmd's defaults, 2222 and 8080, and
// ipmi_sim's 9623), as a reader's machine has them. A test must not assume
// a fixed port is free, so TestDocExamples runs them in a network
// namespace it creates: it re-executes its own binary there, with only a
// loopback interface, and reports what that run reports. Everything the
// run starts (obmd, ipmi_sim, the terminals and what runs in them) is
// inside the namespace, ended by the run by PID; the run itself is ended
// by PID if it outlives the test's deadline.

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/obmd/obmd/sol/soltest"
)

// netnsEnv is set, to the directory holding obmd and obmctl, in the
// environment of the run re-executed in its network namespace.
const netnsEnv = "OBMD_DOCS_NETNS_BIN"

// runInNetNS re-executes this test binary in a new network namespace to
// run TestDocExamples (the subtests -run names, if any) with the binaries
// in bin, and passes its output and outcome on to t. As root the
// namespace is a network namespace alone; otherwise it is made in a user
// namespace of its own, where the test is root; a system that allows
// neither is a missing dependency.
func runInNetNS(t *testing.T, bin string) {
	args := []string{"-test.run=^TestDocExamples$" + subtests(), "-test.count=1", "-test.v"}
	ctx := context.Background()
	if d, ok := t.Deadline(); ok {
		// The run's own timeout fires first and says where it hung; the
		// context is the backstop.
		left := time.Until(d)
		args = append(args, "-test.timeout="+(left-left/10).String())
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, d.Add(-left/20))
		defer cancel()
	}
	cmd := exec.CommandContext(ctx, os.Args[0], args...) // ended by PID (cmd.Process.Kill) at ctx's end
	cmd.Env = append(os.Environ(), netnsEnv+"="+bin)
	cmd.SysProcAttr = netnsAttr()
	cmd.WaitDelay = 10 * time.Second
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		if errors.Is(err, syscall.EPERM) || errors.Is(err, syscall.EINVAL) || errors.Is(err, syscall.ENOSPC) {
			soltest.Missing(t, "the examples run in a network namespace of their own, which needs root or unprivileged user namespaces: %v", err)
		}
		t.Fatalf("start the examples' run in a network namespace: %v", err)
	}
	var skipped bool
	lines := bufio.NewScanner(out)
	lines.Buffer(make([]byte, 64<<10), 1<<20)
	for lines.Scan() {
		line := lines.Text()
		if strings.HasPrefix(line, "--- SKIP: TestDocExamples ") {
			skipped = true
		}
		t.Log(line)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("the examples' run in its network namespace failed (%v): its output is above", err)
	}
	if skipped {
		t.Skip("the examples' run in its network namespace skipped: its output is above")
	}
}

// netnsAttr starts a process in a new network namespace: as root, that
// alone; otherwise in a new user namespace too, mapping the user to root
// in it (which may then bring the loopback interface up). The process is
// killed if the test process dies.
func netnsAttr() *syscall.SysProcAttr {
	attr := &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNET, Pdeathsig: syscall.SIGKILL}
	if uid := os.Getuid(); uid != 0 {
		attr.Cloneflags |= syscall.CLONE_NEWUSER
		attr.UidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: uid, Size: 1}}
		attr.GidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getgid(), Size: 1}}
	}
	return attr
}

// subtests is the part of -run after its first level ("/docs/tenant.md"
// of "TestDocExamples/docs/tenant.md"), so that the run in the namespace
// runs the subtests asked for; "" for all of them.
func subtests() string {
	f := flag.Lookup("test.run")
	if f == nil {
		return ""
	}
	if _, rest, ok := strings.Cut(f.Value.String(), "/"); ok {
		return "/" + rest
	}
	return ""
}

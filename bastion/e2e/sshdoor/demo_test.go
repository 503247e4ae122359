package sshdoor

// `make run`'s demo, end to end: the obmd binary with --demo prints ssh
// command lines with a fresh token and its host key's fingerprint, and
// those lines work as printed on a machine that has never reached obmd.

import (
	"os"
	"os/exec"
	"os/user"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/obmd/obmd/bastion/e2e/obmdtest"

	"github.com/obmd/obmd/sol/soltest"
	"github.com/obmd/obmd/sol/soltest/ipmisim"
)

// TestDemoCommandLine runs `obmd serve --demo` on port 0 and runs the
// command lines it prints, verbatim, as a newcomer would on a machine that
// has never reached obmd (a home directory of its own, empty: no
// known_hosts, no ssh configuration): the sshpass line first, then the
// interactive ssh line, whose host key question is answered with the
// printed fingerprint; then it stops obmd with SIGTERM.
func TestDemoCommandLine(t *testing.T) {
	t.Parallel()
	ipmisim.Require(t, "ssh", "sshpass")
	bin := obmdtest.Binary(t)
	cmd := exec.Command(bin, "serve", "--demo", "--ssh-addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0",
		"--state-dir", t.TempDir(), "--log-format", "json")
	cmd.Env = append(os.Environ(), "OBMD_CONFIG=", "OBMD_WEB_ADDR=127.0.0.1:0")
	logs := &obmdtest.SyncBuffer{} // exec copies obmd's stderr here; Wait waits for the copy
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
			t.Logf("obmd stderr:\n%s", obmdtest.Tail(logs.String(), 6000))
		}
	})
	go func() { exited <- cmd.Wait() }() // read by the test or its cleanup

	var m []string
	for deadline := time.Now().Add(60 * time.Second); m == nil; {
		if m = demoBlock.FindStringSubmatch(logs.String()); m != nil {
			break
		}
		select {
		case err := <-exited:
			stopped = true
			t.Fatalf("obmd exited (%v) without printing the demo lines", err)
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatal("no demo lines within 60 s")
		}
	}
	token, fingerprint, interactive, oneShot := m[1], m[2], m[3], m[4]
	if !strings.Contains(interactive, "demo@127.0.0.1") || !strings.Contains(oneShot, token) || strings.Contains(oneShot, "-p 0 ") {
		t.Fatalf("demo lines: got %q and %q, want the bound port on 127.0.0.1 and the token", interactive, oneShot)
	}
	if out := logs.String(); strings.Index(out, `"msg":"obmd_listening"`) > strings.Index(out, "Try:") {
		t.Errorf("the Try lines come before the start-up log:\n%s", out)
	}

	// The one-shot line, first thing on a fresh machine.
	res := runInHome(t, freshHome(t), oneShot)
	if res.Code != 0 || res.Stdout != "demo: power on\n" {
		t.Errorf("%s: got %v, want demo: power on", oneShot, res)
	}

	// The interactive line on another fresh machine: ssh shows the printed
	// fingerprint and takes it as the answer, then asks for the token.
	home := freshHome(t)
	p := obmdtest.StartPTY(t, inHome(t, home, interactive))
	p.Expect("ED25519 key fingerprint is " + fingerprint + ".")
	p.Expect("(yes/no/[fingerprint])? ")
	p.TypeKeys(fingerprint + "\r")
	p.Expect("Password (node token): ")
	p.TypeKeys(token + "\r")
	p.Expect("[obmd: console of demo; you are writing")
	p.Detach()
	// That machine knows obmd now: the one-shot line works there too.
	if res := runInHome(t, home, oneShot); res.Code != 0 || res.Stdout != "demo: power on\n" {
		t.Errorf("%s after the interactive login: got %v, want demo: power on", oneShot, res)
	}
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

// demoBlock matches what --demo prints: the token, the host key's
// fingerprint, and the two command lines after "Try:".
var demoBlock = regexp.MustCompile(`(?s)its token \(new at each start\) is:\n\n    (\S+)\n.*` +
	`ED25519 key fingerprint is (SHA256:\S+)\n.*Try:\n    (ssh [^\n]+)\n    (sshpass [^\n]+)\n`)

// freshHome is an empty directory to serve as the home directory of a
// user who has never run ssh (inHome).
func freshHome(t testing.TB) string {
	t.Helper()
	if os.Geteuid() != 0 {
		soltest.Missing(t, "a fresh home directory for ssh needs root (a private mount namespace)")
	}
	ipmisim.Require(t, "unshare", "mount", "sh")
	return t.TempDir()
}

// inHome is `sh -c line` with home as the home directory of the user the
// tests run as: OpenSSH reads its configuration and known_hosts from the
// home directory the password database names, whatever $HOME says, so
// home is mounted over that one, in a mount namespace of the command's
// own.
func inHome(t testing.TB, home, line string) *exec.Cmd {
	t.Helper()
	u, err := user.Current()
	if err != nil {
		t.Fatal(err)
	}
	return exec.Command("unshare", "--mount", "--propagation", "private", "sh", "-c",
		`mount --bind "$0" "$1" && cd "$1" && HOME="$1" exec sh -c "$2"`, home, u.HomeDir, line)
}

// runInHome runs line in home (inHome) to its end.
func runInHome(t testing.TB, home, line string) obmdtest.Result {
	t.Helper()
	c := inHome(t, home, line)
	res, err := obmdtest.RunClient(obmdtest.Timeout, c.Path, c.Args[1:]...)
	if err != nil {
		t.Fatalf("%s: %v (%v)", line, err, res)
	}
	return res
}

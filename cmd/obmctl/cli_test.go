package main

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"errors"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	gossh "golang.org/x/crypto/ssh"

	"github.com/obmd/obmd/bastion/admin/api"
	"github.com/obmd/obmd/bastion/daemon"
	"github.com/obmd/obmd/sol/soltest"
	"github.com/obmd/obmd/sol/soltest/sshbmc"
)

// TestObmctlFlagsAnywhere: global flags go before the command, after it,
// or between its arguments, as the command's own flags do.
func TestObmctlFlagsAnywhere(t *testing.T) {
	ctl := newCtl(t)
	if _, errOut, code := ctl("node", "add", "demo", "--type", "sim", "--addr", "sim"); code != 0 {
		t.Fatalf("node add: exit %d %q", code, errOut)
	}
	for _, args := range [][]string{
		{"--json", "node", "ls"},
		{"node", "--json", "ls"},
		{"node", "ls", "--json"},
		{"node", "ls", "-json"},
		{"node", "ls", "--json=true"},
	} {
		out, errOut, code := ctl(args...)
		var nodes api.Nodes
		if err := json.Unmarshal([]byte(out), &nodes); code != 0 || err != nil || len(nodes.Nodes) != 1 || nodes.Nodes[0].Label != "demo" {
			t.Errorf("%q: got exit %d, stdout %q (%v), stderr %q; want the node list as JSON", args, code, out, err, errOut)
		}
	}
	out, errOut, code := ctl("token", "rotate", "demo", "--json")
	var tok api.Token
	if err := json.Unmarshal([]byte(out), &tok); code != 0 || err != nil || tok.Token == "" {
		t.Errorf("token rotate demo --json: got exit %d, stdout %q (%v), stderr %q; want {\"token\": ...}", code, out, err, errOut)
	}
	// Flags between arguments, and -- ending them.
	if out, errOut, code := ctl("node", "add", "--addr", "sim", "demo2", "--type", "sim"); code != 0 || out != "demo2: registered\n" {
		t.Errorf("node add with the label among the flags: got exit %d, %q, %q", code, out, errOut)
	}
	if out, errOut, code := ctl("node", "show", "--", "--json"); code == 0 || out != "" || !strings.Contains(errOut, `"--json"`) {
		t.Errorf("node show -- --json: got exit %d, %q, %q; want --json taken as the label", code, out, errOut)
	}
}

// TestObmctlHelp: --help, -h and help exit 0 and print the commands on
// stdout; help COMMAND and COMMAND --help print that command's flags; a
// group alone (obmctl node) lists its subcommands; no command is a usage
// error that lists every command.
func TestObmctlHelp(t *testing.T) {
	ctl := newCtl(t)
	for _, args := range [][]string{{"--help"}, {"-h"}, {"help"}, {"--json", "--help"}} {
		out, errOut, code := ctl(args...)
		if code != 0 || errOut != "" || !strings.Contains(out, "node add LABEL") || !strings.Contains(out, "lockouts") || !strings.Contains(out, "Exit codes") {
			t.Errorf("%q: got exit %d, stdout %q, stderr %q; want exit 0 and the commands on stdout", args, code, out, errOut)
		}
	}
	for _, args := range [][]string{{"help", "node", "add"}, {"node", "add", "--help"}, {"node", "add", "x", "-h"}} {
		out, errOut, code := ctl(args...)
		if code != 0 || errOut != "" || !strings.Contains(out, "usage: obmctl node add LABEL") || !strings.Contains(out, "--pass-file FILE") {
			t.Errorf("%q: got exit %d, stdout %q, stderr %q; want node add's flags", args, code, out, errOut)
		}
	}
	for _, args := range [][]string{{"node"}, {"--json", "node"}} {
		_, errOut, code := ctl(args...)
		for _, sub := range []string{"node ls", "node show LABEL", "node add LABEL", "node set LABEL", "node rm LABEL"} {
			if code != 2 || !strings.Contains(errOut, sub) {
				t.Errorf("%q: got exit %d, stderr %q; want exit 2 and %q listed", args, code, errOut, sub)
			}
		}
		if strings.Contains(errOut, "unknown command") || strings.Contains(errOut, "token rotate") {
			t.Errorf("%q: stderr %q; want node's subcommands only", args, errOut)
		}
	}
	if out, errOut, code := ctl("help", "node"); code != 0 || !strings.Contains(out, "node rm LABEL") || strings.Contains(out, "token rotate") {
		t.Errorf("help node: got exit %d, %q, %q; want node's subcommands", code, out, errOut)
	}
	if _, errOut, code := ctl(); code != 2 || !strings.Contains(errOut, "token rotate LABEL") {
		t.Errorf("no command: got exit %d, %q; want exit 2 and every command", code, errOut)
	}
	if _, errOut, code := ctl("help", "frob"); code != 2 || !strings.Contains(errOut, `unknown command "frob"`) {
		t.Errorf("help frob: got exit %d, %q", code, errOut)
	}
}

// TestObmctlConsoleLogTimestamps: --timestamps asks for text, so it
// implies --format text; with another format it is refused, not ignored.
func TestObmctlConsoleLogTimestamps(t *testing.T) {
	d := startDaemon(t)
	ctl := ctlFor(d)
	if _, errOut, code := ctl("node", "add", "n1", "--type", "sim", "--addr", "sim", "--capture", "always"); code != 0 {
		t.Fatalf("node add: %q", errOut)
	}
	tok, _, _ := ctl("token", "rotate", "n1")
	// A sim node prints its boot text at a power cycle; the captured link
	// records it once it is up.
	var out string
	for deadline := time.Now().Add(20 * time.Second); !strings.Contains(out, "\n") && time.Now().Before(deadline); {
		sshExec(t, d, "n1", strings.TrimSpace(tok), "power-cycle")
		time.Sleep(200 * time.Millisecond)
		out, _, _ = ctl("console-log", "n1", "--format", "text")
	}
	if !strings.Contains(out, "\n") {
		t.Fatalf("console-log n1: got %q, want some lines", out)
	}
	stamped, errOut, code := ctl("console-log", "n1", "--timestamps")
	first, _, _ := strings.Cut(stamped, "\n")
	if _, err := time.Parse(time.RFC3339, strings.Fields(first + " x")[0]); code != 0 || err != nil {
		t.Errorf("console-log --timestamps: got exit %d, %q, %q; want each line stamped (%v)", code, stamped, errOut, err)
	}
	for _, format := range []string{"raw", "cast"} {
		if _, errOut, code := ctl("console-log", "n1", "--timestamps", "--format", format); code != 2 || !strings.Contains(errOut, "--timestamps") {
			t.Errorf("--timestamps --format %s: got exit %d, %q; want a usage error naming --timestamps", format, code, errOut)
		}
	}
}

// TestObmctlIdempotentRemovals: removing what is not there succeeds, as
// token revoke and node rm always did: key rm, ca rm, unlock. A removal on
// an unknown node still fails.
func TestObmctlIdempotentRemovals(t *testing.T) {
	ctl := newCtl(t)
	if _, errOut, code := ctl("node", "add", "n1", "--type", "sim", "--addr", "sim"); code != 0 {
		t.Fatalf("node add: %q", errOut)
	}
	pub := testKey(t)
	fp, _, code := ctl("key", "add", "n1", writeFile(t, pub))
	fp = strings.TrimSpace(fp)
	if code != 0 || !strings.HasPrefix(fp, "SHA256:") {
		t.Fatalf("key add: exit %d %q", code, fp)
	}
	steps := []struct {
		args     []string
		wantCode int
		wantOut  string
	}{
		{[]string{"key", "rm", "n1", fp}, 0, "n1: key " + fp + " removed\n"},
		{[]string{"key", "rm", "n1", fp}, 0, "n1: key " + fp + " was not registered\n"},
		{[]string{"key", "rm", "nope", fp}, 1, ""},
		{[]string{"token", "revoke", "n1"}, 0, "n1: token revoked\n"},
		{[]string{"token", "revoke", "n1"}, 0, "n1: token revoked\n"},
		{[]string{"unlock", "192.0.2.1"}, 0, "192.0.2.1: was not locked out\n"},
		{[]string{"unlock", "192.0.2.1"}, 0, "192.0.2.1: was not locked out\n"},
		{[]string{"node", "rm", "n1"}, 0, "n1: deleted\n"},
		{[]string{"node", "rm", "n1"}, 0, "n1: deleted\n"},
	}
	for _, s := range steps {
		out, errOut, code := ctl(s.args...)
		if code != s.wantCode || out != s.wantOut {
			t.Errorf("%q: got exit %d, stdout %q, stderr %q; want exit %d, %q", s.args, code, out, errOut, s.wantCode, s.wantOut)
		}
	}
}

// TestObmctlJSONErrors: with --json, an error is also one JSON object on
// stdout, {"error": "..."}, with the same exit code and the same text on
// stderr: the API's refusals, usage errors, and a daemon out of reach.
func TestObmctlJSONErrors(t *testing.T) {
	ctl := newCtl(t)
	for _, tt := range []struct {
		args     []string
		wantCode int
		want     string // in the error
	}{
		{[]string{"--json", "node", "show", "nope"}, 1, `node "nope" not found`},
		{[]string{"node", "show", "nope", "--json"}, 1, `node "nope" not found`},
		{[]string{"token", "rotate", "nope", "--json"}, 1, `node "nope" not found`},
		{[]string{"--json", "frob"}, 2, `unknown command "frob"`},
		{[]string{"--json", "node", "show"}, 2, "LABEL"},
		{[]string{"--json", "node", "ls", "--bogus"}, 2, "unknown flag --bogus"},
		{[]string{"--json", "--url", "http://127.0.0.1:1", "node", "ls"}, 1, "cannot reach obmd"},
		{[]string{"console-log", "n1", "--json"}, 2, "not JSON"},
	} {
		out, errOut, code := ctl(tt.args...)
		var e api.Error
		if err := json.Unmarshal([]byte(out), &e); err != nil || code != tt.wantCode || !strings.Contains(e.Error, tt.want) ||
			errOut != "obmctl: "+e.Error+"\n" && !strings.HasPrefix(errOut, "obmctl: "+e.Error+"\n") {
			t.Errorf("%q: got exit %d, stdout %q (%v), stderr %q; want exit %d, {\"error\": ~%q} and the same on stderr",
				tt.args, code, out, err, errOut, tt.wantCode, tt.want)
		}
	}
	// Without --json, stdout stays empty.
	if out, _, code := ctl("node", "show", "nope"); code != 1 || out != "" {
		t.Errorf("node show nope: got exit %d, stdout %q; want 1 and nothing on stdout", code, out)
	}
}

// TestObmctlNodeAddFlagNames: the API's refusal of a registration names
// the flag the user typed, not the API's field.
func TestObmctlNodeAddFlagNames(t *testing.T) {
	ctl := newCtl(t)
	pw := writePass(t, "pw")
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"node", "add", "n1", "--user", "root", "--pass-file", pw}, "--addr is required"},
		{[]string{"node", "add", "n1", "--addr", "10.0.0.5", "--pass-file", pw}, "--user is required"},
		{[]string{"node", "add", "n1", "--addr", "10.0.0.5", "--user", "root", "--port", "70000", "--pass-file", pw}, "--port 70000"},
		{[]string{"node", "add", "r1", "--type", "redfish", "--addr", "https://bmc", "--user", "u", "--sol-port", "70000", "--pass-file", pw}, "--sol-port 70000"},
		{[]string{"node", "add", "r1", "--type", "redfish", "--addr", "http://bmc", "--user", "u", "--pass-file", pw}, "--addr"},
	} {
		_, errOut, code := ctl(tt.args...)
		if code != 1 || !strings.Contains(errOut, tt.want) || strings.Contains(errOut, "info.") {
			t.Errorf("%q: got exit %d, %q; want %q and no API field name", tt.args, code, errOut, tt.want)
		}
	}
}

// TestObmctlLockouts: five wrong tokens over SSH lock the address out, so
// that the right one is refused as a wrong one is; obmctl lockouts shows
// the operator the address, and obmctl unlock lets the right token in at
// once.
func TestObmctlLockouts(t *testing.T) {
	d := startDaemon(t)
	ctl := ctlFor(d)
	if _, errOut, code := ctl("node", "add", "n1", "--type", "sim", "--addr", "sim"); code != 0 {
		t.Fatalf("node add: %q", errOut)
	}
	tok, _, _ := ctl("token", "rotate", "n1")
	tok = strings.TrimSpace(tok)
	login := func(password string) error { return sshLogin(d, "n1", password) }
	if out, _, code := ctl("lockouts"); code != 0 || !strings.Contains(out, "nothing is locked out") ||
		!strings.Contains(out, "5 failures from one address within 1m0s lock it out for 1m0s") {
		t.Errorf("lockouts before: got exit %d, %q; want none and the limits", code, out)
	}
	for i := range 5 {
		if err := login("wrong"); err == nil {
			t.Fatalf("wrong token %d logged in", i)
		}
	}
	if err := login(tok); err == nil {
		t.Fatal("the right token logged in from a locked-out address; want it refused (the lockout is hidden)")
	}
	// What a person sees with the real client: the same refusal as a wrong token.
	if code, out := openSSH(t, d, "n1", tok, "power-status"); code != 5 {
		t.Errorf("sshpass ssh with the right token while locked out: exit %d, %q; want 5 (a refused password)", code, out)
	}
	out, errOut, code := ctl("lockouts")
	if code != 0 || !strings.Contains(out, "127.0.0.1") || !strings.Contains(out, "SOURCE") {
		t.Errorf("lockouts: got exit %d, %q, %q; want 127.0.0.1 listed", code, out, errOut)
	}
	out, _, code = ctl("lockouts", "--json")
	var lo api.Lockouts
	if err := json.Unmarshal([]byte(out), &lo); code != 0 || err != nil || len(lo.Sources) != 1 || lo.Sources[0].Failures != 5 {
		t.Errorf("lockouts --json: got exit %d, %q (%v); want 127.0.0.1 with 5 failures", code, out, err)
	}
	if out, errOut, code := ctl("unlock", "127.0.0.1"); code != 0 || out != "127.0.0.1: unlocked\n" {
		t.Errorf("unlock: got exit %d, %q, %q", code, out, errOut)
	}
	if code, out := openSSH(t, d, "n1", tok, "power-status"); code != 0 || !strings.Contains(out, "n1: power") {
		t.Errorf("sshpass ssh with the right token after unlock: exit %d, %q; want 0 and the power state", code, out)
	}
	if out, _, _ := ctl("audit"); !strings.Contains(out, "lockout.clear") {
		t.Errorf("audit: got %q, want the unlock", out)
	}
}

// TestObmctlBinary: the built command exits as run says (help 0, usage 2)
// and talks to obmd.
func TestObmctlBinary(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "obmctl")
	goBin, err := exec.LookPath("go")
	if err != nil {
		goBin = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	if out, err := exec.Command(goBin, "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	d := startDaemon(t)
	for _, tt := range []struct {
		args     []string
		wantCode int
		wantOut  string
	}{
		{[]string{"--help"}, 0, "Commands:"},
		{[]string{"node", "ls", "--json"}, 0, `{"nodes":[]}`},
		{[]string{"node"}, 2, ""},
		{[]string{"node", "show", "nope", "--json"}, 1, `{"error":"node \"nope\" not found"}`},
	} {
		cmd := exec.Command(bin, tt.args...)
		cmd.Env = append(os.Environ(), "OBMD_URL=http://"+d.AdminAddr(), "OBMD_ADMIN_TOKEN="+d.AdminToken())
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatalf("%q: %v", tt.args, err)
		}
		if code != tt.wantCode || !strings.Contains(stdout.String(), tt.wantOut) {
			t.Errorf("obmctl %q: got exit %d, stdout %q, stderr %q; want exit %d, stdout ~%q", tt.args, code, stdout.String(), stderr.String(), tt.wantCode, tt.wantOut)
		}
	}
}

// testKey is a new authorized_keys line.
func testKey(t *testing.T) string {
	t.Helper()
	signer, err := gossh.NewSignerFromKey(newEd25519(t))
	if err != nil {
		t.Fatal(err)
	}
	return string(gossh.MarshalAuthorizedKey(signer.PublicKey()))
}

func writeFile(t *testing.T, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func newEd25519(t *testing.T) ed25519.PrivateKey {
	t.Helper()
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return priv
}

// ctlFor runs obmctl against d with stdin "".
func ctlFor(d *daemon.Daemon) ctlFunc {
	env := map[string]string{"OBMD_URL": "http://" + d.AdminAddr(), "OBMD_ADMIN_TOKEN": d.AdminToken()}
	return func(args ...string) (string, string, int) {
		var out, errb bytes.Buffer
		code := run(args, strings.NewReader(""), &out, &errb, func(k string) string { return env[k] })
		return out.String(), errb.String(), code
	}
}

// sshClient logs in to d as node with password.
func sshClient(d *daemon.Daemon, node, password string) (*gossh.Client, error) {
	return gossh.Dial("tcp", d.SSHAddr(), &gossh.ClientConfig{User: node, Auth: []gossh.AuthMethod{gossh.Password(password)},
		HostKeyCallback: gossh.InsecureIgnoreHostKey(), Timeout: 10 * time.Second})
}

// sshLogin logs in to d as node with password, and out again.
func sshLogin(d *daemon.Daemon, node, password string) error {
	c, err := sshClient(d, node, password)
	if err != nil {
		return err
	}
	return c.Close()
}

// sshExec runs command on node over SSH; its failure fails the test.
func sshExec(t *testing.T, d *daemon.Daemon, node, password, command string) {
	t.Helper()
	c, err := sshClient(d, node, password)
	if err != nil {
		t.Fatalf("ssh %s: %v", node, err)
	}
	defer c.Close()
	s, err := c.NewSession()
	if err != nil {
		t.Fatalf("ssh %s: session: %v", node, err)
	}
	defer s.Close()
	if out, err := s.CombinedOutput(command); err != nil {
		t.Fatalf("ssh %s %s: %v %q", node, command, err, out)
	}
}

// openSSH runs command on node with the real OpenSSH client, the token
// typed by sshpass, and returns the exit code and everything printed.
func openSSH(t *testing.T, d *daemon.Daemon, node, token, command string) (int, string) {
	t.Helper()
	for _, tool := range []string{"ssh", "sshpass"} {
		if _, err := exec.LookPath(tool); err != nil {
			soltest.Missing(t, "%s is not installed", tool)
		}
	}
	host, port, err := net.SplitHostPort(d.SSHAddr())
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("sshpass", "-e", "ssh", "-p", port, "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null",
		"-o", "PubkeyAuthentication=no", "-o", "NumberOfPasswordPrompts=1", "-o", "LogLevel=ERROR", "-o", "BatchMode=no",
		node+"@"+host, command)
	cmd.Env = append(os.Environ(), "SSHPASS="+token)
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode(), string(out)
	}
	if err != nil {
		t.Fatalf("sshpass ssh: %v", err)
	}
	return 0, string(out)
}

// TestObmctlSharedBMC: a second node on a BMC another node uses is refused,
// and the refusal names the flag an obmctl user types to say it is meant
// (never the API's query parameter); with it the node registers. An IPv6
// BMC is shown as an operator types it, bracketed before its port.
func TestObmctlSharedBMC(t *testing.T) {
	ctl := newCtl(t)
	pw := writePass(t, "pw")
	add := func(label string, extra ...string) (string, int) {
		args := append([]string{"node", "add", label, "--addr", "::1", "--port", "9623", "--user", "root", "--pass-file", pw}, extra...)
		_, errOut, code := ctl(args...)
		return errOut, code
	}
	if errOut, code := add("v6a"); code != 0 {
		t.Fatalf("first node: exit %d, %q", code, errOut)
	}
	errOut, code := add("v6b")
	if code != 1 || !strings.Contains(errOut, `"v6a" already uses this BMC`) || !strings.Contains(errOut, "--allow-shared-bmc") ||
		strings.Contains(errOut, "allow_shared_bmc") {
		t.Errorf("second node: got exit %d, %q; want 1, naming v6a and --allow-shared-bmc", code, errOut)
	}
	if errOut, code := add("v6b", "--allow-shared-bmc"); code != 0 {
		t.Errorf("second node with --allow-shared-bmc: got exit %d, %q; want 0", code, errOut)
	}
	out, errOut, code := ctl("node", "ls")
	if code != 0 || !strings.Contains(out, "[::1]:9623") {
		t.Errorf("node ls: got exit %d, %q %q; want the BMC as [::1]:9623", code, out, errOut)
	}
}

// TestObmctlSSHConsole: node add takes the SSH console's flags (its
// password and host key from files, never arguments), node show says how
// the console is reached and shows the key pinned at the first console
// link, and node ssh-host-key reset forgets it (idempotent).
func TestObmctlSSHConsole(t *testing.T) {
	d := startDaemon(t)
	ctl := ctlFor(d)
	b := sshbmc.Start(t, sshbmc.Options{Vendor: "openbmc"})
	dir := t.TempDir()
	pw, sshPw := filepath.Join(dir, "pw"), filepath.Join(dir, "ssh-pw")
	os.WriteFile(pw, []byte("ipmi-pass\n"), 0o600)
	os.WriteFile(sshPw, []byte(sshbmc.Pass+"\n"), 0o600)
	if _, errOut, code := ctl("node", "add", "n1", "--addr", "127.0.0.1", "--user", "root", "--pass-file", pw,
		"--console", "ssh", "--ssh-vendor", "openbmc", "--ssh-port", strconv.Itoa(b.Port), "--ssh-user", sshbmc.User,
		"--ssh-pass-file", sshPw); code != 0 {
		t.Fatalf("node add: %q", errOut)
	}
	if _, errOut, code := ctl("node", "add", "n2", "--type", "sim", "--addr", "sim", "--console", "ssh"); code != 2 ||
		!strings.Contains(errOut, "--console") {
		t.Errorf("a sim node with --console: got exit %d, %q, want refused", code, errOut)
	}
	out, _, _ := ctl("node", "show", "n1")
	if !strings.Contains(out, "console:  ssh (SSH: openbmc, port "+strconv.Itoa(b.Port)+"), in use: none yet") ||
		strings.Contains(out, "ssh key:") {
		t.Errorf("node show before a console: %q", out)
	}
	tok, _, _ := ctl("token", "rotate", "n1")
	c, err := sshClient(d, "n1", strings.TrimSpace(tok))
	if err != nil {
		t.Fatal(err)
	}
	s, err := c.NewSession()
	if err != nil {
		t.Fatal(err)
	}
	s.Stdout = io.Discard
	if err := s.Shell(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for !(strings.Contains(out, "(pinned") && strings.Contains(out, "in use: ssh")) && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
		out, _, _ = ctl("node", "show", "n1")
	}
	c.Close()
	if fp := gossh.FingerprintSHA256(b.HostKey()); !strings.Contains(out, "ssh key:  "+fp+" (pinned") ||
		!strings.Contains(out, "in use: ssh") {
		t.Errorf("node show after a console: %q, want the pinned key %s and ssh in use", out, fp)
	}
	if js, _, _ := ctl("node", "show", "n1", "--json"); strings.Contains(js, sshbmc.Pass) || strings.Contains(js, "ipmi-pass") {
		t.Errorf("node show --json shows a password: %s", js)
	}
	for _, want := range []string{"n1: SSH host key forgotten", "n1: no SSH host key was pinned"} {
		if out, errOut, code := ctl("node", "ssh-host-key", "reset", "n1"); code != 0 || !strings.HasPrefix(out, want) {
			t.Errorf("reset: got exit %d, %q, %q, want %q", code, out, errOut, want)
		}
	}
}

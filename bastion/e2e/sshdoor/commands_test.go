package sshdoor

// End to end through the SSH front door: every exec command, its output and
// exit code, through golang.org/x/crypto/ssh (password, public key,
// keyboard-interactive) and the real OpenSSH client (sshpass and ssh -i);
// usage errors; --json; with and without a PTY.

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/obmd/obmd/bastion/e2e/obmdtest"

	gossh "golang.org/x/crypto/ssh"

	"github.com/obmd/obmd/commands"
	"github.com/obmd/obmd/sol"
	"github.com/obmd/obmd/sol/sim"
	"github.com/obmd/obmd/sol/soltest/ipmisim"
)

// transport runs one exec command on a node through one SSH client and
// authentication method.
type transport struct {
	name   string
	method string // the SSH authentication method it ends up using
	// setup registers whatever credential the transport uses on label and
	// returns the function that runs a command line there.
	setup func(t *testing.T, o *obmdtest.Daemon, label string) func(line string) obmdtest.Result
}

// transports are every client and method a tenant may use.
func transports() []transport {
	return []transport{
		{"go-password", "password", func(t *testing.T, o *obmdtest.Daemon, label string) func(string) obmdtest.Result {
			tok := o.Rotate(label)
			return func(line string) obmdtest.Result { return obmdtest.Must(t)(o.ExecGo(label, tok, line)) }
		}},
		{"go-keyboard-interactive", "keyboard-interactive", func(t *testing.T, o *obmdtest.Daemon, label string) func(string) obmdtest.Result {
			tok := o.Rotate(label)
			return func(line string) obmdtest.Result {
				return obmdtest.Must(t)(o.Exec(label, line, obmdtest.KeyboardInteractive(tok)))
			}
		}},
		{"go-publickey", "publickey", func(t *testing.T, o *obmdtest.Daemon, label string) func(string) obmdtest.Result {
			signer, _ := obmdtest.NewKey(t)
			o.AddKey(label, signer.PublicKey())
			return func(line string) obmdtest.Result {
				return obmdtest.Must(t)(o.Exec(label, line, gossh.PublicKeys(signer)))
			}
		}},
		// sshpass answers whichever prompt comes: OpenSSH prefers
		// keyboard-interactive, so the plain password method is forced too.
		{"openssh-sshpass", "keyboard-interactive", func(t *testing.T, o *obmdtest.Daemon, label string) func(string) obmdtest.Result {
			tok := o.Rotate(label)
			return func(line string) obmdtest.Result { return o.OpenSSH(label, tok, nil, words(line)...) }
		}},
		{"openssh-password-method", "password", func(t *testing.T, o *obmdtest.Daemon, label string) func(string) obmdtest.Result {
			tok := o.Rotate(label)
			only := []string{"-o", "PreferredAuthentications=password"}
			return func(line string) obmdtest.Result { return o.OpenSSH(label, tok, only, words(line)...) }
		}},
		{"openssh-key", "publickey", func(t *testing.T, o *obmdtest.Daemon, label string) func(string) obmdtest.Result {
			signer, path := obmdtest.NewKey(t)
			o.AddKey(label, signer.PublicKey())
			return func(line string) obmdtest.Result {
				return o.OpenSSH(label, "", []string{"-i", path}, words(line)...)
			}
		}},
	}
}

// words splits line for the OpenSSH command line; a leading "--" stops
// ssh from taking a first word such as --json as its own option.
func words(line string) []string {
	return append([]string{"--"}, strings.Fields(line)...)
}

// commandCase is one exec command on a simulated node; cases run in order
// on one node (it starts powered on, boot device none).
type commandCase struct {
	line   string
	code   int
	stdout string // exact, with L for the node label; ignored if check is set
	check  func(t *testing.T, label string, res obmdtest.Result)
	action string // the simulator action it must add ("" = none)
	power  string // the simulator's power state afterwards: "on", "off" or "" (unchecked)
}

func commandCases() []commandCase {
	return []commandCase{
		{line: "power-status", stdout: "L: power on\n", power: "on"},
		{line: "power-off", stdout: "L: powered off\n", action: "power off", power: "off"},
		{line: "power-status", stdout: "L: power off\n"},
		{line: "power-on", stdout: "L: powered on\n", action: "power on", power: "on"},
		{line: "power-off --soft", stdout: "L: soft power-off requested\n", action: "power off soft", power: "off"},
		{line: "power-cycle", stdout: "L: power cycled\n", action: "power cycle", power: "on"},
		{line: "power-cycle --force", stdout: "L: reset\n", action: "power reset", power: "on"},
		{line: "power-reset", stdout: "L: reset\n", action: "power reset", power: "on"},
		{line: "bootdev pxe", stdout: "L: next boot from pxe\n", action: "bootdev pxe"},
		{line: "bootdev disk", stdout: "L: next boot from disk\n", action: "bootdev disk"},
		{line: "bootdev bios", stdout: "L: next boot from bios\n", action: "bootdev bios"},
		{line: "bootdev cdrom", stdout: "L: next boot from cdrom\n", action: "bootdev cdrom"},
		{line: "bootdev none", stdout: "L: next boot from none\n", action: "bootdev none"},
		{line: "bootdev PXE --persistent", stdout: "L: next boot from pxe (persistent)\n", action: "bootdev pxe persistent"},
		{line: "help", stdout: commands.Usage()},
		{line: "help power-cycle", stdout: commands.CommandUsage("power-cycle")},
		{line: "bootdev --help", stdout: commands.CommandUsage("bootdev")},
		{line: "version", stdout: "test\n"},
		{line: "sessions", check: func(t *testing.T, label string, res obmdtest.Result) {
			// This exec session, and maybe the previous command's: a session
			// leaves the registry just after its exit status is sent, and
			// the client may be quicker to log in again.
			lines := strings.Split(strings.TrimSpace(res.Stdout), "\n")
			if len(lines) < 2 || len(lines) > 3 || !strings.HasPrefix(lines[0], "ID") {
				t.Errorf("sessions: got %q, want a header and this exec session", res.Stdout)
				return
			}
			for _, l := range lines[1:] {
				if !strings.Contains(l, " exec ") || !strings.Contains(l, "127.0.0.1:") {
					t.Errorf("sessions: got line %q, want an exec session from 127.0.0.1", l)
				}
			}
		}},
		{line: "console-log", stdout: ""},
		{line: "console-log --lines 5", stdout: ""},
	}
}

// TestSSHCommands runs every exec command through every client and method
// and checks stdout, stderr, the exit code and what the BMC did.
func TestSSHCommands(t *testing.T) {
	t.Parallel()
	ipmisim.Require(t, "ssh", "sshpass") // its OpenSSH cases run on the test's daemon: checked before any starts
	o := obmdtest.Start(t)
	for _, tr := range transports() {
		t.Run(tr.name, func(t *testing.T) {
			label := "cmd-" + tr.name
			o.AddNode(label, "sim", sol.Info{Addr: "sim"})
			run := tr.setup(t, o, label)
			bmc := o.Lab().BMC(label, sim.ModeNormal)
			for i, tc := range commandCases() {
				before := bmc.Actions()
				res := run(tc.line)
				if res.Code != tc.code || res.Stderr != "" {
					t.Errorf("#%d %q: got %v, want exit %d and no stderr", i, tc.line, res, tc.code)
					continue
				}
				if tc.check != nil {
					tc.check(t, label, res)
				} else if want := strings.ReplaceAll(tc.stdout, "L:", label+":"); res.Stdout != want {
					t.Errorf("#%d %q: stdout got %q, want %q", i, tc.line, res.Stdout, want)
				}
				var want []string
				if tc.action != "" {
					want = append(before, tc.action)
				}
				if got := bmc.Actions(); tc.action != "" && !slices.Equal(got, want) || tc.action == "" && len(got) != len(before) {
					t.Errorf("#%d %q: simulator actions got %q, want %q added to %q", i, tc.line, got, tc.action, before)
				}
				if tc.power != "" {
					if got := simPower(t, bmc); got != tc.power {
						t.Errorf("#%d %q: power got %s, want %s", i, tc.line, got, tc.power)
					}
				}
			}
			logins := 0
			for _, e := range o.Audit(label) {
				if e.Action != "auth" {
					continue
				}
				logins++
				if e.Actor != "ssh:"+tr.method {
					t.Errorf("audit: got a login by %s, want ssh:%s", e.Actor, tr.method)
					break
				}
			}
			if logins == 0 {
				t.Errorf("audit: got no auth row, want the logins by ssh:%s", tr.method)
			}
			if dev, persistent := bmc.BootDevice(); dev != "pxe" || !persistent {
				t.Errorf("boot device: got %s persistent=%v, want pxe persistent", dev, persistent)
			}
		})
	}
}

func simPower(t *testing.T, b *sim.BMC) string {
	t.Helper()
	s, err := b.PowerStatus(context.Background())
	if err != nil {
		t.Fatalf("simulator power status: %v", err)
	}
	return s
}

// TestSSHUsageErrors: bad arguments and unknown commands exit 2 with the
// usage on stderr and nothing on stdout, through both clients, and do
// nothing to the BMC.
func TestSSHUsageErrors(t *testing.T) {
	t.Parallel()
	ipmisim.Require(t, "ssh", "sshpass") // its OpenSSH cases run on the test's daemon: checked before any starts
	o := obmdtest.Start(t)
	tok := o.AddSimNode("u1")
	bmc := o.Lab().BMC("u1", sim.ModeNormal)
	cases := []struct {
		line  string
		usage string // the usage text stderr must end with
		msg   string // in the first stderr line
	}{
		{"bogus", commands.Usage(), `unknown command "bogus"`},
		{"power-onn", commands.Usage(), `unknown command "power-onn"`},
		{"--soft", commands.Usage(), `unknown command "--soft"`},
		{"help nothing", commands.Usage(), `unknown command "nothing"`},
		{"power-on now", commands.CommandUsage("power-on"), `unexpected argument "now"`},
		{"power-off --hard", commands.CommandUsage("power-off"), `unknown flag "--hard"`},
		{"power-cycle --soft", commands.CommandUsage("power-cycle"), `unknown flag "--soft"`},
		{"power-reset --force", commands.CommandUsage("power-reset"), `unknown flag "--force"`},
		{"bootdev", commands.CommandUsage("bootdev"), "bootdev needs a device"},
		{"bootdev floppy", commands.CommandUsage("bootdev"), `unknown device "floppy"`},
		{"bootdev pxe disk", commands.CommandUsage("bootdev"), `unexpected argument "disk"`},
		{"console-log --lines", commands.CommandUsage("console-log"), "--lines needs a number"},
		{"console-log --lines 0", commands.CommandUsage("console-log"), "--lines wants a number"},
		{"console-log --lines x", commands.CommandUsage("console-log"), "--lines wants a number"},
		{"power-status 'unterminated", commands.Usage(), ""},
	}
	for _, tc := range cases {
		t.Run(tc.line, func(t *testing.T) {
			results := map[string]obmdtest.Result{"go": obmdtest.Must(t)(o.ExecGo("u1", tok, tc.line))}
			if !strings.Contains(tc.line, "'") { // OpenSSH joins words; quoting is not the point here
				results["openssh"] = o.OpenSSH("u1", tok, nil, words(tc.line)...)
			}
			for client, res := range results {
				first, _, _ := strings.Cut(res.Stderr, "\n")
				if res.Code != commands.ExitUsage || res.Stdout != "" || !strings.HasPrefix(first, "obmd: ") ||
					!strings.Contains(first, tc.msg) || !strings.HasSuffix(res.Stderr, tc.usage) {
					t.Errorf("%s: got %v, want exit 2, no stdout, stderr %q then the usage", client, res, tc.msg)
				}
			}
		})
	}
	if got := bmc.Actions(); len(got) != 0 {
		t.Errorf("simulator actions: got %q, want none", got)
	}
}

// TestSSHJSON: --json prints one object whose field names are the
// documented ones, for successes and failures, with the same exit codes.
func TestSSHJSON(t *testing.T) {
	t.Parallel()
	o := obmdtest.Start(t)
	tok := o.AddSimNode("j1")
	cases := []struct {
		line   string
		code   int
		fields []string       // every key of the object
		want   map[string]any // values to check
	}{
		{"power-status --json", 0, []string{"node", "command", "ok", "power"},
			map[string]any{"node": "j1", "command": "power-status", "ok": true, "power": "on"}},
		{"power-off --json", 0, []string{"node", "command", "ok"},
			map[string]any{"command": "power-off", "ok": true}},
		{"power-status --json", 0, []string{"node", "command", "ok", "power"}, map[string]any{"power": "off"}},
		{"--json power-on", commands.ExitUsage, []string{"node", "command", "ok", "error"}, map[string]any{"ok": false, "command": ""}},
		{"power-on --json", 0, []string{"node", "command", "ok"}, map[string]any{"command": "power-on"}},
		{"power-off --soft --json", 0, []string{"node", "command", "ok"}, map[string]any{"command": "power-off"}},
		{"power-cycle --json --force", 0, []string{"node", "command", "ok"}, map[string]any{"command": "power-cycle"}},
		{"power-reset --json", 0, []string{"node", "command", "ok"}, map[string]any{"command": "power-reset"}},
		{"bootdev cdrom --json", 0, []string{"node", "command", "ok", "bootdev", "persistent"},
			map[string]any{"command": "bootdev", "bootdev": "cdrom", "persistent": false}},
		{"bootdev disk --persistent --json", 0, []string{"node", "command", "ok", "bootdev", "persistent"},
			map[string]any{"bootdev": "disk", "persistent": true}},
		{"version --json", 0, []string{"node", "command", "ok", "version"}, map[string]any{"version": "test"}},
		{"help --json", 0, []string{"node", "command", "ok", "help"}, map[string]any{"help": commands.Usage()}},
		{"console-log --json", 0, []string{"node", "command", "ok", "log"}, map[string]any{"log": ""}},
		{"sessions --json", 0, []string{"node", "command", "ok", "sessions"}, nil},
		{"bootdev floppy --json", commands.ExitUsage, []string{"node", "command", "ok", "error"},
			map[string]any{"ok": false, "command": "bootdev"}},
		{"power-on --json --now", commands.ExitUsage, []string{"node", "command", "ok", "error"},
			map[string]any{"ok": false, "command": "power-on"}},
		{"nope --json", commands.ExitUsage, []string{"node", "command", "ok", "error"},
			map[string]any{"ok": false, "command": ""}},
	}
	for i, tc := range cases {
		for _, client := range []string{"go", "openssh"} {
			var res obmdtest.Result
			if client == "go" {
				res = obmdtest.Must(t)(o.ExecGo("j1", tok, tc.line))
			} else {
				res = o.OpenSSH("j1", tok, nil, words(tc.line)...)
			}
			if res.Code != tc.code {
				t.Errorf("#%d %s %q: got %v, want exit %d", i, client, tc.line, res, tc.code)
			}
			var obj map[string]any
			dec := json.NewDecoder(strings.NewReader(res.Stdout))
			if err := dec.Decode(&obj); err != nil || dec.More() || !strings.HasSuffix(res.Stdout, "}\n") {
				t.Errorf("#%d %s %q: stdout %q is not one JSON object and a newline (%v)", i, client, tc.line, res.Stdout, err)
				continue
			}
			keys := make([]string, 0, len(obj))
			for k := range obj {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			wantKeys := slices.Sorted(slices.Values(tc.fields))
			if !slices.Equal(keys, wantKeys) {
				t.Errorf("#%d %s %q: fields got %q, want %q", i, client, tc.line, keys, wantKeys)
			}
			for k, v := range tc.want {
				if obj[k] != v {
					t.Errorf("#%d %s %q: %s got %#v, want %#v", i, client, tc.line, k, obj[k], v)
				}
			}
			if obj["node"] != "j1" {
				t.Errorf("#%d %s %q: node got %#v, want j1", i, client, tc.line, obj["node"])
			}
			if tc.code != 0 && (!strings.HasPrefix(res.Stderr, "obmd: ") || obj["error"] == "") {
				t.Errorf("#%d %s %q: failure without an error in JSON and on stderr: %v", i, client, tc.line, res)
			}
		}
	}

	// sessions --json lists this very session with the documented fields.
	res := obmdtest.Must(t)(o.ExecGo("j1", tok, "sessions --json"))
	var out struct {
		Sessions []map[string]any `json:"sessions"`
	}
	if err := json.Unmarshal([]byte(res.Stdout), &out); err != nil || len(out.Sessions) != 1 {
		t.Fatalf("sessions --json: got %q (%v), want one session", res.Stdout, err)
	}
	s := out.Sessions[0]
	started, _ := s["started"].(string)
	if _, err := time.Parse(time.RFC3339, started); err != nil || s["kind"] != "exec" || s["user"] != "token" ||
		!strings.HasPrefix(s["remote"].(string), "127.0.0.1:") || s["id"] == "" {
		t.Errorf("sessions --json: got %v, want id, kind exec, user token, remote, started (RFC 3339)", s)
	}
}

// TestSSHPTY: a command with a PTY (ssh -tt, x/crypto RequestPty) gives the
// same result as without (ssh -T), modulo CRLF line ends.
func TestSSHPTY(t *testing.T) {
	t.Parallel()
	ipmisim.Require(t, "ssh", "sshpass") // its OpenSSH cases run on the test's daemon: checked before any starts
	o := obmdtest.Start(t)
	tok := o.AddSimNode("p1")
	for _, line := range []string{"power-status", "power-status --json", "help", "bootdev pxe", "bogus", "bootdev floppy --json", "version"} {
		t.Run(line, func(t *testing.T) {
			plain := o.OpenSSH("p1", tok, []string{"-T"}, strings.Fields(line)...)
			tty := o.OpenSSH("p1", tok, []string{"-tt"}, strings.Fields(line)...)
			goTTY := obmdtest.Must(t)(execPTY(o, "p1", tok, line))
			if strings.Contains(plain.Stdout+plain.Stderr, "\r") {
				t.Errorf("without a PTY: got %v, want no CR", plain)
			}
			for name, res := range map[string]obmdtest.Result{"ssh -tt": tty, "x/crypto pty": goTTY} {
				if res.Code != plain.Code {
					t.Errorf("%s: exit got %d, want %d as without a PTY", name, res.Code, plain.Code)
				}
				// Every line end is CRLF, none is doubled.
				for _, s := range []string{res.Stdout, res.Stderr} {
					if strings.Count(s, "\n") != strings.Count(s, "\r\n") || strings.Contains(s, "\r\r") {
						t.Errorf("%s: got %q, want every newline as CRLF", name, s)
					}
				}
				if got := strings.ReplaceAll(res.Stdout, "\r\n", "\n"); got != plain.Stdout {
					t.Errorf("%s: stdout got %q, want %q", name, got, plain.Stdout)
				}
				if got := strings.ReplaceAll(res.Stderr, "\r\n", "\n"); got != plain.Stderr {
					t.Errorf("%s: stderr got %q, want %q", name, got, plain.Stderr)
				}
			}
		})
	}
}

// execPTY runs line with a PTY requested, through x/crypto.
func execPTY(o *obmdtest.Daemon, user, token, line string) (obmdtest.Result, error) {
	c, err := o.Dial(user, gossh.Password(token))
	if err != nil {
		return obmdtest.Result{}, err
	}
	defer c.Close()
	s, err := c.NewSession()
	if err != nil {
		return obmdtest.Result{}, err
	}
	defer s.Close()
	if err := s.RequestPty("xterm", 24, 80, gossh.TerminalModes{}); err != nil {
		return obmdtest.Result{}, err
	}
	var out, errb strings.Builder
	s.Stdout, s.Stderr = &out, &errb
	err = s.Run(line)
	res := obmdtest.Result{Stdout: out.String(), Stderr: errb.String()}
	var ee *gossh.ExitError
	if errors.As(err, &ee) {
		res.Code = ee.ExitStatus()
	} else if err != nil {
		return res, err
	}
	return res, nil
}

// TestSSHConsoleLog: console-log prints this tenancy's scrollback: what the
// node printed while a console was attached.
func TestSSHConsoleLog(t *testing.T) {
	t.Parallel()
	o := obmdtest.Start(t)
	tok := o.AddSimNode("cl1")
	bmc := o.Lab().BMC("cl1", sim.ModeNormal)
	_, s := o.NewSession(t, "cl1", tok)
	defer s.Close()
	if err := s.Shell(); err != nil {
		t.Fatalf("console: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := bmc.WaitConsole(ctx, true); err != nil {
		t.Fatalf("console link never opened: %v", err)
	}
	if res := obmdtest.Must(t)(o.ExecGo("cl1", tok, "power-cycle")); res.Code != 0 {
		t.Fatalf("power-cycle: %v", res)
	}
	var res obmdtest.Result
	for ctx.Err() == nil {
		res = o.OpenSSH("cl1", tok, nil, "console-log", "--lines", "3")
		if strings.Contains(res.Stdout, "sim login: ") {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	want := "sim kernel: serial console on ttyS0\r\n\r\nsim (ttyS0)\r\n\r\nsim login: "
	if res.Code != 0 || !strings.HasSuffix(want, res.Stdout) || !strings.Contains(res.Stdout, "sim login: ") {
		t.Errorf("console-log --lines 3: got %v, want the last lines of %q", res, want)
	}
	all := obmdtest.Must(t)(o.ExecGo("cl1", tok, "console-log"))
	if all.Code != 0 || !strings.Contains(all.Stdout, "SimBIOS 1.0 (simulated BMC of cl1)") {
		t.Errorf("console-log: got %v, want the boot text", all)
	}
	js := obmdtest.Must(t)(o.ExecGo("cl1", tok, "console-log --json"))
	var obj struct{ Log string }
	if err := json.Unmarshal([]byte(js.Stdout), &obj); err != nil || obj.Log != all.Stdout {
		t.Errorf("console-log --json: got %q (%v), want log %q", js.Stdout, err, all.Stdout)
	}
}

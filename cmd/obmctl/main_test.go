package main

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	gossh "golang.org/x/crypto/ssh"

	"github.com/obmd/obmd/bastion/daemon"
)

// startDaemon runs a whole obmd in-process on loopback for obmctl to talk to.
func startDaemon(t *testing.T) *daemon.Daemon {
	t.Helper()
	log := logrus.New()
	log.SetOutput(&bytes.Buffer{})
	var cfg daemon.Config
	cfg.SSH.Addr, cfg.Admin.Addr, cfg.Daemon.StateDir, cfg.Console.Capture = "127.0.0.1:0", "127.0.0.1:0", t.TempDir(), "attached"
	d, err := daemon.New(cfg, log)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	if err := d.Start(ctx); err != nil {
		cancel()
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("daemon: %v", err)
			}
		case <-time.After(20 * time.Second):
			t.Error("daemon did not stop")
		}
	})
	return d
}

func TestObmctl(t *testing.T) {
	d := startDaemon(t)
	env := map[string]string{"OBMD_URL": "http://" + d.AdminAddr(), "OBMD_ADMIN_TOKEN": d.AdminToken()}
	getenv := func(k string) string { return env[k] }
	ctl := func(stdin string, args ...string) (string, string, int) {
		var out, errb bytes.Buffer
		code := run(args, strings.NewReader(stdin), &out, &errb, getenv)
		return out.String(), errb.String(), code
	}
	passFile := filepath.Join(t.TempDir(), "pass")
	os.WriteFile(passFile, []byte("bmc-secret-77\n"), 0o600)
	_, priv, _ := ed25519.GenerateKey(rand.Reader)
	signer, _ := gossh.NewSignerFromKey(priv)
	pub := string(gossh.MarshalAuthorizedKey(signer.PublicKey()))
	_, caPriv, _ := ed25519.GenerateKey(rand.Reader)
	caSigner, _ := gossh.NewSignerFromKey(caPriv)
	caFP := gossh.FingerprintSHA256(caSigner.PublicKey())
	caPub := string(gossh.MarshalAuthorizedKey(caSigner.PublicKey()))

	steps := []struct {
		name     string
		stdin    string
		args     []string
		wantCode int
		wantOut  string // substring of stdout
		wantErr  string // substring of stderr
	}{
		{"add ipmi node", "", []string{"node", "add", "n1", "--type", "ipmi", "--addr", "10.0.0.5", "--user", "root", "--pass-file", passFile}, 0, "n1: registered", ""},
		{"add sim node", "", []string{"node", "add", "n2", "--type", "sim", "--addr", "sim"}, 0, "n2: registered", ""},
		{"password from a pipe", "bmc-secret-77\n", []string{"node", "add", "n4", "--type", "ipmi", "--addr", "10.0.0.6", "--user", "root"}, 0, "n4: registered", "BMC password: "},
		{"password as argument refused", "", []string{"node", "add", "n3", "--addr", "x", "hunter2"}, 2, "", "never an argument"},
		{"list", "", []string{"node", "ls"}, 0, "10.0.0.5:623", ""},
		{"show", "", []string{"node", "show", "n1"}, 0, "token:    false", ""},
		{"rotate", "", []string{"token", "rotate", "n1"}, 0, "", ""},
		{"add key", pub, []string{"key", "add", "n1", "-"}, 0, "SHA256:", ""},
		{"list keys", "", []string{"key", "ls", "n1"}, 0, "SHA256:", ""},
		{"remove key", "", []string{"key", "rm", "n1", gossh.FingerprintSHA256(signer.PublicKey())}, 0, "removed", ""},
		{"add CA", caPub, []string{"ca", "add", "hil", "-"}, 0, caFP + ": trusted as hil", ""},
		{"add CA again", caPub, []string{"ca", "add", "other", "-"}, 1, "", "not added"},
		{"list CAs", "", []string{"ca", "ls"}, 0, caFP + "  hil", ""},
		{"revoke serial", "", []string{"ca", "revoke", "--serial", "42", "--ca", "hil", "--expires", "2030-01-02T03:04:05Z"}, 0, "revoked", ""},
		{"revoke key id", "", []string{"ca", "revoke", "--key-id", "alice"}, 0, "revoked", ""},
		{"revoke both", "", []string{"ca", "revoke", "--serial", "1", "--key-id", "alice"}, 2, "", "--serial N or --key-id ID"},
		{"list revocations", "", []string{"ca", "revoked"}, 0, caFP + "  2030-01-02T03:04:05Z", ""},
		{"list revocations of every CA", "", []string{"ca", "revoked"}, 0, "every CA", ""},
		{"unrevoke serial", "", []string{"ca", "unrevoke", "--serial", "42", "--ca", "hil"}, 0, "serial 42: revocation deleted", ""},
		{"unrevoke serial again", "", []string{"ca", "unrevoke", "--serial", "42", "--ca", "hil"}, 0, "serial 42: was not revoked", ""},
		{"unrevoke key id", "", []string{"ca", "unrevoke", "--key-id", "alice"}, 0, `key id "alice": revocation deleted`, ""},
		{"unrevoke bad serial", "", []string{"ca", "unrevoke", "--serial", "x"}, 2, "", "want an unsigned number"},
		{"unrevoke both", "", []string{"ca", "unrevoke", "--serial", "1", "--key-id", "alice"}, 2, "", "ca unrevoke wants --serial N or --key-id ID"},
		{"revocations left", "", []string{"ca", "revoked"}, 0, "REVOKED", ""},
		{"set principals", "", []string{"principals", "n2", "project-x", "rack-4"}, 0, "n2: principals project-x rack-4", ""},
		{"show principals", "", []string{"principals", "n2"}, 0, "n2: principals project-x rack-4", ""},
		{"clear principals", "", []string{"principals", "n2", "--none"}, 0, "n2: principals none", ""},
		{"remove CA", "", []string{"ca", "rm", caFP}, 0, caFP + ": removed", ""},
		{"remove CA again", "", []string{"ca", "rm", caFP}, 0, "was not trusted", ""},
		{"sessions", "", []string{"sessions"}, 0, "ID", ""},
		{"audit", "", []string{"audit", "--node", "n1"}, 0, "token.rotate", ""},
		{"json", "", []string{"--json", "node", "show", "n2"}, 0, `"label":"n2"`, ""},
		{"health", "", []string{"health"}, 0, "/readyz: 200", ""},
		{"revoke", "", []string{"token", "revoke", "n1"}, 0, "token revoked", ""},
		{"delete", "", []string{"node", "rm", "n1"}, 0, "deleted", ""},
		{"add captured node", "", []string{"node", "add", "n5", "--type", "sim", "--addr", "sim", "--capture", "always"}, 0, "n5: registered", ""},
		{"show capture", "", []string{"node", "show", "n5"}, 0, "capture:  always", ""},
		{"bad capture", "", []string{"node", "set", "n5", "--capture", "sometimes"}, 2, "", "always, attached or default"},
		{"set capture", "", []string{"node", "set", "n5", "--capture", "default"}, 0, "n5: capture default", ""},
		{"show default capture", "", []string{"node", "show", "n5"}, 0, "capture:  default", ""},
		{"console-log", "", []string{"console-log", "n5", "--format", "cast"}, 0, `"version":2`, ""},
		{"add with a screen size", "", []string{"node", "add", "n6", "--type", "sim", "--addr", "sim", "--screen-size", "132x43"}, 0, "n6: registered", ""},
		{"show screen size", "", []string{"node", "show", "n6"}, 0, "screen:   132x43", ""},
		{"bad screen size", "", []string{"node", "set", "n6", "--screen-size", "300x25"}, 1, "", "200x100"},
		{"set screen size", "", []string{"node", "set", "n6", "--screen-size", "100x30"}, 0, "n6: screen size 100x30", ""},
		{"set screen size and capture", "", []string{"node", "set", "n6", "--screen-size", "default", "--capture", "always"}, 0, "n6: capture always\nn6: screen size default", ""},
		{"node set with nothing", "", []string{"node", "set", "n6"}, 2, "", "--capture or --screen-size"},
		{"screen", "", []string{"screen", "n6"}, 0, strings.Repeat("\n", 25), ""},
		{"screen as JSON", "", []string{"screen", "n6", "--json"}, 0, `"cols":80,"rows":25`, ""},
		{"screen as a redraw", "", []string{"screen", "n6", "--ansi"}, 0, "\x1b[?25l", ""},
		{"screen of no node", "", []string{"screen", "nope"}, 1, "", "not found"},
		{"console-log of no node", "", []string{"console-log", "nope"}, 1, "", "no node"},
		{"unknown node", "", []string{"node", "show", "nope"}, 1, "", "not found"},
		{"unknown command", "", []string{"frob"}, 2, "", "unknown command"},
	}
	// login authenticates over SSH as node with password.
	login := func(node, password string) error {
		c, err := gossh.Dial("tcp", d.SSHAddr(), &gossh.ClientConfig{User: node,
			Auth:            []gossh.AuthMethod{gossh.Password(password)},
			HostKeyCallback: gossh.InsecureIgnoreHostKey(), Timeout: 10 * time.Second})
		if err != nil {
			return err
		}
		return c.Close()
	}
	// Checks of a step's stdout beyond a substring.
	checks := map[string]func(out string){
		// Both revocations were deleted: none is listed.
		"revocations left": func(out string) {
			if strings.Contains(out, "serial 42") || strings.Contains(out, "alice") {
				t.Errorf("revocations left: got %q, want none", out)
			}
		},
		// The token printed is the node's new one: it logs in, and a
		// different one does not.
		"rotate": func(out string) {
			tok := strings.TrimSpace(out)
			if err := login("n1", tok); err != nil {
				t.Errorf("rotate: SSH login with the printed token %q: %v", tok, err)
			}
			if err := login("n1", tok+"x"); err == nil {
				t.Errorf("rotate: SSH login with another token succeeded")
			}
		},
	}
	for _, s := range steps {
		out, errOut, code := ctl(s.stdin, s.args...)
		if check := checks[s.name]; check != nil {
			check(out)
		}
		if code != s.wantCode || !strings.Contains(out, s.wantOut) || !strings.Contains(errOut, s.wantErr) {
			t.Errorf("%s: got exit %d, stdout %q, stderr %q; want exit %d, stdout ~%q, stderr ~%q",
				s.name, code, out, errOut, s.wantCode, s.wantOut, s.wantErr)
		}
		if strings.Contains(out+errOut, "bmc-secret-77") {
			t.Errorf("%s: the BMC password was printed", s.name)
		}
	}

	env["OBMD_ADMIN_TOKEN"] = "wrong"
	if _, errOut, code := ctl("", "node", "ls"); code != 1 || !strings.Contains(errOut, "admin token is wrong") {
		t.Errorf("wrong admin token: got exit %d, %q; want 1 and a hint about the token", code, errOut)
	}
}

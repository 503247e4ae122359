package main

import (
	"bufio"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	gossh "golang.org/x/crypto/ssh"

	"github.com/obmd/obmd/keys"
)

// loopbackArgs are the serve flags every binary test uses.
func loopbackArgs(stateDir string) []string {
	return []string{"--ssh-addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0", "--state-dir", stateDir}
}

// dbEnv is the environment selecting dsn ("" = default SQLite).
func dbEnv(dsn string) map[string]string {
	if dsn == "" {
		return map[string]string{}
	}
	return map[string]string{"OBMD_DB": dsn}
}

// randomHex returns n random bytes in hex.
func randomHex(t testing.TB, n int) string {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

func TestBinaryVersion(t *testing.T) {
	code, out, errOut := runObmd(t, nil, "version")
	if code != 0 || out != "obmd "+testVersion+"\n" {
		t.Errorf("obmd version: got exit %d, stdout %q (stderr %q), want 0 and %q", code, out, errOut, "obmd "+testVersion+"\n")
	}
}

// TestBinaryMigrate runs `obmd migrate` twice on each engine.
func TestBinaryMigrate(t *testing.T) {
	t.Parallel()
	onEngines(t, func(t *testing.T, e engine) {
		state := filepath.Join(t.TempDir(), "state")
		dsn := e.dsn(t, state)
		for i := range 2 {
			code, _, errOut := runObmd(t, dbEnv(dsn), "migrate", "--state-dir", state)
			if code != 0 {
				t.Fatalf("migrate #%d: got exit %d, want 0; stderr:\n%s", i+1, code, errOut)
			}
			line, ok := findLog(errOut, "obmd_migrated")
			if !ok {
				t.Fatalf("migrate #%d: no obmd_migrated log line in:\n%s", i+1, errOut)
			}
			if v, _ := line["version"].(float64); v < 1 || line["version"] != line["latest"] {
				t.Errorf("migrate #%d: got version %v of %v, want the latest", i+1, line["version"], line["latest"])
			}
			if want := e.name; line["db"] != want {
				t.Errorf("migrate #%d: got db %v, want %s", i+1, line["db"], want)
			}
		}
		if _, err := os.Stat(state); e.name != "sqlite" && !os.IsNotExist(err) {
			t.Errorf("migrate on %s: got state directory %v, want none created", e.name, err)
		}
		if dump := dumpDB(t, dsn, state); !strings.Contains(dump, "access_seq:") {
			t.Errorf("after migrate: the schema's seed row is missing; dump:\n%s", dump)
		}
	})
}

// TestBinaryDBErrorHidesPassword checks that an unreachable MySQL or
// PostgreSQL, or a DSN of an unknown form, fails the start cleanly, says
// why and never prints the DSN's password; nothing is created for a DSN
// refused (before, any DSN but mysql:// was a SQLite path, created with
// the password in its name and logged).
func TestBinaryDBErrorHidesPassword(t *testing.T) {
	t.Parallel()
	const pw = "Pw-must-not-leak-7d1f"
	tests := []struct{ dsn, want string }{
		{"mysql://obmd:" + pw + "@tcp(127.0.0.1:1)/obmd", "127.0.0.1:1"},
		{"postgres://obmd:" + pw + "@127.0.0.1:1/obmd?sslmode=disable", "127.0.0.1:1"},
		{"postgress://obmd:" + pw + "@127.0.0.1:1/obmd", "unknown DSN scheme"},
	}
	for _, tt := range tests {
		for _, cmd := range []string{"migrate", "serve"} {
			state := t.TempDir()
			work := t.TempDir()
			code, out, errOut := runObmdIn(t, work, map[string]string{"OBMD_DB": tt.dsn}, append([]string{cmd}, loopbackArgs(state)...)...)
			if code != 1 {
				t.Errorf("%s on %s: got exit %d, want 1; stderr:\n%s", cmd, tt.want, code, errOut)
			}
			if strings.Contains(out+errOut, pw) {
				t.Errorf("%s: the database password is in the output:\n%s", cmd, errOut)
			}
			if !strings.Contains(errOut, tt.want) {
				t.Errorf("%s: got %q, want an error saying %s", cmd, errOut, tt.want)
			}
			if _, err := os.Stat(filepath.Join(state, "admin-token")); !os.IsNotExist(err) {
				t.Errorf("%s: admin token file: got %v, want none generated when the database is unreachable", cmd, err)
			}
			if ents, _ := os.ReadDir(work); len(ents) > 0 {
				t.Errorf("%s: created %s in the working directory, want nothing", cmd, ents[0].Name())
			}
		}
	}
}

// TestBinaryAdminToken checks the generated admin token (0600, printed on
// the first start only) and OBMD_ADMIN_TOKEN; the second part configures
// everything through OBMD_* variables instead of flags.
func TestBinaryAdminToken(t *testing.T) {
	t.Parallel()
	t.Run("generated", func(t *testing.T) {
		state := t.TempDir()
		p := startObmd(t, nil, loopbackArgs(state)...)
		if want := filepath.Join(state, "admin-token"); p.TokenFile != want {
			t.Errorf("admin_token_file: got %q, want %q", p.TokenFile, want)
		}
		fi, err := os.Stat(p.TokenFile)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != 0o600 {
			t.Errorf("admin token file mode: got %v, want 0600", fi.Mode().Perm())
		}
		tok := p.adminToken()
		if len(tok) < 22 {
			t.Errorf("admin token: got %d characters, want at least 128 bits", len(tok))
		}
		// Printed once Start has returned, so just after obmd_listening.
		for deadline := time.Now().Add(10 * time.Second); !strings.Contains(p.stderr.String(), tok) && time.Now().Before(deadline); {
			time.Sleep(10 * time.Millisecond)
		}
		if n := strings.Count(p.stderr.String(), tok); n != 1 {
			t.Errorf("first start: the admin token is printed %d times, want once", n)
		}
		if code, _ := p.do("GET", "/v1/nodes", "", "admin", tok); code != 200 {
			t.Errorf("GET /v1/nodes with the generated token: got %d, want 200", code)
		}
		if code, _ := p.stop(syscall.SIGTERM, 15*time.Second); code != 0 {
			t.Errorf("SIGTERM: got exit %d, want 0", code)
		}

		p = startObmd(t, nil, loopbackArgs(state)...)
		if strings.Contains(p.stderr.String(), tok) {
			t.Errorf("second start printed the admin token again:\n%s", p.stderr.String())
		}
		if got := p.adminToken(); got != tok {
			t.Errorf("second start: got admin token %q, want the first one", got)
		}
		if code, _ := p.do("GET", "/v1/nodes", "", "admin", tok); code != 200 {
			t.Errorf("second start: GET /v1/nodes: got %d, want 200", code)
		}
	})
	t.Run("from OBMD_ADMIN_TOKEN, all by env", func(t *testing.T) {
		state := filepath.Join(t.TempDir(), "state")
		given := "given-" + randomHex(t, 16)
		p := startObmd(t, map[string]string{"OBMD_ADMIN_TOKEN": given, "OBMD_STATE_DIR": state,
			"OBMD_SSH_ADDR": "127.0.0.1:0", "OBMD_ADMIN_ADDR": "127.0.0.1:0"})
		if strings.Contains(p.stderr.String(), given) {
			t.Errorf("the configured admin token is printed:\n%s", p.stderr.String())
		}
		if _, err := os.Stat(filepath.Join(state, "admin-token")); !os.IsNotExist(err) {
			t.Errorf("admin-token file: got %v, want none when OBMD_ADMIN_TOKEN is set", err)
		}
		if p.TokenFile != "(from configuration)" {
			t.Errorf("admin_token_file: got %q, want %q", p.TokenFile, "(from configuration)")
		}
		if _, err := os.Stat(filepath.Join(state, "obmd.db")); err != nil {
			t.Errorf("OBMD_STATE_DIR: want the database in it: %v", err)
		}
		for _, c := range []struct {
			pass string
			want int
		}{{given, 200}, {given + "x", 404}, {"", 404}} {
			if code, _ := p.do("GET", "/v1/nodes", "", "admin", c.pass); code != c.want {
				t.Errorf("admin password %q: got %d, want %d", c.pass, code, c.want)
			}
		}
	})
}

// TestBinaryRefusesBadStart checks that obmd refuses to start, cleanly and
// at once, when an address is taken, plain HTTP would leave loopback or a
// setting of the console hub or of a driver is one they refuse; it leaves
// nothing behind (the state directory is not even created, no admin token
// generated).
func TestBinaryRefusesBadStart(t *testing.T) {
	t.Parallel()
	taken := listenLoopback(t)
	loopback := []string{"--ssh-addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0"}
	tests := []struct {
		name string
		env  map[string]string
		args []string
		code int
		want []string
	}{
		{name: "console setting", env: map[string]string{"OBMD_CONSOLE_CAPTURE": "sometimes"}, args: loopback, code: 2,
			want: []string{"obmd_config_invalid", `console: capture \"sometimes\"`}},
		{name: "driver setting", env: map[string]string{"OBMD_IPMI_OPTIONS_CIPHER_ORDER": "17,99"}, args: loopback, code: 2,
			want: []string{"obmd_config_invalid", "unsupported cipher suite 99"}},
		{name: "ssh port taken", args: []string{"--ssh-addr", taken, "--admin-addr", "127.0.0.1:0"}, code: 1,
			want: []string{"obmd_start_failed", "listen for SSH", "address already in use"}},
		{name: "admin port taken", args: []string{"--ssh-addr", "127.0.0.1:0", "--admin-addr", taken}, code: 1,
			want: []string{"obmd_start_failed", "listen for admin HTTP", "address already in use"}},
		{name: "plain http off loopback", args: []string{"--ssh-addr", "127.0.0.1:0", "--admin-addr", "192.0.2.1:0"}, code: 2,
			want: []string{"obmd_config_invalid", "not loopback", "insecure_http"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			state := filepath.Join(t.TempDir(), "state")
			code, _, errOut := runObmd(t, tt.env, append([]string{"serve", "--state-dir", state}, tt.args...)...)
			if code != tt.code {
				t.Errorf("got exit %d, want %d; stderr:\n%s", code, tt.code, errOut)
			}
			for _, w := range tt.want {
				if !strings.Contains(errOut, w) {
					t.Errorf("stderr: got %q, want it to mention %q", errOut, w)
				}
			}
			if _, err := os.Stat(state); !os.IsNotExist(err) {
				t.Errorf("state directory: got %v, want nothing created by a failed start", err)
			}
		})
	}
}

// TestBinaryHILFlow is the admin API's curl flow (docs/admin-api.md), as HIL's obmd driver and its
// integration tests run it, against the binary, then a restart on the same
// state, then a grep of the database for secrets; on SQLite and MariaDB.
func TestBinaryHILFlow(t *testing.T) {
	t.Parallel()
	onEngines(t, func(t *testing.T, e engine) {
		t.Parallel()
		state := t.TempDir()
		dsn := e.dsn(t, state)
		env := dbEnv(dsn)
		// The flow fails on purpose eight times from 127.0.0.1 (wrong
		// tokens and admin credentials), past the default guessing limit,
		// which would then lock this client out of the rest.
		env["OBMD_AUTH_LIMITS_PER_SOURCE"] = "100"
		// bmc1 is at an address nobody answers: no link is held for it.
		env["OBMD_CONSOLE_CAPTURE"] = "attached"
		p := startObmd(t, env, loopbackArgs(state)...)
		admin := p.adminToken()
		firstHostKey := p.HostKey

		// Registration, as HIL's tests do it (unknown info fields ignored).
		mock := `{"type":"mock","info":{"addr":"10.0.0.4","NumWrites":0}}`
		p.must(200, "PUT", "/node/n1", mock, admin)
		p.must(200, "PUT", "/node/n1", mock, admin) // identical: idempotent
		p.must(409, "PUT", "/node/n1", `{"type":"mock","info":{"addr":"10.0.0.5"}}`, admin)
		tok := rotate(p, "n1", admin)
		q := "?token=" + url.QueryEscape(tok)

		for _, op := range []string{"power_on", "power_off", "power_cycle"} {
			body := ""
			if op == "power_cycle" {
				body = `{"force":true}`
			}
			if code, got := p.do("POST", "/node/n1/"+op+q, body, "", ""); code != 200 || got != "" {
				t.Errorf("%s: got %d %q, want 200 and an empty body", op, code, got)
			}
		}
		checkMockStatus(t, p, "n1", tok)
		for _, c := range []struct {
			dev  string
			want int
			body string
		}{{"A", 200, ""}, {"B", 200, ""}, {"C", 400, `{"error":"set boot device of n1: unsupported boot device; valid: A, B"}` + "\n"}} {
			code, got := p.do("PUT", "/node/n1/boot_device"+q, `{"bootdev":"`+c.dev+`"}`, "", "")
			if code != c.want || got != c.body {
				t.Errorf("boot_device %s: got %d %q, want %d %q", c.dev, code, got, c.want, c.body)
			}
		}
		for i := range 2 { // every stream starts at 0, as obmd's mock did
			if got := consoleLines(t, p, "n1", tok, 3); got != "0\n1\n2\n" {
				t.Errorf("console stream #%d: got %q, want %q", i+1, got, "0\n1\n2\n")
			}
		}
		if code, _ := p.do("GET", "/node/n1/power_status?token=wrong", "", "", ""); code != 401 {
			t.Errorf("power_status with a wrong token: got %d, want 401", code)
		}
		if code, _ := p.do("GET", "/node/nope/power_status"+q, "", "", ""); code != 401 {
			t.Errorf("power_status of an unknown node: got %d, want 401 (as a wrong token)", code)
		}
		for _, c := range []struct{ user, pass string }{{"admin", "wrong"}, {"", ""}, {"root", admin}} {
			if code, got := p.do("PUT", "/node/n9", mock, c.user, c.pass); code != 404 {
				t.Errorf("PUT with admin credential %q:%q: got %d %q, want 404", c.user, c.pass, code, got)
			}
			if code, _ := p.do("POST", "/node/n1/token", "", c.user, c.pass); code != 404 {
				t.Errorf("POST token with admin credential %q:%q: got %d, want 404", c.user, c.pass, code)
			}
		}

		// A key for n1, and an IPMI node whose password must never be stored
		// or shown in clear; its first token is rotated away.
		signer, line := newSSHKey(t)
		var added struct{ Fingerprint string }
		if err := json.Unmarshal([]byte(p.must(201, "POST", "/v1/nodes/n1/keys", mustJSON(t, map[string]string{"key": line}), admin)), &added); err != nil || !strings.HasPrefix(added.Fingerprint, "SHA256:") {
			t.Fatalf("add key: got %+v (%v), want a SHA256 fingerprint", added, err)
		}
		bmcPass := "BMC-pw-" + randomHex(t, 6) // 19 bytes: IPMI takes 20 at most
		p.must(200, "PUT", "/node/bmc1", `{"type":"ipmi","info":{"addr":"192.0.2.10","user":"root","pass":"`+bmcPass+`"}}`, admin)
		oldIPMITok := rotate(p, "bmc1", admin)
		ipmiTok := rotate(p, "bmc1", admin)
		if got := p.must(200, "GET", "/v1/nodes/bmc1", "", admin); strings.Contains(got, bmcPass) || !strings.Contains(got, "192.0.2.10") {
			t.Errorf("GET /v1/nodes/bmc1: got %s, want the node without its password", got)
		}

		if code, took := p.stop(syscall.SIGTERM, 15*time.Second); code != 0 {
			t.Errorf("SIGTERM: got exit %d after %v, want 0", code, took)
		}
		p.checkJSONLogs()
		secrets := map[string]string{"n1 token": tok, "old bmc1 token": oldIPMITok, "bmc1 token": ipmiTok, "BMC password": bmcPass}
		checkNoSecrets(t, "obmd's output", p.stderr.String(), secrets)
		dump := dumpDB(t, dsn, state)
		checkNoSecrets(t, "the database dump", dump, secrets)
		for _, want := range []string{"bmc1", keys.HashToken(ipmiTok).String(), added.Fingerprint} {
			if !strings.Contains(dump, want) {
				t.Errorf("the database dump lacks %q: is it a dump?\n%s", want, dump)
			}
		}
		checkStateDir(t, state, secrets)

		// Restart on the same state: nodes, tokens and keys survive.
		p = startObmd(t, env, loopbackArgs(state)...)
		if p.HostKey != firstHostKey {
			t.Errorf("host key after restart: got %s, want %s", p.HostKey, firstHostKey)
		}
		checkMockStatus(t, p, "n1", tok)
		if code, _ := p.do("GET", "/node/bmc1/power_status?token="+url.QueryEscape(oldIPMITok), "", "", ""); code != 401 {
			t.Errorf("rotated-away token after restart: got %d, want 401", code)
		}
		var list struct{ Nodes []struct{ Label string } }
		if err := json.Unmarshal([]byte(p.must(200, "GET", "/v1/nodes", "", admin)), &list); err != nil || len(list.Nodes) != 2 {
			t.Errorf("GET /v1/nodes after restart: got %+v (%v), want n1 and bmc1", list, err)
		}
		if got := p.must(200, "GET", "/v1/nodes/n1/keys", "", admin); !strings.Contains(got, added.Fingerprint) {
			t.Errorf("keys after restart: got %s, want %s", got, added.Fingerprint)
		}
		checkSSHKeyLogin(t, p, "n1", signer)

		// Revocation and deletion are idempotent.
		for range 2 {
			p.must(200, "DELETE", "/node/n1/token", "", admin)
		}
		if code, _ := p.do("GET", "/node/n1/power_status"+q, "", "", ""); code != 401 {
			t.Errorf("power_status after the token was revoked: got %d, want 401", code)
		}
		for range 2 {
			p.must(200, "DELETE", "/node/n1", "", admin)
		}
		if code, _ := p.do("GET", "/node/n1/power_status"+q, "", "", ""); code != 401 {
			t.Errorf("power_status of a deleted node: got %d, want 401 (as a wrong token)", code)
		}
		p.must(404, "POST", "/node/n1/token", "", admin)
		p.must(404, "DELETE", "/node/n1/token", "", admin)
		if code, took := p.stop(syscall.SIGTERM, 15*time.Second); code != 0 {
			t.Errorf("second SIGTERM: got exit %d after %v, want 0", code, took)
		}
		checkNoSecrets(t, "obmd's output after restart", p.stderr.String(), secrets)
		if strings.Contains(p.stderr.String(), admin) {
			t.Errorf("the restarted obmd printed the admin token")
		}
	})
}

// rotate issues a new token for label.
func rotate(p *proc, label, admin string) string {
	p.t.Helper()
	var out struct {
		Token string `json:"token"`
	}
	body := p.must(200, "POST", "/node/"+label+"/token", "", admin)
	if err := json.Unmarshal([]byte(body), &out); err != nil || out.Token == "" {
		p.t.Fatalf("POST /node/%s/token: got %q (%v), want {\"token\":...}", label, body, err)
	}
	return out.Token
}

func checkMockStatus(t *testing.T, p *proc, label, tok string) {
	t.Helper()
	const want = `{"power_status":"Mock Status"}` + "\n"
	if code, got := p.do("GET", "/node/"+label+"/power_status?token="+url.QueryEscape(tok), "", "", ""); code != 200 || got != want {
		t.Errorf("power_status: got %d %q, want 200 %q", code, got, want)
	}
}

// consoleLines opens the HTTP console of label, reads n lines and closes it.
func consoleLines(t *testing.T, p *proc, label, tok string, n int) string {
	t.Helper()
	resp := p.send("GET", "/node/"+label+"/console?token="+url.QueryEscape(tok), "", "", "")
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("GET console: got %d, want 200", resp.StatusCode)
	}
	r := bufio.NewReader(resp.Body)
	var got strings.Builder
	for range n {
		line, err := r.ReadString('\n')
		got.WriteString(line)
		if err != nil {
			t.Errorf("console: read after %q: %v", got.String(), err)
			break
		}
	}
	return got.String()
}

func newSSHKey(t testing.TB) (gossh.Signer, string) {
	t.Helper()
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	signer, err := gossh.NewSignerFromKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	return signer, strings.TrimSpace(string(gossh.MarshalAuthorizedKey(signer.PublicKey()))) + " e2e@test"
}

func mustJSON(t testing.TB, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// checkSSHKeyLogin logs in to label with signer and runs power-status.
func checkSSHKeyLogin(t *testing.T, p *proc, label string, signer gossh.Signer) {
	t.Helper()
	c, err := gossh.Dial("tcp", p.SSHAddr, &gossh.ClientConfig{User: label, Auth: []gossh.AuthMethod{gossh.PublicKeys(signer)},
		HostKeyCallback: checkHostKey(t, p.HostKey), Timeout: 10 * time.Second})
	if err != nil {
		t.Errorf("ssh %s with its registered key: %v", label, err)
		return
	}
	defer c.Close()
	s, err := c.NewSession()
	if err != nil {
		t.Errorf("ssh session: %v", err)
		return
	}
	defer s.Close()
	out, err := s.Output("power-status")
	if err != nil || !strings.Contains(string(out), label) {
		t.Errorf("ssh %s power-status: got %q (%v), want the node's power status", label, out, err)
	}
}

// checkHostKey accepts only the host key whose fingerprint obmd logged.
func checkHostKey(t testing.TB, want string) gossh.HostKeyCallback {
	return func(_ string, _ net.Addr, key gossh.PublicKey) error {
		if got := gossh.FingerprintSHA256(key); got != want {
			t.Errorf("host key: got %s, want the logged %s", got, want)
			return errors.New("host key mismatch")
		}
		return nil
	}
}

// checkNoSecrets fails if text holds any of secrets.
func checkNoSecrets(t *testing.T, where, text string, secrets map[string]string) {
	t.Helper()
	for name, s := range secrets {
		if strings.Contains(text, s) {
			t.Errorf("%s contains the %s", where, name)
		}
	}
}

// checkStateDir greps every file in the state directory, except the sealing
// key and the admin token, for secrets.
func checkStateDir(t *testing.T, state string, secrets map[string]string) {
	t.Helper()
	n := 0
	err := filepath.WalkDir(state, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		switch d.Name() {
		case "seal.key", "admin-token":
			return nil
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		n++
		checkNoSecrets(t, path, string(data), secrets)
		return nil
	})
	if err != nil {
		t.Fatalf("walk %s: %v", state, err)
	}
	if n == 0 {
		t.Errorf("state directory %s: no file to check", state)
	}
}

// listenLoopback holds a loopback port for the test and returns its address.
func listenLoopback(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l.Addr().String()
}

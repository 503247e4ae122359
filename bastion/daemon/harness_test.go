package daemon_test

// The end-to-end harness: a whole obmd in this process on 127.0.0.1:0,
// talked to through its admin HTTP API, golang.org/x/crypto/ssh, and the
// real OpenSSH client. Every e2e test of the project lives in this package
// so the slow ones run once.

import (
	"bytes"
	"context"
	"crypto"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	gossh "golang.org/x/crypto/ssh"

	"github.com/obmd/obmd/bastion/access/authlimit"
	"github.com/obmd/obmd/bastion/daemon"
	"github.com/obmd/obmd/db/dbtest"
	"github.com/obmd/obmd/sol"
	"github.com/obmd/obmd/sol/soltest/ipmisim"
)

// syncBuffer collects log output from many goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// obmd is a running daemon under test.
type obmd struct {
	*daemon.Daemon
	*adminClient // its admin API: api, request, mustAPI, rotate
	t            testing.TB
	Cfg          daemon.Config
	Logs         *syncBuffer // everything logged, at debug level

	cancel context.CancelFunc
	done   chan error
}

// startObmd starts a daemon on SQLite (or on the engine's DSN) with test
// defaults (short fail delay and linger; guessing limits no test reaches by
// accident: the tests of the limits set their own, as the others fail on
// purpose many times from 127.0.0.1, which the harness's admin client
// shares); opts adjust the config.
func startObmd(t testing.TB, opts ...func(*daemon.Config)) *obmd {
	t.Helper()
	cfg := daemon.Config{
		SSHAddr:    "127.0.0.1:0",
		AdminAddr:  "127.0.0.1:0",
		StateDir:   t.TempDir(),
		FailDelay:  20 * time.Millisecond,
		Linger:     200 * time.Millisecond,
		EpochPoll:  100 * time.Millisecond,
		Version:    "test",
		AuthLimits: authlimit.Config{PerSource: 1 << 20, PerNode: 1 << 20},
		// Tests register IPMI nodes at addresses nobody answers: no link
		// opens unless a test attaches (the capture tests set their own).
		ConsoleCapture: "attached",
	}
	for _, o := range opts {
		o(&cfg)
	}
	return startWith(t, cfg)
}

// startWith starts a daemon with exactly cfg (restarts reuse a config).
func startWith(t testing.TB, cfg daemon.Config) *obmd {
	t.Helper()
	logs := &syncBuffer{}
	log := logrus.New()
	log.SetOutput(logs)
	log.SetLevel(logrus.DebugLevel)
	log.SetFormatter(&logrus.JSONFormatter{})
	d, err := daemon.New(cfg, log)
	if err != nil {
		t.Fatalf("daemon.New: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	if err := d.Start(ctx); err != nil {
		cancel()
		t.Fatalf("daemon.Start: %v", err)
	}
	o := &obmd{Daemon: d, adminClient: newAdminClient(t, d.AdminAddr(), d.AdminToken(), ""), t: t, Cfg: cfg, Logs: logs,
		cancel: cancel, done: make(chan error, 1)}
	go func() { o.done <- d.Run(ctx) }() // waited for by stop
	t.Cleanup(func() {
		if err := o.stop(); err != nil {
			t.Errorf("daemon stop: %v", err)
		}
		if t.Failed() {
			t.Logf("daemon log:\n%s", tailString(logs.String(), 8000))
			keepLog(t, logs.String())
		}
	})
	return o
}

// keepLog writes a failed test's whole daemon log into the directory
// OBMD_TEST_LOG_DIR names, if any (the test output has only its tail).
func keepLog(t testing.TB, log string) {
	dir := os.Getenv("OBMD_TEST_LOG_DIR")
	if dir == "" {
		return
	}
	name := filepath.Join(dir, strings.NewReplacer("/", "_", " ", "_").Replace(t.Name())+".log")
	if err := os.WriteFile(name, []byte(log), 0o600); err != nil {
		t.Logf("keep the daemon log: %v", err)
		return
	}
	t.Logf("whole daemon log in %s", name)
}

// stop shuts the daemon down and waits (idempotent).
func (o *obmd) stop() error {
	if o.cancel == nil {
		return nil
	}
	o.cancel()
	o.cancel = nil
	select {
	case err := <-o.done:
		return err
	case <-time.After(30 * time.Second):
		return errors.New("daemon did not stop within 30 s")
	}
}

func tailString(s string, n int) string {
	if len(s) > n {
		return "..." + s[len(s)-n:]
	}
	return s
}

// onEngines runs f once per database engine (SQLite; MariaDB and
// PostgreSQL when OBMD_TEST_MYSQL_DSN and OBMD_TEST_POSTGRES_DSN are set,
// required under OBMD_REQUIRE_INTEGRATION=1).
func onEngines(t *testing.T, f func(t *testing.T, dsn string)) {
	for _, e := range dbtest.Engines() {
		t.Run(e.Name, func(t *testing.T) { f(t, e.DSN(t)) })
	}
}

// onSharedEngines runs f once per engine that replicas share (MariaDB,
// PostgreSQL; each required under OBMD_REQUIRE_INTEGRATION=1), on a
// database of its own.
func onSharedEngines(t *testing.T, f func(t *testing.T, dsn string)) {
	for _, e := range dbtest.SharedEngines() {
		t.Run(e.Name, func(t *testing.T) { f(t, e.DSN(t)) })
	}
}

// ---- admin API ----

// addNode registers label with type typ and info via the obmd route. The
// tests put several nodes on one simulated BMC (each driver, each case),
// so they say it is intended (allow_shared_bmc).
func (o *obmd) addNode(label, typ string, info sol.Info) {
	o.t.Helper()
	o.mustAPI(200, "PUT", "/node/"+url.PathEscape(label)+"?allow_shared_bmc=1", map[string]any{"type": typ, "info": info})
}

// addSimNode registers label on the built-in simulator and returns its token.
func (o *obmd) addSimNode(label string) string {
	o.t.Helper()
	o.addNode(label, "sim", sol.Info{Addr: "sim"})
	return o.rotate(label)
}

// addIPMINode registers label on sim s with driver typ ("ipmi" or
// "ipmitool") and returns its token.
func (o *obmd) addIPMINode(label, typ string, s *ipmisim.Sim) string {
	o.t.Helper()
	o.addNode(label, typ, s.Info())
	return o.rotate(label)
}

// addKey registers pub on label and returns its fingerprint.
func (a *adminClient) addKey(label string, pub gossh.PublicKey) string {
	a.t.Helper()
	line := strings.TrimSpace(string(gossh.MarshalAuthorizedKey(pub)))
	var out struct{ Fingerprint string }
	data := a.mustAPI(201, "POST", "/v1/nodes/"+url.PathEscape(label)+"/keys", map[string]string{"key": line})
	if err := json.Unmarshal(data, &out); err != nil {
		a.t.Fatalf("add key: %v", err)
	}
	return out.Fingerprint
}

// ---- SSH through golang.org/x/crypto/ssh ----

// dial connects as user with auth.
func (o *obmd) dial(user string, auth ...gossh.AuthMethod) (*gossh.Client, error) {
	return gossh.Dial("tcp", o.SSHAddr(), &gossh.ClientConfig{
		User: user, Auth: auth, HostKeyCallback: gossh.InsecureIgnoreHostKey(), Timeout: 10 * time.Second,
	})
}

// session dials user with a token and opens a session on the connection,
// both closed at the test's end.
func (o *obmd) session(t testing.TB, user, token string) (*gossh.Client, *gossh.Session) {
	t.Helper()
	c, err := o.dial(user, gossh.Password(token))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	s, err := c.NewSession()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return c, s
}

// execResult is what one exec returned.
type execResult struct {
	Stdout, Stderr string
	Code           int
}

// execGo runs cmd on user@obmd with a token (password auth) and returns its
// output and exit status; err is a transport or authentication failure.
func (o *obmd) execGo(user, token, cmd string) (execResult, error) {
	c, err := o.dial(user, gossh.Password(token))
	if err != nil {
		return execResult{}, err
	}
	defer c.Close()
	return runSession(c, cmd)
}

func runSession(c *gossh.Client, cmd string) (execResult, error) {
	s, err := c.NewSession()
	if err != nil {
		return execResult{}, err
	}
	defer s.Close()
	var out, errb bytes.Buffer
	s.Stdout, s.Stderr = &out, &errb
	err = s.Run(cmd)
	res := execResult{Stdout: out.String(), Stderr: errb.String()}
	var ee *gossh.ExitError
	switch {
	case errors.As(err, &ee):
		res.Code = ee.ExitStatus()
	case err != nil:
		return res, err
	}
	return res, nil
}

// newKey returns a fresh ed25519 signer and the path of its OpenSSH private
// key file (for ssh -i).
func newKey(t testing.TB) (gossh.Signer, string) {
	t.Helper()
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return keyFile(t, priv, "id_ed25519")
}

// keyFile returns a signer of priv and the path of its OpenSSH private key
// file, named name.
func keyFile(t testing.TB, priv crypto.PrivateKey, name string) (gossh.Signer, string) {
	t.Helper()
	signer, err := gossh.NewSignerFromKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	block, err := gossh.MarshalPrivateKey(priv, "")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, pemEncode(block), 0o600); err != nil {
		t.Fatal(err)
	}
	return signer, path
}

// ---- SSH through the real OpenSSH client ----

// sshArgs are the OpenSSH client arguments for user@obmd: no user config,
// no known_hosts, only the given auth.
func (o *obmd) sshArgs(user string, extra ...string) []string {
	host, port, _ := net.SplitHostPort(o.SSHAddr())
	args := []string{"-F", "/dev/null", "-p", port,
		"-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null", "-o", "LogLevel=ERROR",
		"-o", "ConnectTimeout=10", "-o", "BatchMode=no", "-o", "IdentitiesOnly=yes"}
	args = append(args, extra...)
	return append(args, user+"@"+host)
}

// openssh runs `sshpass -p TOKEN ssh ... user@obmd cmd...` (or, with token
// "", `ssh -i key`: pass "-i", path in extra) and returns its result.
func (o *obmd) openssh(user, token string, extra []string, cmd ...string) execResult {
	o.t.Helper()
	return o.opensshIn(user, token, nil, extra, cmd...)
}

// opensshIn is openssh with stdin (nil: none).
func (o *obmd) opensshIn(user, token string, stdin io.Reader, extra []string, cmd ...string) execResult {
	o.t.Helper()
	ipmisim.Require(o.t, "ssh", "sshpass")
	var name string
	var args []string
	if token != "" {
		name = "sshpass"
		args = append([]string{"-p", token, "ssh"}, o.sshArgs(user, append([]string{"-o", "PubkeyAuthentication=no"}, extra...)...)...)
	} else {
		name = "ssh"
		args = o.sshArgs(user, append([]string{"-o", "PasswordAuthentication=no", "-o", "KbdInteractiveAuthentication=no"}, extra...)...)
	}
	res, err := runClientIn(60*time.Second, stdin, name, append(args, cmd...)...)
	if err != nil {
		o.t.Fatalf("ssh: %v (%v)", err, res)
	}
	return res
}

// clientWaitDelay bounds the wait for a client's output once the client
// has exited or been killed: ssh, sshpass's child, may outlive a killed
// sshpass and hold the pipes.
const clientWaitDelay = 2 * time.Second

// runClient runs a client program to its end and returns its output and
// exit code; err is a failure to run it, or that it was still running
// after limit (it is then killed).
func runClient(limit time.Duration, name string, args ...string) (execResult, error) {
	return runClientIn(limit, nil, name, args...)
}

// runClientIn is runClient with stdin (nil: none).
func runClientIn(limit time.Duration, stdin io.Reader, name string, args ...string) (execResult, error) {
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	c := exec.CommandContext(ctx, name, args...)
	c.WaitDelay = clientWaitDelay
	c.Stdin = stdin
	var out, errb bytes.Buffer
	c.Stdout, c.Stderr = &out, &errb
	err := c.Run()
	res := execResult{Stdout: out.String(), Stderr: errb.String()}
	var ee *exec.ExitError
	switch {
	case ctx.Err() != nil:
		return res, fmt.Errorf("%s still running after %v", name, limit)
	case errors.As(err, &ee):
		res.Code = ee.ExitCode()
	case err != nil:
		return res, err
	}
	return res, nil
}

// TestRunClientBounded: a client that outlives its limit, and whose own
// child holds its output pipes (as ssh under sshpass does), is given up
// on within the limit and the wait delay, not when the child ends.
func TestRunClientBounded(t *testing.T) {
	t.Parallel()
	start := time.Now()
	_, err := runClient(200*time.Millisecond, "sh", "-c", "sleep 10 & sleep 10")
	if took := time.Since(start); err == nil || took > 200*time.Millisecond+clientWaitDelay+3*time.Second {
		t.Errorf("got %v after %v, want an error within the limit and the wait delay", err, took.Round(time.Millisecond))
	}
}

func (r execResult) String() string {
	return fmt.Sprintf("exit %d, stdout %q, stderr %q", r.Code, r.Stdout, r.Stderr)
}

func pemEncode(b *pem.Block) []byte { return pem.EncodeToMemory(b) }

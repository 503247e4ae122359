package obmdtest

// The end-to-end harness: a whole obmd in this process on 127.0.0.1:0,
// talked to through its admin HTTP API, golang.org/x/crypto/ssh, and the
// real OpenSSH client.

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
	"github.com/obmd/obmd/db"
	"github.com/obmd/obmd/db/dbtest"
	"github.com/obmd/obmd/sol"
	"github.com/obmd/obmd/sol/soltest/ipmisim"
)

// SyncBuffer collects log output from many goroutines.
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write appends p.
func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String returns what s holds.
func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// Daemon is a running daemon under test.
type Daemon struct {
	*daemon.Daemon
	*Admin // its admin API: api, request, mustAPI, rotate
	T      testing.TB
	Cfg    daemon.Config
	Logs   *SyncBuffer // everything logged, at debug level

	cancel context.CancelFunc
	done   chan error
}

// Start starts a daemon on SQLite (or on the engine's DSN) with test
// defaults (short fail delay and linger; guessing limits no test reaches by
// accident: the tests of the limits set their own, as the others fail on
// purpose many times from 127.0.0.1, which the harness's admin client
// shares); opts adjust the config.
func Start(t testing.TB, opts ...func(*daemon.Config)) *Daemon {
	t.Helper()
	return StartDB(t, nil, opts...)
}

// StartDB is Start with options for db.Open (daemon.New's dbOpts).
func StartDB(t testing.TB, dbOpts []db.Option, opts ...func(*daemon.Config)) *Daemon {
	t.Helper()
	cfg := daemon.Config{
		Daemon:     daemon.DaemonConfig{StateDir: t.TempDir()},
		SSH:        daemon.SSHConfig{Addr: "127.0.0.1:0", FailDelay: 20 * time.Millisecond},
		Admin:      daemon.AdminConfig{Addr: "127.0.0.1:0", FailDelay: 20 * time.Millisecond},
		Access:     daemon.AccessConfig{Poll: 100 * time.Millisecond},
		Version:    "test",
		AuthLimits: authlimit.Config{PerSource: 1 << 20, PerNode: 1 << 20},
	}
	cfg.Console.Linger = 200 * time.Millisecond
	// Tests register IPMI nodes at addresses nobody answers: no link
	// opens unless a test attaches (the capture tests set their own).
	cfg.Console.Capture = "attached"
	for _, o := range opts {
		o(&cfg)
	}
	return StartWith(t, cfg, dbOpts...)
}

// StartWith starts a daemon with exactly cfg (restarts reuse a config).
func StartWith(t testing.TB, cfg daemon.Config, dbOpts ...db.Option) *Daemon {
	t.Helper()
	logs := &SyncBuffer{}
	log := logrus.New()
	log.SetOutput(logs)
	log.SetLevel(logrus.DebugLevel)
	log.SetFormatter(&logrus.JSONFormatter{})
	d, err := daemon.New(cfg, log, dbOpts...)
	if err != nil {
		t.Fatalf("daemon.New: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	if err := d.Start(ctx); err != nil {
		cancel()
		t.Fatalf("daemon.Start: %v", err)
	}
	o := &Daemon{Daemon: d, Admin: NewAdmin(t, d.AdminAddr(), d.AdminToken(), ""), T: t, Cfg: cfg, Logs: logs,
		cancel: cancel, done: make(chan error, 1)}
	go func() { o.done <- d.Run(ctx) }() // waited for by stop
	t.Cleanup(func() {
		if err := o.Stop(); err != nil {
			t.Errorf("daemon stop: %v", err)
		}
		if t.Failed() {
			t.Logf("daemon log:\n%s", Tail(logs.String(), 8000))
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

// Stop shuts the daemon down and waits (idempotent).
func (o *Daemon) Stop() error {
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

// Tail returns the last n bytes of s, marked as cut if s is longer.
func Tail(s string, n int) string {
	if len(s) > n {
		return "..." + s[len(s)-n:]
	}
	return s
}

// OnEngines runs f once per database engine (SQLite; MariaDB and
// PostgreSQL when OBMD_TEST_MYSQL_DSN and OBMD_TEST_POSTGRES_DSN are set,
// required under OBMD_REQUIRE_INTEGRATION=1).
func OnEngines(t *testing.T, f func(t *testing.T, dsn string)) {
	for _, e := range dbtest.Engines() {
		t.Run(e.Name, func(t *testing.T) { f(t, e.DSN(t)) })
	}
}

// OnSharedEngines runs f once per engine that replicas share (MariaDB,
// PostgreSQL; each required under OBMD_REQUIRE_INTEGRATION=1), on a
// database of its own.
func OnSharedEngines(t *testing.T, f func(t *testing.T, dsn string)) {
	for _, e := range dbtest.SharedEngines() {
		t.Run(e.Name, func(t *testing.T) { f(t, e.DSN(t)) })
	}
}

// ---- admin API ----

// AddNode registers label with type typ and info via the obmd route. The
// tests put several nodes on one simulated BMC (each driver, each case),
// so they say it is intended (allow_shared_bmc).
func (o *Daemon) AddNode(label, typ string, info sol.Info) {
	o.T.Helper()
	o.MustAPI(200, "PUT", "/node/"+url.PathEscape(label)+"?allow_shared_bmc=1", map[string]any{"type": typ, "info": info})
}

// AddSimNode registers label on the built-in simulator and returns its token.
func (o *Daemon) AddSimNode(label string) string {
	o.T.Helper()
	o.AddNode(label, "sim", sol.Info{Addr: "sim"})
	return o.Rotate(label)
}

// AddIPMINode registers label on sim s with driver typ ("ipmi" or
// "ipmitool") and returns its token.
func (o *Daemon) AddIPMINode(label, typ string, s *ipmisim.Sim) string {
	o.T.Helper()
	o.AddNode(label, typ, s.Info())
	return o.Rotate(label)
}

// AddKey registers pub on label and returns its fingerprint.
func (a *Admin) AddKey(label string, pub gossh.PublicKey) string {
	a.T.Helper()
	line := strings.TrimSpace(string(gossh.MarshalAuthorizedKey(pub)))
	var out struct{ Fingerprint string }
	data := a.MustAPI(201, "POST", "/v1/nodes/"+url.PathEscape(label)+"/keys", map[string]string{"key": line})
	if err := json.Unmarshal(data, &out); err != nil {
		a.T.Fatalf("add key: %v", err)
	}
	return out.Fingerprint
}

// ---- SSH through golang.org/x/crypto/ssh ----

// Dial connects as user with auth.
func (o *Daemon) Dial(user string, auth ...gossh.AuthMethod) (*gossh.Client, error) {
	return gossh.Dial("tcp", o.SSHAddr(), &gossh.ClientConfig{
		User: user, Auth: auth, HostKeyCallback: gossh.InsecureIgnoreHostKey(), Timeout: 10 * time.Second,
	})
}

// NewSession dials user with a token and opens a session on the connection,
// both closed at the test's end.
func (o *Daemon) NewSession(t testing.TB, user, token string) (*gossh.Client, *gossh.Session) {
	t.Helper()
	c, err := o.Dial(user, gossh.Password(token))
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

// Result is what one exec returned.
type Result struct {
	Stdout, Stderr string
	Code           int
}

// ExecGo runs cmd on user@obmd with a token (password auth) and returns its
// output and exit status; err is a transport or authentication failure.
func (o *Daemon) ExecGo(user, token, cmd string) (Result, error) {
	c, err := o.Dial(user, gossh.Password(token))
	if err != nil {
		return Result{}, err
	}
	defer c.Close()
	return RunSession(c, cmd)
}

// RunSession runs cmd in a new session of c and returns its output and
// exit code.
func RunSession(c *gossh.Client, cmd string) (Result, error) {
	s, err := c.NewSession()
	if err != nil {
		return Result{}, err
	}
	defer s.Close()
	var out, errb bytes.Buffer
	s.Stdout, s.Stderr = &out, &errb
	err = s.Run(cmd)
	res := Result{Stdout: out.String(), Stderr: errb.String()}
	var ee *gossh.ExitError
	switch {
	case errors.As(err, &ee):
		res.Code = ee.ExitStatus()
	case err != nil:
		return res, err
	}
	return res, nil
}

// NewKey returns a fresh ed25519 signer and the path of its OpenSSH private
// key file (for ssh -i).
func NewKey(t testing.TB) (gossh.Signer, string) {
	t.Helper()
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return KeyFile(t, priv, "id_ed25519")
}

// KeyFile returns a signer of priv and the path of its OpenSSH private key
// file, named name.
func KeyFile(t testing.TB, priv crypto.PrivateKey, name string) (gossh.Signer, string) {
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

// SSHArgs are the OpenSSH client arguments for user@obmd: no user config,
// no known_hosts, only the given auth.
func (o *Daemon) SSHArgs(user string, extra ...string) []string {
	host, port, _ := net.SplitHostPort(o.SSHAddr())
	args := []string{"-F", "/dev/null", "-p", port,
		"-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null", "-o", "LogLevel=ERROR",
		"-o", "ConnectTimeout=10", "-o", "BatchMode=no", "-o", "IdentitiesOnly=yes"}
	args = append(args, extra...)
	return append(args, user+"@"+host)
}

// OpenSSH runs `sshpass -p TOKEN ssh ... user@obmd cmd...` (or, with token
// "", `ssh -i key`: pass "-i", path in extra) and returns its result.
func (o *Daemon) OpenSSH(user, token string, extra []string, cmd ...string) Result {
	o.T.Helper()
	return o.OpenSSHIn(user, token, nil, extra, cmd...)
}

// OpenSSHIn is openssh with stdin (nil: none).
func (o *Daemon) OpenSSHIn(user, token string, stdin io.Reader, extra []string, cmd ...string) Result {
	o.T.Helper()
	ipmisim.Require(o.T, "ssh", "sshpass")
	var name string
	var args []string
	if token != "" {
		name = "sshpass"
		args = append([]string{"-p", token, "ssh"}, o.SSHArgs(user, append([]string{"-o", "PubkeyAuthentication=no"}, extra...)...)...)
	} else {
		name = "ssh"
		args = o.SSHArgs(user, append([]string{"-o", "PasswordAuthentication=no", "-o", "KbdInteractiveAuthentication=no"}, extra...)...)
	}
	res, err := runClientIn(60*time.Second, stdin, name, append(args, cmd...)...)
	if err != nil {
		o.T.Fatalf("ssh: %v (%v)", err, res)
	}
	return res
}

// ClientWaitDelay bounds the wait for a client's output once the client
// has exited or been killed: ssh, sshpass's child, may outlive a killed
// sshpass and hold the pipes.
const ClientWaitDelay = 2 * time.Second

// RunClient runs a client program to its end and returns its output and
// exit code; err is a failure to run it, or that it was still running
// after limit (it is then killed).
func RunClient(limit time.Duration, name string, args ...string) (Result, error) {
	return runClientIn(limit, nil, name, args...)
}

// runClientIn is runClient with stdin (nil: none).
func runClientIn(limit time.Duration, stdin io.Reader, name string, args ...string) (Result, error) {
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	c := exec.CommandContext(ctx, name, args...)
	c.WaitDelay = ClientWaitDelay
	c.Stdin = stdin
	var out, errb bytes.Buffer
	c.Stdout, c.Stderr = &out, &errb
	err := c.Run()
	res := Result{Stdout: out.String(), Stderr: errb.String()}
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

// String is r for a failure message.
func (r Result) String() string {
	return fmt.Sprintf("exit %d, stdout %q, stderr %q", r.Code, r.Stdout, r.Stderr)
}

func pemEncode(b *pem.Block) []byte { return pem.EncodeToMemory(b) }

package obmdtest

// What the end-to-end tests share beyond the in-process daemon
// (daemon.go): how a test waits for what a client shows, the
// clients, and the obmd binary for the tests that run it as a process.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/creack/pty"
	gossh "golang.org/x/crypto/ssh"

	"github.com/obmd/obmd/sol/sim"
	"github.com/obmd/obmd/sol/soltest"
	"github.com/obmd/obmd/sol/soltest/ipmisim"
)

// Main runs an e2e package's tests (m.Run) and removes the obmd binary
// they built; it returns m.Run's exit code. Each e2e package's TestMain
// calls it.
func Main(m *testing.M) int {
	code := m.Run()
	if builtDir != "" {
		os.RemoveAll(builtDir)
	}
	return code
}

// obmdBuild builds cmd/obmd once per test binary, into builtDir (removed
// by TestMain).
var (
	obmdBuild = sync.OnceValues(buildObmd)
	builtDir  string
)

// Binary returns the path of cmd/obmd, built once per test binary.
func Binary(t testing.TB) string {
	t.Helper()
	soltest.External(t, "the obmd binary, run as a process")
	path, err := obmdBuild()
	if err != nil {
		t.Fatal(err)
	}
	return path
}

// buildObmd builds cmd/obmd with -race when these tests run with it, so
// that a test run compiles one set of dependencies (the build cache of the
// test binary serves most of it).
func buildObmd() (string, error) {
	dir, err := os.MkdirTemp("", "obmd-e2e-")
	if err != nil {
		return "", err
	}
	builtDir = dir
	path := filepath.Join(dir, "obmd")
	args := []string{"build", "-o", path}
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			if s.Key == "-race" && s.Value == "true" {
				args = append(args, "-race")
			}
		}
	}
	goTool, err := exec.LookPath("go")
	if err != nil {
		goTool = filepath.Join(os.Getenv("GOROOT"), "bin", "go")
	}
	out, err := exec.Command(goTool, append(args, "github.com/obmd/obmd/cmd/obmd")...).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("go build ./cmd/obmd: %v\n%s", err, out)
	}
	return path, nil
}

// Timeout bounds every wait of these tests for something that must happen
// soon: generous, since CI has two cores and runs them under -race.
const Timeout = 20 * time.Second

// WaitUntil polls cond, less and less often (5 ms to 50 ms apart), until it
// holds; it fails t after e2eWait.
func WaitUntil(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(Timeout)
	for pause := 5 * time.Millisecond; !cond(); pause = min(2*pause, 50*time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, Timeout)
		}
		time.Sleep(pause)
	}
}

// Buffer collects a byte stream and lets a test wait for text in it.
type Buffer struct {
	mu   sync.Mutex
	b    []byte
	grew chan struct{} // closed and replaced by every Write
}

// NewBuffer returns an empty Buffer.
func NewBuffer() *Buffer { return &Buffer{grew: make(chan struct{})} }

// Write appends p and wakes the waiters.
func (c *Buffer) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.b = append(c.b, p...)
	close(c.grew)
	c.grew = make(chan struct{})
	return len(p), nil
}

// Bytes returns a copy of what c holds.
func (c *Buffer) Bytes() []byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	return bytes.Clone(c.b)
}

// String returns what c holds.
func (c *Buffer) String() string { return string(c.Bytes()) }

// Len returns how many bytes c holds.
func (c *Buffer) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.b)
}

// Find waits until want occurs at or after offset from and returns the
// offset just past it; ok is false after timeout.
func (c *Buffer) Find(from int, want []byte, timeout time.Duration) (end int, ok bool) {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		c.mu.Lock()
		i := -1
		if from <= len(c.b) { // else wait for the stream to reach from
			i = bytes.Index(c.b[from:], want)
		}
		grew := c.grew
		c.mu.Unlock()
		if i >= 0 {
			return from + i + len(want), true
		}
		select {
		case <-grew:
		case <-deadline.C:
			return 0, false
		}
	}
}

// Wait is find that fails t on timeout.
func (c *Buffer) Wait(t testing.TB, what string, from int, want string) int {
	t.Helper()
	end, ok := c.Find(from, []byte(want), Timeout)
	if !ok {
		s := c.String()
		t.Fatalf("%s: %q never came; got (tail) %q", what, want, Tail(s[min(from, len(s)):], 600))
	}
	return end
}

// printSeq numbers printUntilSeen's markers, so that each is new to every
// client.
var printSeq atomic.Int64

// PrintUntilSeen prints markers "<prefix-N>", each new and on a line of its
// own, with print (a node's serial port) until seen says one arrived, and
// returns that one. Output printed while a console link or a replica's
// relay is still opening is lost: this is how a test knows its clients
// receive.
func PrintUntilSeen(t testing.TB, print func([]byte) error, prefix string, seen func(marker string) bool) string {
	t.Helper()
	deadline := time.Now().Add(Timeout)
	for {
		m := fmt.Sprintf("<%s-%d>", prefix, printSeq.Add(1))
		if err := print([]byte(m + "\r\n")); err != nil {
			t.Fatalf("print %s: %v", m, err)
		}
		for stop := time.Now().Add(100 * time.Millisecond); time.Now().Before(stop); time.Sleep(5 * time.Millisecond) {
			if seen(m) {
				return m
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %s marker reached the clients within %v", prefix, Timeout)
		}
	}
}

// Inject is print for a simulated BMC's serial side.
func Inject(bmc *sim.BMC) func([]byte) error {
	return func(p []byte) error { bmc.Inject(p); return nil }
}

// Shows is a printUntilSeen condition: every buffer holds the marker.
func Shows(bufs ...*Buffer) func(string) bool {
	return func(m string) bool {
		for _, b := range bufs {
			if !strings.Contains(b.String(), m) {
				return false
			}
		}
		return true
	}
}

// End is how a client the test watches ended.
type End struct {
	Done chan struct{} // closed when the client has ended; At, Code and Err are then set
	At   time.Time
	Code int
	Err  error
}

// NewEnd returns the End of a client still running.
func NewEnd() *End { return &End{Done: make(chan struct{})} }

// Finish records that the client ended now, with code and err.
func (e *End) Finish(code int, err error) { e.finishAt(time.Now(), code, err) }

func (e *End) finishAt(at time.Time, code int, err error) {
	e.At, e.Code, e.Err = at, code, err
	close(e.Done)
}

// Wait returns when the client ended, failing t if it does not.
func (e *End) Wait(t testing.TB, what string) time.Time {
	t.Helper()
	select {
	case <-e.Done:
		return e.At
	case <-time.After(Timeout):
		t.Fatalf("%s did not end", what)
		return time.Time{}
	}
}

// Ended reports whether the client has ended, without waiting.
func (e *End) Ended() bool {
	select {
	case <-e.Done:
		return true
	default:
		return false
	}
}

// HTTPConsole is a GET /node/{label}/console stream; its body is copied
// into out until it ends.
type HTTPConsole struct {
	Resp *http.Response // status and headers; the body is out's
	Out  *Buffer
	End  *End   // err: the copy's (nil for a clean end of the body)
	Stop func() // ends the stream (idempotent) and waits for the copy
}

// ConsoleHTTP opens label's HTTP console with token; it returns once the
// response has begun (the stream is registered), or fails t unless the
// status is 200. The stream ends at the latest when t does.
func (o *Daemon) ConsoleHTTP(t testing.TB, label, token string) *HTTPConsole {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, "GET",
		"http://"+o.AdminAddr()+"/node/"+url.PathEscape(label)+"/console?token="+url.QueryEscape(token), nil)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	resp, err := (&http.Client{}).Do(req)
	if err != nil {
		cancel()
		t.Fatalf("GET console: %v", err)
	}
	if resp.StatusCode != 200 {
		data, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		cancel()
		t.Fatalf("GET console: got %d %s, want 200", resp.StatusCode, data)
	}
	h := &HTTPConsole{Resp: resp, Out: NewBuffer(), End: NewEnd()}
	go func() { // ends when the body does; finishes h.end
		_, err := io.Copy(h.Out, resp.Body)
		h.End.Finish(0, err)
	}()
	h.Stop = func() {
		cancel()
		resp.Body.Close()
		<-h.End.Done
	}
	t.Cleanup(h.Stop)
	return h
}

// CountsFrom0 fails t unless the stream's first n lines are 0, 1, ...
// n-1: a mock console's counter from its start.
func (h *HTTPConsole) CountsFrom0(t testing.TB, what string, n int) {
	t.Helper()
	var want []byte
	end := 0
	for i := range n {
		want = fmt.Appendf(want, "%d\n", i)
		end = h.Out.Wait(t, what, end, "\n")
	}
	if got := h.Out.Bytes()[:end]; string(got) != string(want) {
		t.Fatalf("%s: got %q, want %q", what, got, want)
	}
}

// ---- interactive clients ----

// Client is what every interactive client of these tests has: keys in,
// what it printed, how it ended.
type Client struct {
	t   testing.TB
	In  io.Writer // its keyboard
	Out *Buffer   // what it printed: stdout, or everything on a pty
	Pos int       // expect's cursor in out
	End *End      // code: its exit status, -1 without one
}

// TypeKeys sends keystrokes.
func (c *Client) TypeKeys(s string) {
	c.t.Helper()
	if _, err := c.In.Write([]byte(s)); err != nil {
		c.t.Fatalf("type %q: %v", s, err)
	}
}

// Expect waits for want in out after the previous match and moves past it.
func (c *Client) Expect(want string) {
	c.t.Helper()
	c.Pos = c.Out.Wait(c.t, "client output", c.Pos, want)
}

// Exit waits for the client to end and returns its exit status.
func (c *Client) Exit() int {
	c.t.Helper()
	c.End.Wait(c.t, "the client")
	return c.End.Code
}

// DialSSH connects to addr as user with auth (x/crypto, any host key).
func DialSSH(addr, user string, auth ...gossh.AuthMethod) (*gossh.Client, error) {
	return gossh.Dial("tcp", addr, &gossh.ClientConfig{
		User: user, Auth: auth, HostKeyCallback: gossh.InsecureIgnoreHostKey(), Timeout: 10 * time.Second,
	})
}

// ExecSSH runs line on user@addr (x/crypto) on a connection of its own and
// returns its output and exit status; err is a failure to connect, to
// authenticate or to run it.
func ExecSSH(addr, user, line string, auth ...gossh.AuthMethod) (Result, error) {
	c, err := DialSSH(addr, user, auth...)
	if err != nil {
		return Result{}, err
	}
	defer c.Close()
	return RunSession(c, line)
}

// GoSession is a session through golang.org/x/crypto/ssh, on a connection of
// its own: a console, or a command started without waiting for it.
type GoSession struct {
	Client
	Conn    *gossh.Client
	Session *gossh.Session
	Stderr  *Buffer   // stderr: obmd's banner and notices (out itself with SessionOpts.merge)
	epos    int       // notice's cursor in errb
	stdout  io.Reader // a stalled console's stdout, read only by drain
	wg      sync.WaitGroup
}

// SessionOpts say how a GoSession starts.
type SessionOpts struct {
	PTY   bool   // request a pty first
	Cmd   string // exec this instead of asking for a shell (the console)
	Stall bool   // never read stdout until drain
	Merge bool   // stderr into out too, as a terminal shows them
}

// StartGoSession connects to addr as user with auth and starts a session.
func StartGoSession(t testing.TB, addr, user string, auth gossh.AuthMethod, opt SessionOpts) *GoSession {
	t.Helper()
	c, err := DialSSH(addr, user, auth)
	if err != nil {
		t.Fatalf("dial %s: %v", user, err)
	}
	s, err := c.NewSession()
	if err != nil {
		c.Close()
		t.Fatalf("new session: %v", err)
	}
	g := &GoSession{Client: Client{t: t, Out: NewBuffer(), End: NewEnd()}, Conn: c, Session: s, Stderr: NewBuffer()}
	started := false
	t.Cleanup(func() {
		s.Close()
		c.Close()
		if started {
			<-g.End.Done
		}
		g.wg.Wait()
	})
	if opt.Merge {
		g.Stderr = g.Out
	}
	if g.In, err = s.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	if opt.Stall {
		if g.stdout, err = s.StdoutPipe(); err != nil {
			t.Fatal(err)
		}
	} else {
		s.Stdout = g.Out
	}
	s.Stderr = g.Stderr
	if opt.PTY {
		if err := s.RequestPty("xterm", 24, 80, gossh.TerminalModes{}); err != nil {
			t.Fatalf("pty-req: %v", err)
		}
	}
	if opt.Cmd != "" {
		err = s.Start(opt.Cmd)
	} else {
		err = s.Shell()
	}
	if err != nil {
		t.Fatalf("start %q: %v", opt.Cmd, err)
	}
	started = true
	go func() { // ends with the session (Close at the latest); finishes g.end once its output is in
		err := s.Wait()
		code := 0
		var ee *gossh.ExitError
		switch {
		case errors.As(err, &ee):
			code, err = ee.ExitStatus(), nil
		case err != nil:
			code = -1
		}
		g.End.Finish(code, err)
	}()
	return g
}

// GoConsole attaches to user's console on o with token.
func (o *Daemon) GoConsole(t testing.TB, user, token string, opt SessionOpts) *GoSession {
	t.Helper()
	return StartGoSession(t, o.SSHAddr(), user, gossh.Password(token), opt)
}

// Drain starts reading a stalled console's stdout.
func (g *GoSession) Drain() {
	g.wg.Add(1)
	go func() { // ends when the session's stdout does
		defer g.wg.Done()
		io.Copy(g.Out, g.stdout)
	}()
}

// Notice waits for want on stderr after the previous notice.
func (g *GoSession) Notice(want string) {
	g.t.Helper()
	g.epos = g.Stderr.Wait(g.t, "console notices", g.epos, want)
}

// SSHArgs are the OpenSSH client arguments for user@addr: no user config,
// no known_hosts, only the given auth.
func SSHArgs(addr, user string, extra ...string) []string {
	host, port, _ := net.SplitHostPort(addr)
	args := []string{"-F", "/dev/null", "-p", port,
		"-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null", "-o", "LogLevel=ERROR",
		"-o", "ConnectTimeout=10", "-o", "BatchMode=no", "-o", "IdentitiesOnly=yes"}
	args = append(args, extra...)
	return append(args, user+"@"+host)
}

// PTY is the real OpenSSH client, ssh -tt, with a pty for a terminal, as
// a person at a keyboard runs it. Its out is the screen (stdout and stderr
// share the pty).
type PTY struct {
	Client
	Master *os.File // the pty master: the keyboard (in) and the screen
}

// SSHPTY starts ssh -tt to user@addr running cmd (none: the console). With
// a token it runs under sshpass, the token in its environment (not its
// arguments); with token "" it authenticates with the key file in extra
// ("-i", path).
func SSHPTY(t testing.TB, addr, user, token string, extra []string, cmd ...string) *PTY {
	t.Helper()
	var c *exec.Cmd
	if token != "" {
		ipmisim.Require(t, "ssh", "sshpass")
		args := append([]string{"-e", "ssh", "-tt"}, SSHArgs(addr, user, append([]string{"-o", "PubkeyAuthentication=no"}, extra...)...)...)
		c = exec.Command("sshpass", append(args, cmd...)...)
		c.Env = append(os.Environ(), "SSHPASS="+token)
	} else {
		ipmisim.Require(t, "ssh")
		args := append([]string{"-tt"}, SSHArgs(addr, user, append([]string{"-o", "PasswordAuthentication=no",
			"-o", "KbdInteractiveAuthentication=no"}, extra...)...)...)
		c = exec.Command("ssh", append(args, cmd...)...)
	}
	return StartPTY(t, c)
}

// StartPTY runs the ssh command c under a pty (sshPTY).
func StartPTY(t testing.TB, c *exec.Cmd) *PTY {
	t.Helper()
	f, err := pty.StartWithSize(c, &pty.Winsize{Rows: 24, Cols: 80})
	if err != nil {
		t.Fatalf("start ssh under a pty: %v", err)
	}
	p := &PTY{Client: Client{t: t, In: f, Out: NewBuffer(), End: NewEnd()}, Master: f}
	read := make(chan struct{})
	go func() { // ends when the last process holding the pty's tty has exited (EIO), or at f.Close
		defer close(read)
		io.Copy(p.Out, f)
	}()
	go func() { // reaps ssh; finishes p.end once its last words are read
		err := c.Wait()
		at := time.Now()
		select {
		case <-read:
		case <-time.After(5 * time.Second):
		}
		code := 0
		var ee *exec.ExitError
		switch {
		case errors.As(err, &ee):
			code, err = ee.ExitCode(), nil
		case err != nil:
			code = -1
		}
		p.End.finishAt(at, code, err)
	}()
	t.Cleanup(func() {
		if !p.End.Ended() {
			c.Process.Kill()
			<-p.End.Done
		}
		f.Close()
		<-read
		if t.Failed() {
			t.Logf("ssh screen (tail): %q", Tail(p.Out.String(), 2000))
		}
	})
	return p
}

// ---- the admin API ----

// RequestFrom sends an HTTP request to base+path from the local address
// src, with basic credentials user:pass ("" user: none) and the headers
// hdr; it returns the status and body (0 and an error logged if it failed:
// safe in goroutines).
func RequestFrom(t testing.TB, base, src, method, path, user, pass string, hdr http.Header) (int, []byte) {
	t.Helper()
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: 10 * time.Second}
	client := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{DialContext: d.DialContext}}
	defer client.CloseIdleConnections()
	req, err := http.NewRequest(method, base+path, nil)
	if err != nil {
		t.Errorf("request: %v", err)
		return 0, nil
	}
	for k, v := range hdr {
		req.Header[k] = v
	}
	if user != "" {
		req.SetBasicAuth(user, pass)
	}
	res, err := client.Do(req)
	if err != nil {
		t.Errorf("%s %s from %s: %v", method, path, src, err)
		return 0, nil
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(res.Body)
	return res.StatusCode, body
}

// Admin is an HTTP client of an obmd's admin API.
type Admin struct {
	T     testing.TB // what fails on a transport error or an unwanted status
	base  string     // http://host:port
	token string     // the admin token
	where string     // " on <replica>" in messages, or ""
	http  *http.Client
}

// NewAdmin returns a client of the admin API at addr with token; where
// (" on <replica>", or "") goes into its failure messages.
func NewAdmin(t testing.TB, addr, token, where string) *Admin {
	return &Admin{T: t, base: "http://" + addr, token: token, where: where, http: &http.Client{Timeout: 30 * time.Second}}
}

// On is a copy of a that fails t (a subtest) instead.
func (a *Admin) On(t testing.TB) *Admin {
	c := *a
	c.T = t
	return &c
}

// Request sends an HTTP request to the admin port and returns status and
// body; user "" sends no auth. body may be nil, a string or []byte (sent as
// is), or a value to encode as JSON.
func (a *Admin) Request(method, path string, body any, user, pass string) (int, []byte) {
	a.T.Helper()
	var r io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		r = strings.NewReader(b)
	case []byte:
		r = bytes.NewReader(b)
	default:
		data, err := json.Marshal(b)
		if err != nil {
			a.T.Fatalf("encode body: %v", err)
		}
		r = bytes.NewReader(data)
	}
	req, err := http.NewRequest(method, a.base+path, r)
	if err != nil {
		a.T.Fatalf("request %s %s: %v", method, path, err)
	}
	if user != "" {
		req.SetBasicAuth(user, pass)
	}
	resp, err := a.http.Do(req)
	if err != nil {
		a.T.Fatalf("%s %s%s: %v", method, path, a.where, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		a.T.Fatalf("%s %s%s: read body: %v", method, path, a.where, err)
	}
	return resp.StatusCode, data
}

// API sends an admin request (basic admin:<token>).
func (a *Admin) API(method, path string, body any) (int, []byte) {
	a.T.Helper()
	return a.Request(method, path, body, "admin", a.token)
}

// MustAPI is api that fails unless the status is want.
func (a *Admin) MustAPI(want int, method, path string, body any) []byte {
	a.T.Helper()
	status, data := a.API(method, path, body)
	if status != want {
		a.T.Fatalf("%s %s%s: got %d %s, want %d", method, path, a.where, status, data, want)
	}
	return data
}

// Rotate issues a new token for label.
func (a *Admin) Rotate(label string) string {
	a.T.Helper()
	var out struct{ Token string }
	if err := json.Unmarshal(a.MustAPI(200, "POST", "/node/"+url.PathEscape(label)+"/token", nil), &out); err != nil || out.Token == "" {
		a.T.Fatalf("rotate %s%s: bad answer: %v", label, a.where, err)
	}
	return out.Token
}

// NoPTY is the real OpenSSH client with pipes for stdin, stdout and
// stderr (ssh -T), as a script runs it.
type NoPTY struct {
	Stdin       io.Writer
	Out, Stderr *Buffer
	End         *End
}

// SSHNoPTY starts `ssh -T user@addr console` under sshpass, the token in
// its environment; it is killed when t ends.
func SSHNoPTY(t testing.TB, addr, user, token string) *NoPTY {
	t.Helper()
	ipmisim.Require(t, "ssh", "sshpass")
	args := append([]string{"-e", "ssh", "-T"}, SSHArgs(addr, user, "-o", "PubkeyAuthentication=no")...)
	c := exec.Command("sshpass", append(args, "console")...)
	c.Env = append(os.Environ(), "SSHPASS="+token)
	stdin, err := c.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	p := &NoPTY{Stdin: stdin, Out: NewBuffer(), Stderr: NewBuffer(), End: NewEnd()}
	c.Stdout, c.Stderr = p.Out, p.Stderr
	c.WaitDelay = 2 * time.Second // ssh (sshpass's child) may outlive a killed sshpass
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.End.Finish(0, c.Wait()) }() // reaps ssh
	t.Cleanup(func() {
		if !p.End.Ended() {
			c.Process.Kill()
			<-p.End.Done
		}
		if t.Failed() {
			t.Logf("ssh -T stderr: %q", Tail(p.Stderr.String(), 2000))
		}
	})
	return p
}

// PrintUntil prints numbered lines with print until done delivers.
func PrintUntil(t testing.TB, print func([]byte) error, prefix string, done <-chan Result) Result {
	t.Helper()
	deadline := time.Now().Add(Timeout)
	for i := 0; ; i++ {
		if err := print(fmt.Appendf(nil, "%s-%d\r\n", prefix, i)); err != nil {
			t.Fatal(err)
		}
		select {
		case res := <-done:
			return res
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: the command did not end within %v", prefix, Timeout)
		}
	}
}

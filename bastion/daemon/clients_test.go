package daemon_test

// What the end-to-end tests share beyond the in-process daemon
// (harness_test.go): how a test waits for what a client shows, the
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
	"github.com/obmd/obmd/sol/soltest/ipmisim"
)

func TestMain(m *testing.M) {
	if u := os.Getenv(cliEnv); u != "" {
		os.Exit(runConsoleCLI(u)) // a child process of TestConsoleMockBufferedPipe
	}
	code := m.Run()
	galeraCluster.Close()
	if builtDir != "" {
		os.RemoveAll(builtDir)
	}
	if previousDir != "" {
		os.RemoveAll(previousDir)
	}
	os.Exit(code)
}

// obmdBuild builds cmd/obmd once per test binary, into builtDir (removed
// by TestMain).
var (
	obmdBuild = sync.OnceValues(buildObmd)
	builtDir  string
)

// obmdBinary returns the path of cmd/obmd, built once per test binary.
func obmdBinary(t testing.TB) string {
	t.Helper()
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

// e2eWait bounds every wait of these tests for something that must happen
// soon: generous, since CI has two cores and runs them under -race.
const e2eWait = 20 * time.Second

// waitUntil polls cond, less and less often (5 ms to 50 ms apart), until it
// holds; it fails t after e2eWait.
func waitUntil(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(e2eWait)
	for pause := 5 * time.Millisecond; !cond(); pause = min(2*pause, 50*time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, e2eWait)
		}
		time.Sleep(pause)
	}
}

// conBuf collects a byte stream and lets a test wait for text in it.
type conBuf struct {
	mu   sync.Mutex
	b    []byte
	grew chan struct{} // closed and replaced by every Write
}

func newConBuf() *conBuf { return &conBuf{grew: make(chan struct{})} }

func (c *conBuf) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.b = append(c.b, p...)
	close(c.grew)
	c.grew = make(chan struct{})
	return len(p), nil
}

func (c *conBuf) Bytes() []byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	return bytes.Clone(c.b)
}

func (c *conBuf) String() string { return string(c.Bytes()) }

func (c *conBuf) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.b)
}

// find waits until want occurs at or after offset from and returns the
// offset just past it; ok is false after timeout.
func (c *conBuf) find(from int, want []byte, timeout time.Duration) (end int, ok bool) {
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

// wait is find that fails t on timeout.
func (c *conBuf) wait(t testing.TB, what string, from int, want string) int {
	t.Helper()
	end, ok := c.find(from, []byte(want), e2eWait)
	if !ok {
		s := c.String()
		t.Fatalf("%s: %q never came; got (tail) %q", what, want, tailString(s[min(from, len(s)):], 600))
	}
	return end
}

// printSeq numbers printUntilSeen's markers, so that each is new to every
// client.
var printSeq atomic.Int64

// printUntilSeen prints markers "<prefix-N>", each new and on a line of its
// own, with print (a node's serial port) until seen says one arrived, and
// returns that one. Output printed while a console link or a replica's
// relay is still opening is lost: this is how a test knows its clients
// receive.
func printUntilSeen(t testing.TB, print func([]byte) error, prefix string, seen func(marker string) bool) string {
	t.Helper()
	deadline := time.Now().Add(e2eWait)
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
			t.Fatalf("no %s marker reached the clients within %v", prefix, e2eWait)
		}
	}
}

// inject is print for a simulated BMC's serial side.
func inject(bmc *sim.BMC) func([]byte) error {
	return func(p []byte) error { bmc.Inject(p); return nil }
}

// shows is a printUntilSeen condition: every buffer holds the marker.
func shows(bufs ...*conBuf) func(string) bool {
	return func(m string) bool {
		for _, b := range bufs {
			if !strings.Contains(b.String(), m) {
				return false
			}
		}
		return true
	}
}

// clientEnd is how a client the test watches ended.
type clientEnd struct {
	done chan struct{} // closed when the client has ended; at, code and err are then set
	at   time.Time
	code int
	err  error
}

func newClientEnd() *clientEnd { return &clientEnd{done: make(chan struct{})} }

func (e *clientEnd) finish(code int, err error) { e.finishAt(time.Now(), code, err) }

func (e *clientEnd) finishAt(at time.Time, code int, err error) {
	e.at, e.code, e.err = at, code, err
	close(e.done)
}

// wait returns when the client ended, failing t if it does not.
func (e *clientEnd) wait(t testing.TB, what string) time.Time {
	t.Helper()
	select {
	case <-e.done:
		return e.at
	case <-time.After(e2eWait):
		t.Fatalf("%s did not end", what)
		return time.Time{}
	}
}

func (e *clientEnd) ended() bool {
	select {
	case <-e.done:
		return true
	default:
		return false
	}
}

// httpConsole is a GET /node/{label}/console stream; its body is copied
// into out until it ends.
type httpConsole struct {
	resp *http.Response // status and headers; the body is out's
	out  *conBuf
	end  *clientEnd // err: the copy's (nil for a clean end of the body)
	stop func()     // ends the stream (idempotent) and waits for the copy
}

// consoleHTTP opens label's HTTP console with token; it returns once the
// response has begun (the stream is registered), or fails t unless the
// status is 200. The stream ends at the latest when t does.
func (o *obmd) consoleHTTP(t testing.TB, label, token string) *httpConsole {
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
	h := &httpConsole{resp: resp, out: newConBuf(), end: newClientEnd()}
	go func() { // ends when the body does; finishes h.end
		_, err := io.Copy(h.out, resp.Body)
		h.end.finish(0, err)
	}()
	h.stop = func() {
		cancel()
		resp.Body.Close()
		<-h.end.done
	}
	t.Cleanup(h.stop)
	return h
}

// countsFrom0 fails t unless the stream's first n lines are 0, 1, ...
// n-1: a mock console's counter from its start.
func (h *httpConsole) countsFrom0(t testing.TB, what string, n int) {
	t.Helper()
	var want []byte
	end := 0
	for i := range n {
		want = fmt.Appendf(want, "%d\n", i)
		end = h.out.wait(t, what, end, "\n")
	}
	if got := h.out.Bytes()[:end]; string(got) != string(want) {
		t.Fatalf("%s: got %q, want %q", what, got, want)
	}
}

// ---- interactive clients ----

// client is what every interactive client of these tests has: keys in,
// what it printed, how it ended.
type client struct {
	t   testing.TB
	in  io.Writer  // its keyboard
	out *conBuf    // what it printed: stdout, or everything on a pty
	pos int        // expect's cursor in out
	end *clientEnd // code: its exit status, -1 without one
}

// typeKeys sends keystrokes.
func (c *client) typeKeys(s string) {
	c.t.Helper()
	if _, err := c.in.Write([]byte(s)); err != nil {
		c.t.Fatalf("type %q: %v", s, err)
	}
}

// expect waits for want in out after the previous match and moves past it.
func (c *client) expect(want string) {
	c.t.Helper()
	c.pos = c.out.wait(c.t, "client output", c.pos, want)
}

// exit waits for the client to end and returns its exit status.
func (c *client) exit() int {
	c.t.Helper()
	c.end.wait(c.t, "the client")
	return c.end.code
}

// dialSSH connects to addr as user with auth (x/crypto, any host key).
func dialSSH(addr, user string, auth ...gossh.AuthMethod) (*gossh.Client, error) {
	return gossh.Dial("tcp", addr, &gossh.ClientConfig{
		User: user, Auth: auth, HostKeyCallback: gossh.InsecureIgnoreHostKey(), Timeout: 10 * time.Second,
	})
}

// execSSH runs line on user@addr (x/crypto) on a connection of its own and
// returns its output and exit status; err is a failure to connect, to
// authenticate or to run it.
func execSSH(addr, user, line string, auth ...gossh.AuthMethod) (execResult, error) {
	c, err := dialSSH(addr, user, auth...)
	if err != nil {
		return execResult{}, err
	}
	defer c.Close()
	return runSession(c, line)
}

// conGo is a session through golang.org/x/crypto/ssh, on a connection of
// its own: a console, or a command started without waiting for it.
type conGo struct {
	client
	c      *gossh.Client
	s      *gossh.Session
	errb   *conBuf   // stderr: obmd's banner and notices (out itself with conOpts.merge)
	epos   int       // notice's cursor in errb
	stdout io.Reader // a stalled console's stdout, read only by drain
	wg     sync.WaitGroup
}

// conOpts say how a conGo starts.
type conOpts struct {
	pty   bool   // request a pty first
	cmd   string // exec this instead of asking for a shell (the console)
	stall bool   // never read stdout until drain
	merge bool   // stderr into out too, as a terminal shows them
}

// goSession connects to addr as user with auth and starts a session.
func goSession(t testing.TB, addr, user string, auth gossh.AuthMethod, opt conOpts) *conGo {
	t.Helper()
	c, err := dialSSH(addr, user, auth)
	if err != nil {
		t.Fatalf("dial %s: %v", user, err)
	}
	s, err := c.NewSession()
	if err != nil {
		c.Close()
		t.Fatalf("new session: %v", err)
	}
	g := &conGo{client: client{t: t, out: newConBuf(), end: newClientEnd()}, c: c, s: s, errb: newConBuf()}
	started := false
	t.Cleanup(func() {
		s.Close()
		c.Close()
		if started {
			<-g.end.done
		}
		g.wg.Wait()
	})
	if opt.merge {
		g.errb = g.out
	}
	if g.in, err = s.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	if opt.stall {
		if g.stdout, err = s.StdoutPipe(); err != nil {
			t.Fatal(err)
		}
	} else {
		s.Stdout = g.out
	}
	s.Stderr = g.errb
	if opt.pty {
		if err := s.RequestPty("xterm", 24, 80, gossh.TerminalModes{}); err != nil {
			t.Fatalf("pty-req: %v", err)
		}
	}
	if opt.cmd != "" {
		err = s.Start(opt.cmd)
	} else {
		err = s.Shell()
	}
	if err != nil {
		t.Fatalf("start %q: %v", opt.cmd, err)
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
		g.end.finish(code, err)
	}()
	return g
}

// goConsole attaches to user's console on o with token.
func (o *obmd) goConsole(t testing.TB, user, token string, opt conOpts) *conGo {
	t.Helper()
	return goSession(t, o.SSHAddr(), user, gossh.Password(token), opt)
}

// drain starts reading a stalled console's stdout.
func (g *conGo) drain() {
	g.wg.Add(1)
	go func() { // ends when the session's stdout does
		defer g.wg.Done()
		io.Copy(g.out, g.stdout)
	}()
}

// notice waits for want on stderr after the previous notice.
func (g *conGo) notice(want string) {
	g.t.Helper()
	g.epos = g.errb.wait(g.t, "console notices", g.epos, want)
}

// sshArgs are the OpenSSH client arguments for user@addr: no user config,
// no known_hosts, only the given auth.
func sshArgs(addr, user string, extra ...string) []string {
	host, port, _ := net.SplitHostPort(addr)
	args := []string{"-F", "/dev/null", "-p", port,
		"-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null", "-o", "LogLevel=ERROR",
		"-o", "ConnectTimeout=10", "-o", "BatchMode=no", "-o", "IdentitiesOnly=yes"}
	args = append(args, extra...)
	return append(args, user+"@"+host)
}

// conPTY is the real OpenSSH client, ssh -tt, with a pty for a terminal, as
// a person at a keyboard runs it. Its out is the screen (stdout and stderr
// share the pty).
type conPTY struct {
	client
	f *os.File // the pty master: the keyboard (in) and the screen
}

// sshPTY starts ssh -tt to user@addr running cmd (none: the console). With
// a token it runs under sshpass, the token in its environment (not its
// arguments); with token "" it authenticates with the key file in extra
// ("-i", path).
func sshPTY(t testing.TB, addr, user, token string, extra []string, cmd ...string) *conPTY {
	t.Helper()
	var c *exec.Cmd
	if token != "" {
		ipmisim.Require(t, "ssh", "sshpass")
		args := append([]string{"-e", "ssh", "-tt"}, sshArgs(addr, user, append([]string{"-o", "PubkeyAuthentication=no"}, extra...)...)...)
		c = exec.Command("sshpass", append(args, cmd...)...)
		c.Env = append(os.Environ(), "SSHPASS="+token)
	} else {
		ipmisim.Require(t, "ssh")
		args := append([]string{"-tt"}, sshArgs(addr, user, append([]string{"-o", "PasswordAuthentication=no",
			"-o", "KbdInteractiveAuthentication=no"}, extra...)...)...)
		c = exec.Command("ssh", append(args, cmd...)...)
	}
	return startPTY(t, c)
}

// startPTY runs the ssh command c under a pty (sshPTY).
func startPTY(t testing.TB, c *exec.Cmd) *conPTY {
	t.Helper()
	f, err := pty.StartWithSize(c, &pty.Winsize{Rows: 24, Cols: 80})
	if err != nil {
		t.Fatalf("start ssh under a pty: %v", err)
	}
	p := &conPTY{client: client{t: t, in: f, out: newConBuf(), end: newClientEnd()}, f: f}
	read := make(chan struct{})
	go func() { // ends when the last process holding the pty's tty has exited (EIO), or at f.Close
		defer close(read)
		io.Copy(p.out, f)
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
		p.end.finishAt(at, code, err)
	}()
	t.Cleanup(func() {
		if !p.end.ended() {
			c.Process.Kill()
			<-p.end.done
		}
		f.Close()
		<-read
		if t.Failed() {
			t.Logf("ssh screen (tail): %q", tailString(p.out.String(), 2000))
		}
	})
	return p
}

// ---- the admin API ----

// requestFrom sends an HTTP request to base+path from the local address
// src, with basic credentials user:pass ("" user: none) and the headers
// hdr; it returns the status and body (0 and an error logged if it failed:
// safe in goroutines).
func requestFrom(t testing.TB, base, src, method, path, user, pass string, hdr http.Header) (int, []byte) {
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

// adminClient is an HTTP client of an obmd's admin API.
type adminClient struct {
	t     testing.TB // what fails on a transport error or an unwanted status
	base  string     // http://host:port
	token string     // the admin token
	where string     // " on <replica>" in messages, or ""
	http  *http.Client
}

func newAdminClient(t testing.TB, addr, token, where string) *adminClient {
	return &adminClient{t: t, base: "http://" + addr, token: token, where: where, http: &http.Client{Timeout: 30 * time.Second}}
}

// on is a copy of a that fails t (a subtest) instead.
func (a *adminClient) on(t testing.TB) *adminClient {
	c := *a
	c.t = t
	return &c
}

// request sends an HTTP request to the admin port and returns status and
// body; user "" sends no auth. body may be nil, a string or []byte (sent as
// is), or a value to encode as JSON.
func (a *adminClient) request(method, path string, body any, user, pass string) (int, []byte) {
	a.t.Helper()
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
			a.t.Fatalf("encode body: %v", err)
		}
		r = bytes.NewReader(data)
	}
	req, err := http.NewRequest(method, a.base+path, r)
	if err != nil {
		a.t.Fatalf("request %s %s: %v", method, path, err)
	}
	if user != "" {
		req.SetBasicAuth(user, pass)
	}
	resp, err := a.http.Do(req)
	if err != nil {
		a.t.Fatalf("%s %s%s: %v", method, path, a.where, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		a.t.Fatalf("%s %s%s: read body: %v", method, path, a.where, err)
	}
	return resp.StatusCode, data
}

// api sends an admin request (basic admin:<token>).
func (a *adminClient) api(method, path string, body any) (int, []byte) {
	a.t.Helper()
	return a.request(method, path, body, "admin", a.token)
}

// mustAPI is api that fails unless the status is want.
func (a *adminClient) mustAPI(want int, method, path string, body any) []byte {
	a.t.Helper()
	status, data := a.api(method, path, body)
	if status != want {
		a.t.Fatalf("%s %s%s: got %d %s, want %d", method, path, a.where, status, data, want)
	}
	return data
}

// rotate issues a new token for label.
func (a *adminClient) rotate(label string) string {
	a.t.Helper()
	var out struct{ Token string }
	if err := json.Unmarshal(a.mustAPI(200, "POST", "/node/"+url.PathEscape(label)+"/token", nil), &out); err != nil || out.Token == "" {
		a.t.Fatalf("rotate %s%s: bad answer: %v", label, a.where, err)
	}
	return out.Token
}

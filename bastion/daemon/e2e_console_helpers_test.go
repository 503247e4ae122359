package daemon_test

// Helpers of the console end-to-end tests (e2e_console_*_test.go): the
// real OpenSSH client under a pty, x/crypto console clients (including one
// that never reads), and a byte stream a test can wait on.

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/creack/pty"

	"github.com/obmd/obmd/sol/ipmisim"
)

// Console escapes as a user types them (default prefix Ctrl-E c).
const (
	escDetach   = "\x05c."
	escHelp     = "\x05c?"
	escTakeOver = "\x05cf"
	escReadOnly = "\x05cs"
	escBreak    = "\x05cb"
	escReplay   = "\x05cr"
)

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

// ---- the real OpenSSH client under a pty ----

// conPTY is `ssh -tt` (through sshpass, the token in its environment) with
// a pty for a terminal, as a person at a keyboard runs it.
type conPTY struct {
	t    testing.TB
	f    *os.File // pty master: our keyboard and screen
	out  *conBuf  // everything ssh printed (stdout and stderr share the pty)
	pos  int      // expect's cursor in out
	cmd  *exec.Cmd
	done chan struct{} // closed when ssh has exited; code is then set
	code int
	read chan struct{} // closed when the screen reader has stopped
}

// sshPTY starts ssh -tt to user@obmd running cmd (none: the console).
func (o *obmd) sshPTY(t testing.TB, user, token string, cmd ...string) *conPTY {
	t.Helper()
	ipmisim.Require(t, "ssh", "sshpass")
	args := append([]string{"-e", "ssh", "-tt"}, o.sshArgs(user, "-o", "PubkeyAuthentication=no")...)
	c := exec.Command("sshpass", append(args, cmd...)...)
	c.Env = append(os.Environ(), "SSHPASS="+token)
	f, err := pty.StartWithSize(c, &pty.Winsize{Rows: 24, Cols: 80})
	if err != nil {
		t.Fatalf("start ssh under a pty: %v", err)
	}
	p := &conPTY{t: t, f: f, out: newConBuf(), cmd: c, done: make(chan struct{}), read: make(chan struct{})}
	go func() { // ends when the last process holding the pty's tty has exited (EIO)
		defer close(p.read)
		io.Copy(p.out, f)
	}()
	go func() { // reaps ssh; closes done
		err := c.Wait()
		var ee *exec.ExitError
		switch {
		case errors.As(err, &ee):
			p.code = ee.ExitCode()
		case err != nil:
			p.code = -1
		}
		close(p.done)
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			c.Process.Kill()
			<-p.done
		}
		select {
		case <-p.read:
		case <-time.After(5 * time.Second):
		}
		f.Close()
		if t.Failed() {
			t.Logf("ssh screen (tail): %q", tailString(p.out.String(), 2000))
		}
	})
	return p
}

// typeKeys sends keystrokes.
func (p *conPTY) typeKeys(s string) {
	p.t.Helper()
	if _, err := p.f.Write([]byte(s)); err != nil {
		p.t.Fatalf("type %q: %v", s, err)
	}
}

// expect waits for want after the previous match and moves past it.
func (p *conPTY) expect(want string) {
	p.t.Helper()
	p.pos = p.out.wait(p.t, "ssh screen", p.pos, want)
}

// exit waits for ssh to end and returns its exit code.
func (p *conPTY) exit() int {
	p.t.Helper()
	select {
	case <-p.done:
		return p.code
	case <-time.After(e2eWait):
		p.t.Fatalf("ssh did not exit")
		return -1
	}
}

// ---- admin API ----

// conAudit returns the actions and results of label's audit events.
func (o *obmd) conAudit(label string) []string {
	o.t.Helper()
	var out struct {
		Events []struct{ Action, Result string }
	}
	data := o.mustAPI(200, "GET", "/v1/audit?node="+url.QueryEscape(label)+"&limit=1000", nil)
	if err := json.Unmarshal(data, &out); err != nil {
		o.t.Fatalf("decode audit: %v: %s", err, data)
	}
	var acts []string
	for _, e := range out.Events {
		acts = append(acts, e.Action+" "+e.Result)
	}
	return acts
}

// conLogLines returns the daemon's log lines that contain every one of subs.
func (o *obmd) conLogLines(subs ...string) []string {
	var out []string
	for _, l := range strings.Split(o.Logs.String(), "\n") {
		ok := true
		for _, s := range subs {
			ok = ok && strings.Contains(l, s)
		}
		if ok {
			out = append(out, l)
		}
	}
	return out
}

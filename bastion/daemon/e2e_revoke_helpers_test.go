package daemon_test

// Helpers of the revocation, isolation, hostile-input and secrets tests
// (e2e_revoke_test.go, e2e_hostile_test.go, e2e_secrets_test.go): sessions
// that a test starts and then watches end, each recording when it ended.

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/url"
	"os"
	"os/exec"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/creack/pty"

	"github.com/obmd/obmd/sol/ipmisim"
)

// rvPTY is the real OpenSSH client (ssh -tt) on a pty: a person at a
// terminal. With a token it runs under sshpass (the token in its
// environment, not its arguments); with token "" it authenticates with
// the key file in extra ("-i", path).
type rvPTY struct {
	f   *os.File
	out *conBuf // what ssh printed (stdout and stderr share the pty)
	end *clientEnd
}

func (o *obmd) rvSSH(t testing.TB, user, token string, extra []string, cmd ...string) *rvPTY {
	t.Helper()
	ipmisim.Require(t, "ssh", "sshpass")
	var c *exec.Cmd
	if token != "" {
		args := append([]string{"-e", "ssh", "-tt"}, o.sshArgs(user, append([]string{"-o", "PubkeyAuthentication=no"}, extra...)...)...)
		c = exec.Command("sshpass", append(args, cmd...)...)
		c.Env = append(os.Environ(), "SSHPASS="+token)
	} else {
		args := append([]string{"-tt"}, o.sshArgs(user, append([]string{"-o", "PasswordAuthentication=no",
			"-o", "KbdInteractiveAuthentication=no"}, extra...)...)...)
		c = exec.Command("ssh", append(args, cmd...)...)
	}
	f, err := pty.StartWithSize(c, &pty.Winsize{Rows: 24, Cols: 200})
	if err != nil {
		t.Fatalf("start ssh: %v", err)
	}
	p := &rvPTY{f: f, out: newConBuf(), end: newClientEnd()}
	read := make(chan struct{})
	go func() { // ends when the pty reports EIO (ssh exited); closes read
		defer close(read)
		io.Copy(p.out, f)
	}()
	go func() { // ends when ssh exits; finishes p.end
		err := c.Wait()
		at := time.Now()
		<-read
		f.Close()
		code := 0
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			code, err = ee.ExitCode(), nil
		}
		p.end.finishAt(at, code, err)
	}()
	t.Cleanup(func() {
		if !p.end.ended() {
			c.Process.Kill()
			<-p.end.done
		}
	})
	return p
}

func (p *rvPTY) send(s string) { p.f.Write([]byte(s)) }

// rvSession is a live session as GET /v1/sessions shows it.
type rvSession struct {
	ID   string `json:"id"`
	Node string `json:"node"`
	Kind string `json:"kind"`
	User string `json:"user"`
}

// rvSessions lists label's live sessions.
func (o *obmd) rvSessions(label string) []rvSession {
	o.t.Helper()
	var out struct{ Sessions []rvSession }
	if err := json.Unmarshal(o.mustAPI(200, "GET", "/v1/sessions?node="+url.QueryEscape(label), nil), &out); err != nil {
		o.t.Fatalf("sessions: %v", err)
	}
	return out.Sessions
}

// rvKinds is the sorted kinds of label's live sessions, joined by ",".
func (o *obmd) rvKinds(label string) string {
	var k []string
	for _, s := range o.rvSessions(label) {
		k = append(k, s.Kind)
	}
	sort.Strings(k)
	return strings.Join(k, ",")
}

// rvCtx is a context bounded by e2eWait.
func rvCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), e2eWait)
	t.Cleanup(cancel)
	return ctx
}

// median of ds (0 for none).
func median(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[len(s)/2]
}

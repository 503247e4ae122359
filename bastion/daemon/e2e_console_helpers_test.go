package daemon_test

// Helpers of the console end-to-end tests (e2e_console_*_test.go): the
// escapes, a byte stream a test can wait on, and the daemon's log.

import (
	"bytes"
	"encoding/json"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"
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

package daemon_test

// Helpers of the console end-to-end tests (e2e_console_*_test.go): the
// escapes, the audit of breaks, and the daemon's log.

import (
	"encoding/json"
	"net/url"
	"strings"
)

// Console escapes as a user types them (default prefix Ctrl-E c).
const (
	escDetach   = "\x05c."
	escHelp     = "\x05c?"
	escTakeOver = "\x05cf"
	escReadOnly = "\x05cs"
	escBreak    = "\x05cb"
	escRedraw   = "\x05cr"
	escPlayback = "\x05cp"
)

// detach types the detach escape and fails the test unless the client is
// told and exits 0.
func (c *client) detach() {
	c.t.Helper()
	c.typeKeys(escDetach)
	c.expect("[obmd: detached]")
	if code := c.exit(); code != 0 {
		c.t.Errorf("exit after detach: got %d, want 0", code)
	}
}

// ---- admin API ----

// conAudit returns the actions and results of label's audit events, one
// per event (a row counting repeats stands for each of them).
func (o *obmd) conAudit(label string) []string {
	o.t.Helper()
	var out struct {
		Events []struct {
			Action, Result string
			Count          int
		}
	}
	data := o.mustAPI(200, "GET", "/v1/audit?node="+url.QueryEscape(label)+"&limit=1000", nil)
	if err := json.Unmarshal(data, &out); err != nil {
		o.t.Fatalf("decode audit: %v: %s", err, data)
	}
	var acts []string
	for _, e := range out.Events {
		for range max(e.Count, 1) { // a row of counted repeats stands for each
			acts = append(acts, e.Action+" "+e.Result)
		}
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

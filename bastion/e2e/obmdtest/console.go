package obmdtest

// Helpers of the console end-to-end tests (bastion/e2e/console): the
// escapes, the audit of breaks, and the daemon's log.

import (
	"encoding/json"
	"net/url"
	"strings"
)

// Console escapes as a user types them (default prefix Ctrl-E c).
const (
	EscDetach   = "\x05c."
	EscHelp     = "\x05c?"
	EscTakeOver = "\x05cf"
	EscReadOnly = "\x05cs"
	EscBreak    = "\x05cb"
	EscRedraw   = "\x05cr"
	EscPlayback = "\x05cp"
)

// Detach types the detach escape and fails the test unless the client is
// told and exits 0.
func (c *Client) Detach() {
	c.t.Helper()
	c.TypeKeys(EscDetach)
	c.Expect("[obmd: detached]")
	if code := c.Exit(); code != 0 {
		c.t.Errorf("exit after detach: got %d, want 0", code)
	}
}

// ---- admin API ----

// ConsoleAudit returns the actions and results of label's audit events, one
// per event (a row counting repeats stands for each of them).
func (o *Daemon) ConsoleAudit(label string) []string {
	o.T.Helper()
	var out struct {
		Events []struct {
			Action, Result string
			Count          int
		}
	}
	data := o.MustAPI(200, "GET", "/v1/audit?node="+url.QueryEscape(label)+"&limit=1000", nil)
	if err := json.Unmarshal(data, &out); err != nil {
		o.T.Fatalf("decode audit: %v: %s", err, data)
	}
	var acts []string
	for _, e := range out.Events {
		for range max(e.Count, 1) { // a row of counted repeats stands for each
			acts = append(acts, e.Action+" "+e.Result)
		}
	}
	return acts
}

// LogLinesWith returns the daemon's log lines that contain every one of subs.
func (o *Daemon) LogLinesWith(subs ...string) []string {
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

// LogShows is a printUntilSeen condition: label's console-log (over
// x/crypto/ssh, cheaper than OpenSSH for polling) holds the marker.
func (o *Daemon) LogShows(label, tok string) func(string) bool {
	return func(m string) bool {
		res, err := o.ExecGo(label, tok, "console-log")
		return err == nil && res.Code == 0 && strings.Contains(res.Stdout, m)
	}
}

// IPMIDrivers are the driver types that reach a real BMC.
var IPMIDrivers = []string{"ipmi", "ipmitool"}

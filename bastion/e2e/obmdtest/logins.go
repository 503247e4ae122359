package obmdtest

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"
)

// JudgedLogin runs a login from src to label (try), again while
// obmd refused it because its database was unavailable: such a refusal
// counts against nobody, whatever the name (on a loaded machine a write
// held past access.WriteStall makes the database count as stuck for a
// moment), and the tests of what a source's failures lead to need each of
// theirs judged. obmd logs the refusal before it answers the client.
func (o *Daemon) JudgedLogin(src, label string, try func() error) {
	o.T.Helper()
	againWhileUnavailable(o.T, fmt.Sprintf("login from %s to %s", src, label), Timeout, func() (bool, any) {
		before := o.DBRefusals(src)
		err := try()
		return o.DBRefusals(src) != before, err
	})
}

// judgedStatus is the status of an admin API request from src (GET path),
// made again while obmd answered 503 because its database could not
// verify it (as JudgedLogin).
func (o *Daemon) judgedStatus(src, path string) int {
	o.T.Helper()
	var status int
	againWhileUnavailable(o.T, fmt.Sprintf("GET %s from %s", path, src), Timeout, func() (bool, any) {
		status, _ = RequestFrom(o.T, "http://"+o.AdminAddr(), src, "GET", path, "", "", nil)
		return status == http.StatusServiceUnavailable, status
	})
	return status
}

// againWhileUnavailable runs try (what) again, a little later, while it
// reports that obmd refused it because its database was unavailable, and
// fails t if that lasts bound: such a refusal judges nothing, so a test
// that took it for an answer could pass without anything judged. detail
// (the last try's error or status) is for the failure.
func againWhileUnavailable(t testing.TB, what string, bound time.Duration, try func() (unavailable bool, detail any)) {
	t.Helper()
	for deadline := time.Now().Add(bound); ; time.Sleep(100 * time.Millisecond) {
		unavailable, detail := try()
		if !unavailable {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: the database stayed unavailable for %v (%v)", what, bound, detail)
		}
		t.Logf("%s: refused while the database was unavailable; again", what)
	}
}

// DBRefusals counts the logins from src that obmd refused because its
// database was unavailable (auth_denied "database unavailable" in its log).
func (o *Daemon) DBRefusals(src string) int {
	n := 0
	for _, line := range strings.Split(o.Logs.String(), "\n") {
		if strings.Contains(line, `"msg":"auth_denied"`) && strings.Contains(line, `"reason":"database unavailable`) &&
			strings.Contains(line, `"remote":"`+src+`:`) {
			n++
		}
	}
	return n
}

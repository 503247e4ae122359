package obmdtest

import (
	"strings"
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
	for deadline := time.Now().Add(Timeout); ; {
		before := o.DBRefusals(src)
		err := try()
		if o.DBRefusals(src) == before {
			return
		}
		if time.Now().After(deadline) {
			o.T.Fatalf("login from %s to %s: the database stayed unavailable for %v (%v)", src, label, Timeout, err)
		}
		o.T.Logf("login from %s to %s: refused while the database was unavailable; again", src, label)
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

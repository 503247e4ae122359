package daemon_test

import (
	"strings"
	"testing"
	"time"

	gossh "golang.org/x/crypto/ssh"

	"github.com/obmd/obmd/bastion/daemon"
	"github.com/obmd/obmd/db/dbtest"
	"github.com/obmd/obmd/sol/sim"
)

// listenCutBound is how soon a change made through one replica must cut a
// session on another through PostgreSQL's notification: far below the
// hour that replica waits between polls, generous for a loaded machine.
const listenCutBound = 5 * time.Second

// TestReplicasListen: two replicas on one PostgreSQL, not told of each
// other (no peer link), the second polling for changes only once an hour.
// A token rotated through the first cuts the second's console within
// seconds, with the change's reason: PostgreSQL notifies the second as the
// change commits (LISTEN/NOTIFY), and its watcher reads the change then;
// without the notification the console would last until that poll.
func TestReplicasListen(t *testing.T) {
	dsn := dbtest.PostgresDSN(t)
	state := t.TempDir() // shared: the same host key, seal key and admin token
	a := startObmd(t, func(c *daemon.Config) { c.DB, c.StateDir = dsn, state })
	b := startObmd(t, func(c *daemon.Config) { c.DB, c.StateDir, c.EpochPoll = dsn, state, time.Hour })
	tok := a.addSimNode("n1")
	v := goSession(t, b.SSHAddr(), "n1", gossh.Password(tok), conOpts{pty: true, merge: true})
	v.out.wait(t, "the console on the second replica", 0, "console of n1")
	// The link serves (a link opened after the change would find the
	// epoch moved itself, without the reason).
	printUntilSeen(t, inject(b.Lab().BMC("n1", sim.ModeNormal)), "linked", shows(v.out))
	start := time.Now()
	a.rotate("n1")
	if took := v.end.wait(t, "the console on the second replica").Sub(start); took > listenCutBound {
		t.Errorf("console cut %v after the rotation, want within %v", took.Round(time.Millisecond), listenCutBound)
	}
	if !strings.Contains(v.out.String(), "token rotated") {
		t.Errorf("console cut without the change's reason; screen %q", tailString(v.out.String(), 400))
	}
}

package replicas

import (
	"strings"
	"testing"
	"time"

	"github.com/obmd/obmd/bastion/e2e/obmdtest"

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
	a := obmdtest.Start(t, func(c *daemon.Config) { c.DB.DSN, c.Daemon.StateDir = dsn, state })
	b := obmdtest.Start(t, func(c *daemon.Config) { c.DB.DSN, c.Daemon.StateDir, c.Access.Poll = dsn, state, time.Hour })
	tok := a.AddSimNode("n1")
	v := obmdtest.StartGoSession(t, b.SSHAddr(), "n1", gossh.Password(tok), obmdtest.SessionOpts{PTY: true, Merge: true})
	v.Out.Wait(t, "the console on the second replica", 0, "console of n1")
	// The link serves (a link opened after the change would find the
	// epoch moved itself, without the reason).
	obmdtest.PrintUntilSeen(t, obmdtest.Inject(b.Lab().BMC("n1", sim.ModeNormal)), "linked", obmdtest.Shows(v.Out))
	start := time.Now()
	a.Rotate("n1")
	if took := v.End.Wait(t, "the console on the second replica").Sub(start); took > listenCutBound {
		t.Errorf("console cut %v after the rotation, want within %v", took.Round(time.Millisecond), listenCutBound)
	}
	if !strings.Contains(v.Out.String(), "token rotated") {
		t.Errorf("console cut without the change's reason; screen %q", obmdtest.Tail(v.Out.String(), 400))
	}
}

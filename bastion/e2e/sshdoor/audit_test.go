package sshdoor

// End to end through the SSH front door: every login, session start and
// end, and power action lands in the audit log (GET /v1/audit).

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/obmd/obmd/bastion/e2e/obmdtest"

	gossh "golang.org/x/crypto/ssh"

	"github.com/obmd/obmd/bastion/daemon"
	"github.com/obmd/obmd/sol/sim"
)

// TestSSHAudit runs each power command, a failing one and a console session
// and checks the audit log holds, in order and per connection, the login,
// the session start, the action and the session end. Each connection comes
// from an address of its own: from one address, repeated logins and
// session bounds would be counted rather than written one by one
// (TestAuditRowsBounded).
func TestSSHAudit(t *testing.T) {
	t.Parallel()
	obmdtest.OnEngines(t, func(t *testing.T, dsn string) {
		o := obmdtest.Start(t, func(c *daemon.Config) { c.DB.DSN = dsn })
		tok := o.AddSimNode("au")
		bmc := o.Lab().BMC("au", sim.ModeNormal)
		type step struct {
			line, action, result, detail string // detail: prefix of the action's detail
			exit                         int
		}
		steps := []step{
			{"power-status", "power.status", "ok", "on; took ", 0},
			{"power-off", "power.off", "ok", "took ", 0},
			{"power-on", "power.on", "ok", "took ", 0},
			{"power-off --soft", "power.soft-off", "ok", "took ", 0},
			{"power-cycle", "power.cycle", "ok", "took ", 0},
			{"power-cycle --force", "power.reset", "ok", "took ", 0},
			{"power-reset --json", "power.reset", "ok", "took ", 0},
			{"bootdev pxe --persistent", "bootdev", "ok", "pxe (persistent); took ", 0},
			{"version", "", "", "", 0},
			{"power-on", "power.on", "error", "simulated BMC: BMC on fire; took ", 1},
		}
		var want []string
		for i, st := range steps {
			if i == len(steps)-1 {
				bmc.SetFail(errors.New("BMC on fire"))
			}
			c, err := o.DialFrom(fmt.Sprintf("127.0.1.%d", i+1), "au", gossh.Password(tok))
			if err != nil {
				t.Fatal(err)
			}
			res := obmdtest.Must(t)(obmdtest.RunSession(c, st.line))
			c.Close()
			if res.Code != st.exit {
				t.Fatalf("%q: got %v, want exit %d", st.line, res, st.exit)
			}
			want = append(want, "auth ok ssh:password token", "session.start ok ssh:password exec")
			if st.action != "" {
				want = append(want, fmt.Sprintf("%s %s ssh:password %s", st.action, st.result, st.detail))
			}
			want = append(want, fmt.Sprintf("session.end ok ssh:password exec exit %d after ", st.exit))
		}
		bmc.SetFail(nil)

		// A console session, through a public key.
		signer, _ := obmdtest.NewKey(t)
		fp := o.AddKey("au", signer.PublicKey())
		c, err := o.DialFrom("127.0.1.100", "au", gossh.PublicKeys(signer))
		if err != nil {
			t.Fatal(err)
		}
		s, err := c.NewSession()
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Shell(); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := bmc.WaitConsole(ctx, true); err != nil {
			t.Fatalf("console never attached: %v", err)
		}
		s.Close()
		c.Close()
		want = append(want, "auth ok ssh:publickey key "+fp, "session.start ok ssh:publickey console",
			"session.end ok ssh:publickey console exit ")
		var events []obmdtest.AuditRow
		for ctx.Err() == nil { // the console's end is recorded after the client left
			if events = o.Audit("au"); len(events) > 0 && events[len(events)-1].Action == "session.end" &&
				strings.HasPrefix(events[len(events)-1].Detail, "console") {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}

		var got []obmdtest.AuditRow
		for _, e := range events {
			if e.Actor != "admin" {
				got = append(got, e)
			}
		}
		if len(got) != len(want) {
			t.Fatalf("audit: got %d SSH events, want %d:\n%s", len(got), len(want), auditText(got))
		}
		var source string
		for i, e := range got {
			line := fmt.Sprintf("%s %s %s %s", e.Action, e.Result, e.Actor, e.Detail)
			if !strings.HasPrefix(line, want[i]) {
				t.Errorf("audit event %d: got %q, want %q...", i, line, want[i])
			}
			// One connection per command: its events share the source port.
			if e.Action == "auth" {
				source = e.Source
			}
			if e.Node != "au" || !strings.HasPrefix(e.Source, "127.0.1.") || e.Source != source {
				t.Errorf("audit event %d: got node %q source %q, want au and %s (the login's)", i, e.Node, e.Source, source)
			}
		}
		if t.Failed() {
			t.Logf("audit:\n%s", auditText(got))
		}
	})
}

func auditText(events []obmdtest.AuditRow) string {
	var b strings.Builder
	for _, e := range events {
		fmt.Fprintf(&b, "  %s %s %s %s %s %q\n", e.Node, e.Source, e.Actor, e.Action, e.Result, e.Detail)
	}
	return b.String()
}

package certs

// What a certificate permits (issue 22): without permit-pty a certificate
// session is for power only, through every command that reads or types on
// the console; what it does is marked in the console history with the
// certificate's name, as the audit names it.

import (
	"strings"
	"testing"
	"time"

	"github.com/obmd/obmd/bastion/e2e/obmdtest"

	gossh "golang.org/x/crypto/ssh"

	"github.com/obmd/obmd/bastion/daemon"
	"github.com/obmd/obmd/sol/sim"
)

// noConsole is what a certificate without permit-pty is told of a command
// on the console.
const noConsole = "this certificate does not permit the console (no permit-pty)"

// TestCertPowerOnly: a certificate signed with -O no-pty runs the power,
// boot-device and information commands, but every command that reads or
// types on the console is refused with exit 3 and the reason, through
// OpenSSH and x/crypto: nothing of the console's output reaches it,
// nothing it sends reaches the node, no power operation of a refused
// --wait-for runs. The power and boot-device operations it runs are
// marked in the history (console-log --timestamps, the admin's
// console-log) and audited with the certificate's CA, key id and serial.
// A certificate with permit-pty reads the console.
func TestCertPowerOnly(t *testing.T) {
	t.Parallel()
	obmdtest.OnEngines(t, func(t *testing.T, dsn string) {
		o, k, _ := certObmd(t, dsn, func(c *daemon.Config) { c.Console.Capture = "always" })
		tok := o.AddSimNode("po")
		bmc := o.Lab().BMC("po", sim.ModeNormal)
		secret := obmdtest.PrintUntilSeen(t, obmdtest.Inject(bmc), "secret", o.LogShows("po", tok))
		cert := k.sign("-I", "robot@ci", "-n", "po", "-V", "+1s:+1h", "-z", "7", "-O", "no-pty")
		before := lastAudit(o, "po")
		actions := len(bmc.Actions())
		for _, argv := range [][]string{
			{"console"},
			{"console", "--read-only"},
			{"console-log"},
			{"console-log", "--timestamps", "--json"},
			{"console-log", "--cast"},
			{"wait-for", "secret", "--tenancy", "--timeout", "2s"},
			{"wait-for", "secret", "--since", "attach", "--timeout", "2s"},
			{"send", "typed-by-robot"},
			{"send", "--hex", "0d0a"},
			{"expect", "'send typed-by-robot; wait secret 2s'"},
			{"power-on", "--wait-for", "secret", "--timeout", "2s"},
			{"power-cycle", "--wait-for", "secret", "--timeout", "2s"},
			{"console-log", "--follow"}, // last: on a build that lets it through, it never ends
		} {
			res := o.OpenSSH("po", "", k.args(cert), argv...)
			want := "obmd: " + argv[0] + ": " + noConsole
			if res.Code != 3 || !strings.Contains(res.Stderr, want) || strings.Contains(res.Stdout, secret) {
				t.Errorf("%s: got %v, want exit 3 and %q", strings.Join(argv, " "), res, want)
			}
		}
		c, err := o.Dial("po", gossh.PublicKeys(k.signer(cert)))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		for _, line := range []string{"send --stdin", "expect --stdin", "console-log --follow --timestamps"} {
			if res, err := obmdtest.RunSession(c, line); err != nil || res.Code != 3 || !strings.Contains(res.Stderr, noConsole) {
				t.Errorf("x/crypto %s: got %v, %v; want exit 3 and why", line, res, err)
			}
		}
		if typed := bmc.Typed(); len(typed) != 0 {
			t.Errorf("the node was typed %q, want nothing", typed)
		}
		if got := bmc.Actions()[actions:]; len(got) != 0 {
			t.Errorf("BMC actions of the refused commands: %q, want none", got)
		}
		// Every refusal is counted; repeats of one at the end of the
		// aggregation window.
		denied := 0
		for deadline := time.Now().Add(10 * time.Second); denied != 16 && time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
			denied = 0
			for _, e := range o.Audit("po") {
				if e.ID > before && e.Action == "session.start" && e.Result == "denied" && strings.Contains(e.Detail, noConsole) &&
					e.Actor == "ssh:cert hil:robot@ci serial 7" {
					denied += int(e.Count)
				}
			}
		}
		if denied != 16 {
			t.Errorf("audited refusals: got %d, want 16", denied)
		}

		for _, argv := range [][]string{{"power-status"}, {"power-cycle"}, {"bootdev", "pxe"}, {"sessions"}, {"help"}} {
			if res := o.OpenSSH("po", "", k.args(cert), argv...); res.Code != 0 {
				t.Errorf("%s: got %v, want exit 0", strings.Join(argv, " "), res)
			}
		}
		const who = "ssh:cert hil:robot@ci serial 7"
		markers := []string{"[obmd: power-cycle by " + who + "]\n", "[obmd: boot device pxe by " + who + "]\n"}
		obmdtest.WaitUntil(t, "the markers in console-log --timestamps", func() bool {
			res := o.OpenSSH("po", tok, nil, "console-log", "--timestamps")
			return res.Code == 0 && strings.Contains(res.Stdout, markers[0]) && strings.Contains(res.Stdout, markers[1])
		})
		admin := string(o.MustAPI(200, "GET", "/v1/nodes/po/console-log?format=text", nil))
		for _, m := range markers {
			if !strings.Contains(admin, m) {
				t.Errorf("the admin's console-log lacks %q:\n%s", m, obmdtest.Tail(admin, 2000))
			}
		}
		if strings.Contains(admin, "by ssh:token") {
			t.Errorf("the admin's console-log names a token for the certificate's operations:\n%s", obmdtest.Tail(admin, 2000))
		}
		var power bool
		for _, e := range o.Audit("po") {
			power = power || e.Action == "power.cycle" && e.Actor == who && e.Result == "ok"
		}
		if !power {
			t.Errorf("audit: no power.cycle by %s", who)
		}

		pty := k.sign("-I", "alice", "-n", "po", "-V", "+1s:+1h", "-z", "8")
		if res := o.OpenSSH("po", "", k.args(pty), "console-log"); res.Code != 0 || !strings.Contains(res.Stdout, secret) {
			t.Errorf("console-log with permit-pty: got %v, want the console's output", res)
		}
	})
}

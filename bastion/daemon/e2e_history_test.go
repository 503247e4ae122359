package daemon_test

// End-to-end tests of the console history (issue 13): capture with nobody
// attached, console-log over the real OpenSSH client, replay on attach
// from the stored history, restarts and tenancies.

import (
	"strings"
	"testing"
	"time"

	"github.com/obmd/obmd/bastion/daemon"
	"github.com/obmd/obmd/sol/history"
	"github.com/obmd/obmd/sol/ipmisim"
)

// capturing is the config of the capture tests: the daemon's own default
// (capture always for ipmi and ipmitool nodes).
func capturing(dsn string) func(*daemon.Config) {
	return func(c *daemon.Config) {
		c.DB = dsn
		c.ConsoleCapture = ""
	}
}

// logShows is a printUntilSeen condition: label's console-log (over
// x/crypto/ssh, cheaper than OpenSSH for polling) holds the marker.
func (o *obmd) logShows(label, tok string) func(string) bool {
	return func(m string) bool {
		res, err := o.execGo(label, tok, "console-log")
		return err == nil && res.Code == 0 && strings.Contains(res.Stdout, m)
	}
}

// TestHistoryCaptureIPMI: against ipmi_sim, per driver and per database
// engine, text written on the BMC's serial port while nobody is attached
// shows up later in `console-log --timestamps` over real OpenSSH, in order,
// each line stamped within a second of when it was written; a viewer that
// attaches then gets it in its replay, from the history.
func TestHistoryCaptureIPMI(t *testing.T) {
	t.Parallel()
	ipmisim.Require(t, "ipmitool", "ssh", "sshpass")
	onEngines(t, func(t *testing.T, dsn string) {
		o := startObmd(t, capturing(dsn))
		for _, typ := range conDrivers {
			t.Run(typ, func(t *testing.T) {
				s := ipmisim.Start(t)
				label := "hist-" + typ
				tok := o.addIPMINode(label, typ, s)
				// Nobody attaches: the link is held for capture.
				printUntilSeen(t, s.WriteSerial, "held", o.logShows(label, tok))
				lines := []string{"kernel: panic at 3am", "installer: failed while you slept", "login: "}
				var wrote []time.Time
				for _, l := range lines {
					wrote = append(wrote, time.Now())
					if err := s.WriteSerial([]byte(l + "\r\n")); err != nil {
						t.Fatal(err)
					}
					time.Sleep(300 * time.Millisecond)
				}
				waitUntil(t, "the last line in console-log", func() bool { return o.logShows(label, tok)(lines[2]) })
				res := o.openssh(label, tok, nil, "console-log", "--timestamps")
				if res.Code != 0 {
					t.Fatalf("console-log --timestamps: %v", res)
				}
				checkStamped(t, res.Stdout, lines, wrote)

				p := sshPTY(t, o.SSHAddr(), label, tok, nil)
				p.expect(lines[0] + "\r\n" + lines[1] + "\r\n" + lines[2])
			})
		}
	})
}

// checkStamped finds each of lines, in order, in out (console-log
// --timestamps), and checks that its time is within a second of wrote.
func checkStamped(t *testing.T, out string, lines []string, wrote []time.Time) {
	t.Helper()
	rest := out
	for i, want := range lines {
		k := strings.Index(rest, " "+want)
		if k < 0 {
			t.Fatalf("console-log --timestamps lacks %q after the lines before it:\n%s", want, out)
		}
		start := strings.LastIndex(rest[:k], "\n") + 1
		at, err := time.Parse(history.TimeLayout, rest[start:k])
		if err != nil {
			t.Fatalf("line %q: no time stamp (%v):\n%s", want, err, out)
		}
		if d := at.Sub(wrote[i]); d < -time.Second || d > time.Second {
			t.Errorf("line %q stamped %v, written %v: %v apart, want within 1s", want, at, wrote[i], d)
		}
		rest = rest[k+len(want):]
	}
}

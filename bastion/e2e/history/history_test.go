package history

// End-to-end tests of the console history (issue 13): capture with nobody
// attached, console-log over the real OpenSSH client, replay on attach
// from the stored history, restarts and tenancies.

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/obmd/obmd/bastion/e2e/obmdtest"

	gossh "golang.org/x/crypto/ssh"

	"github.com/obmd/obmd/bastion/daemon"
	"github.com/obmd/obmd/sol/history"
	"github.com/obmd/obmd/sol/history/casttest"
	"github.com/obmd/obmd/sol/sim"
	"github.com/obmd/obmd/sol/soltest/ipmisim"
)

// capturing is the config of the capture tests: the daemon's own default
// (capture always for ipmi and ipmitool nodes).
func capturing(dsn string) func(*daemon.Config) {
	return func(c *daemon.Config) {
		c.DB.DSN = dsn
		c.Console.Capture = ""
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
	obmdtest.OnEngines(t, func(t *testing.T, dsn string) {
		o := obmdtest.Start(t, capturing(dsn))
		for _, typ := range obmdtest.IPMIDrivers {
			t.Run(typ, func(t *testing.T) {
				s := ipmisim.Start(t)
				label := "hist-" + typ
				tok := o.AddIPMINode(label, typ, s)
				// Nobody attaches: the link is held for capture.
				obmdtest.PrintUntilSeen(t, s.WriteSerial, "held", o.LogShows(label, tok))
				lines := []string{"kernel: panic at 3am", "installer: failed while you slept", "login: "}
				var wrote []time.Time
				for _, l := range lines {
					wrote = append(wrote, time.Now())
					if err := s.WriteSerial([]byte(l + "\r\n")); err != nil {
						t.Fatal(err)
					}
					time.Sleep(300 * time.Millisecond)
				}
				obmdtest.WaitUntil(t, "the last line in console-log", func() bool { return o.LogShows(label, tok)(lines[2]) })
				res := o.OpenSSH(label, tok, nil, "console-log", "--timestamps")
				if res.Code != 0 {
					t.Fatalf("console-log --timestamps: %v", res)
				}
				checkStamped(t, res.Stdout, lines, wrote)

				p := obmdtest.SSHPTY(t, o.SSHAddr(), label, tok, nil)
				for _, l := range lines { // the screen redrawn, a row at a time
					p.Expect(strings.TrimSpace(l))
				}
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

// TestHistoryTenancies: after each kind of access change, on SQLite and
// MariaDB, the next tenant's console-log, attach replay and --follow hold
// nothing from before the change; a --follow of the old tenancy is cut
// without a byte of the new one; and the capture goes on in the new
// tenancy with nobody attached.
func TestHistoryTenancies(t *testing.T) {
	t.Parallel()
	obmdtest.OnEngines(t, func(t *testing.T, dsn string) {
		o := obmdtest.Start(t, func(c *daemon.Config) { c.DB.DSN = dsn; c.Console.Capture = "always" })
		for _, sc := range obmdtest.AccessChanges() {
			t.Run(sc.Name, func(t *testing.T) {
				label := "ten-" + sc.Name
				tok := o.AddSimNode(label)
				if sc.Key {
					k, _ := obmdtest.NewKey(t)
					sc.Change = withKey(sc.Change, o.AddKey(label, k.PublicKey()))
				}
				bmc := o.Lab().BMC(label, sim.ModeNormal)
				old := obmdtest.PrintUntilSeen(t, obmdtest.Inject(bmc), "tenant-1-secret", o.LogShows(label, tok))
				follow := o.GoConsole(t, label, tok, obmdtest.SessionOpts{Cmd: "console-log --follow"})
				follow.Expect(old)

				sc.Change(o.Admin, label, "")
				follow.End.Wait(t, "the old tenancy's follower")
				switch sc.Name {
				case "rotate", "revoke": // the change's own token is not kept
					tok = o.Rotate(label)
				case "node-deletion":
					tok = o.AddSimNode(label)
				}
				bmc = o.Lab().BMC(label, sim.ModeNormal)
				fresh := obmdtest.PrintUntilSeen(t, obmdtest.Inject(bmc), "tenant-2", o.LogShows(label, tok))
				next := o.GoConsole(t, label, tok, obmdtest.SessionOpts{Cmd: "console-log --follow"})
				viewer := o.GoConsole(t, label, tok, obmdtest.SessionOpts{PTY: true})
				viewer.Expect(fresh) // the replay, from the new tenancy's history
				next.Expect(fresh)
				live := obmdtest.PrintUntilSeen(t, obmdtest.Inject(bmc), "tenant-2-live", obmdtest.Shows(next.Out, viewer.Out))
				res, err := o.ExecGo(label, tok, "console-log")
				if err != nil || res.Code != 0 || !strings.Contains(res.Stdout, live) {
					t.Fatalf("console-log of the new tenancy: %v %v, want %s", res, err, live)
				}
				for what, out := range map[string]string{"console-log": res.Stdout, "--follow": next.Out.String(),
					"attach replay": viewer.Out.String()} {
					if strings.Contains(out, "tenant-1-secret") {
						t.Errorf("%s after %s shows the previous tenancy: %q", what, sc.Name, out)
					}
				}
				if s := follow.Out.String(); strings.Contains(s, "tenant-2") {
					t.Errorf("the old tenancy's follower got the new tenancy's output: %q", s)
				}
			})
		}
	})
}

// withKey is a change that removes key fp, whatever fp it is given.
func withKey(change func(a *obmdtest.Admin, label, fp string), fp string) func(a *obmdtest.Admin, label, fp string) {
	return func(a *obmdtest.Admin, label, _ string) { change(a, label, fp) }
}

// capturedSim starts obmd on dsn ("": SQLite in its state directory)
// capturing every node, registers sim node label and prints markers
// (prefix) on it until console-log shows one, which it returns: the held
// link records.
func capturedSim(t *testing.T, dsn, label, prefix string) (o *obmdtest.Daemon, tok string, bmc *sim.BMC, marker string) {
	t.Helper()
	o = obmdtest.Start(t, func(c *daemon.Config) { c.DB.DSN, c.Console.Capture = dsn, "always" })
	tok = o.AddSimNode(label)
	bmc = o.Lab().BMC(label, sim.ModeNormal)
	return o, tok, bmc, obmdtest.PrintUntilSeen(t, obmdtest.Inject(bmc), prefix, o.LogShows(label, tok))
}

// TestHistoryRestart: a restart of a single obmd keeps the history of the
// current tenancy, on every engine: console-log and the replay of a viewer
// who attaches after the restart (the scrollback ring is empty then) show
// what the node printed before it, with nobody attached; and the capture
// goes on after it, in the same history.
func TestHistoryRestart(t *testing.T) {
	t.Parallel()
	obmdtest.OnEngines(t, testHistoryRestart)
}

func testHistoryRestart(t *testing.T, dsn string) {
	ipmisim.Require(t, "ssh", "sshpass") // console-log through OpenSSH after the restart: checked before the daemon starts
	o, tok, bmc, before := capturedSim(t, dsn, "kept", "before-restart")
	if err := o.Stop(); err != nil {
		t.Fatal(err)
	}
	o = obmdtest.StartWith(t, o.Cfg)
	res := o.OpenSSH("kept", tok, nil, "console-log")
	if res.Code != 0 || !strings.Contains(res.Stdout, before) {
		t.Fatalf("console-log after a restart: %v, want %s", res, before)
	}
	bmc = o.Lab().BMC("kept", sim.ModeNormal)
	after := obmdtest.PrintUntilSeen(t, obmdtest.Inject(bmc), "after-restart", o.LogShows("kept", tok))
	g := o.GoConsole(t, "kept", tok, obmdtest.SessionOpts{PTY: true})
	g.Expect(before)
	g.Expect(after)
	res = o.OpenSSH("kept", tok, nil, "console-log", "--timestamps")
	if k := strings.Index(res.Stdout, before); k < 0 || !strings.Contains(res.Stdout[k:], "[obmd: console link lost]") ||
		!strings.Contains(res.Stdout[k:], after) {
		t.Errorf("console-log --timestamps: got %q, want %s, the link lost at the stop, then %s", res.Stdout, before, after)
	}
}

// TestHistoryFormats: hostile console output (escape sequences, invalid
// UTF-8, NUL, a bare newline) comes back byte-exact from console-log over
// real OpenSSH, and on a PTY too (no newline rewriting);
// power and boot-device operations are markers of --timestamps, with who
// ran them; --cast is asciicast v2 whose "o" events carry the same text,
// and Debian's `asciinema cat` of it prints the raw console-log's bytes.
// On every engine: the bytes are stored as they came.
func TestHistoryFormats(t *testing.T) {
	t.Parallel()
	obmdtest.OnEngines(t, testHistoryFormats)
}

func testHistoryFormats(t *testing.T, dsn string) {
	o, tok, bmc, sync := capturedSim(t, dsn, "hostile", "sync")
	hostile := "\x1b]0;pwned\x07\x1b[2J\x00bad\xff\xfeutf8\x9b31m\r\nbare\nend\r\n"
	bmc.Inject([]byte(hostile))
	obmdtest.WaitUntil(t, "the hostile output in console-log", func() bool { return o.LogShows("hostile", tok)("end\r\n") })
	res := o.OpenSSH("hostile", tok, nil, "console-log")
	if want := sync + "\r\n" + hostile; res.Code != 0 || !strings.HasSuffix(res.Stdout, want) {
		t.Errorf("console-log: got %q, want it to end with %q", res.Stdout, want)
	}
	pty := obmdtest.StartGoSession(t, o.SSHAddr(), "hostile", gossh.Password(tok), obmdtest.SessionOpts{PTY: true, Cmd: "console-log"})
	pty.End.Wait(t, "console-log on a pty")
	if got := pty.Out.String(); got != res.Stdout {
		t.Errorf("console-log on a pty: got %q, want the bytes untouched, as without one: %q", got, res.Stdout)
	}
	if r, err := o.ExecGo("hostile", tok, "power-cycle"); err != nil || r.Code != 0 {
		t.Fatalf("power-cycle: %v %v", r, err)
	}
	if r, err := o.ExecGo("hostile", tok, "bootdev pxe"); err != nil || r.Code != 0 {
		t.Fatalf("bootdev: %v %v", r, err)
	}
	res = o.OpenSSH("hostile", tok, nil, "console-log", "--timestamps")
	for _, want := range []string{" [obmd: power-cycle by ssh:token]\n", " [obmd: boot device pxe by ssh:token]\n"} {
		if !strings.Contains(res.Stdout, want) {
			t.Errorf("console-log --timestamps lacks the marker %q:\n%q", want, res.Stdout)
		}
	}
	raw := o.OpenSSH("hostile", tok, nil, "console-log")
	res = o.OpenSSH("hostile", tok, nil, "console-log", "--cast")
	// Debian's asciinema replays the raw bytes, except that each byte
	// that is not UTF-8 becomes U+FFFD (JSON strings hold only Unicode);
	// escape sequences and NUL pass through untouched.
	if got, want := string(casttest.AsciinemaCat(t, []byte(res.Stdout))), string([]rune(raw.Stdout)); raw.Code != 0 || got != want {
		t.Errorf("asciinema cat of console-log --cast over OpenSSH: got %q, want the raw console-log %q", got, want)
	}
	lines := strings.Split(strings.TrimSuffix(res.Stdout, "\n"), "\n")
	var header struct{ Version int }
	if res.Code != 0 || len(lines) < 2 || json.Unmarshal([]byte(lines[0]), &header) != nil || header.Version != 2 {
		t.Fatalf("console-log --cast: got %v, want an asciicast v2 header and events", res)
	}
	var text strings.Builder
	for _, l := range lines[1:] {
		var ev []any
		if err := json.Unmarshal([]byte(l), &ev); err != nil || len(ev) != 3 {
			t.Fatalf("cast event %q: not [time, kind, data] (%v)", l, err)
		}
		if ev[1] == "o" {
			text.WriteString(ev[2].(string))
		}
	}
	if want := string([]rune(sync + "\r\n" + hostile)); !strings.Contains(text.String(), want) {
		t.Errorf("cast output: got %q, want it to hold %q", text.String(), want)
	}
}

// TestHistoryAdmin: on SQLite and MariaDB, capture set through PUT
// /v1/nodes/{label} (and PUT .../capture) holds or releases the node's
// link with nobody attached; with history_retention set, an access change
// leaves the old tenancy readable through the admin API (console-log
// ?tenancy=, listed by /tenancies) and never by the next tenant.
func TestHistoryAdmin(t *testing.T) {
	t.Parallel()
	obmdtest.OnEngines(t, func(t *testing.T, dsn string) {
		o := obmdtest.Start(t, func(c *daemon.Config) { c.DB.DSN = dsn; c.History.Retention = time.Hour })
		o.MustAPI(201, "PUT", "/v1/nodes/kept", map[string]any{"type": "sim", "info": map[string]string{"addr": "sim"},
			"capture": "always"})
		if got := string(o.MustAPI(200, "GET", "/v1/nodes/kept", nil)); !strings.Contains(got, `"capture":"always"`) {
			t.Errorf("GET /v1/nodes/kept: got %s, want capture always", got)
		}
		tok := o.Rotate("kept")
		bmc := o.Lab().BMC("kept", sim.ModeNormal)
		obmdtest.WaitUntil(t, "the captured link open with nobody attached", bmc.ConsoleActive)
		secret := obmdtest.PrintUntilSeen(t, obmdtest.Inject(bmc), "tenant-1", o.LogShows("kept", tok))
		var before struct{ Tenancies []struct{ Tenancy int64 } }
		obmdtest.WaitUntil(t, "the tenancy stored (one flush)", func() bool {
			err := json.Unmarshal(o.MustAPI(200, "GET", "/v1/nodes/kept/tenancies", nil), &before)
			return err == nil && len(before.Tenancies) == 1
		})
		old := before.Tenancies[0].Tenancy

		tok = o.Rotate("kept")
		fresh := obmdtest.PrintUntilSeen(t, obmdtest.Inject(bmc), "tenant-2", o.LogShows("kept", tok))
		if res, _ := o.ExecGo("kept", tok, "console-log"); strings.Contains(res.Stdout, secret) {
			t.Errorf("the next tenant's console-log shows the kept tenancy: %q", res.Stdout)
		}
		// The old tenancy is ended (its marker written) in the background
		// once the change is applied: ReadHistory keeps it from the tenant
		// by the epoch meanwhile.
		var oldLog string
		obmdtest.WaitUntil(t, "the kept tenancy's end marker", func() bool {
			oldLog = string(o.MustAPI(200, "GET", fmt.Sprintf("/v1/nodes/kept/console-log?tenancy=%d&format=text", old), nil))
			return strings.Contains(oldLog, "[obmd: tenancy ended")
		})
		if !strings.Contains(oldLog, secret) || strings.Contains(oldLog, fresh) || !strings.Contains(oldLog, "[obmd: tenancy ended") {
			t.Errorf("admin console-log of the kept tenancy: got %q, want %s and its end, not %s", oldLog, secret, fresh)
		}
		if cur := string(o.MustAPI(200, "GET", "/v1/nodes/kept/console-log", nil)); !strings.Contains(cur, fresh) || strings.Contains(cur, secret) {
			t.Errorf("admin console-log of the current tenancy: got %q, want %s only", cur, fresh)
		}
		o.MustAPI(400, "GET", "/v1/nodes/kept/console-log?format=pdf", nil)
		o.MustAPI(404, "GET", "/v1/nodes/kept/console-log?tenancy=999999", nil)

		// Capture attached: the link is released, and closes after linger.
		o.MustAPI(200, "PUT", "/v1/nodes/kept/capture", map[string]string{"capture": "attached"})
		obmdtest.WaitUntil(t, "the released link closed", func() bool { return !bmc.ConsoleActive() })
		o.MustAPI(400, "PUT", "/v1/nodes/kept/capture", map[string]string{"capture": "sometimes"})
		if res, err := o.ExecGo("kept", tok, "power-status"); err != nil || res.Code != 0 {
			t.Errorf("setting capture cut the tenancy: power-status %v %v", res, err)
		}
	})
}

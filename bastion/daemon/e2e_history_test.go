package daemon_test

// End-to-end tests of the console history (issue 13): capture with nobody
// attached, console-log over the real OpenSSH client, replay on attach
// from the stored history, restarts and tenancies.

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

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

// TestHistoryTenancies: after each kind of access change, on SQLite and
// MariaDB, the next tenant's console-log, attach replay and --follow hold
// nothing from before the change; a --follow of the old tenancy is cut
// without a byte of the new one; and the capture goes on in the new
// tenancy with nobody attached.
func TestHistoryTenancies(t *testing.T) {
	t.Parallel()
	onEngines(t, func(t *testing.T, dsn string) {
		o := startObmd(t, func(c *daemon.Config) { c.DB = dsn; c.ConsoleCapture = "always" })
		for _, sc := range rvScenarios() {
			t.Run(sc.name, func(t *testing.T) {
				label := "ten-" + sc.name
				tok := o.addSimNode(label)
				if sc.key {
					k, _ := newKey(t)
					sc.change = withKey(sc.change, o.addKey(label, k.PublicKey()))
				}
				bmc := o.Lab().BMC(label, sim.ModeNormal)
				old := printUntilSeen(t, inject(bmc), "tenant-1-secret", o.logShows(label, tok))
				follow := o.goConsole(t, label, tok, conOpts{cmd: "console-log --follow"})
				follow.expect(old)

				sc.change(o.adminClient, label, "")
				follow.end.wait(t, "the old tenancy's follower")
				switch sc.name {
				case "rotate", "revoke": // the change's own token is not kept
					tok = o.rotate(label)
				case "node-deletion":
					tok = o.addSimNode(label)
				}
				bmc = o.Lab().BMC(label, sim.ModeNormal)
				fresh := printUntilSeen(t, inject(bmc), "tenant-2", o.logShows(label, tok))
				next := o.goConsole(t, label, tok, conOpts{cmd: "console-log --follow"})
				viewer := o.goConsole(t, label, tok, conOpts{pty: true})
				viewer.expect(fresh) // the replay, from the new tenancy's history
				next.expect(fresh)
				live := printUntilSeen(t, inject(bmc), "tenant-2-live", shows(next.out, viewer.out))
				res, err := o.execGo(label, tok, "console-log")
				if err != nil || res.Code != 0 || !strings.Contains(res.Stdout, live) {
					t.Fatalf("console-log of the new tenancy: %v %v, want %s", res, err, live)
				}
				for what, out := range map[string]string{"console-log": res.Stdout, "--follow": next.out.String(),
					"attach replay": viewer.out.String()} {
					if strings.Contains(out, "tenant-1-secret") {
						t.Errorf("%s after %s shows the previous tenancy: %q", what, sc.name, out)
					}
				}
				if s := follow.out.String(); strings.Contains(s, "tenant-2") {
					t.Errorf("the old tenancy's follower got the new tenancy's output: %q", s)
				}
			})
		}
	})
}

// withKey is a change that removes key fp, whatever fp it is given.
func withKey(change func(a *adminClient, label, fp string), fp string) func(a *adminClient, label, fp string) {
	return func(a *adminClient, label, _ string) { change(a, label, fp) }
}

// capturedSim starts obmd on dsn ("": SQLite in its state directory)
// capturing every node, registers sim node label and prints markers
// (prefix) on it until console-log shows one, which it returns: the held
// link records.
func capturedSim(t *testing.T, dsn, label, prefix string) (o *obmd, tok string, bmc *sim.BMC, marker string) {
	t.Helper()
	o = startObmd(t, func(c *daemon.Config) { c.DB, c.ConsoleCapture = dsn, "always" })
	tok = o.addSimNode(label)
	bmc = o.Lab().BMC(label, sim.ModeNormal)
	return o, tok, bmc, printUntilSeen(t, inject(bmc), prefix, o.logShows(label, tok))
}

// TestHistoryRestart: a restart of a single obmd keeps the history of the
// current tenancy, on every engine: console-log and the replay of a viewer
// who attaches after the restart (the scrollback ring is empty then) show
// what the node printed before it, with nobody attached; and the capture
// goes on after it, in the same history.
func TestHistoryRestart(t *testing.T) {
	t.Parallel()
	onEngines(t, testHistoryRestart)
}

func testHistoryRestart(t *testing.T, dsn string) {
	o, tok, bmc, before := capturedSim(t, dsn, "kept", "before-restart")
	if err := o.stop(); err != nil {
		t.Fatal(err)
	}
	o = startWith(t, o.Cfg)
	res := o.openssh("kept", tok, nil, "console-log")
	if res.Code != 0 || !strings.Contains(res.Stdout, before) {
		t.Fatalf("console-log after a restart: %v, want %s", res, before)
	}
	bmc = o.Lab().BMC("kept", sim.ModeNormal)
	after := printUntilSeen(t, inject(bmc), "after-restart", o.logShows("kept", tok))
	g := o.goConsole(t, "kept", tok, conOpts{pty: true})
	g.expect(before)
	g.expect(after)
	res = o.openssh("kept", tok, nil, "console-log", "--timestamps")
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
	onEngines(t, testHistoryFormats)
}

func testHistoryFormats(t *testing.T, dsn string) {
	o, tok, bmc, sync := capturedSim(t, dsn, "hostile", "sync")
	hostile := "\x1b]0;pwned\x07\x1b[2J\x00bad\xff\xfeutf8\x9b31m\r\nbare\nend\r\n"
	bmc.Inject([]byte(hostile))
	waitUntil(t, "the hostile output in console-log", func() bool { return o.logShows("hostile", tok)("end\r\n") })
	res := o.openssh("hostile", tok, nil, "console-log")
	if want := sync + "\r\n" + hostile; res.Code != 0 || !strings.HasSuffix(res.Stdout, want) {
		t.Errorf("console-log: got %q, want it to end with %q", res.Stdout, want)
	}
	pty := goSession(t, o.SSHAddr(), "hostile", gossh.Password(tok), conOpts{pty: true, cmd: "console-log"})
	pty.end.wait(t, "console-log on a pty")
	if got := pty.out.String(); got != res.Stdout {
		t.Errorf("console-log on a pty: got %q, want the bytes untouched, as without one: %q", got, res.Stdout)
	}
	if r, err := o.execGo("hostile", tok, "power-cycle"); err != nil || r.Code != 0 {
		t.Fatalf("power-cycle: %v %v", r, err)
	}
	if r, err := o.execGo("hostile", tok, "bootdev pxe"); err != nil || r.Code != 0 {
		t.Fatalf("bootdev: %v %v", r, err)
	}
	res = o.openssh("hostile", tok, nil, "console-log", "--timestamps")
	for _, want := range []string{" [obmd: power-cycle by ssh:token]\n", " [obmd: boot device pxe by ssh:token]\n"} {
		if !strings.Contains(res.Stdout, want) {
			t.Errorf("console-log --timestamps lacks the marker %q:\n%q", want, res.Stdout)
		}
	}
	raw := o.openssh("hostile", tok, nil, "console-log")
	res = o.openssh("hostile", tok, nil, "console-log", "--cast")
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
	onEngines(t, func(t *testing.T, dsn string) {
		o := startObmd(t, func(c *daemon.Config) { c.DB = dsn; c.HistoryRetention = time.Hour })
		o.mustAPI(201, "PUT", "/v1/nodes/kept", map[string]any{"type": "sim", "info": map[string]string{"addr": "sim"},
			"capture": "always"})
		if got := string(o.mustAPI(200, "GET", "/v1/nodes/kept", nil)); !strings.Contains(got, `"capture":"always"`) {
			t.Errorf("GET /v1/nodes/kept: got %s, want capture always", got)
		}
		tok := o.rotate("kept")
		bmc := o.Lab().BMC("kept", sim.ModeNormal)
		waitUntil(t, "the captured link open with nobody attached", bmc.ConsoleActive)
		secret := printUntilSeen(t, inject(bmc), "tenant-1", o.logShows("kept", tok))
		var before struct{ Tenancies []struct{ Tenancy int64 } }
		waitUntil(t, "the tenancy stored (one flush)", func() bool {
			err := json.Unmarshal(o.mustAPI(200, "GET", "/v1/nodes/kept/tenancies", nil), &before)
			return err == nil && len(before.Tenancies) == 1
		})
		old := before.Tenancies[0].Tenancy

		tok = o.rotate("kept")
		fresh := printUntilSeen(t, inject(bmc), "tenant-2", o.logShows("kept", tok))
		if res, _ := o.execGo("kept", tok, "console-log"); strings.Contains(res.Stdout, secret) {
			t.Errorf("the next tenant's console-log shows the kept tenancy: %q", res.Stdout)
		}
		// The old tenancy is ended (its marker written) in the background
		// once the change is applied: ReadHistory keeps it from the tenant
		// by the epoch meanwhile.
		var oldLog string
		waitUntil(t, "the kept tenancy's end marker", func() bool {
			oldLog = string(o.mustAPI(200, "GET", fmt.Sprintf("/v1/nodes/kept/console-log?tenancy=%d&format=text", old), nil))
			return strings.Contains(oldLog, "[obmd: tenancy ended")
		})
		if !strings.Contains(oldLog, secret) || strings.Contains(oldLog, fresh) || !strings.Contains(oldLog, "[obmd: tenancy ended") {
			t.Errorf("admin console-log of the kept tenancy: got %q, want %s and its end, not %s", oldLog, secret, fresh)
		}
		if cur := string(o.mustAPI(200, "GET", "/v1/nodes/kept/console-log", nil)); !strings.Contains(cur, fresh) || strings.Contains(cur, secret) {
			t.Errorf("admin console-log of the current tenancy: got %q, want %s only", cur, fresh)
		}
		o.mustAPI(400, "GET", "/v1/nodes/kept/console-log?format=pdf", nil)
		o.mustAPI(404, "GET", "/v1/nodes/kept/console-log?tenancy=999999", nil)

		// Capture attached: the link is released, and closes after linger.
		o.mustAPI(200, "PUT", "/v1/nodes/kept/capture", map[string]string{"capture": "attached"})
		waitUntil(t, "the released link closed", func() bool { return !bmc.ConsoleActive() })
		o.mustAPI(400, "PUT", "/v1/nodes/kept/capture", map[string]string{"capture": "sometimes"})
		if res, err := o.execGo("kept", tok, "power-status"); err != nil || res.Code != 0 {
			t.Errorf("setting capture cut the tenancy: power-status %v %v", res, err)
		}
	})
}

package access

// Revocation end to end: every access change (rotation, revocation, key
// removal, node deletion, a /v1 change of the BMC info) ends every live
// session of the node on this replica before the admin call returns: a
// console through the real OpenSSH client, a power operation in flight, an
// HTTP console stream. And the next tenant sees nothing of the previous
// one's console.

import (
	"fmt"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/obmd/obmd/bastion/e2e/obmdtest"

	gossh "golang.org/x/crypto/ssh"

	"github.com/obmd/obmd/bastion/access/authlimit"
	"github.com/obmd/obmd/bastion/daemon"
	"github.com/obmd/obmd/db"
	"github.com/obmd/obmd/db/dbtest"
	"github.com/obmd/obmd/sol/sim"
	"github.com/obmd/obmd/sol/soltest/ipmisim"
)

// delays are one run's measured delays from the start of the admin call.
type delays struct {
	call, console, exec, http time.Duration
}

// inFlight is how long the simulated BMC takes over the power-cycle that
// each change must cut: had it not been cut, the simulator records it when
// that time is over.
const inFlight = time.Second

// cycleCut is a run's power-cycle, checked once inFlight has passed
// since the change began (by then an uncut cycle is recorded).
type cycleCut struct {
	label string
	bmc   *sim.BMC
	start time.Time
}

func (c cycleCut) check(t *testing.T) {
	t.Helper()
	time.Sleep(time.Until(c.start.Add(inFlight + 100*time.Millisecond)))
	if slices.Contains(c.bmc.Actions(), "power cycle") {
		t.Errorf("%s: BMC actions %v: the cut power-cycle still happened", c.label, c.bmc.Actions())
	}
}

// runs is how many times each scenario runs (the figures in
// BENCHMARKS.md are medians over more: OBMD_REVOKE_RUNS=21).
func runs(t *testing.T) int {
	if s := os.Getenv("OBMD_REVOKE_RUNS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			t.Fatalf("OBMD_REVOKE_RUNS=%q: want a positive number", s)
		}
		return n
	}
	return 3
}

// TestRevokeEndsEverySession runs each access change against a live
// OpenSSH console, a power-cycle in flight (x/crypto exec, the simulated
// BMC taking 1 s) and an HTTP console stream, and checks that all three
// end with the reason, that the admin call returned only after the
// replica's registry was empty, and that the power operation never
// happened. It logs the median delays (see BENCHMARKS.md, "Revocation").
//
// OBMD_REVOKE_ON=mysql runs it on MariaDB (OBMD_TEST_MYSQL_DSN) instead of
// SQLite.
func TestRevokeEndsEverySession(t *testing.T) {
	o := obmdtest.Start(t, func(c *daemon.Config) {
		if os.Getenv("OBMD_REVOKE_ON") == "mysql" {
			c.DB.DSN = dbtest.MySQLDSN(t)
		}
	})
	runs := runs(t)
	var report []string
	var cycles []cycleCut // checked at the end, so the runs need not wait
	for _, sc := range obmdtest.AccessChanges() {
		t.Run(sc.Name, func(t *testing.T) {
			var ds []delays
			for i := 0; i < runs; i++ {
				d, c := revokeOnce(t, o, sc, fmt.Sprintf("%s-%d", sc.Name, i))
				ds = append(ds, d)
				cycles = append(cycles, c)
			}
			pick := func(f func(delays) time.Duration) string {
				var v []time.Duration
				for _, d := range ds {
					v = append(v, f(d))
				}
				return fmt.Sprintf("%6.2f ms (max %6.2f)", ms(median(v)), ms(slices.Max(v)))
			}
			line := fmt.Sprintf("| %-13s | %s | %s | %s | %s | %d |", sc.Name,
				pick(func(d delays) time.Duration { return d.call }),
				pick(func(d delays) time.Duration { return d.console }),
				pick(func(d delays) time.Duration { return d.exec }),
				pick(func(d delays) time.Duration { return d.http }), runs)
			report = append(report, line)
		})
	}
	for _, c := range cycles {
		c.check(t)
	}
	t.Logf("revocation delays, median (and max) from the start of the admin call to the session's end as its client saw it:\n"+
		"| change | admin call returned | OpenSSH console ended | exec in flight ended | HTTP console ended | runs |\n"+
		"|---|---|---|---|---|---|\n%s", strings.Join(report, "\n"))
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// revokeOnce sets up the three sessions on a fresh node, makes the change
// and measures. The power-cycle it cut is for the caller to check.
func revokeOnce(t *testing.T, o *obmdtest.Daemon, sc obmdtest.AccessChange, label string) (delays, cycleCut) {
	t.Helper()
	token := o.AddSimNode(label)
	bmc := o.Lab().BMC(label, sim.ModeNormal)
	var fp string
	sshAuth, sshExtra := gossh.AuthMethod(gossh.Password(token)), []string(nil)
	sshToken := token
	if sc.Key {
		signer, path := obmdtest.NewKey(t)
		fp = o.AddKey(label, signer.PublicKey())
		sshAuth, sshExtra, sshToken = gossh.PublicKeys(signer), []string{"-i", path}, ""
	}

	con := obmdtest.SSHPTY(t, o.SSHAddr(), label, sshToken, sshExtra)
	con.Out.Wait(t, "OpenSSH console banner", 0, "console of "+label)
	if err := bmc.WaitConsole(obmdtest.Context(t), true); err != nil {
		t.Fatalf("console link: %v", err)
	}
	bmc.SetDelay(inFlight) // the power-cycle below stays in flight
	exStarted := time.Now()
	ex := obmdtest.StartGoSession(t, o.SSHAddr(), label, sshAuth, obmdtest.SessionOpts{Cmd: "power-cycle"})
	web := o.ConsoleHTTP(t, label, token)
	obmdtest.WaitUntil(t, "three live sessions", func() bool { return o.SessionKinds(label) == "console,exec,http-console" })
	time.Sleep(20 * time.Millisecond) // let the runner reach the BMC

	start := time.Now()
	if setup := start.Sub(exStarted); setup > inFlight*8/10 {
		t.Fatalf("the sessions took %v to start: the power-cycle may end before the change", setup)
	}
	sc.Change(o.Admin, label, fp)
	returned := time.Now()
	if left := o.Sessions(label); len(left) != 0 {
		t.Errorf("after the admin call returned: got live sessions %+v, want none", left)
	}
	d := delays{call: returned.Sub(start)}
	d.console = con.End.Wait(t, "OpenSSH console").Sub(start)
	d.exec = ex.End.Wait(t, "exec").Sub(start)
	d.http = web.End.Wait(t, "HTTP console").Sub(start)
	bmc.SetDelay(0)

	reason := fmt.Sprintf("access to %s was revoked (%s)", label, sc.Why)
	if got := con.Out.String(); !strings.Contains(got, reason) {
		t.Errorf("OpenSSH console: got (tail) %q, want the reason %q", obmdtest.Tail(got, 300), reason)
	}
	if con.End.Code != 3 {
		t.Errorf("OpenSSH console: got exit %d, want 3 (not allowed)", con.End.Code)
	}
	if got := ex.Stderr.String(); !strings.Contains(got, reason) || strings.Count(strings.TrimSpace(got), "\n") != 0 {
		t.Errorf("exec stderr: got %q, want one line with %q", got, reason)
	}
	if ex.End.Code != 3 || ex.End.Err != nil {
		t.Errorf("exec: got exit %d (%v), want 3", ex.End.Code, ex.End.Err)
	}
	if web.End.Err != nil {
		t.Errorf("HTTP console: got %v, want a clean end of the stream", web.End.Err)
	}
	for _, dd := range []time.Duration{d.console, d.exec, d.http} {
		if dd > 5*time.Second { // generous: the goal is 100 ms
			t.Errorf("a session took %v to end", dd)
		}
	}
	return d, cycleCut{label: label, bmc: bmc, start: start}
}

// TestRevokeRacingAuth hammers a node with old-token console sessions while
// its token rotates: a session that got its console (the banner) must be
// cut with the reason; none may outlive the rotation.
func TestRevokeRacingAuth(t *testing.T) {
	o := obmdtest.Start(t, func(c *daemon.Config) {
		c.Sessions.MaxPerNode, c.Sessions.MaxPerSource = -1, -1
		c.AuthLimits = authlimit.Config{PerSource: 1 << 20, PerNode: 1 << 20}
	})
	old := o.AddSimNode("race")
	first := o.GoConsole(t, "race", old, obmdtest.SessionOpts{})
	first.Stderr.Wait(t, "old-token console", 0, "console of race")
	const workers = 6
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var mu sync.Mutex
	var consoles, refused, denied int
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				c, err := o.Dial("race", gossh.Password(old))
				if err != nil {
					mu.Lock()
					denied++
					mu.Unlock()
					continue
				}
				s, err := c.NewSession()
				if err != nil {
					c.Close()
					continue
				}
				errb := obmdtest.NewBuffer()
				s.Stderr = errb
				s.Shell()
				done := make(chan error, 1)
				go func() { done <- s.Wait() }()
				var werr error
				select {
				case werr = <-done:
				case <-time.After(obmdtest.Timeout):
					t.Errorf("an old-token session outlived the rotation: stderr %q", errb.String())
					c.Close()
					<-done
				}
				c.Close()
				got := errb.String()
				mu.Lock()
				switch {
				case strings.Contains(got, "console of race"):
					consoles++
					if !strings.Contains(got, "access to race was revoked (token rotated)") {
						t.Errorf("a console with the old token ended without the reason: %q (%v)", got, werr)
					}
				case strings.Contains(got, "access to race was revoked"):
					refused++
				default:
					t.Errorf("old-token session: unexpected stderr %q (%v)", got, werr)
				}
				mu.Unlock()
			}
		}()
	}
	obmdtest.WaitUntil(t, "the workers' consoles", func() bool { return len(o.Sessions("race")) > 1 })
	o.Rotate("race")
	first.End.Wait(t, "the old-token console")
	if got := first.Stderr.String(); !strings.Contains(got, "access to race was revoked (token rotated)") {
		t.Errorf("old-token console: got stderr %q, want the reason", got)
	}
	// Authentication now fails for the old token; give the workers a moment
	// to see it, then stop them.
	time.Sleep(200 * time.Millisecond)
	close(stop)
	wg.Wait()
	if left := o.Sessions("race"); len(left) != 0 {
		t.Errorf("sessions left: %+v", left)
	}
	t.Logf("old-token consoles cut %d, refused at start %d, denied at auth %d", consoles, refused, denied)
	if denied == 0 {
		t.Errorf("got no denial of the old token after the rotation")
	}
	if strings.Contains(o.Logs.String(), "sessions_slow_to_end") {
		t.Errorf("a cut waited for a session that could not end (logged sessions_slow_to_end)")
	}
}

// marker is a distinctive marker prefix for one test.
func marker(t *testing.T, what string) string {
	return fmt.Sprintf("%s-%s-%d", what, strings.ReplaceAll(t.Name(), "/", "-"), time.Now().UnixNano())
}

// newTenant checks what the next tenant (token tokB) can see of label's
// console: its console's replay, the `r` replay escape, console-log and
// the HTTP console hold fresh output (printed with print until it shows,
// since a new console link takes a moment to open) and no marker of the
// old tenant's (prefix old).
func newTenant(t *testing.T, o *obmdtest.Daemon, label, tokB, old string, print func([]byte) error) {
	t.Helper()
	b := o.GoConsole(t, label, tokB, obmdtest.SessionOpts{PTY: true}) // escapes need a PTY
	b.Stderr.Wait(t, "new tenant's banner", 0, "console of "+label)
	fresh := obmdtest.PrintUntilSeen(t, print, marker(t, "FRESH"), obmdtest.Shows(b.Out))
	if strings.Contains(b.Out.String(), old) {
		t.Errorf("new tenant's console replayed the old tenant's output %q", old)
	}
	// The replay escape sends the scrollback again: fresh (printed once)
	// shows twice.
	seen := b.Out.Wait(t, "new tenant's console", 0, fresh)
	b.In.Write([]byte("\x05cr"))
	b.Out.Wait(t, "replay escape", seen, fresh)
	if strings.Contains(b.Out.String(), old) {
		t.Errorf("replay escape showed the old tenant's output %q", old)
	}
	res, err := o.ExecGo(label, tokB, "console-log")
	if err != nil || res.Code != 0 || !strings.Contains(res.Stdout, fresh) {
		t.Errorf("console-log: got %v (%v), want exit 0 with %q", res, err, fresh)
	}
	if strings.Contains(res.Stdout, old) {
		t.Errorf("console-log holds the old tenant's output %q", old)
	}
	web := o.ConsoleHTTP(t, label, tokB)
	obmdtest.PrintUntilSeen(t, print, marker(t, "WEB"), obmdtest.Shows(web.Out))
	if strings.Contains(web.Out.String(), old) {
		t.Errorf("HTTP console holds the old tenant's output %q", old)
	}
}

// TestRevokeIsolation: the tenant after a rotation sees nothing the
// previous one saw: neither while the old tenant is still attached, nor
// when the old tenant has just left and the link lingers with its
// scrollback. A control without rotation shows that the same replay paths
// do carry the scrollback to the same tenant.
func TestRevokeIsolation(t *testing.T) {
	o := obmdtest.Start(t, func(c *daemon.Config) { c.Console.Linger = 5 * time.Second })
	for _, tc := range []struct {
		name    string
		detach  bool // the old tenant leaves before the rotation
		rotate  bool
		wantOld bool
	}{
		{name: "attached", rotate: true},
		{name: "lingering link", detach: true, rotate: true},
		{name: "control without rotation", detach: true, wantOld: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			label := "iso-" + strings.ReplaceAll(tc.name, " ", "-")
			tokA := o.AddSimNode(label)
			bmc := o.Lab().BMC(label, sim.ModeNormal)
			a := obmdtest.SSHPTY(t, o.SSHAddr(), label, tokA, nil)
			a.Out.Wait(t, "old tenant's banner", 0, "console of "+label)
			old := marker(t, "MARKER")
			obmdtest.PrintUntilSeen(t, obmdtest.Inject(bmc), old, obmdtest.Shows(a.Out))
			if tc.detach {
				a.TypeKeys(obmdtest.EscDetach)
				a.End.Wait(t, "old tenant's detach")
			}
			tokB := tokA
			if tc.rotate {
				tokB = o.Rotate(label)
			}
			if !tc.detach {
				a.End.Wait(t, "old tenant's console")
				if !strings.Contains(a.Out.String(), "access to "+label+" was revoked (token rotated)") {
					t.Errorf("old tenant: got (tail) %q, want the reason", obmdtest.Tail(a.Out.String(), 300))
				}
			}
			if tc.wantOld {
				res, err := o.ExecGo(label, tokB, "console-log")
				if err != nil || !strings.Contains(res.Stdout, old) {
					t.Fatalf("control: console-log got %v (%v), want the scrollback with %q", res, err, old)
				}
				return
			}
			newTenant(t, o, label, tokB, old, obmdtest.Inject(bmc))
		})
	}
}

// TestRevokeIsolationIPMISim is TestRevokeIsolation's first case against a
// real BMC: OpenIPMI's ipmi_sim through the native driver, the marker
// printed on the node's serial port.
func TestRevokeIsolationIPMISim(t *testing.T) {
	s := ipmisim.Start(t)
	o := obmdtest.Start(t)
	tokA := o.AddIPMINode("iso-ipmi", "ipmi", s)
	a := obmdtest.SSHPTY(t, o.SSHAddr(), "iso-ipmi", tokA, nil)
	a.Out.Wait(t, "old tenant's banner", 0, "console of iso-ipmi")
	old := marker(t, "MARKER")
	obmdtest.PrintUntilSeen(t, s.WriteSerial, old, obmdtest.Shows(a.Out))
	tokB := o.Rotate("iso-ipmi")
	a.End.Wait(t, "old tenant's console")
	if !strings.Contains(a.Out.String(), "access to iso-ipmi was revoked (token rotated)") {
		t.Errorf("old tenant: got (tail) %q, want the reason", obmdtest.Tail(a.Out.String(), 300))
	}
	newTenant(t, o, "iso-ipmi", tokB, old, s.WriteSerial)
}

// TestRevokeAcrossReplicas: two replicas share a database; the token is
// rotated through one while the old tenant is attached to the other, whose
// change watcher is made slow (and, on PostgreSQL, deaf to notifications). The new tenant reaching the other replica
// first must neither meet the old tenant's session nor its scrollback: the
// session admission applies the change there and then.
func TestRevokeAcrossReplicas(t *testing.T) {
	obmdtest.OnEngines(t, func(t *testing.T, dsn string) {
		dir := t.TempDir()
		shared := func(c *daemon.Config) {
			c.DB.DSN, c.DB.SealKey, c.SSH.HostKey, c.Admin.Token = dsn, dir+"/seal.key", dir+"/host_key", "replicas-admin-token-of-32-chars"
		}
		r1 := obmdtest.Start(t, shared)
		r2 := obmdtest.StartDB(t, []db.Option{db.WithoutListen()}, shared, func(c *daemon.Config) { c.Access.Poll = time.Hour })
		tokA := r1.AddSimNode("xr")
		bmc := r2.Lab().BMC("xr", sim.ModeNormal)
		a := r2.GoConsole(t, "xr", tokA, obmdtest.SessionOpts{})
		a.Stderr.Wait(t, "old tenant's banner on replica 2", 0, "console of xr")
		old := marker(t, "MARKER")
		obmdtest.PrintUntilSeen(t, obmdtest.Inject(bmc), old, obmdtest.Shows(a.Out))

		tokB := r1.Rotate("xr")
		if a.End.Ended() {
			t.Fatalf("replica 2 cut the old tenant before anything told it: the test's premise is wrong")
		}
		newTenant(t, r2, "xr", tokB, old, obmdtest.Inject(bmc))
		a.End.Wait(t, "old tenant's console on replica 2")
		if got := a.Stderr.String(); !strings.Contains(got, "access to xr was revoked") {
			t.Errorf("old tenant on replica 2: got stderr %q, want the reason", got)
		}
	})
}

// TestRevokeOldConnection: a connection authenticated before a change
// opens no new session after it, and is closed by it even with no session
// open (before, it stayed open, idle, until the client hung up).
func TestRevokeOldConnection(t *testing.T) {
	o := obmdtest.Start(t)
	token := o.AddSimNode("oc")
	c, err := o.Dial("oc", gossh.Password(token))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if res, err := obmdtest.RunSession(c, "power-status"); err != nil || res.Code != 0 {
		t.Fatalf("before the rotation: got %v (%v), want exit 0", res, err)
	}
	closed := make(chan struct{})
	go func() { c.Wait(); close(closed) }() // ends when the connection does
	o.Rotate("oc")
	select {
	case <-closed:
	case <-time.After(obmdtest.Timeout):
		t.Fatal("the connection authenticated before the rotation is still open")
	}
	if _, err := c.NewSession(); err == nil {
		t.Error("a new session on the old connection: opened, want the connection closed")
	}
}

// median of ds (0 for none).
func median(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[len(s)/2]
}

package certs

// Certificate sessions cut live (issue 16): revoking a serial or a key id,
// removing the CA, the certificate's expiry, a node principal removed; on
// the replica that took the call and on the others.

import (
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/obmd/obmd/bastion/e2e/obmdtest"

	gossh "golang.org/x/crypto/ssh"

	"github.com/obmd/obmd/bastion/daemon"
	"github.com/obmd/obmd/sol/sim"
)

// live is a node's live sessions: an OpenSSH console and an x/crypto
// power-cycle in flight, both by certificate, and a token console that
// no credential change may end (nil once a node's change has ended it).
type live struct {
	con   *obmdtest.PTY
	ex    *obmdtest.GoSession
	token *obmdtest.GoSession
	bmc   *sim.BMC
}

// inFlight is how long the simulated BMC holds the power-cycle: longer
// than any test waits for its cut.
const inFlight = 10 * time.Second

// liveCert starts the sessions of live on label of o with the
// certificate at cert (of k), and waits until all three are registered.
func liveCert(t *testing.T, o *obmdtest.Daemon, k *issuer, label, cert, token string) *live {
	t.Helper()
	l := &live{bmc: o.Lab().BMC(label, sim.ModeNormal)}
	l.con = obmdtest.SSHPTY(t, o.SSHAddr(), label, "", k.args(cert))
	l.con.Out.Wait(t, "OpenSSH console banner", 0, "console of "+label)
	l.token = o.GoConsole(t, label, token, obmdtest.SessionOpts{})
	l.token.Stderr.Wait(t, "token console banner", 0, "console of "+label)
	l.bmc.SetDelay(inFlight)
	t.Cleanup(func() { l.bmc.SetDelay(0) })
	l.ex = obmdtest.StartGoSession(t, o.SSHAddr(), label, gossh.PublicKeys(k.signer(cert)), obmdtest.SessionOpts{Cmd: "power-cycle"})
	obmdtest.WaitUntil(t, "three live sessions", func() bool { return o.SessionKinds(label) == "console,console,exec" })
	return l
}

// cut checks that the certificate sessions ended with reason, each within
// bound of start, and the token console did not; it returns the slower
// end's delay.
func (l *live) cut(t *testing.T, start time.Time, reason string, bound time.Duration) time.Duration {
	t.Helper()
	dc := l.con.End.Wait(t, "OpenSSH console").Sub(start)
	de := l.ex.End.Wait(t, "exec").Sub(start)
	if got := l.con.Out.String(); !strings.Contains(got, reason) {
		t.Errorf("OpenSSH console: got (tail) %q, want %q", obmdtest.Tail(got, 300), reason)
	}
	if got := l.ex.Stderr.String(); !strings.Contains(got, reason) {
		t.Errorf("exec stderr: got %q, want %q", got, reason)
	}
	if l.con.End.Code != 3 || l.ex.End.Code != 3 {
		t.Errorf("exit codes: console %d, exec %d; want 3", l.con.End.Code, l.ex.End.Code)
	}
	if l.token != nil && l.token.End.Ended() {
		t.Errorf("the token console ended (%q), want it alive", l.token.Stderr.String())
	}
	if slow := max(dc, de); slow > bound {
		t.Errorf("the sessions took %v (console) and %v (exec) to end, want within %v", dc, de, bound)
	}
	return max(dc, de)
}

// TestCertRevokeLive: revoking a certificate's serial or key id, or
// removing its CA, ends its live console and exec before the admin call
// returns, and leaves a token session and another CA's certificate alone;
// the certificate is refused from then on.
func TestCertRevokeLive(t *testing.T) {
	t.Parallel()
	obmdtest.OnEngines(t, func(t *testing.T, dsn string) {
		o, k, fp := certObmd(t, dsn)
		for i, sc := range []struct {
			name, why string
			change    func(label string, serial int)
		}{
			{"serial", "certificate revoked", func(_ string, serial int) {
				o.MustAPI(200, "POST", "/v1/cas/revoked", map[string]any{"serial": serial, "ca": fp})
			}},
			{"key id", "certificate revoked", func(label string, _ int) {
				o.MustAPI(200, "POST", "/v1/cas/revoked", map[string]any{"key_id": "alice@" + label})
			}},
			{"CA removal", "certificate authority removed", func(string, int) {
				o.MustAPI(200, "DELETE", "/v1/cas/"+url.PathEscape(fp), nil)
			}},
		} {
			t.Run(sc.name, func(t *testing.T) {
				label, serial := fmt.Sprintf("cr%d", i), 100+i
				token := o.AddSimNode(label)
				cert := k.sign("-I", "alice@"+label, "-n", label, "-V", "+1s:+1h", "-z", fmt.Sprint(serial))
				l := liveCert(t, o, k, label, cert, token)
				for _, s := range o.Sessions(label) {
					if s.Cert.KeyID != "" && (s.User != fmt.Sprintf("cert hil:alice@%s serial %d", label, serial) ||
						s.Cert.Serial != uint64(serial) || s.Cert.CA != fp || s.Expires.IsZero()) {
						t.Errorf("GET /v1/sessions: got %+v, want the certificate named", s)
					}
				}
				start := time.Now()
				sc.change(label, serial)
				d := l.cut(t, start, fmt.Sprintf("access to %s was revoked (%s)", label, sc.why), 5*time.Second)
				t.Logf("%s: sessions ended %v after the call began", sc.name, d.Round(time.Millisecond))
				certRefused(o, k, label, cert, "the certificate after the change")
			})
		}
	})
}

// TestCertExpiryLive: a live console and a live exec end by themselves at
// the certificate's valid_before, with "your certificate for ...
// expired", and the certificate is refused from then on: the skew (the
// default, 60 s) widens only the start of a certificate's validity, never
// its end, as OpenSSH treats valid_before.
func TestCertExpiryLive(t *testing.T) {
	t.Parallel()
	o, k, _ := certObmd(t, "")
	token := o.AddSimNode("ce")
	now := time.Now().Truncate(time.Second)
	end := now.Add(4 * time.Second)
	cert := k.sign("-I", "carol", "-n", "ce", "-V", window(now.Add(time.Second), end))
	l := liveCert(t, o, k, "ce", cert, token)
	d := l.cut(t, end, "your certificate for ce expired", 2*time.Second)
	if d < 0 {
		t.Errorf("the sessions ended %v before the certificate's end", -d)
	}
	t.Logf("sessions ended %v after the certificate's end", d.Round(time.Millisecond))
	certRefused(o, k, "ce", cert, "the certificate after its end, within the skew")
}

// TestCertPrincipals: a node carrying principal project-x opens to a
// certificate for project-x (and only that node of those without it);
// removing the principal is an access change that ends its sessions.
func TestCertPrincipals(t *testing.T) {
	t.Parallel()
	obmdtest.OnEngines(t, func(t *testing.T, dsn string) {
		o, k, _ := certObmd(t, dsn)
		token := o.AddSimNode("px1")
		o.AddSimNode("px2")
		if got := string(o.MustAPI(200, "PUT", "/v1/nodes/px1", map[string]any{"principals": []string{"project-x"}})); !strings.Contains(got, `"principals":["project-x"]`) {
			t.Errorf("PUT principals: got %s", got)
		}
		if got := string(o.MustAPI(200, "GET", "/v1/nodes/px1", nil)); !strings.Contains(got, `"principals":["project-x"]`) {
			t.Errorf("GET node: got %s, want its principals", got)
		}
		cert := k.sign("-I", "dave", "-n", "project-x", "-V", "+1s:+1h", "-z", "9")
		certRefused(o, k, "px2", cert, "node without the principal")
		l := liveCert(t, o, k, "px1", cert, token)
		start := time.Now()
		o.MustAPI(200, "PUT", "/v1/nodes/px1", map[string]any{"principals": []string{}})
		// An access change of the node: every session of it ends, the
		// token's too.
		l.token.End.Wait(t, "token console")
		l.token = nil
		l.cut(t, start, "access to px1 was revoked", 5*time.Second)
		certRefused(o, k, "px1", cert, "after the principal's removal")
	})
}

// TestCertAcrossReplicas: three replicas on one database see the same CAs
// and revocations; a revocation and a CA removal made through one cut the
// certificate sessions on the two others at once, and close the idle
// connections logged in with the certificate there (their change watchers
// poll every 20 s: the peer notice does it), and the certificate is
// refused there from then on.
func TestCertAcrossReplicas(t *testing.T) {
	t.Parallel()
	obmdtest.OnEngines(t, func(t *testing.T, dsn string) {
		dir := t.TempDir()
		replica := func(id string, poll time.Duration) *obmdtest.Daemon {
			return obmdtest.Start(t, func(c *daemon.Config) {
				c.DB.DSN, c.DB.SealKey, c.SSH.HostKey, c.Admin.Token = dsn, dir+"/seal.key", dir+"/host_key", "replicas-admin-token-of-32-chars"
				// A long lease lets the polls be slow (epoch_poll must stay
				// below half of lease_ttl less the fence margin).
				c.Replica.ID, c.Replica.PeerAddr, c.Access.Poll, c.Cluster.LeaseTTL = id, "127.0.0.1:0", poll, time.Minute
			})
		}
		k := newIssuer(t) // first: it needs OpenSSH's tools, which -short skips
		r1 := replica("r1", 100*time.Millisecond)
		r2, r3 := replica("r2", 20*time.Second), replica("r3", 20*time.Second)
		fp := trust(r1.Admin, k, "hil")
		for _, r := range []*obmdtest.Daemon{r2, r3} {
			if got := string(r.MustAPI(200, "GET", "/v1/cas", nil)); !strings.Contains(got, fp) {
				t.Errorf("GET /v1/cas on another replica: got %s, want the CA", got)
			}
		}
		token := r1.AddSimNode("xc")
		cert := k.sign("-I", "erin", "-n", "xc", "-V", "+1s:+1h", "-z", "5")
		con := obmdtest.SSHPTY(t, r2.SSHAddr(), "xc", "", k.args(cert))
		con.Out.Wait(t, "console banner on r2", 0, "console of xc")
		ex := obmdtest.StartGoSession(t, r3.SSHAddr(), "xc", gossh.PublicKeys(k.signer(cert)), obmdtest.SessionOpts{Cmd: "console"})
		ex.Stderr.Wait(t, "exec console banner on r3", 0, "console of xc")
		tok := r2.GoConsole(t, "xc", token, obmdtest.SessionOpts{})
		tok.Stderr.Wait(t, "token console banner on r2", 0, "console of xc")
		// Idle connections (ControlMasters holding no session) end too.
		idle := idleMaster(t, "the revoked certificate's master on r2", r2.SSHAddr(), "xc", "", k.args(cert))
		kept := idleMaster(t, "another certificate's master on r3", r3.SSHAddr(), "xc", "",
			k.args(k.sign("-I", "erin", "-n", "xc", "-V", "+1s:+1h", "-z", "7")))

		start := time.Now()
		r1.MustAPI(200, "POST", "/v1/cas/revoked", map[string]any{"serial": 5})
		t.Logf("revocation: r2's idle master closed after %v", idle.closed(start, 5*time.Second).Round(time.Millisecond))
		closedAudit(r2, "xc", "ssh:cert hil:erin serial 5", "access to xc was revoked (certificate revoked)")
		kept.alive("another serial's revocation")
		reason := "access to xc was revoked (certificate revoked)"
		dc, de := con.End.Wait(t, "console on r2").Sub(start), ex.End.Wait(t, "exec on r3").Sub(start)
		t.Logf("revocation: r2's console ended after %v, r3's exec after %v", dc.Round(time.Millisecond), de.Round(time.Millisecond))
		if !strings.Contains(con.Out.String(), reason) || !strings.Contains(ex.Stderr.String(), reason) {
			t.Errorf("reasons: console %q, exec %q; want %q", obmdtest.Tail(con.Out.String(), 200), ex.Stderr.String(), reason)
		}
		if max(dc, de) > 5*time.Second {
			t.Errorf("the sessions on the other replicas took %v and %v to end", dc, de)
		}
		for _, r := range []*obmdtest.Daemon{r2, r3} {
			if got := string(r.MustAPI(200, "GET", "/v1/cas/revoked", nil)); !strings.Contains(got, `"serial":5`) {
				t.Errorf("GET /v1/cas/revoked on another replica: got %s, want serial 5", got)
			}
			if res, err := obmdtest.ExecSSH(r.SSHAddr(), "xc", "power-status", gossh.PublicKeys(k.signer(cert))); err == nil {
				t.Errorf("the revoked certificate on another replica: got %v, want refused", res)
			}
		}

		next := k.sign("-I", "erin", "-n", "xc", "-V", "+1s:+1h", "-z", "6")
		con = obmdtest.SSHPTY(t, r3.SSHAddr(), "xc", "", k.args(next))
		con.Out.Wait(t, "console banner on r3", 0, "console of xc")
		start = time.Now()
		r1.MustAPI(200, "DELETE", "/v1/cas/"+url.PathEscape(fp), nil)
		d := con.End.Wait(t, "console on r3").Sub(start)
		t.Logf("CA removal: r3's console ended after %v", d.Round(time.Millisecond))
		if got := con.Out.String(); !strings.Contains(got, "access to xc was revoked (certificate authority removed)") || d > 5*time.Second {
			t.Errorf("CA removal on r3: ended after %v with (tail) %q", d, obmdtest.Tail(got, 200))
		}
		if got := string(r2.MustAPI(200, "GET", "/v1/cas", nil)); strings.Contains(got, fp) {
			t.Errorf("GET /v1/cas on r2 after the removal: got %s", got)
		}
		t.Logf("CA removal: r3's idle master closed after %v", kept.closed(start, 5*time.Second).Round(time.Millisecond))
		if tok.End.Ended() {
			t.Errorf("the token console on r2 ended: %q", tok.Stderr.String())
		}
	})
}

// TestCertOldConnection: a connection that logged in with a certificate
// is closed once the certificate is revoked or its CA removed, though
// neither moved the node's epoch, and opens no new session; a connection
// with another certificate stays open and opens sessions.
func TestCertOldConnection(t *testing.T) {
	t.Parallel()
	o, k, fp := certObmd(t, "")
	o.AddSimNode("oc")
	dial := func(serial string) (*gossh.Client, chan struct{}) {
		c, err := o.Dial("oc", gossh.PublicKeys(k.signer(k.sign("-I", "frank", "-n", "oc", "-V", "+1s:+1h", "-z", serial))))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		if res, err := obmdtest.RunSession(c, "power-status"); err != nil || res.Code != 0 {
			t.Fatalf("before the change: got %v (%v), want exit 0", res, err)
		}
		closed := make(chan struct{})
		go func() { c.Wait(); close(closed) }() // ends when the connection does
		return c, closed
	}
	gone := func(c *gossh.Client, closed chan struct{}, what string) {
		t.Helper()
		select {
		case <-closed:
		case <-time.After(obmdtest.Timeout):
			t.Fatalf("%s: still open", what)
		}
		if res, err := obmdtest.RunSession(c, "power-status"); err == nil {
			t.Errorf("%s: a new session got %v, want the connection closed", what, res)
		}
	}
	revoked, revokedClosed := dial("1")
	kept, keptClosed := dial("2")
	removed, removedClosed := dial("3")
	o.MustAPI(200, "POST", "/v1/cas/revoked", map[string]any{"serial": 1})
	gone(revoked, revokedClosed, "the revoked certificate's connection")
	if res, err := obmdtest.RunSession(kept, "power-status"); err != nil || res.Code != 0 {
		t.Errorf("another certificate's connection: got %v (%v), want exit 0", res, err)
	}
	o.MustAPI(200, "DELETE", "/v1/cas/"+url.PathEscape(fp), nil)
	gone(removed, removedClosed, "a connection after its CA's removal")
	gone(kept, keptClosed, "the other certificate's connection after its CA's removal")
}

// TestCertWatcherFallback: a replica no notice reaches (here: two obmd on
// one database without peer links) cuts a revoked certificate's session,
// and closes its idle connection, at its next poll of the database
// (epoch_poll, 100 ms here).
func TestCertWatcherFallback(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	shared := func(c *daemon.Config) {
		c.DB.DSN, c.DB.SealKey, c.SSH.HostKey, c.Admin.Token = dir+"/obmd.db", dir+"/seal.key", dir+"/host_key", "replicas-admin-token-of-32-chars"
	}
	r1, k, _ := certObmd(t, "", shared)
	r2 := obmdtest.Start(t, shared)
	r1.AddSimNode("wf")
	cert := k.sign("-I", "gina", "-n", "wf", "-V", "+1s:+1h", "-z", "8")
	con := obmdtest.SSHPTY(t, r2.SSHAddr(), "wf", "", k.args(cert))
	con.Out.Wait(t, "console banner on r2", 0, "console of wf")
	idle := idleMaster(t, "an idle master on r2", r2.SSHAddr(), "wf", "", k.args(cert))
	start := time.Now()
	r1.MustAPI(200, "POST", "/v1/cas/revoked", map[string]any{"key_id": "gina"})
	t.Logf("r2's idle master closed %v after the call began", idle.closed(start, 5*time.Second).Round(time.Millisecond))
	d := con.End.Wait(t, "console on r2").Sub(start)
	t.Logf("r2's console ended %v after the call began", d.Round(time.Millisecond))
	if got := con.Out.String(); !strings.Contains(got, "access to wf was revoked (certificate revoked)") || d > 5*time.Second {
		t.Errorf("r2: ended after %v with (tail) %q", d, obmdtest.Tail(got, 200))
	}
}

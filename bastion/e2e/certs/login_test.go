package certs

// Certificate logins end to end (issue 16): certificates signed by Debian's
// ssh-keygen, used by the real OpenSSH client (ssh -o CertificateFile=) and
// by x/crypto, on both database engines.

import (
	"database/sql"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/obmd/obmd/bastion/e2e/obmdtest"

	gossh "golang.org/x/crypto/ssh"

	"github.com/obmd/obmd/bastion/daemon"
)

// failDelay is the fail delay of the certificate tests: long enough to
// see that every refusal waits for it.
const failDelay = 200 * time.Millisecond

// TestCertLogin: a CA is trusted through /v1/cas (adding it again is 200;
// GET lists it); a certificate signed with the operator guide's line (ssh-keygen
// -s CA -I alice@project-x -n node-17 -V +1s:+8h -z 42) logs in through
// OpenSSH and x/crypto, and the audit names its key id and serial; `-V
// +1m` right after a node's access change is refused (its start is
// backdated: strict tenancy); a certificate from before a token rotation
// is refused after it, one signed after works.
func TestCertLogin(t *testing.T) {
	t.Parallel()
	obmdtest.OnEngines(t, func(t *testing.T, dsn string) {
		o, k, fp := certObmd(t, dsn)
		o.MustAPI(200, "POST", "/v1/cas", map[string]string{"key": k.ca, "name": "hil"})
		if got := string(o.MustAPI(200, "GET", "/v1/cas", nil)); !strings.Contains(got, fp) || !strings.Contains(got, `"name":"hil"`) {
			t.Errorf("GET /v1/cas: got %s, want the CA", got)
		}
		o.AddSimNode("node-17")
		good := k.sign("-I", "alice@project-x", "-n", "node-17", "-V", "+1s:+8h", "-z", "42")
		certOpens(o, k, "node-17", good, "OpenSSH with the certificate")
		if res, err := o.Exec("node-17", "power-on", gossh.PublicKeys(k.signer(good))); err != nil || res.Code != 0 {
			t.Fatalf("x/crypto with the certificate: got %v, %v", res, err)
		}
		if res := o.OpenSSH("node-17", "", k.args(good), "sessions", "--json"); res.Code != 0 ||
			!strings.Contains(res.Stdout, `"user":"cert hil:alice@project-x serial 42"`) || !strings.Contains(res.Stdout, `"own":true`) {
			t.Errorf("sessions by certificate: got %v, want its own session named by the certificate", res)
		}
		var login, power bool
		for _, e := range o.Audit("node-17") {
			if e.Actor != "ssh:cert hil:alice@project-x serial 42" {
				continue
			}
			login = login || (e.Action == "auth" && e.Result == "ok" && strings.Contains(e.Detail, "principal node-17"))
			power = power || strings.HasPrefix(e.Action, "power")
		}
		if !login || !power {
			t.Errorf("audit: login %v, power action %v by ssh:cert hil:alice@project-x serial 42; want both:\n%+v", login, power, o.Audit("node-17"))
		}

		before := lastAudit(o, "node-17")
		backdated := k.sign("-I", "alice", "-n", "node-17", "-V", "+1m", "-z", "42")
		certRefused(o, k, "node-17", backdated, "-V +1m just after the node's change")
		if !certDenied(o, "node-17", "valid from before the node's last access change", before) {
			t.Errorf("-V +1m: no audited refusal naming the tenancy")
		}

		// Rotation: the tenancy starts again.
		obmdtest.WaitUntil(t, "the certificate's start to pass", func() bool { return time.Now().After(validAfter(t, good)) })
		o.Rotate("node-17")
		before = lastAudit(o, "node-17")
		certRefused(o, k, "node-17", good, "certificate signed before the rotation")
		if !certDenied(o, "node-17", "before the node's last access change", before) {
			t.Errorf("certificate from before the rotation: no audited refusal naming the tenancy")
		}
		fresh := k.sign("-I", "alice", "-n", "node-17", "-V", "+1s:+1h", "-z", "44")
		certOpens(o, k, "node-17", fresh, "certificate signed after the rotation")
	})
}

// TestCertRefused: each reason to refuse a certificate is refused through
// OpenSSH with the answer an unregistered key gets, audited with its
// reason, and (x/crypto) never sooner than fail_delay.
func TestCertRefused(t *testing.T) {
	t.Parallel()
	obmdtest.OnEngines(t, func(t *testing.T, dsn string) {
		o, k, _ := certObmd(t, dsn, obmdtest.NoLimits, func(c *daemon.Config) { c.SSH.FailDelay, c.Admin.FailDelay = failDelay, failDelay })
		untrusted := newIssuer(t)
		o.AddSimNode("c17")
		o.MustAPI(200, "POST", "/v1/cas/revoked", map[string]any{"serial": 43})
		o.MustAPI(200, "POST", "/v1/cas/revoked", map[string]any{"key_id": "mallory", "ca": "hil"})
		_, strangerPath := obmdtest.NewKey(t)
		wrongKey := o.OpenSSH("c17", "", []string{"-i", strangerPath}, "power-status")
		if wrongKey.Code != 255 || !strings.Contains(wrongKey.Stderr, "Permission denied") {
			t.Fatalf("unregistered key: got %v, want permission denied", wrongKey)
		}
		now := time.Now()
		for _, tc := range []struct {
			name string
			k    *issuer
			args []string
			why  string
		}{
			{"wrong principal", k, []string{"-I", "alice", "-n", "c18", "-V", "+1s:+1h"}, "no principal of the node"},
			{"expired", k, []string{"-I", "alice", "-n", "c17", "-V", window(now.Add(-2*time.Hour), now.Add(-time.Hour))}, "expired"},
			{"not yet valid", k, []string{"-I", "alice", "-n", "c17", "-V", "+2h:+3h"}, "not yet valid"},
			{"untrusted CA", untrusted, []string{"-I", "alice", "-n", "c17", "-V", "+1s:+1h"}, "not trusted"},
			{"revoked serial", k, []string{"-I", "alice", "-n", "c17", "-V", "+1s:+1h", "-z", "43"}, "revoked by serial"},
			{"revoked key id", k, []string{"-I", "mallory", "-n", "c17", "-V", "+1s:+1h", "-z", "7"}, "revoked by key id"},
			{"unknown critical option", k, []string{"-I", "alice", "-n", "c17", "-V", "+1s:+1h", "-O", "critical:frob@example.com=x"}, "critical option"},
			{"force-command", k, []string{"-I", "alice", "-n", "c17", "-V", "+1s:+1h", "-O", "force-command=power-off"}, "critical option"},
			{"source-address mismatch", k, []string{"-I", "alice", "-n", "c17", "-V", "+1s:+1h", "-O", "source-address=10.9.9.9/32"}, "source-address"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				cert := tc.k.sign(tc.args...)
				before := lastAudit(o, "c17")
				res := o.OpenSSH("c17", "", tc.k.args(cert), "power-status")
				if res.Code != wrongKey.Code || res.Stderr != wrongKey.Stderr {
					t.Errorf("OpenSSH: got %v, want what an unregistered key gets (%v)", res, wrongKey)
				}
				if !certDenied(o, "c17", tc.why, before) {
					t.Errorf("no audited refusal naming %q: %+v", tc.why, o.Audit("c17"))
				}
				start := time.Now()
				if _, err := o.Exec("c17", "power-status", gossh.PublicKeys(tc.k.signer(cert))); err == nil {
					t.Errorf("x/crypto: logged in, want refused")
				}
				if took := time.Since(start); took < failDelay {
					t.Errorf("x/crypto refusal after %v, want at least the fail delay %v", took, failDelay)
				}
			})
		}
		ok := k.sign("-I", "alice", "-n", "c17", "-V", "+1s:+1h", "-O", "source-address=127.0.0.0/8,10.9.9.9/32")
		certOpens(o, k, "c17", ok, "source-address allowing 127.0.0.1")
	})
}

// TestCertNoPTY: without permit-pty, a certificate session gets no PTY
// and no console, but runs commands. A person typing `ssh np` at a
// terminal is told why (OpenSSH goes on without the PTY it asked for);
// `ssh -tt` gives up by itself, as it does with sshd.
func TestCertNoPTY(t *testing.T) {
	t.Parallel()
	obmdtest.OnEngines(t, func(t *testing.T, dsn string) {
		o, k, _ := certObmd(t, dsn)
		o.AddSimNode("np")
		cert := k.sign("-I", "bob", "-n", "np", "-V", "+1s:+1h", "-O", "no-pty")
		con := obmdtest.StartPTY(t, exec.Command("ssh", obmdtest.SSHArgs(o.SSHAddr(), "np", append([]string{"-o", "PasswordAuthentication=no",
			"-o", "KbdInteractiveAuthentication=no"}, k.args(cert)...)...)...))
		con.Expect("PTY allocation request failed")
		con.Expect("does not permit the console")
		if code := con.Exit(); code != 3 {
			t.Errorf("ssh at a terminal without permit-pty: exit %d, want 3", code)
		}
		if res := o.OpenSSH("np", "", append(k.args(cert), "-tt")); res.Code != 255 || !strings.Contains(res.Stderr, "PTY allocation request failed") {
			t.Errorf("ssh -tt without permit-pty: got %v, want OpenSSH to give up", res)
		}
		certOpens(o, k, "np", cert, "exec without permit-pty")
		c, err := o.Dial("np", gossh.PublicKeys(k.signer(cert)))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		s, err := c.NewSession()
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		if err := s.RequestPty("xterm", 24, 80, gossh.TerminalModes{}); err == nil {
			t.Errorf("x/crypto pty-req without permit-pty: accepted, want refused")
		}
		if res, err := obmdtest.RunSession(c, "console"); err != nil || res.Code != 3 || !strings.Contains(res.Stderr, "does not permit the console") {
			t.Errorf("exec console without permit-pty: got %v, %v; want exit 3 and why", res, err)
		}
	})
}

// TestCertKeyProof (CVE-2024-45337): offering another person's
// certificate (public, so anyone may have it) without its private key
// logs in no one; OpenSSH given someone else's certificate file and its
// own key asks about the certificate (obmd accepts the offer), cannot
// sign with it, and logs in with its own key: the audit and the session
// name that key, never the certificate accepted earlier in the handshake.
func TestCertKeyProof(t *testing.T) {
	t.Parallel()
	o, k, _ := certObmd(t, "")
	o.AddSimNode("kp")
	aliceCert := k.sign("-I", "alice", "-n", "kp", "-V", "+1s:+1h", "-z", "1")
	alice := k.signer(aliceCert)
	mallory, malloryKey := obmdtest.NewKey(t)
	fp := o.AddKey("kp", mallory.PublicKey())
	if c, err := o.Dial("kp", gossh.PublicKeys(obmdtest.Impostor{Key: alice.PublicKey(), Signer: mallory})); err == nil {
		c.Close()
		t.Fatal("the certificate without its private key authenticated")
	}
	con := obmdtest.SSHPTY(t, o.SSHAddr(), "kp", "", []string{"-v", "-i", malloryKey, "-o", "CertificateFile=" + aliceCert})
	con.Out.Wait(t, "console banner", 0, "console of kp")
	if got := con.Out.String(); !strings.Contains(got, "Server accepts key: "+aliceCert+" ED25519-CERT") {
		t.Fatalf("OpenSSH never had the certificate accepted (the premise): %q", obmdtest.Tail(got, 2000))
	}
	if v := o.Sessions("kp"); len(v) != 1 || v[0].User != "key "+fp || v[0].Cert.KeyID != "" {
		t.Errorf("GET /v1/sessions: got %+v, want mallory's key", v)
	}
	var ok []string
	for _, e := range o.Audit("kp") {
		if e.Action == "auth" && e.Result == "ok" {
			ok = append(ok, e.Actor+" "+e.Detail)
		}
	}
	if len(ok) != 1 || ok[0] != "ssh:publickey key "+fp {
		t.Errorf("successful logins audited: got %q, want mallory's key only", ok)
	}
}

// TestCertRevocationsPurged: a revocation is kept until the certificates
// it names would have expired anyway (its expiry, the skew and a margin),
// then deleted by the purge every certs.purge_interval; one without an
// expiry stays.
func TestCertRevocationsPurged(t *testing.T) {
	t.Parallel()
	o := obmdtest.Start(t, func(c *daemon.Config) { c.Certs.PurgeInterval = 50 * time.Millisecond })
	past, future := time.Now().Add(-time.Hour), time.Now().Add(time.Hour)
	o.MustAPI(200, "POST", "/v1/cas/revoked", map[string]any{"serial": 1, "expires": past.Format(time.RFC3339)})
	o.MustAPI(200, "POST", "/v1/cas/revoked", map[string]any{"serial": 2, "expires": future.Unix()})
	o.MustAPI(200, "POST", "/v1/cas/revoked", map[string]any{"key_id": "alice"})
	obmdtest.WaitUntil(t, "the expired revocation purged", func() bool {
		return !strings.Contains(string(o.MustAPI(200, "GET", "/v1/cas/revoked", nil)), `"serial":1,`)
	})
	got := string(o.MustAPI(200, "GET", "/v1/cas/revoked", nil))
	if !strings.Contains(got, `"serial":2,`) || !strings.Contains(got, `"key_id":"alice"`) {
		t.Errorf("GET /v1/cas/revoked after the purge: got %s, want serial 2 and key id alice kept", got)
	}
}

// TestCertKeygenPlusOneMinute: the line, ssh-keygen -s ca -I id
// -n node-17 -V +1m -z 42, whose start ssh-keygen backdates by 60 to 119
// s, logs in to a node whose tenancy began before that (as a node HIL
// registered minutes ago). Waiting minutes is out of a test's budget, so
// the node's last access change is moved five minutes back in the
// database instead; just after a change the same line is refused
// (TestCertLogin).
func TestCertKeygenPlusOneMinute(t *testing.T) {
	t.Parallel()
	obmdtest.OnEngines(t, func(t *testing.T, dsn string) {
		o, k, _ := certObmd(t, dsn)
		o.AddSimNode("node-17")
		cert := k.sign("-I", "id", "-n", "node-17", "-V", "+1m", "-z", "42")
		certRefused(o, k, "node-17", cert, "-V +1m just after the node's registration")
		backdateChanges(t, dsn, 5*time.Minute)
		certOpens(o, k, "node-17", cert, "-V +1m on a node registered five minutes ago")
	})
}

// backdateChanges moves every recorded access change of the database at
// dsn back by d.
func backdateChanges(t *testing.T, dsn string, d time.Duration) {
	t.Helper()
	storeRaw(t, dsn, `UPDATE access_changes SET at = at - ?`, d.Milliseconds())
}

// storeRaw runs query with args on the database at dsn (the daemon's, as
// it is open), as an operator or an older obmd would.
func storeRaw(t *testing.T, dsn, query string, args ...any) {
	t.Helper()
	// SQLite as obmd opens it (db/open.go): the same VFS, whose wal-index
	// is in this process's heap, and a wait for the daemon's writer.
	driver, name := "sqlite", dsn+"?vfs=unix-excl&_pragma=busy_timeout%2810000%29&_txlock=immediate"
	if after, ok := strings.CutPrefix(dsn, "mysql://"); ok {
		driver, name = "mysql", after
	}
	if strings.HasPrefix(dsn, "postgres://") {
		// PostgreSQL numbers its placeholders ($1, $2, ...).
		driver, name = "pgx", dsn
		for i := 1; strings.Contains(query, "?"); i++ {
			query = strings.Replace(query, "?", "$"+strconv.Itoa(i), 1)
		}
	}
	conn, err := sql.Open(driver, name)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.Exec(query, args...); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
}

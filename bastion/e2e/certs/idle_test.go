package certs

// Idle connections end with their credential (issue 16's gap): an OpenSSH
// ControlMaster (`ssh -N -M`) that logged in with a certificate, or a
// token, and holds no session exits when what would cut its sessions
// happens: its serial or key id revoked, its CA removed, its expiry, an
// access change of its node. One holding a session exits once the
// session has said why.

import (
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/obmd/obmd/bastion/e2e/obmdtest"
)

// idleBound is how soon after the change an idle connection must be
// closed: the cut is done before the admin call returns, so this is the
// registry's bound (cut_wait, 2 s) with room for a loaded machine.
const idleBound = 5 * time.Second

// idleCert signs a certificate of k for label, key id id and serial.
func idleCert(k *issuer, label, id string, serial int) []string {
	return k.args(k.sign("-I", id, "-n", label, "-V", "+1s:+1h", "-z", fmt.Sprint(serial)))
}

// TestCertIdleClosed: revoking a certificate's serial, or its key id, or
// removing its CA, closes the idle connections that logged in with it
// (the ControlMaster exits), audited with the reason; another
// certificate's connection, another node's and a token's stay usable.
func TestCertIdleClosed(t *testing.T) {
	t.Parallel()
	obmdtest.OnEngines(t, func(t *testing.T, dsn string) {
		o, k, fp := certObmd(t, dsn)
		o.AddSimNode("ic1")
		token := o.AddSimNode("ic2")
		addr := o.SSHAddr()
		bySerial := idleMaster(t, "serial 11's master", addr, "ic1", "", idleCert(k, "ic1", "ivy", 11))
		byKeyID := idleMaster(t, "jay@ic1's master", addr, "ic1", "", idleCert(k, "ic1", "jay@ic1", 12))
		other := idleMaster(t, "ic2's certificate master", addr, "ic2", "", idleCert(k, "ic2", "kim", 13))
		tok := idleMaster(t, "ic2's token master", addr, "ic2", token, nil)

		start := time.Now()
		o.MustAPI(200, "POST", "/v1/cas/revoked", map[string]any{"serial": 11, "ca": fp})
		t.Logf("serial: closed %v after the call began", bySerial.closed(start, idleBound).Round(time.Millisecond))
		closedAudit(o, "ic1", "ssh:cert hil:ivy serial 11", "access to ic1 was revoked (certificate revoked)")
		for _, m := range []*master{byKeyID, other, tok} {
			m.alive("serial 11's revocation")
		}

		start = time.Now()
		o.MustAPI(200, "POST", "/v1/cas/revoked", map[string]any{"key_id": "jay@ic1"})
		t.Logf("key id: closed %v after the call began", byKeyID.closed(start, idleBound).Round(time.Millisecond))
		closedAudit(o, "ic1", "ssh:cert hil:jay@ic1 serial 12", "access to ic1 was revoked (certificate revoked)")
		other.alive("jay@ic1's revocation")

		start = time.Now()
		o.MustAPI(200, "DELETE", "/v1/cas/"+url.PathEscape(fp), nil)
		t.Logf("CA removal: closed %v after the call began", other.closed(start, idleBound).Round(time.Millisecond))
		closedAudit(o, "ic2", "ssh:cert hil:kim serial 13", "access to ic2 was revoked (certificate authority removed)")
		tok.alive("the CA's removal")
	})
}

// TestCertIdleExpiry: an idle connection that logged in with a
// certificate is closed at the certificate's valid_before, not before and
// not a skew (the default, 60 s) later; one with a longer certificate
// stays.
func TestCertIdleExpiry(t *testing.T) {
	t.Parallel()
	obmdtest.OnEngines(t, func(t *testing.T, dsn string) {
		o, k, _ := certObmd(t, dsn)
		o.AddSimNode("ie")
		now := time.Now().Truncate(time.Second)
		end := now.Add(5 * time.Second)
		short := idleMaster(t, "the short certificate's master", o.SSHAddr(), "ie", "",
			k.args(k.sign("-I", "lee", "-n", "ie", "-V", window(now.Add(time.Second), end), "-z", "21")))
		long := idleMaster(t, "the long certificate's master", o.SSHAddr(), "ie", "", idleCert(k, "ie", "max", 22))
		d := short.closed(end, 2*time.Second)
		if d < 0 {
			t.Errorf("closed %v before the certificate's end", -d)
		}
		t.Logf("closed %v after the certificate's end", d.Round(time.Millisecond))
		closedAudit(o, "ie", "ssh:cert hil:lee serial 21", "your certificate for ie expired")
		long.alive("the other certificate's expiry")
	})
}

// TestIdleAccessChange: an access change of a node (here a token
// rotation) closes every connection logged in to it, whatever the
// credential: an idle one at once; one holding a session (a console
// through a ControlMaster) once the session has been cut and said why, so
// that the master does not stay up refusing each new session. Another
// node's connections stay.
func TestIdleAccessChange(t *testing.T) {
	t.Parallel()
	obmdtest.OnEngines(t, func(t *testing.T, dsn string) {
		o, k, _ := certObmd(t, dsn)
		token := o.AddSimNode("ia1")
		o.AddSimNode("ia2")
		addr := o.SSHAddr()
		idle := idleMaster(t, "ia1's idle certificate master", addr, "ia1", "", idleCert(k, "ia1", "ned", 31))
		busy := idleMaster(t, "ia1's busy certificate master", addr, "ia1", "", idleCert(k, "ia1", "ola", 32))
		busyTok := idleMaster(t, "ia1's busy token master", addr, "ia1", token, nil)
		other := idleMaster(t, "ia2's master", addr, "ia2", "", idleCert(k, "ia2", "pat", 33))
		stderrs := map[*master]*obmdtest.Buffer{}
		ended := map[*master]chan struct{}{}
		for _, m := range []*master{busy, busyTok} {
			stderrs[m], ended[m] = m.start("console")
			stderrs[m].Wait(t, m.name+"'s console banner", 0, "console of ia1")
		}
		obmdtest.WaitUntil(t, "two consoles", func() bool { return o.SessionKinds("ia1") == "console,console" })

		start := time.Now()
		o.Rotate("ia1")
		t.Logf("idle: closed %v after the call began", idle.closed(start, idleBound).Round(time.Millisecond))
		for _, m := range []*master{busy, busyTok} {
			select {
			case <-ended[m]:
			case <-time.After(obmdtest.Timeout):
				t.Fatalf("%s: its console did not end", m.name)
			}
			if got := stderrs[m].String(); !strings.Contains(got, "access to ia1 was revoked (token rotated)") {
				t.Errorf("%s: console's stderr %q, want the reason", m.name, got)
			}
			t.Logf("%s: closed %v after the call began", m.name, m.closed(start, idleBound).Round(time.Millisecond))
		}
		closedAudit(o, "ia1", "ssh:cert hil:ned serial 31", "access to ia1 was revoked (token rotated)")
		closedAudit(o, "ia1", "ssh:cert hil:ola serial 32", "access to ia1 was revoked (token rotated)")
		closedAudit(o, "ia1", "ssh:keyboard-interactive", "access to ia1 was revoked (token rotated)") // sshpass answers its prompt
		other.alive("another node's rotation")
	})
}

package sshcert

import (
	"crypto/rand"
	"net/netip"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	gossh "golang.org/x/crypto/ssh"

	"github.com/obmd/obmd/keys"
)

// trust is a set of trusted CAs: fingerprint -> name.
type trust map[string]string

func (t trust) Authority(fp string) (string, bool) {
	name, ok := t[fp]
	return name, ok
}

// revoked is a revocation set; it records what it was asked.
type revoked struct {
	serials map[uint64]bool
	keyIDs  map[string]bool
	asked   []string // "ca serial keyid"
}

func (r *revoked) Revoked(ca string, serial uint64, keyID string) (bool, bool) {
	r.asked = append(r.asked, ca+" "+strconv.FormatUint(serial, 10)+" "+keyID)
	return r.serials[serial], r.keyIDs[keyID]
}

// newSigner returns a fresh ed25519 key as a signer.
func newSigner(t testing.TB) gossh.Signer {
	t.Helper()
	s, err := keys.LoadOrCreateHostKey(filepath.Join(t.TempDir(), "key"))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// clock is the policy's clock in the x/crypto tests: 2030-01-02 03:04:05.
var clock = time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)

// world is one test's CA, user key, and the login they are checked for.
type world struct {
	ca, other gossh.Signer // other is an untrusted CA
	user      gossh.PublicKey
	trust     trust
	revoked   *revoked
}

func newWorld(t testing.TB) *world {
	t.Helper()
	w := &world{ca: newSigner(t), other: newSigner(t), user: newSigner(t).PublicKey(),
		revoked: &revoked{serials: map[uint64]bool{}, keyIDs: map[string]bool{}}}
	w.trust = trust{keys.Fingerprint(w.ca.PublicKey()): "hil"}
	return w
}

// cert returns a certificate for node-17 valid from 10 minutes before the
// clock to 10 minutes after, serial 42, key id alice, with permit-pty,
// changed by edit before w.ca signs it.
func (w *world) cert(t testing.TB, edit func(c *gossh.Certificate)) *gossh.Certificate {
	t.Helper()
	return w.signBy(t, w.ca, edit)
}

func (w *world) signBy(t testing.TB, ca gossh.Signer, edit func(c *gossh.Certificate)) *gossh.Certificate {
	t.Helper()
	c := &gossh.Certificate{
		Key:             w.user,
		Serial:          42,
		CertType:        gossh.UserCert,
		KeyId:           "alice",
		ValidPrincipals: []string{"node-17"},
		ValidAfter:      uint64(clock.Add(-10 * time.Minute).Unix()),
		ValidBefore:     uint64(clock.Add(10 * time.Minute).Unix()),
		Permissions: gossh.Permissions{Extensions: map[string]string{
			"permit-pty": "", "permit-port-forwarding": "",
		}},
	}
	if edit != nil {
		edit(c)
	}
	if err := c.SignCert(rand.Reader, ca); err != nil {
		t.Fatalf("sign: %v", err)
	}
	return c
}

// login is the login the x/crypto tests check: node-17 (principal
// project-x), whose tenancy began an hour before the clock, from 127.0.0.1.
func (w *world) login() Login {
	return Login{Node: "node-17", Principals: []string{"project-x"}, TenancyStart: clock.Add(-time.Hour),
		Client: netip.MustParseAddr("127.0.0.1"), Authorities: w.trust, Revocations: w.revoked}
}

// policyAt returns a policy with the default skew whose clock reads now.
func policyAt(t testing.TB, now time.Time) *Policy {
	t.Helper()
	p, err := New(Config{Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

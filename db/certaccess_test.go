package db

import (
	"context"
	"crypto/rand"
	"errors"
	"net/netip"
	"path/filepath"
	"slices"
	"testing"
	"time"

	gossh "golang.org/x/crypto/ssh"

	"github.com/obmd/obmd/db/dbtest"
	"github.com/obmd/obmd/keys"
	"github.com/obmd/obmd/keys/sshcert"
)

func testCertAccess(t *testing.T, s *Store, _ testEnv) {
	ctx := context.Background()
	if _, err := s.CertAccess(ctx, "nope", caOne.Fingerprint, 1, "alice"); !errors.Is(err, ErrNotFound) {
		t.Errorf("unknown node: got %v, want %v", err, ErrNotFound)
	}
	n := mustCreate(t, s, "n1")
	a, err := s.CertAccess(ctx, "n1", caOne.Fingerprint, 42, "alice")
	if err != nil {
		t.Fatal(err)
	}
	// The creation's change is recorded first in its transaction.
	start := a.TenancyStart
	if a.Epoch != n.Epoch || start.After(n.CreatedAt) || n.CreatedAt.Sub(start) > time.Second || a.Trusted ||
		a.RevokedSerial || a.RevokedKeyID || a.Principals == nil || len(a.Principals) != 0 {
		t.Errorf("new node, untrusted CA: got %+v, want epoch %d from its creation at %v, no principal, untrusted, not revoked",
			a, n.Epoch, n.CreatedAt)
	}

	mustAddCA(t, s, caOne)
	if _, err := s.SetNodePrincipals(ctx, "n1", []string{"project-y", "project-x"}); err != nil {
		t.Fatal(err)
	}
	for _, r := range []Revocation{{Kind: CredSerial, CA: caOne.Fingerprint, Serial: 42}, {Kind: CredKeyID, KeyID: "alice"}} {
		if _, err := s.Revoke(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	a, err = s.CertAccess(ctx, "n1", caOne.Fingerprint, 42, "alice")
	if err != nil {
		t.Fatal(err)
	}
	if !a.Trusted || a.CAName != "hil" || !a.RevokedSerial || !a.RevokedKeyID ||
		!slices.Equal(a.Principals, []string{"project-x", "project-y"}) || a.Epoch != n.Epoch || !a.TenancyStart.Equal(start) {
		t.Errorf("got %+v, want hil trusted, revoked both ways, principals project-x,y, tenancy unchanged", a)
	}
	// It answers for the certificate it was read for only.
	if name, ok := a.Authority(caOne.Fingerprint); !ok || name != "hil" {
		t.Errorf("authority of its CA: got %q, %v, want hil", name, ok)
	}
	if _, ok := a.Authority(caTwo.Fingerprint); ok {
		t.Error("authority of another CA: got trusted, want untrusted")
	}
	b, _ := s.CertAccess(ctx, "n1", caOne.Fingerprint, 7, "bob")
	if bySerial, byKeyID := b.Revoked(caOne.Fingerprint, 7, "bob"); bySerial || byKeyID {
		t.Errorf("serial 7 bob: got revoked %v, %v, want neither", bySerial, byKeyID)
	}
	for _, other := range []struct {
		ca     string
		serial uint64
		keyID  string
	}{{caTwo.Fingerprint, 7, "bob"}, {caOne.Fingerprint, 8, "bob"}, {caOne.Fingerprint, 7, "bob2"}} {
		if bySerial, byKeyID := b.Revoked(other.ca, other.serial, other.keyID); !bySerial || !byKeyID {
			t.Errorf("asked about %v, read for serial 7 bob: got %v, %v, want revoked", other, bySerial, byKeyID)
		}
	}

	// It saw every change up to the latest, credential changes included.
	latest, _ := s.LatestChange(ctx)
	if a.Seen != latest || a.Seen <= a.Epoch {
		t.Errorf("seen: got %d, want the latest epoch %d (a revocation's, above the node's %d)", a.Seen, latest, a.Epoch)
	}

	// The tenancy starts at the node's last access change.
	e, err := s.SetToken(ctx, "n1", keys.HashToken("t"))
	if err != nil {
		t.Fatal(err)
	}
	a, _ = s.CertAccess(ctx, "n1", caOne.Fingerprint, 7, "bob")
	if a.Epoch != e || a.Seen != e || !a.TenancyStart.After(n.CreatedAt) {
		t.Errorf("after rotation: got epoch %d from %v, want %d from after %v", a.Epoch, a.TenancyStart, e, n.CreatedAt)
	}
}

// testCertLogin: the store and the policy together, with a certificate
// made by x/crypto: a login is accepted, then refused after a revocation,
// after its CA's removal, and after a rotation (a certificate from before
// the node's last access change).
func testCertLogin(t *testing.T, s *Store, _ testEnv) {
	ctx := context.Background()
	ca, user := signer(t), signer(t)
	fp := keys.Fingerprint(ca.PublicKey())
	if _, err := s.AddCA(ctx, CA{Fingerprint: fp, Name: "hil", Line: "l"}); err != nil {
		t.Fatal(err)
	}
	n := mustCreate(t, s, "node-17")
	now := s.now()
	cert := &gossh.Certificate{Key: user.PublicKey(), Serial: 42, CertType: gossh.UserCert, KeyId: "alice",
		ValidPrincipals: []string{"node-17"}, ValidAfter: uint64(n.CreatedAt.Unix() + 1),
		ValidBefore: uint64(now.Add(time.Hour).Unix())}
	if err := cert.SignCert(rand.Reader, ca); err != nil {
		t.Fatal(err)
	}
	p, err := sshcert.New(sshcert.Config{Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	login := func() error {
		t.Helper()
		a, err := s.CertAccess(ctx, "node-17", fp, 42, "alice")
		if err != nil {
			t.Fatal(err)
		}
		_, err = p.Check(cert, sshcert.Login{Node: "node-17", Principals: a.Principals, TenancyStart: a.TenancyStart,
			Client: netip.MustParseAddr("127.0.0.1"), Authorities: a, Revocations: a})
		return err
	}
	if err := login(); err != nil {
		t.Fatalf("login: got %v, want accepted", err)
	}
	if _, err := s.Revoke(ctx, Revocation{Kind: CredKeyID, CA: fp, KeyID: "alice"}); err != nil {
		t.Fatal(err)
	}
	if err := login(); !errors.Is(err, sshcert.ErrRevokedKeyID) {
		t.Errorf("after revocation: got %v, want %v", err, sshcert.ErrRevokedKeyID)
	}
	if _, err := s.PurgeRevocations(ctx, now.Add(time.Hour)); err != nil { // kept for good: not purged
		t.Fatal(err)
	}
	if err := login(); !errors.Is(err, sshcert.ErrRevokedKeyID) {
		t.Errorf("after a purge: got %v, want %v", err, sshcert.ErrRevokedKeyID)
	}
	if _, _, err := s.DeleteCA(ctx, fp); err != nil {
		t.Fatal(err)
	}
	if err := login(); !errors.Is(err, sshcert.ErrUntrustedCA) {
		t.Errorf("after the CA's removal: got %v, want %v", err, sshcert.ErrUntrustedCA)
	}
	// Trusted again, revocation gone (a fresh store would have none):
	// the certificate opens the node until its access changes.
	if _, err := s.AddCA(ctx, CA{Fingerprint: fp, Name: "hil", Line: "l"}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.w.ExecContext(ctx, `DELETE FROM cert_revocations`); err != nil {
		t.Fatal(err)
	}
	if err := login(); err != nil {
		t.Fatalf("trusted again: got %v, want accepted", err)
	}
	s.now = func() time.Time { return now.Add(2 * time.Second) } // the rotation comes after valid_after
	if _, err := s.SetToken(ctx, "node-17", keys.HashToken("t")); err != nil {
		t.Fatal(err)
	}
	if err := login(); !errors.Is(err, sshcert.ErrBeforeTenancy) {
		t.Errorf("after a rotation: got %v, want %v", err, sshcert.ErrBeforeTenancy)
	}
}

// signer returns a fresh ed25519 key.
func signer(t testing.TB) gossh.Signer {
	t.Helper()
	s, err := keys.LoadOrCreateHostKey(filepath.Join(t.TempDir(), "key"))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// BenchmarkLoginRead compares the read of a certificate login (CertAccess:
// node, tenancy, principals, CA and revocations in one statement) with
// that of a token login (Access), on each engine.
func BenchmarkLoginRead(b *testing.B) {
	for _, e := range dbtest.Engines() {
		b.Run(e.Name, func(b *testing.B) {
			s := openTestStore(b, e.DSN(b))
			ctx := context.Background()
			n, err := s.CreateNode(ctx, Node{Label: "node-17", Type: "mock", InfoSealed: []byte("x")})
			if err != nil {
				b.Fatal(err)
			}
			if _, err := s.SetToken(ctx, n.Label, keys.HashToken("t")); err != nil {
				b.Fatal(err)
			}
			if _, err := s.SetNodePrincipals(ctx, n.Label, []string{"project-x", "project-y"}); err != nil {
				b.Fatal(err)
			}
			if _, err := s.AddCA(ctx, caOne); err != nil {
				b.Fatal(err)
			}
			for i := range 1000 {
				if _, err := s.Revoke(ctx, Revocation{Kind: CredSerial, CA: caOne.Fingerprint, Serial: uint64(i)}); err != nil {
					b.Fatal(err)
				}
			}
			b.Run("token", func(b *testing.B) {
				for b.Loop() {
					if _, err := s.Access(ctx, n.Label); err != nil {
						b.Fatal(err)
					}
				}
			})
			b.Run("cert", func(b *testing.B) {
				for b.Loop() {
					if _, err := s.CertAccess(ctx, n.Label, caOne.Fingerprint, 5000, "alice"); err != nil {
						b.Fatal(err)
					}
				}
			})
		})
	}
}

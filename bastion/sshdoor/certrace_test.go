package sshdoor_test

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"sync/atomic"
	"testing"
	"time"

	gossh "golang.org/x/crypto/ssh"

	"github.com/obmd/obmd/bastion/access"
	"github.com/obmd/obmd/db"
	"github.com/obmd/obmd/db/dbtest"
	"github.com/obmd/obmd/keys"
)

// certRaceStore is the database, with a hook run once right after a
// certificate login's read (CertAccess).
type certRaceStore struct {
	*db.Store
	afterRead atomic.Pointer[func()]
}

func (s *certRaceStore) CertAccess(ctx context.Context, label, ca string, serial uint64, keyID string) (db.CertAccess, error) {
	a, err := s.Store.CertAccess(ctx, label, ca, serial, keyID)
	if f := s.afterRead.Swap(nil); f != nil {
		(*f)()
	}
	return a, err
}

// AccessAt reads, whatever the mark.
func (s *certRaceStore) AccessAt(ctx context.Context, label string, _ uint64) (db.Access, error) {
	return s.Store.Access(ctx, label)
}

// newCertSigner trusts a new CA in st and returns a signer of a
// certificate it signed for label with serial, valid for an hour.
func newCertSigner(t *testing.T, st *db.Store, label string, serial uint64) gossh.Signer {
	t.Helper()
	_, caKey, _ := ed25519.GenerateKey(rand.Reader)
	ca, err := gossh.NewSignerFromKey(caKey)
	if err != nil {
		t.Fatal(err)
	}
	line := string(gossh.MarshalAuthorizedKey(ca.PublicKey()))
	if _, err := st.AddCA(context.Background(), db.CA{Fingerprint: keys.Fingerprint(ca.PublicKey()), Name: "hil", Line: line}); err != nil {
		t.Fatal(err)
	}
	_, userKey, _ := ed25519.GenerateKey(rand.Reader)
	user, err := gossh.NewSignerFromKey(userKey)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	cert := &gossh.Certificate{Key: user.PublicKey(), Serial: serial, CertType: gossh.UserCert, KeyId: "alice",
		ValidPrincipals: []string{label}, ValidAfter: uint64(now.Add(2 * time.Second).Unix()),
		ValidBefore: uint64(now.Add(time.Hour).Unix())}
	if err := cert.SignCert(rand.Reader, ca); err != nil {
		t.Fatal(err)
	}
	s, err := gossh.NewCertSigner(cert, user)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestCertLoginRacingRevocation, on SQLite and MariaDB: a certificate
// login that read the database just before its serial was revoked, the
// revocation applied here before the login's connection is watched, has
// its connection closed at once (the watch reads the certificate's access
// again); the same certificate's next login is refused.
func TestCertLoginRacingRevocation(t *testing.T) {
	for _, eng := range dbtest.Engines() {
		t.Run(eng.Name, func(t *testing.T) {
			ctx := context.Background()
			st, log := raceDB(t, eng)
			store := &certRaceStore{Store: st}
			rev := newRevoker(st, 5*time.Second, log)
			addr := serveBastion(t, store, &ranRunner{}, rev, log)
			signer := newCertSigner(t, st, "n1", 9)
			dial := func() (*gossh.Client, error) {
				return gossh.Dial("tcp", addr, &gossh.ClientConfig{User: "n1", Auth: []gossh.AuthMethod{gossh.PublicKeys(signer)},
					HostKeyCallback: gossh.InsecureIgnoreHostKey(), Timeout: 10 * time.Second})
			}
			c, err := dial()
			if err != nil {
				t.Fatalf("login racing nothing: %v", err)
			}
			c.Close()

			revoke := func() {
				err := rev.ChangeCred(ctx, access.CredChange{Cred: db.CredChange{Kind: db.CredSerial, Serial: 9},
					Why: db.ReasonCertRevoked, Do: func(ctx context.Context) (int64, error) {
						return st.Revoke(ctx, db.Revocation{Kind: db.CredSerial, Serial: 9})
					}})
				if err != nil {
					t.Errorf("revoke: %v", err)
				}
			}
			store.afterRead.Store(&revoke)
			if c, err := dial(); err == nil {
				t.Error("login racing a revocation before its watch: logged in, want its connection closed at once")
				c.Close()
			}
			if store.afterRead.Load() != nil { // else the next login would race it, and pass all the same
				t.Fatal("the login racing a revocation never read the certificate's access: nothing raced")
			}
			if c, err := dial(); err == nil {
				t.Error("the revoked certificate logged in")
				c.Close()
			}
		})
	}
}

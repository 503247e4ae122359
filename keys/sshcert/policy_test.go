package sshcert

import (
	"crypto/rand"
	"crypto/rsa"
	"errors"
	"math"
	"net/netip"
	"strings"
	"testing"
	"time"
	"unicode"

	gossh "golang.org/x/crypto/ssh"

	"github.com/obmd/obmd/keys"
)

// TestCheck: certificates made with x/crypto, each refused for its reason
// or accepted with the right grant.
func TestCheck(t *testing.T) {
	w := newWorld(t)
	skew := DefaultSkew
	after, before := clock.Add(-10*time.Minute), clock.Add(10*time.Minute)
	tests := []struct {
		name  string
		cert  func() *gossh.Certificate
		login func(l *Login)
		now   time.Time // default: clock
		want  error     // nil: accepted
	}{
		{name: "accepted", cert: func() *gossh.Certificate { return w.cert(t, nil) }},
		{name: "node principal", cert: func() *gossh.Certificate {
			return w.cert(t, func(c *gossh.Certificate) { c.ValidPrincipals = []string{"other", "project-x"} })
		}},
		{name: "wrong principal", want: ErrPrincipal, cert: func() *gossh.Certificate {
			return w.cert(t, func(c *gossh.Certificate) { c.ValidPrincipals = []string{"node-18", "project-y"} })
		}},
		{name: "principal of another node", want: ErrPrincipal, cert: func() *gossh.Certificate {
			return w.cert(t, func(c *gossh.Certificate) { c.ValidPrincipals = []string{"project-x"} })
		}, login: func(l *Login) { l.Principals = nil }},
		{name: "principal case differs", want: ErrPrincipal, cert: func() *gossh.Certificate {
			return w.cert(t, func(c *gossh.Certificate) { c.ValidPrincipals = []string{"Node-17"} })
		}},
		{name: "no node", want: ErrPrincipal, cert: func() *gossh.Certificate { return w.cert(t, nil) },
			login: func(l *Login) { l.Node = "" }},
		{name: "expired", want: ErrExpired, now: before,
			cert: func() *gossh.Certificate { return w.cert(t, nil) }},
		{name: "expired, within what was the skew", want: ErrExpired, now: before.Add(skew - time.Nanosecond),
			cert: func() *gossh.Certificate { return w.cert(t, nil) }},
		{name: "just before valid_before", now: before.Add(-time.Nanosecond),
			cert: func() *gossh.Certificate { return w.cert(t, nil) }},
		{name: "not yet valid", want: ErrNotYetValid, now: after.Add(-skew - time.Nanosecond),
			cert: func() *gossh.Certificate { return w.cert(t, nil) }},
		{name: "start within skew", now: after.Add(-skew),
			cert: func() *gossh.Certificate { return w.cert(t, nil) }},
		{name: "never expires", now: clock.AddDate(50, 0, 0), cert: func() *gossh.Certificate {
			return w.cert(t, func(c *gossh.Certificate) { c.ValidBefore = gossh.CertTimeInfinity })
		}},
		{name: "valid_before past int64", want: ErrExpired, cert: func() *gossh.Certificate {
			return w.cert(t, func(c *gossh.Certificate) { c.ValidBefore = gossh.CertTimeInfinity - 1 })
		}},
		{name: "valid_after past int64", want: ErrNotYetValid, cert: func() *gossh.Certificate {
			return w.cert(t, func(c *gossh.Certificate) {
				c.ValidAfter, c.ValidBefore = math.MaxInt64+1, gossh.CertTimeInfinity
			})
		}},
		{name: "empty window", want: ErrExpired, cert: func() *gossh.Certificate {
			return w.cert(t, func(c *gossh.Certificate) { c.ValidBefore = c.ValidAfter })
		}},
		{name: "before the tenancy", want: ErrBeforeTenancy, cert: func() *gossh.Certificate { return w.cert(t, nil) },
			login: func(l *Login) { l.TenancyStart = after.Add(time.Second) }},
		{name: "before the tenancy by less than a second", want: ErrBeforeTenancy,
			cert:  func() *gossh.Certificate { return w.cert(t, nil) },
			login: func(l *Login) { l.TenancyStart = after.Add(time.Millisecond) }},
		{name: "before the tenancy by less than the skew", want: ErrBeforeTenancy,
			cert:  func() *gossh.Certificate { return w.cert(t, nil) },
			login: func(l *Login) { l.TenancyStart = after.Add(skew / 2) }},
		{name: "from the tenancy start", cert: func() *gossh.Certificate { return w.cert(t, nil) },
			login: func(l *Login) { l.TenancyStart = after }},
		{name: "tenancy unknown", want: ErrBeforeTenancy, cert: func() *gossh.Certificate { return w.cert(t, nil) },
			login: func(l *Login) { l.TenancyStart = time.Time{} }},
		{name: "valid always", want: ErrBeforeTenancy, cert: func() *gossh.Certificate {
			return w.cert(t, func(c *gossh.Certificate) { c.ValidAfter = 0 })
		}},
		{name: "untrusted CA", want: ErrUntrustedCA, cert: func() *gossh.Certificate { return w.signBy(t, w.other, nil) }},
		{name: "no CA list", want: ErrUntrustedCA, cert: func() *gossh.Certificate { return w.cert(t, nil) },
			login: func(l *Login) { l.Authorities = nil }},
		{name: "forged", want: ErrSignature, cert: func() *gossh.Certificate {
			c := w.cert(t, nil)
			c.ValidPrincipals = []string{"node-17", "node-18"} // after signing
			return c
		}},
		{name: "claims a trusted CA, signed by another", want: ErrSignature, cert: func() *gossh.Certificate {
			c := w.signBy(t, w.other, nil)
			c.SignatureKey = w.ca.PublicKey()
			return c
		}},
		{name: "host certificate", want: ErrNotUserCert, cert: func() *gossh.Certificate {
			return w.cert(t, func(c *gossh.Certificate) { c.CertType = gossh.HostCert })
		}},
		{name: "unknown critical option", want: ErrOption, cert: func() *gossh.Certificate {
			return w.cert(t, func(c *gossh.Certificate) { c.CriticalOptions = map[string]string{"foo@example.com": "x"} })
		}},
		{name: "force-command", want: ErrOption, cert: func() *gossh.Certificate {
			return w.cert(t, func(c *gossh.Certificate) { c.CriticalOptions = map[string]string{"force-command": "power-status"} })
		}},
		{name: "verify-required", want: ErrOption, cert: func() *gossh.Certificate {
			return w.cert(t, func(c *gossh.Certificate) { c.CriticalOptions = map[string]string{"verify-required": ""} })
		}},
		{name: "source-address matches", cert: func() *gossh.Certificate {
			return w.cert(t, func(c *gossh.Certificate) {
				c.CriticalOptions = map[string]string{"source-address": "10.0.0.0/8,127.0.0.1"}
			})
		}},
		{name: "source-address of a mapped client", cert: func() *gossh.Certificate {
			return w.cert(t, func(c *gossh.Certificate) { c.CriticalOptions = map[string]string{"source-address": "127.0.0.0/8"} })
		}, login: func(l *Login) { l.Client = netip.MustParseAddr("::ffff:127.0.0.1") }},
		{name: "source-address mismatch", want: ErrSourceAddress, cert: func() *gossh.Certificate {
			return w.cert(t, func(c *gossh.Certificate) {
				c.CriticalOptions = map[string]string{"source-address": "10.0.0.0/8,::1"}
			})
		}},
		{name: "source-address with a bad entry", want: ErrSourceAddress, cert: func() *gossh.Certificate {
			return w.cert(t, func(c *gossh.Certificate) {
				c.CriticalOptions = map[string]string{"source-address": "127.0.0.1,10.0.0.1/8"}
			})
		}},
		{name: "source-address without a client address", want: ErrSourceAddress, cert: func() *gossh.Certificate {
			return w.cert(t, func(c *gossh.Certificate) { c.CriticalOptions = map[string]string{"source-address": "0.0.0.0/0"} })
		}, login: func(l *Login) { l.Client = netip.Addr{} }},
		{name: "revoked serial", want: ErrRevokedSerial, cert: func() *gossh.Certificate {
			w.revoked.serials[7] = true
			return w.cert(t, func(c *gossh.Certificate) { c.Serial = 7 })
		}},
		{name: "revoked key id", want: ErrRevokedKeyID, cert: func() *gossh.Certificate {
			w.revoked.keyIDs["mallory"] = true
			return w.cert(t, func(c *gossh.Certificate) { c.KeyId = "mallory" })
		}},
		{name: "no revocation list", want: ErrRevoked, cert: func() *gossh.Certificate { return w.cert(t, nil) },
			login: func(l *Login) { l.Revocations = nil }},
		{name: "empty key id", want: ErrKeyID, cert: func() *gossh.Certificate {
			return w.cert(t, func(c *gossh.Certificate) { c.KeyId = "" })
		}},
		{name: "key id too long", want: ErrKeyID, cert: func() *gossh.Certificate {
			return w.cert(t, func(c *gossh.Certificate) { c.KeyId = strings.Repeat("a", MaxKeyIDLen+1) })
		}},
		{name: "key id at the limit", cert: func() *gossh.Certificate {
			return w.cert(t, func(c *gossh.Certificate) { c.KeyId = strings.Repeat("a", MaxKeyIDLen) })
		}},
		{name: "key id not UTF-8", want: ErrKeyID, cert: func() *gossh.Certificate {
			return w.cert(t, func(c *gossh.Certificate) { c.KeyId = "al\xffice" })
		}},
		{name: "no certificate", want: ErrMalformed, cert: func() *gossh.Certificate { return nil }},
		{name: "unsigned", want: ErrMalformed, cert: func() *gossh.Certificate {
			c := w.cert(t, nil)
			c.Signature = nil
			return c
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			now := tt.now
			if now.IsZero() {
				now = clock
			}
			l := w.login()
			if tt.login != nil {
				tt.login(&l)
			}
			g, err := policyAt(t, now).Check(tt.cert(), l)
			if tt.want == nil {
				if err != nil {
					t.Fatalf("got %v, want accepted", err)
				}
				if g.CA != "hil" || g.Serial == 0 || g.KeyID == "" {
					t.Errorf("grant: got %+v, want CA hil and the certificate's serial and key id", g)
				}
				return
			}
			if !errors.Is(err, tt.want) {
				t.Fatalf("got %v, want %v", err, tt.want)
			}
			t.Logf("refused: %v", err)
			if g != (Grant{}) {
				t.Errorf("grant of a refusal: got %+v, want none", g)
			}
		})
	}
}

func TestGrant(t *testing.T) {
	w := newWorld(t)
	c := w.cert(t, func(c *gossh.Certificate) { c.ValidPrincipals = []string{"project-x", "node-17"} })
	g, err := policyAt(t, clock).Check(c, w.login())
	if err != nil {
		t.Fatal(err)
	}
	want := Grant{CA: "hil", CAFingerprint: keys.Fingerprint(w.ca.PublicKey()), KeyID: "alice", Serial: 42,
		Principal: "node-17", Console: true, Expires: clock.Add(10 * time.Minute)}
	if g != want {
		t.Errorf("got %+v, want %+v", g, want)
	}
	if got, want := g.Identity(), "ssh:cert hil:alice serial 42"; got != want {
		t.Errorf("identity: got %q, want %q", got, want)
	}
	// Revocations are asked about the certificate that was verified.
	if got, want := w.revoked.asked, []string{keys.Fingerprint(w.ca.PublicKey()) + " 42 alice"}; len(got) != 1 || got[0] != want[0] {
		t.Errorf("revocations asked: got %q, want %q", got, want)
	}

	noPTY := w.cert(t, func(c *gossh.Certificate) { delete(c.Extensions, "permit-pty") })
	if g, err := policyAt(t, clock).Check(noPTY, w.login()); err != nil || g.Console {
		t.Errorf("without permit-pty: got %+v, %v, want accepted without console", g, err)
	}
	forever := w.cert(t, func(c *gossh.Certificate) { c.ValidBefore = gossh.CertTimeInfinity })
	if g, err := policyAt(t, clock).Check(forever, w.login()); err != nil || !g.Expires.IsZero() {
		t.Errorf("never expiring: got %+v, %v, want accepted with no expiry", g, err)
	}
}

// TestAuditTextIsSafe: what a certificate says (its key id, principals,
// options) reaches the audit escaped and bounded.
func TestAuditTextIsSafe(t *testing.T) {
	w := newWorld(t)
	nasty := "\x1b[2J\r\nroot " + strings.Repeat("é", 200)
	c := w.cert(t, func(c *gossh.Certificate) {
		c.KeyId = nasty
		c.ValidPrincipals = []string{nasty, nasty, nasty, nasty, nasty, nasty}
		c.CriticalOptions = map[string]string{"source-address": nasty}
	})
	for _, l := range []Login{w.login(), {Node: "node-17", Authorities: trust{}}} {
		_, err := policyAt(t, clock).Check(c, l)
		if err == nil {
			t.Fatal("got accepted, want refused")
		}
		msg := err.Error()
		if strings.IndexFunc(msg, func(r rune) bool { return !unicode.IsGraphic(r) }) >= 0 {
			t.Errorf("refusal %q holds a non-printable character", msg)
		}
		if len(msg) > 1500 {
			t.Errorf("refusal is %d bytes long, want at most 1500", len(msg))
		}
	}
	// The longest: a CA name at its limit, a key id of control bytes
	// (each shown as 4), the largest serial.
	const most = MaxNameLen + len(`:""...`) + 4*maxShownKeyID + len(" serial 18446744073709551615")
	for _, g := range []Grant{
		{CA: "hil", KeyID: nasty, Serial: 1},
		{CA: strings.Repeat("n", MaxNameLen), KeyID: strings.Repeat("\x01", 300), Serial: math.MaxUint64},
	} {
		who := g.Who()
		if strings.IndexFunc(who, func(r rune) bool { return !unicode.IsGraphic(r) }) >= 0 || len(who) > most {
			t.Errorf("who %q (%d bytes): want printable and at most %d bytes", who, len(who), most)
		}
	}
	for keyID, want := range map[string]string{
		"alice":             "ssh:cert hil:alice serial 1",
		"alice@example.com": "ssh:cert hil:alice@example.com serial 1",
		"alice smith":       `ssh:cert hil:"alice smith" serial 1`,
		"":                  `ssh:cert hil:"" serial 1`,
		"a\"b":              `ssh:cert hil:"a\"b" serial 1`,
	} {
		if got := (Grant{CA: "hil", KeyID: keyID, Serial: 1}).Identity(); got != want {
			t.Errorf("identity of key id %q: got %s, want %s", keyID, got, want)
		}
	}
}

// TestSHA1Signature: a CA signature made with SHA-1 (ssh-rsa) is refused
// unless legacy algorithms are asked for; rsa-sha2-512 is accepted.
func TestSHA1Signature(t *testing.T) {
	rk, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	base, err := gossh.NewSignerFromKey(rk)
	if err != nil {
		t.Fatal(err)
	}
	w := newWorld(t)
	w.trust[keys.Fingerprint(base.PublicKey())] = "rsa"
	for _, tt := range []struct {
		algo   string
		legacy bool
		want   error
	}{
		{gossh.KeyAlgoRSA, false, ErrSignature},
		{gossh.KeyAlgoRSA, true, nil},
		{gossh.KeyAlgoRSASHA512, false, nil},
		{gossh.KeyAlgoRSASHA256, false, nil},
	} {
		t.Run(tt.algo, func(t *testing.T) {
			s, err := gossh.NewSignerWithAlgorithms(base.(gossh.AlgorithmSigner), []string{tt.algo})
			if err != nil {
				t.Fatal(err)
			}
			c := w.signBy(t, s, nil)
			p, err := New(Config{Now: func() time.Time { return clock }, LegacyAlgorithms: tt.legacy})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := p.Check(c, w.login()); !errors.Is(err, tt.want) && (tt.want != nil || err != nil) {
				t.Errorf("legacy %v: got %v, want %v", tt.legacy, err, tt.want)
			}
		})
	}
}

func TestNew(t *testing.T) {
	for _, tt := range []struct {
		skew, want time.Duration
		ok         bool
	}{
		{0, DefaultSkew, true},
		{time.Second, time.Second, true},
		{MaxSkew, MaxSkew, true},
		{MaxSkew + 1, 0, false},
		{-1, 0, false},
	} {
		p, err := New(Config{Skew: tt.skew})
		if (err == nil) != tt.ok {
			t.Errorf("skew %v: got %v, want ok %v", tt.skew, err, tt.ok)
			continue
		}
		if err == nil && p.Skew() != tt.want {
			t.Errorf("skew %v: got %v, want %v", tt.skew, p.Skew(), tt.want)
		}
	}
}

func TestClaims(t *testing.T) {
	w := newWorld(t)
	c := w.cert(t, nil)
	ca, serial, keyID := Claims(c)
	if ca != keys.Fingerprint(w.ca.PublicKey()) || serial != 42 || keyID != "alice" {
		t.Errorf("got %s %d %s, want the CA's fingerprint, 42, alice", ca, serial, keyID)
	}
	if ca, serial, keyID := Claims(nil); ca != "" || serial != 0 || keyID != "" {
		t.Errorf("claims of nil: got %q %d %q, want nothing", ca, serial, keyID)
	}
}

// BenchmarkCheck measures one accepted check (an ed25519 CA signature
// verified, the source-address parsed).
func BenchmarkCheck(b *testing.B) {
	w := newWorld(b)
	c := w.cert(b, func(c *gossh.Certificate) { c.CriticalOptions = map[string]string{"source-address": "127.0.0.0/8"} })
	p := policyAt(b, clock)
	l := w.login()
	b.ReportAllocs()
	for b.Loop() {
		w.revoked.asked = w.revoked.asked[:0]
		if _, err := p.Check(c, l); err != nil {
			b.Fatal(err)
		}
	}
}

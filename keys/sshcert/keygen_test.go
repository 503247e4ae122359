package sshcert

import (
	"errors"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	gossh "golang.org/x/crypto/ssh"

	"github.com/obmd/obmd/keys"
)

// keygen is OpenSSH's ssh-keygen working in one test's directory.
type keygen struct {
	t   *testing.T
	dir string
}

func newKeygen(t *testing.T) *keygen {
	t.Helper()
	if _, err := exec.LookPath("ssh-keygen"); err != nil {
		if os.Getenv("OBMD_REQUIRE_INTEGRATION") == "1" {
			t.Fatalf("ssh-keygen not found (openssh-client) and OBMD_REQUIRE_INTEGRATION=1")
		}
		t.Skip("ssh-keygen not found (openssh-client)")
	}
	return &keygen{t: t, dir: t.TempDir()}
}

func (k *keygen) run(args ...string) {
	k.t.Helper()
	cmd := exec.Command("ssh-keygen", args...)
	cmd.Dir = k.dir
	if out, err := cmd.CombinedOutput(); err != nil {
		k.t.Fatalf("ssh-keygen %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// key makes a key pair named name of type typ ("ed25519", "ecdsa") and
// returns its public key.
func (k *keygen) key(name, typ string) gossh.PublicKey {
	k.t.Helper()
	k.run("-q", "-t", typ, "-N", "", "-C", name, "-f", name)
	return k.parse(name + ".pub")
}

func (k *keygen) parse(file string) gossh.PublicKey {
	k.t.Helper()
	b, err := os.ReadFile(filepath.Join(k.dir, file))
	if err != nil {
		k.t.Fatal(err)
	}
	pub, _, _, _, err := gossh.ParseAuthorizedKey(b)
	if err != nil {
		k.t.Fatalf("parse %s: %v", file, err)
	}
	return pub
}

// sign signs the user key with CA ca, passing args to ssh-keygen, and
// returns the certificate.
func (k *keygen) sign(ca string, args ...string) *gossh.Certificate {
	k.t.Helper()
	k.run(append(append([]string{"-q", "-s", ca}, args...), "user.pub")...)
	c, ok := k.parse("user-cert.pub").(*gossh.Certificate)
	if !ok {
		k.t.Fatal("user-cert.pub is not a certificate")
	}
	return c
}

// TestCheckKeygen: certificates signed by OpenSSH's ssh-keygen, checked
// against the real clock.
func TestCheckKeygen(t *testing.T) {
	k := newKeygen(t)
	ca := k.key("ca", "ed25519")
	ecdsa := k.key("ecdsa-ca", "ecdsa")
	k.key("other-ca", "ed25519")
	k.key("user", "ed25519")
	cas := trust{keys.Fingerprint(ca): "hil", keys.Fingerprint(ecdsa): "ec"}
	base := []string{"-I", "alice", "-n", "node-17", "-V", "+1m", "-z", "42"}
	with := func(args ...string) []string { return append(append([]string{}, base...), args...) }

	tests := []struct {
		name    string
		ca      string
		args    []string
		login   func(l *Login)
		want    error
		console bool // for accepted ones
	}{
		{name: "accepted", args: base, console: true},
		{name: "accepted from an ECDSA CA", ca: "ecdsa-ca", args: base, console: true},
		{name: "project principal", console: true,
			args: []string{"-I", "alice", "-n", "project-x,other", "-V", "+1m", "-z", "42"}},
		{name: "wrong principal", want: ErrPrincipal,
			args: []string{"-I", "alice", "-n", "node-18", "-V", "+1m", "-z", "42"}},
		{name: "empty principals", want: ErrNoPrincipals, args: []string{"-I", "alice", "-V", "+1m", "-z", "42"}},
		{name: "expired", want: ErrExpired, args: []string{"-I", "alice", "-n", "node-17", "-V", "-3h:-2h"},
			login: func(l *Login) { l.TenancyStart = time.Now().Add(-4 * time.Hour) }},
		{name: "not yet valid", want: ErrNotYetValid, args: []string{"-I", "alice", "-n", "node-17", "-V", "+1h:+2h"}},
		{name: "untrusted CA", ca: "other-ca", want: ErrUntrustedCA, args: base},
		{name: "revoked serial", want: ErrRevokedSerial, args: []string{"-I", "bob", "-n", "node-17", "-V", "+1m", "-z", "7"}},
		{name: "revoked key id", want: ErrRevokedKeyID, args: []string{"-I", "mallory", "-n", "node-17", "-V", "+1m", "-z", "8"}},
		{name: "unknown critical option", want: ErrOption, args: with("-O", "critical:foo@example.com=bar")},
		{name: "force-command", want: ErrOption, args: with("-O", "force-command=power-status")},
		{name: "verify-required", want: ErrOption, args: with("-O", "verify-required")},
		{name: "source-address matches", args: with("-O", "source-address=10.0.0.0/8,127.0.0.1/32,::1"), console: true},
		{name: "source-address mismatch", want: ErrSourceAddress, args: with("-O", "source-address=10.0.0.0/8,::1")},
		{name: "no-pty", args: with("-O", "no-pty")},
		{name: "clear", args: with("-O", "clear")},
		{name: "clear, then permit-pty", args: with("-O", "clear", "-O", "permit-pty"), console: true},
		{name: "host certificate", want: ErrNotUserCert, args: with("-h")},
		{name: "issued before the tenancy", want: ErrBeforeTenancy, args: base,
			login: func(l *Login) { l.TenancyStart = time.Now().Add(-time.Second) }},
	}
	revs := &revoked{serials: map[uint64]bool{7: true}, keyIDs: map[string]bool{"mallory": true}}
	p, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			signer := tt.ca
			if signer == "" {
				signer = "ca"
			}
			c := k.sign(signer, tt.args...)
			l := Login{Node: "node-17", Principals: []string{"project-x"}, TenancyStart: time.Now().Add(-time.Hour),
				Client: netip.MustParseAddr("127.0.0.1"), Authorities: cas, Revocations: revs}
			if tt.login != nil {
				tt.login(&l)
			}
			g, err := p.Check(c, l)
			if tt.want != nil {
				if !errors.Is(err, tt.want) {
					t.Fatalf("got %v, want %v", err, tt.want)
				}
				t.Logf("refused: %v", err)
				return
			}
			if err != nil {
				t.Fatalf("got %v, want accepted", err)
			}
			if g.Console != tt.console {
				t.Errorf("console: got %v, want %v", g.Console, tt.console)
			}
		})
	}
}

// TestKeygenAfterChange: ssh-keygen's "-V +1m" backdates the start of the
// validity (by one to two minutes), so a certificate signed that way just
// after the node's access changed belongs, by its dates, to the previous
// tenancy and is refused; one that starts after the change ("-V
// +1s:+1m") opens the node at once, the start being within the skew.
func TestKeygenAfterChange(t *testing.T) {
	k := newKeygen(t)
	ca := k.key("ca", "ed25519")
	k.key("user", "ed25519")
	change := time.Now()
	l := Login{Node: "node-17", TenancyStart: change, Client: netip.MustParseAddr("127.0.0.1"),
		Authorities: trust{keys.Fingerprint(ca): "hil"}, Revocations: &revoked{}}
	p, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	backdated := k.sign("ca", "-I", "alice", "-n", "node-17", "-V", "+1m", "-z", "42")
	if _, err := p.Check(backdated, l); !errors.Is(err, ErrBeforeTenancy) {
		t.Errorf("-V +1m just after the change: got %v, want %v", err, ErrBeforeTenancy)
	}
	after := k.sign("ca", "-I", "alice", "-n", "node-17", "-V", "+1s:+1m", "-z", "42")
	if g, err := p.Check(after, l); err != nil || g.Serial != 42 {
		t.Errorf("-V +1s:+1m just after the change: got %+v, %v, want accepted", g, err)
	}
}

// TestKeygenSkewEdges: a certificate with fixed times (-V with absolute
// UTC times), checked with a clock at each edge of its window: the skew
// widens its start only; valid_before is strict, as in OpenSSH.
func TestKeygenSkewEdges(t *testing.T) {
	k := newKeygen(t)
	ca := k.key("ca", "ed25519")
	k.key("user", "ed25519")
	c := k.sign("ca", "-I", "alice", "-n", "node-17", "-V", "20300102030405Z:20300102040405Z", "-z", "1")
	from := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	to := from.Add(time.Hour)
	const skew = 30 * time.Second
	l := Login{Node: "node-17", TenancyStart: from, Client: netip.MustParseAddr("127.0.0.1"),
		Authorities: trust{keys.Fingerprint(ca): "hil"}, Revocations: &revoked{}}
	for _, tt := range []struct {
		name string
		now  time.Time
		want error
	}{
		{"before the skew", from.Add(-skew - time.Millisecond), ErrNotYetValid},
		{"start of the skew", from.Add(-skew), nil},
		{"valid_after", from, nil},
		{"just before valid_before", to.Add(-time.Millisecond), nil},
		{"valid_before", to, ErrExpired},
		{"within the skew past valid_before", to.Add(skew - time.Millisecond), ErrExpired},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p, err := New(Config{Skew: skew, Now: func() time.Time { return tt.now }})
			if err != nil {
				t.Fatal(err)
			}
			g, err := p.Check(c, l)
			if !errors.Is(err, tt.want) || (tt.want == nil && err != nil) {
				t.Fatalf("got %v, want %v", err, tt.want)
			}
			if err == nil && !g.Expires.Equal(to) {
				t.Errorf("expires: got %v, want valid_before %v", g.Expires, to)
			}
		})
	}
	// A tenancy that began after valid_after refuses it, skew or not.
	l.TenancyStart = from.Add(time.Second)
	p, _ := New(Config{Skew: skew, Now: func() time.Time { return from.Add(time.Minute) }})
	if _, err := p.Check(c, l); !errors.Is(err, ErrBeforeTenancy) {
		t.Errorf("tenancy from after valid_after: got %v, want %v", err, ErrBeforeTenancy)
	}
}

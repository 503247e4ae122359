package cluster

import (
	"crypto/rand"
	"crypto/rsa"
	"testing"
	"time"

	gossh "golang.org/x/crypto/ssh"

	"github.com/obmd/obmd/db/dbtest"
	"github.com/obmd/obmd/sol/sim"
)

func newRSAHostKey(t testing.TB) gossh.Signer {
	t.Helper()
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	s, err := gossh.NewSignerFromKey(k)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// algCase is a client that offers one algorithm the server must refuse.
type algCase struct {
	name string
	cfg  func(*gossh.ClientConfig)
}

// TestPeerAlgorithms: the peer channel offers what the front door does by
// default (bastion/internal/sshalgo's Modern set), whatever the shared host key: a
// client offering only a SHA-1 key exchange, MAC or signature is refused,
// and replicas sharing an RSA host key still relay to each other.
func TestPeerAlgorithms(t *testing.T) {
	for name, key := range map[string]gossh.Signer{"ed25519": newHostKey(t), "rsa": newRSAHostKey(t)} {
		t.Run(name, func(t *testing.T) {
			lab := sim.NewLab()
			b := lab.BMC("n1", sim.ModeNormal)
			store := openStore(t, dbtest.SQLiteDSN(t))
			r0, r1 := startReplica(t, "r0", store, lab, key), startReplica(t, "r1", store, lab, key)
			cases := []algCase{
				{"kex diffie-hellman-group14-sha1", func(c *gossh.ClientConfig) {
					c.KeyExchanges = []string{gossh.InsecureKeyExchangeDH14SHA1}
				}},
				{"mac hmac-sha1", func(c *gossh.ClientConfig) {
					c.Ciphers, c.MACs = []string{gossh.CipherAES128CTR}, []string{gossh.HMACSHA1}
				}},
				{"mac hmac-sha1-96", func(c *gossh.ClientConfig) {
					c.Ciphers, c.MACs = []string{gossh.CipherAES128CTR}, []string{gossh.InsecureHMACSHA196}
				}},
			}
			if name == "rsa" {
				sha1, err := gossh.NewSignerWithAlgorithms(key.(gossh.AlgorithmSigner), []string{gossh.KeyAlgoRSA})
				if err != nil {
					t.Fatal(err)
				}
				cases = append(cases,
					algCase{"host key ssh-rsa", func(c *gossh.ClientConfig) { c.HostKeyAlgorithms = []string{gossh.KeyAlgoRSA} }},
					algCase{"signature ssh-rsa", func(c *gossh.ClientConfig) { c.Auth = []gossh.AuthMethod{gossh.PublicKeys(sha1)} }})
			}
			for _, tc := range cases {
				cfg := &gossh.ClientConfig{User: peerUser, Auth: []gossh.AuthMethod{gossh.PublicKeys(key)},
					HostKeyCallback: gossh.FixedHostKey(key.PublicKey()), Timeout: 5 * time.Second}
				tc.cfg(cfg)
				if c, err := gossh.Dial("tcp", r0.l.Addr().String(), cfg); err == nil {
					c.Close()
					t.Errorf("%s: got a connection, want refused", tc.name)
				}
			}

			v0 := attach(t, r0, "n1", "alice")
			waitFor(t, "the first link", func() bool { return r0.hub.Stats().LinksUp == 1 })
			v1 := attach(t, r1, "n1", "bob")
			seeAll(t, b, "relayed\n", record(v0), record(v1))
		})
	}
}

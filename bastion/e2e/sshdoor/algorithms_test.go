package sshdoor

// SSH algorithms: by default the front door offers what a current OpenSSH
// server does, without SHA-1 (bastion/internal/sshalgo); a client that offers only
// a SHA-1 key exchange, MAC, host key or user key signature is refused,
// through x/crypto and through OpenSSH, and every one of them gets in with
// ssh_legacy_algorithms set. The server's host key is RSA here, so that
// its signature algorithm is a choice too.

import (
	"crypto/rand"
	"crypto/rsa"
	"strings"
	"testing"
	"time"

	"github.com/obmd/obmd/bastion/e2e/obmdtest"

	gossh "golang.org/x/crypto/ssh"

	"github.com/obmd/obmd/bastion/daemon"
	"github.com/obmd/obmd/sol/soltest/ipmisim"
)

// rsaKey returns a new RSA signer and the path of its OpenSSH private
// key file.
func rsaKey(t testing.TB) (gossh.Signer, string) {
	t.Helper()
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	return obmdtest.KeyFile(t, k, "id_rsa")
}

// server is an obmd with an RSA host key and node alg1, reachable with
// tok or with the RSA user key.
type server struct {
	*obmdtest.Daemon
	tok     string
	user    gossh.Signer
	keyFile string
}

func start(t *testing.T, legacy bool) server {
	t.Helper()
	_, hostKey := rsaKey(t)
	o := obmdtest.Start(t, func(c *daemon.Config) { c.SSH.HostKey, c.SSH.LegacyAlgorithms = hostKey, legacy })
	s := server{Daemon: o, tok: o.AddSimNode("alg1")}
	s.user, s.keyFile = rsaKey(t)
	o.AddKey("alg1", s.user.PublicKey())
	return s
}

// goCase is an x/crypto client; sha1 says it offers only a SHA-1
// algorithm of some kind.
type goCase struct {
	name string
	sha1 bool
	cfg  func(s server, c *gossh.ClientConfig)
}

func goCases(t *testing.T) []goCase {
	restrict := func(s gossh.Signer, algo string) gossh.Signer {
		ms, err := gossh.NewSignerWithAlgorithms(s.(gossh.AlgorithmSigner), []string{algo})
		if err != nil {
			t.Fatal(err)
		}
		return ms
	}
	kex := func(k string) func(server, *gossh.ClientConfig) {
		return func(_ server, c *gossh.ClientConfig) { c.KeyExchanges = []string{k} }
	}
	mac := func(m string) func(server, *gossh.ClientConfig) {
		return func(_ server, c *gossh.ClientConfig) {
			c.Ciphers, c.MACs = []string{gossh.CipherAES128CTR}, []string{m}
		}
	}
	hostKey := func(a string) func(server, *gossh.ClientConfig) {
		return func(_ server, c *gossh.ClientConfig) { c.HostKeyAlgorithms = []string{a} }
	}
	userKey := func(a string) func(server, *gossh.ClientConfig) {
		return func(s server, c *gossh.ClientConfig) {
			c.Auth = []gossh.AuthMethod{gossh.PublicKeys(restrict(s.user, a))}
		}
	}
	return []goCase{
		{"defaults", false, func(server, *gossh.ClientConfig) {}},
		{"kex mlkem768x25519-sha256", false, kex(gossh.KeyExchangeMLKEM768X25519)},
		{"kex curve25519-sha256 (the benchmarks' pin)", false, kex(gossh.KeyExchangeCurve25519)},
		{"kex diffie-hellman-group14-sha1", true, kex(gossh.InsecureKeyExchangeDH14SHA1)},
		{"aes128-ctr with hmac-sha2-256-etm", false, mac(gossh.HMACSHA256ETM)},
		{"aes128-ctr with hmac-sha1", true, mac(gossh.HMACSHA1)},
		{"aes128-ctr with hmac-sha1-96", true, mac(gossh.InsecureHMACSHA196)},
		{"host key rsa-sha2-512", false, hostKey(gossh.KeyAlgoRSASHA512)},
		{"host key ssh-rsa", true, hostKey(gossh.KeyAlgoRSA)},
		{"user key rsa-sha2-256", false, userKey(gossh.KeyAlgoRSASHA256)},
		{"user key ssh-rsa", true, userKey(gossh.KeyAlgoRSA)},
	}
}

// openSSHCase is an OpenSSH client (password, or the RSA key with key).
type openSSHCase struct {
	name string
	sha1 bool
	key  bool
	opts []string
}

var openSSHCases = []openSSHCase{
	{"defaults", false, false, nil},
	{"defaults with an RSA key", false, true, nil},
	{"KexAlgorithms=diffie-hellman-group14-sha1", true, false, []string{"-o", "KexAlgorithms=diffie-hellman-group14-sha1"}},
	{"MACs=hmac-sha1 with aes128-ctr", true, false, []string{"-o", "Ciphers=aes128-ctr", "-o", "MACs=hmac-sha1"}},
	{"HostKeyAlgorithms=ssh-rsa", true, false, []string{"-o", "HostKeyAlgorithms=ssh-rsa"}},
	{"PubkeyAcceptedAlgorithms=ssh-rsa", true, true, []string{"-o", "PubkeyAcceptedAlgorithms=ssh-rsa"}},
}

// TestSSHAlgorithms: each client gets in unless it offers only SHA-1 and
// the server is not in legacy mode.
func TestSSHAlgorithms(t *testing.T) {
	t.Parallel()
	ipmisim.Require(t, "ssh", "sshpass")
	for _, legacy := range []bool{false, true} {
		name := "default"
		if legacy {
			name = "ssh_legacy_algorithms"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			s := start(t, legacy)
			for _, c := range goCases(t) {
				cfg := &gossh.ClientConfig{User: "alg1", Auth: []gossh.AuthMethod{gossh.Password(s.tok)},
					HostKeyCallback: gossh.InsecureIgnoreHostKey(), Timeout: 10 * time.Second}
				c.cfg(s, cfg)
				res, err := goExec(s.SSHAddr(), cfg)
				if refused := c.sha1 && !legacy; refused != (err != nil) || err == nil && res.Code != 0 {
					t.Errorf("x/crypto, %s: got %v, %v; want refused %v", c.name, res, err, refused)
				}
			}
			for _, c := range openSSHCases {
				tok, opts := s.tok, c.opts
				if c.key {
					tok, opts = "", append([]string{"-i", s.keyFile}, opts...)
				}
				res := s.OpenSSH("alg1", tok, opts, "power-status")
				if refused := c.sha1 && !legacy; refused != (res.Code != 0) || !refused && !strings.Contains(res.Stdout, "on") {
					t.Errorf("OpenSSH, %s: got %v; want refused %v", c.name, res, refused)
				}
			}
		})
	}
}

// goExec runs power-status through x/crypto with cfg.
func goExec(addr string, cfg *gossh.ClientConfig) (obmdtest.Result, error) {
	c, err := gossh.Dial("tcp", addr, cfg)
	if err != nil {
		return obmdtest.Result{}, err
	}
	defer c.Close()
	return obmdtest.RunSession(c, "power-status")
}

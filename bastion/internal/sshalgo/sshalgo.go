// Package sshalgo owns obmd's SSH algorithm policy, for the SSH door and the
// replicas' peer channel.
//
// It lists the key exchanges, ciphers, MACs and signature algorithms that
// the front door and the replicas' peer channel offer and accept.
//
// Modern, the default, is what a current OpenSSH server (10.x) offers by
// default, less what golang.org/x/crypto/ssh does not implement (sntrup761)
// and less every use of SHA-1, which OpenSSH still allows in its MACs: key
// exchange mlkem768x25519-sha256, curve25519-sha256 and ECDH on the NIST
// curves (no finite-field Diffie-Hellman, which OpenSSH 10 dropped from the
// server's defaults); AES-GCM, ChaCha20-Poly1305 and AES-CTR; the
// encrypt-then-MAC SHA-2 MACs (used with AES-CTR only: the AEAD ciphers carry
// their own); and SHA-2 or EdDSA signatures only, so an RSA key signs with
// rsa-sha2-256/512 and never ssh-rsa (SHA-1), for user and host keys alike.
//
// Legacy adds back what obmd offered before, for old management hosts:
// diffie-hellman-group14-sha1 and -sha256, hmac-sha1, hmac-sha1-96 and the
// encrypt-and-MAC SHA-2 MACs, and ssh-rsa signatures.
package sshalgo

import (
	"fmt"
	"slices"

	gossh "golang.org/x/crypto/ssh"
)

// Set is one policy: what a server offers and accepts, and what a client
// offers.
type Set struct {
	KeyExchanges []string
	Ciphers      []string
	MACs         []string
	// Signatures are the signature algorithms accepted for public-key
	// logins and used by host keys (RSA: which of ssh-rsa, rsa-sha2-256 and
	// rsa-sha2-512; other key types have one algorithm each).
	Signatures []string
}

// Modern is the default policy (see the package comment).
func Modern() Set {
	return Set{
		KeyExchanges: []string{gossh.KeyExchangeMLKEM768X25519, gossh.KeyExchangeCurve25519,
			gossh.KeyExchangeECDHP256, gossh.KeyExchangeECDHP384, gossh.KeyExchangeECDHP521},
		Ciphers: []string{gossh.CipherAES128GCM, gossh.CipherAES256GCM, gossh.CipherChaCha20Poly1305,
			gossh.CipherAES128CTR, gossh.CipherAES192CTR, gossh.CipherAES256CTR},
		MACs: []string{gossh.HMACSHA256ETM, gossh.HMACSHA512ETM},
		// x/crypto's supported list leaves ssh-rsa out (it is "insecure").
		Signatures: gossh.SupportedAlgorithms().PublicKeyAuths,
	}
}

// Legacy is Modern plus the SHA-1 algorithms (see the package comment).
func Legacy() Set {
	s := Modern()
	s.KeyExchanges = append(s.KeyExchanges, gossh.KeyExchangeDH14SHA256, gossh.InsecureKeyExchangeDH14SHA1)
	s.MACs = append(s.MACs, gossh.HMACSHA256, gossh.HMACSHA512, gossh.HMACSHA1, gossh.InsecureHMACSHA196)
	s.Signatures = append(s.Signatures, gossh.KeyAlgoRSA)
	return s
}

// For returns Legacy if legacy is set, else Modern.
func For(legacy bool) Set {
	if legacy {
		return Legacy()
	}
	return Modern()
}

// Server makes cfg offer and accept s: key exchanges, ciphers, MACs and
// the signature algorithms of public-key logins. Host keys are restricted
// apart (HostKey), before they are added.
func (s Set) Server(cfg *gossh.ServerConfig) {
	s.config(&cfg.Config)
	cfg.PublicKeyAuthAlgorithms = slices.Clone(s.Signatures)
}

// Client makes cfg offer s, and accept the host key pub only with s's
// signature algorithms (the peer channel pins the shared host key).
func (s Set) Client(cfg *gossh.ClientConfig, pub gossh.PublicKey) {
	s.config(&cfg.Config)
	cfg.HostKeyAlgorithms = s.hostKeyAlgorithms(pub.Type())
}

func (s Set) config(c *gossh.Config) {
	c.KeyExchanges = slices.Clone(s.KeyExchanges)
	c.Ciphers = slices.Clone(s.Ciphers)
	c.MACs = slices.Clone(s.MACs)
}

// HostKey returns signer restricted to s's signature algorithms: an RSA
// host key then proves itself with SHA-2 only (unless s allows ssh-rsa).
// Other key types have one algorithm and are returned as they are.
func (s Set) HostKey(signer gossh.Signer) (gossh.Signer, error) {
	typ := signer.PublicKey().Type()
	if typ != gossh.KeyAlgoRSA {
		return signer, nil
	}
	as, ok := signer.(gossh.AlgorithmSigner)
	if !ok {
		return nil, fmt.Errorf("RSA host key cannot sign with SHA-2")
	}
	ms, err := gossh.NewSignerWithAlgorithms(as, s.hostKeyAlgorithms(typ))
	if err != nil {
		return nil, fmt.Errorf("restrict host key algorithms: %w", err)
	}
	return ms, nil
}

// hostKeyAlgorithms lists the signature algorithms of a key of type typ
// that s allows.
func (s Set) hostKeyAlgorithms(typ string) []string {
	if typ != gossh.KeyAlgoRSA {
		return []string{typ}
	}
	var out []string
	for _, a := range []string{gossh.KeyAlgoRSASHA256, gossh.KeyAlgoRSASHA512, gossh.KeyAlgoRSA} {
		if slices.Contains(s.Signatures, a) {
			out = append(out, a)
		}
	}
	return out
}

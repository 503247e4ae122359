package keys

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"fmt"

	gossh "golang.org/x/crypto/ssh"
)

// LoadOrCreateHostKey returns the ed25519 SSH host key stored at path (OpenSSH
// private key format), generating it with mode 0600 on first use. Replicas
// that share a host key point at the same file.
func LoadOrCreateHostKey(path string) (gossh.Signer, error) {
	data, _, err := loadOrCreate(path, func() ([]byte, error) {
		_, priv, err := ed25519.GenerateKey(rand.Reader)
		if err != nil {
			return nil, fmt.Errorf("generate host key: %w", err)
		}
		block, err := gossh.MarshalPrivateKey(priv, "obmd host key")
		if err != nil {
			return nil, fmt.Errorf("encode host key: %w", err)
		}
		return pem.EncodeToMemory(block), nil
	})
	if err != nil {
		return nil, err
	}
	signer, err := gossh.ParsePrivateKey(data)
	if err != nil {
		return nil, fmt.Errorf("parse host key %s: %w", path, err)
	}
	return signer, nil
}

// Fingerprint is the OpenSSH SHA256 fingerprint of pub ("SHA256:...").
func Fingerprint(pub gossh.PublicKey) string {
	return gossh.FingerprintSHA256(pub)
}

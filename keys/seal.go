package keys

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"errors"
	"fmt"
)

const sealKeyBytes = 32 // AES-256

// ErrUnseal is returned when sealed data cannot be opened: a wrong key, a
// value moved to another row, or tampering.
var ErrUnseal = errors.New("cannot unseal: wrong key or corrupted data")

// Sealer encrypts small secrets (BMC credentials) for storage with
// AES-256-GCM. The associated data binds a sealed value to its owner (the
// node label), so a value copied to another row does not open.
type Sealer struct {
	aead cipher.AEAD
}

// NewSealer returns a Sealer for a 32-byte key.
func NewSealer(key []byte) (*Sealer, error) {
	if len(key) != sealKeyBytes {
		return nil, fmt.Errorf("sealing key: got %d bytes, want %d", len(key), sealKeyBytes)
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, fmt.Errorf("sealing key: %w", err)
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, fmt.Errorf("sealing key: %w", err)
	}
	return &Sealer{aead: aead}, nil
}

// LoadOrCreateSealer reads the sealing key at path, generating a random one
// (mode 0600) on first use. Losing this file makes every stored BMC password
// unreadable; replicas must share it.
func LoadOrCreateSealer(path string) (*Sealer, error) {
	key, _, err := loadOrCreate(path, func() ([]byte, error) {
		k := make([]byte, sealKeyBytes)
		if _, err := rand.Read(k); err != nil {
			return nil, fmt.Errorf("generate sealing key: %w", err)
		}
		return k, nil
	})
	if err != nil {
		return nil, err
	}
	s, err := NewSealer(key)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return s, nil
}

// Seal encrypts plaintext bound to owner; the result is nonce || ciphertext.
func (s *Sealer) Seal(plaintext []byte, owner string) ([]byte, error) {
	nonce := make([]byte, s.aead.NonceSize(), s.aead.NonceSize()+len(plaintext)+s.aead.Overhead())
	if _, err := rand.Read(nonce); err != nil {
		return nil, fmt.Errorf("seal: %w", err)
	}
	return s.aead.Seal(nonce, nonce, plaintext, []byte(owner)), nil
}

// Open decrypts what Seal produced for the same owner, or returns ErrUnseal.
func (s *Sealer) Open(sealed []byte, owner string) ([]byte, error) {
	n := s.aead.NonceSize()
	if len(sealed) < n+s.aead.Overhead() {
		return nil, ErrUnseal
	}
	out, err := s.aead.Open(nil, sealed[:n], sealed[n:], []byte(owner))
	if err != nil {
		return nil, ErrUnseal
	}
	return out, nil
}

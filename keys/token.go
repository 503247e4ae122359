package keys

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"strings"
)

// tokenBytes is the entropy of a generated token: 192 bits.
const tokenBytes = 24

// NewToken returns a fresh random token: 192 bits from crypto/rand, in
// unpadded base64url so it survives URLs, shells and password prompts.
func NewToken() (string, error) {
	b := make([]byte, tokenBytes)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("generate token: %w", err)
	}
	return base64.RawURLEncoding.EncodeToString(b), nil
}

// TokenHash is the SHA-256 of a token: all obmd ever stores of one.
type TokenHash [sha256.Size]byte

// HashToken hashes a token for storage or comparison.
func HashToken(token string) TokenHash {
	return sha256.Sum256([]byte(token))
}

// Equal compares two hashes in constant time.
func (h TokenHash) Equal(o TokenHash) bool {
	return subtle.ConstantTimeCompare(h[:], o[:]) == 1
}

// String is the hash in lower-case hex (64 characters), the stored form.
func (h TokenHash) String() string { return hex.EncodeToString(h[:]) }

// ParseTokenHash parses the stored hex form.
func ParseTokenHash(s string) (TokenHash, error) {
	var h TokenHash
	b, err := hex.DecodeString(s)
	if err != nil || len(b) != len(h) {
		return h, fmt.Errorf("parse token hash: want %d hex characters", 2*len(h))
	}
	copy(h[:], b)
	return h, nil
}

// LoadOrCreateSecret returns the secret stored at path (surrounding white
// space trimmed), generating a token there with mode 0600 on first use;
// created says which happened, so the caller can show a new secret once.
func LoadOrCreateSecret(path string) (secret string, created bool, err error) {
	data, created, err := loadOrCreate(path, func() ([]byte, error) {
		t, err := NewToken()
		return []byte(t + "\n"), err
	})
	if err != nil {
		return "", false, err
	}
	secret = strings.TrimSpace(string(data))
	if secret == "" {
		return "", false, fmt.Errorf("secret file %s is empty", path)
	}
	return secret, created, nil
}

// SecretEqual compares two secrets in constant time (beyond their length).
func SecretEqual(a, b string) bool {
	ha, hb := HashToken(a), HashToken(b)
	return ha.Equal(hb)
}

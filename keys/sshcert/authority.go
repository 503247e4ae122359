package sshcert

import (
	"crypto/rsa"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	gossh "golang.org/x/crypto/ssh"

	"github.com/obmd/obmd/keys"
)

// MaxNameLen is the longest CA name.
const MaxNameLen = 64

// MaxPrincipalLen is the longest node principal (a node label's limit).
const MaxPrincipalLen = 80

// MinRSABits is the smallest RSA CA key accepted.
const MinRSABits = 2048

// Authority is a CA key an administrator asks obmd to trust
// (ParseAuthority), as it is stored.
type Authority struct {
	Name        string // the admin's name for it: the audit says "name:keyid"
	Fingerprint string // SHA256:... of the key
	Line        string // normalised authorized-key line ("TYPE BASE64[ COMMENT]")
	Key         gossh.PublicKey
}

// ParseAuthority checks a CA an administrator adds: name is 1 to
// MaxNameLen bytes of ASCII letters, digits, ".", "_" and "-" (so that
// "name:keyid" in the audit reads one way), and line is one authorized-key
// line (keys.ParseAuthorizedKey: no options, not a certificate) of a key
// type that OpenSSH accepts for a CA: not DSA, and RSA of MinRSABits at
// least. Its errors are safe to show the administrator.
func ParseAuthority(name, line string) (Authority, error) {
	if err := validName(name); err != nil {
		return Authority{}, err
	}
	ak, err := keys.ParseAuthorizedKey(line)
	if errors.Is(err, keys.ErrKeyCertificate) {
		return Authority{}, errors.New("CA key: a certificate cannot be a CA; give the CA's public key")
	}
	if err != nil {
		return Authority{}, fmt.Errorf("CA key: %w", err)
	}
	switch ak.Key.Type() {
	case gossh.KeyAlgoED25519, gossh.KeyAlgoSKED25519,
		gossh.KeyAlgoECDSA256, gossh.KeyAlgoECDSA384, gossh.KeyAlgoECDSA521, gossh.KeyAlgoSKECDSA256:
	case gossh.KeyAlgoRSA:
		ck, ok := ak.Key.(gossh.CryptoPublicKey)
		if !ok {
			return Authority{}, errors.New("CA key: unreadable RSA key")
		}
		rk, ok := ck.CryptoPublicKey().(*rsa.PublicKey)
		if !ok || rk.N.BitLen() < MinRSABits {
			return Authority{}, fmt.Errorf("CA key: RSA keys of fewer than %d bits are not accepted", MinRSABits)
		}
	default:
		return Authority{}, fmt.Errorf("CA key: type %s is not accepted for a CA", ak.Key.Type())
	}
	return Authority{Name: name, Fingerprint: ak.Fingerprint, Line: ak.Line, Key: ak.Key}, nil
}

func validName(name string) error {
	if name == "" || len(name) > MaxNameLen {
		return fmt.Errorf("CA name must be 1 to %d bytes", MaxNameLen)
	}
	for _, r := range name {
		if !(r < utf8.RuneSelf && (unicode.IsLetter(r) || unicode.IsDigit(r) || strings.ContainsRune("._-", r))) {
			return fmt.Errorf("CA name %s: only ASCII letters, digits, \".\", \"_\" and \"-\" are allowed", quote(name, MaxNameLen))
		}
	}
	return nil
}

// ValidPrincipal reports why p cannot be a node principal, or nil: it is 1
// to MaxPrincipalLen bytes of printable UTF-8 with no white space and no
// comma (ssh-keygen -n separates principals with commas). The error is
// safe to show the administrator.
func ValidPrincipal(p string) error {
	switch {
	case p == "" || len(p) > MaxPrincipalLen:
		return fmt.Errorf("principal must be 1 to %d bytes", MaxPrincipalLen)
	case !utf8.ValidString(p):
		return fmt.Errorf("principal %s is not valid UTF-8", quote(p, MaxPrincipalLen))
	}
	for _, r := range p {
		if r == ',' || unicode.IsSpace(r) || !unicode.IsGraphic(r) {
			return fmt.Errorf("principal %s: no white space, comma or non-printable character", quote(p, MaxPrincipalLen))
		}
	}
	return nil
}

// checkRevocable refuses a key id a revocation could not name: empty (it
// names no holder either), longer than MaxKeyIDLen, or not UTF-8.
func checkRevocable(keyID string) error {
	switch {
	case keyID == "":
		return fmt.Errorf("%w (empty)", ErrKeyID)
	case len(keyID) > MaxKeyIDLen:
		return fmt.Errorf("%w (%d bytes, the limit is %d)", ErrKeyID, len(keyID), MaxKeyIDLen)
	case !utf8.ValidString(keyID):
		return fmt.Errorf("%w (not UTF-8)", ErrKeyID)
	}
	return nil
}

// maxShownKeyID bounds a key id in the audit.
const maxShownKeyID = 64

// cleanKeyID shows a key id safely in one audit field: as it is when it is
// short printable text without spaces, quotes or backslashes ("alice",
// "alice@example.com"), else Go-quoted with escapes ("\"alice smith\"",
// "\"\\x1b[2J\""); past maxShownKeyID bytes it is cut and marked "...".
// The empty key id shows as "".
func cleanKeyID(id string) string {
	plain := id != "" && len(id) <= maxShownKeyID && utf8.ValidString(id) &&
		strings.IndexFunc(id, func(r rune) bool {
			return !unicode.IsGraphic(r) || unicode.IsSpace(r) || r == '"' || r == '\\'
		}) < 0
	if plain {
		return id
	}
	return quote(id, maxShownKeyID)
}

// quote Go-quotes s with only graphic characters, cut to max bytes first
// (at a rune boundary when s is UTF-8) and marked "..." if it was cut.
func quote(s string, max int) string {
	if len(s) <= max {
		return strconv.QuoteToGraphic(s)
	}
	cut := s[:max]
	for i := 0; i < utf8.UTFMax && len(cut) > 0 && !utf8.ValidString(cut) && utf8.ValidString(s); i++ {
		cut = cut[:len(cut)-1]
	}
	return strconv.QuoteToGraphic(cut) + "..."
}

// maxShownPrincipals bounds the principals a refusal lists.
const maxShownPrincipals = 4

// list shows principals for the audit, at most maxShownPrincipals of them.
func list(ps []string) string {
	if len(ps) == 0 {
		return "none"
	}
	var b strings.Builder
	for i, p := range ps {
		if i == maxShownPrincipals {
			fmt.Fprintf(&b, " and %d more", len(ps)-i)
			break
		}
		if i > 0 {
			b.WriteString(",")
		}
		b.WriteString(quote(p, MaxPrincipalLen))
	}
	return b.String()
}

// shownName is a CA name for the audit: as it is if it is valid (the admin
// API admits no other), else quoted.
func shownName(name string) string {
	if validName(name) == nil {
		return name
	}
	return quote(name, MaxNameLen)
}

// describe names a certificate in a refusal: its CA (by name when trusted,
// else by fingerprint), key id and serial, as it claims them.
func describe(cert *gossh.Certificate, cas Authorities) string {
	if cert == nil {
		return "(none)"
	}
	ca, serial, keyID := Claims(cert)
	if cas != nil && ca != "" {
		if name, ok := cas.Authority(ca); ok {
			ca = shownName(name)
		}
	}
	if ca == "" {
		ca = "(no CA)"
	}
	return ca + ":" + cleanKeyID(keyID) + " serial " + strconv.FormatUint(serial, 10)
}

package keys

import (
	"errors"
	"fmt"
	"strings"
	"unicode"

	gossh "golang.org/x/crypto/ssh"
)

// MaxAuthorizedKeyLine bounds one authorized_keys line. The largest keys in
// use (RSA 16384, certificates) stay well below it.
const MaxAuthorizedKeyLine = 16 << 10

// Errors from ParseAuthorizedKey that callers may show to an administrator.
var (
	ErrKeyTooLong     = fmt.Errorf("authorized key line is longer than %d bytes", MaxAuthorizedKeyLine)
	ErrKeyOptions     = errors.New("authorized key options (command=, from=, ...) are not supported")
	ErrKeyMultiLine   = errors.New("give exactly one authorized key line")
	ErrKeyMalformed   = errors.New("not an authorized key line (want: TYPE BASE64 [COMMENT])")
	ErrKeyCertificate = errors.New("certificates are not accepted as node keys")
)

// AuthorizedKey is one parsed authorized_keys line.
type AuthorizedKey struct {
	Key         gossh.PublicKey
	Fingerprint string // SHA256:...
	Comment     string // printable, at most 256 bytes
	Line        string // normalised "TYPE BASE64[ COMMENT]", what is stored
}

// ParseAuthorizedKey parses exactly one authorized_keys line without
// options. It rejects (with the errors above) anything else, so what is
// stored is exactly what is enforced.
func ParseAuthorizedKey(line string) (AuthorizedKey, error) {
	if len(line) > MaxAuthorizedKeyLine {
		return AuthorizedKey{}, ErrKeyTooLong
	}
	line = strings.TrimSpace(line)
	if strings.ContainsAny(line, "\r\n") {
		return AuthorizedKey{}, ErrKeyMultiLine
	}
	if line == "" {
		return AuthorizedKey{}, ErrKeyMalformed
	}
	pub, comment, options, rest, err := gossh.ParseAuthorizedKey([]byte(line))
	if err != nil {
		return AuthorizedKey{}, ErrKeyMalformed
	}
	if len(options) > 0 {
		return AuthorizedKey{}, ErrKeyOptions
	}
	if len(rest) > 0 {
		return AuthorizedKey{}, ErrKeyMultiLine
	}
	if _, ok := pub.(*gossh.Certificate); ok {
		return AuthorizedKey{}, ErrKeyCertificate
	}
	comment = cleanComment(comment)
	norm := strings.TrimSpace(string(gossh.MarshalAuthorizedKey(pub)))
	if comment != "" {
		norm += " " + comment
	}
	return AuthorizedKey{Key: pub, Fingerprint: Fingerprint(pub), Comment: comment, Line: norm}, nil
}

// cleanComment keeps a comment printable and short: it is shown in listings
// and must not carry terminal control sequences.
func cleanComment(c string) string {
	c = strings.Map(func(r rune) rune {
		if !unicode.IsPrint(r) {
			return -1
		}
		return r
	}, c)
	if len(c) > 256 {
		c = strings.ToValidUTF8(c[:256], "")
	}
	return strings.TrimSpace(c)
}

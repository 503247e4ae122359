package keys

import (
	"errors"
	"strings"
	"testing"
	"unicode"
)

// FuzzParseAuthorizedKey: the parser never panics, refuses with one of its
// documented errors, and what it accepts is stored in a normal form that
// parses back to the same key, with a printable bounded comment.
func FuzzParseAuthorizedKey(f *testing.F) {
	for _, s := range []string{
		"ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGcOWuhoq8Pd1C6nkJBjqGc6XkI8Cmb0CoFsFu4yb0bY alice@laptop",
		"ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGcOWuhoq8Pd1C6nkJBjqGc6XkI8Cmb0CoFsFu4yb0bY",
		"ecdsa-sha2-nistp256 AAAAE2VjZHNhLXNoYTItbmlzdHAyNTYAAAAIbmlzdHAyNTYAAABBBEmKSENjQEezOmxkZMy7opKgwFB9nkt5YRrYMjNuG5N87uRgg6CLrbo5wAdT/y6v0mKV0U2w0WZ2YB/++Tpockg= c",
		`command="/bin/sh" ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGcOWuhoq8Pd1C6nkJBjqGc6XkI8Cmb0CoFsFu4yb0bY`,
		"ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGcOWuhoq8Pd1C6nkJBjqGc6XkI8Cmb0CoFsFu4yb0bY a\x1b[2Jb",
		"ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGcOWuhoq8Pd1C6nkJBjqGc6XkI8Cmb0CoFsFu4yb0bY x\nssh-ed25519 AAAA",
		"ssh-rsa AAAA", "ssh-ed25519", "", " ", "#", "\xff\xfe", "ssh-ed25519 ====",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, line string) {
		ak, err := ParseAuthorizedKey(line)
		if err != nil {
			for _, known := range []error{ErrKeyTooLong, ErrKeyOptions, ErrKeyMultiLine, ErrKeyMalformed, ErrKeyCertificate} {
				if errors.Is(err, known) {
					return
				}
			}
			t.Fatalf("got %v, want one of the documented errors", err)
		}
		if ak.Key == nil || ak.Fingerprint != Fingerprint(ak.Key) {
			t.Fatalf("accepted %q without a consistent key and fingerprint", line)
		}
		if len(ak.Comment) > 256 || strings.IndexFunc(ak.Comment, func(r rune) bool { return !unicode.IsPrint(r) }) >= 0 {
			t.Fatalf("comment %q is not printable or too long", ak.Comment)
		}
		if strings.ContainsAny(ak.Line, "\r\n") {
			t.Fatalf("stored line %q spans lines", ak.Line)
		}
		back, err := ParseAuthorizedKey(ak.Line)
		if err != nil {
			t.Fatalf("stored line %q does not parse again: %v", ak.Line, err)
		}
		if back.Line != ak.Line || back.Fingerprint != ak.Fingerprint || back.Comment != ak.Comment {
			t.Fatalf("stored line %q is not a fixed point: got %+v", ak.Line, back)
		}
	})
}

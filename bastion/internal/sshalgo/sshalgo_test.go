package sshalgo

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/rsa"
	"slices"
	"strings"
	"testing"

	gossh "golang.org/x/crypto/ssh"
)

// TestImplemented: x/crypto silently drops names it does not implement,
// which would change what obmd offers without a word: every name of both
// sets must be one it implements.
func TestImplemented(t *testing.T) {
	sup, insec := gossh.SupportedAlgorithms(), gossh.InsecureAlgorithms()
	known := func(a, b []string) []string { return append(slices.Clone(a), b...) }
	for name, s := range map[string]Set{"modern": Modern(), "legacy": Legacy()} {
		for _, c := range []struct {
			what       string
			got, known []string
		}{
			{"key exchange", s.KeyExchanges, known(sup.KeyExchanges, insec.KeyExchanges)},
			{"cipher", s.Ciphers, known(sup.Ciphers, insec.Ciphers)},
			{"MAC", s.MACs, known(sup.MACs, insec.MACs)},
			{"signature", s.Signatures, known(sup.PublicKeyAuths, insec.PublicKeyAuths)},
		} {
			for _, a := range c.got {
				if !slices.Contains(c.known, a) {
					t.Errorf("%s %s %q: not implemented by x/crypto", name, c.what, a)
				}
			}
		}
	}
}

// TestModernHasNoSHA1: no SHA-1 anywhere in the default set; the legacy
// set has exactly the ones old clients need.
func TestModernHasNoSHA1(t *testing.T) {
	m := Modern()
	for _, list := range [][]string{m.KeyExchanges, m.Ciphers, m.MACs, m.Signatures} {
		for _, a := range list {
			if strings.HasSuffix(a, "-sha1") || strings.Contains(a, "sha1-") || strings.HasPrefix(a, "hmac-sha1") || a == gossh.KeyAlgoRSA {
				t.Errorf("modern set offers %q", a)
			}
		}
	}
	l := Legacy()
	for _, a := range []string{gossh.InsecureKeyExchangeDH14SHA1, gossh.HMACSHA1, gossh.InsecureHMACSHA196, gossh.KeyAlgoRSA} {
		if !slices.Contains(slices.Concat(l.KeyExchanges, l.MACs, l.Signatures), a) {
			t.Errorf("legacy set lacks %q", a)
		}
	}
}

// TestHostKey: an RSA host key signs with SHA-2 only unless the set
// allows ssh-rsa; an ed25519 key is left as it is.
func TestHostKey(t *testing.T) {
	rk, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	rs, err := gossh.NewSignerFromKey(rk)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		set  Set
		want []string
	}{
		{Modern(), []string{gossh.KeyAlgoRSASHA256, gossh.KeyAlgoRSASHA512}},
		{Legacy(), []string{gossh.KeyAlgoRSASHA256, gossh.KeyAlgoRSASHA512, gossh.KeyAlgoRSA}},
	} {
		hk, err := c.set.HostKey(rs)
		if err != nil {
			t.Fatal(err)
		}
		ms, ok := hk.(gossh.MultiAlgorithmSigner)
		if !ok || !slices.Equal(ms.Algorithms(), c.want) {
			t.Errorf("RSA host key: got %T, want algorithms %v", hk, c.want)
		}
	}
	_, ek, _ := ed25519.GenerateKey(rand.Reader)
	es, err := gossh.NewSignerFromKey(ek)
	if err != nil {
		t.Fatal(err)
	}
	if hk, err := Modern().HostKey(es); err != nil || hk != es {
		t.Errorf("ed25519 host key: got %v, %v; want it unchanged", hk, err)
	}
}

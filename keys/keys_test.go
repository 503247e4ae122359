package keys

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	gossh "golang.org/x/crypto/ssh"
)

func TestLoadOrCreateHostKey(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sub", "ssh_host_ed25519_key")
	first, err := LoadOrCreateHostKey(path)
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	if got := first.PublicKey().Type(); got != gossh.KeyAlgoED25519 {
		t.Errorf("key type: got %s, want %s", got, gossh.KeyAlgoED25519)
	}
	st, err := os.Stat(path)
	if err != nil {
		t.Fatalf("stat: %v", err)
	}
	if got := st.Mode().Perm(); got != 0o600 {
		t.Errorf("mode: got %o, want 600", got)
	}
	if dir, _ := os.Stat(filepath.Dir(path)); dir.Mode().Perm() != 0o700 {
		t.Errorf("directory mode: got %o, want 700", dir.Mode().Perm())
	}
	again, err := LoadOrCreateHostKey(path)
	if err != nil {
		t.Fatalf("reuse: %v", err)
	}
	if got, want := Fingerprint(again.PublicKey()), Fingerprint(first.PublicKey()); got != want {
		t.Errorf("reused key: got %s, want %s", got, want)
	}
	if !strings.HasPrefix(Fingerprint(first.PublicKey()), "SHA256:") {
		t.Errorf("fingerprint %q: want a SHA256: prefix", Fingerprint(first.PublicKey()))
	}
	// No temporary file is left behind.
	entries, _ := os.ReadDir(filepath.Dir(path))
	if len(entries) != 1 {
		t.Errorf("directory holds %d entries, want 1", len(entries))
	}
}

func TestLoadOrCreateHostKeyRace(t *testing.T) {
	path := filepath.Join(t.TempDir(), "key")
	var wg sync.WaitGroup
	fps := make([]string, 8)
	for i := range fps {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s, err := LoadOrCreateHostKey(path)
			if err != nil {
				t.Error(err)
				return
			}
			fps[i] = Fingerprint(s.PublicKey())
		}()
	}
	wg.Wait()
	for _, fp := range fps[1:] {
		if fp != fps[0] {
			t.Fatalf("racing creators disagree: got %s, want %s", fp, fps[0])
		}
	}
}

func TestLoadOrCreateHostKeyErrors(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "garbage")
	if err := os.WriteFile(bad, []byte("not a key"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadOrCreateHostKey(bad); err == nil {
		t.Errorf("garbage key file: got no error, want one")
	}
	if _, err := LoadOrCreateHostKey(filepath.Join(bad, "below-a-file")); err == nil {
		t.Errorf("path below a file: got no error, want one")
	}
}

func TestNewToken(t *testing.T) {
	seen := map[string]bool{}
	for i := 0; i < 1000; i++ {
		tok, err := NewToken()
		if err != nil {
			t.Fatal(err)
		}
		if len(tok) != 32 {
			t.Fatalf("token %q: got %d characters, want 32", tok, len(tok))
		}
		raw, err := base64.RawURLEncoding.DecodeString(tok)
		if err != nil || len(raw) != tokenBytes {
			t.Fatalf("token %q: got %d bytes (%v), want %d of unpadded base64url", tok, len(raw), err, tokenBytes)
		}
		if strings.ContainsAny(tok, "+/= \t\n") {
			t.Fatalf("token %q holds a character that needs quoting", tok)
		}
		if seen[tok] {
			t.Fatalf("token %q generated twice", tok)
		}
		seen[tok] = true
	}
	// Every bit position varies (a stuck bit would show after 1000 draws).
	var or, and [tokenBytes]byte
	for i := range and {
		and[i] = 0xff
	}
	for tok := range seen {
		raw, _ := base64.RawURLEncoding.DecodeString(tok)
		for i, b := range raw {
			or[i] |= b
			and[i] &= b
		}
	}
	for i := range or {
		if or[i] != 0xff || and[i] != 0 {
			t.Fatalf("byte %d: or %08b and %08b: some bit never changes", i, or[i], and[i])
		}
	}
}

func TestTokenHash(t *testing.T) {
	a, b := HashToken("token-a"), HashToken("token-b")
	tests := []struct {
		name string
		x, y TokenHash
		want bool
	}{
		{"same token", a, HashToken("token-a"), true},
		{"other token", a, b, false},
		{"empty vs zero", HashToken(""), TokenHash{}, false},
		{"one bit", a, flip(a, 31), false},
		{"zero values", TokenHash{}, TokenHash{}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.x.Equal(tt.y); got != tt.want {
				t.Errorf("Equal: got %v, want %v", got, tt.want)
			}
		})
	}
	s := a.String()
	if len(s) != 64 || strings.ToLower(s) != s {
		t.Errorf("String: got %q, want 64 lower-case hex characters", s)
	}
	back, err := ParseTokenHash(s)
	if err != nil || !back.Equal(a) {
		t.Errorf("ParseTokenHash(String()): got %v, %v, want the same hash", back, err)
	}
	for _, bad := range []string{"", "zz", s[:62], s + "00", strings.Repeat("g", 64)} {
		if _, err := ParseTokenHash(bad); err == nil {
			t.Errorf("ParseTokenHash(%q): got no error, want one", bad)
		} else if strings.Contains(err.Error(), bad) && bad != "" {
			t.Errorf("ParseTokenHash error %q echoes its input", err)
		}
	}
}

func flip(h TokenHash, i int) TokenHash {
	h[i] ^= 1
	return h
}

func TestSecretEqual(t *testing.T) {
	tests := []struct {
		a, b string
		want bool
	}{
		{"admin-secret", "admin-secret", true},
		{"admin-secret", "admin-secreT", false},
		{"admin-secret", "admin-secret ", false},
		{"", "", true},
		{"", "x", false},
	}
	for _, tt := range tests {
		if got := SecretEqual(tt.a, tt.b); got != tt.want {
			t.Errorf("SecretEqual(%q, %q): got %v, want %v", tt.a, tt.b, got, tt.want)
		}
	}
}

func TestLoadOrCreateSecret(t *testing.T) {
	path := filepath.Join(t.TempDir(), "admin-token")
	s1, created, err := LoadOrCreateSecret(path)
	if err != nil || !created || s1 == "" {
		t.Fatalf("first: got %q, created %v, %v; want a new secret", s1, created, err)
	}
	if st, _ := os.Stat(path); st.Mode().Perm() != 0o600 {
		t.Errorf("mode: got %o, want 600", st.Mode().Perm())
	}
	s2, created, err := LoadOrCreateSecret(path)
	if err != nil || created || s2 != s1 {
		t.Errorf("second: got %q, created %v, %v; want %q reused", s2, created, err, s1)
	}
	// An operator's file with surrounding white space.
	own := filepath.Join(t.TempDir(), "own")
	os.WriteFile(own, []byte("  my-secret\n\n"), 0o600)
	if got, _, err := LoadOrCreateSecret(own); err != nil || got != "my-secret" {
		t.Errorf("operator file: got %q, %v, want %q", got, err, "my-secret")
	}
	empty := filepath.Join(t.TempDir(), "empty")
	os.WriteFile(empty, []byte(" \n"), 0o600)
	if _, _, err := LoadOrCreateSecret(empty); err == nil {
		t.Errorf("empty file: got no error, want one")
	}
}

func TestSealer(t *testing.T) {
	key := bytes.Repeat([]byte{0x42}, 32)
	s, err := NewSealer(key)
	if err != nil {
		t.Fatal(err)
	}
	plain := []byte(`{"addr":"10.0.0.5","user":"root","pass":"hunter2-bmc"}`)
	sealed, err := s.Seal(plain, "node-17")
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(sealed, []byte("hunter2-bmc")) {
		t.Fatalf("sealed value holds the plaintext")
	}
	again, _ := s.Seal(plain, "node-17")
	if bytes.Equal(again, sealed) {
		t.Errorf("two seals of the same value are equal: the nonce is not fresh")
	}
	other, _ := NewSealer(bytes.Repeat([]byte{0x43}, 32))
	tampered := bytes.Clone(sealed)
	tampered[len(tampered)-1] ^= 0x80
	tests := []struct {
		name    string
		s       *Sealer
		sealed  []byte
		owner   string
		wantErr bool
	}{
		{"round trip", s, sealed, "node-17", false},
		{"wrong owner", s, sealed, "node-18", true},
		{"owner prefix", s, sealed, "node-1", true},
		{"wrong key", other, sealed, "node-17", true},
		{"tampered tag", s, tampered, "node-17", true},
		{"tampered nonce", s, append([]byte{sealed[0] ^ 1}, sealed[1:]...), "node-17", true},
		{"truncated", s, sealed[:20], "node-17", true},
		{"empty", s, nil, "node-17", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.s.Open(tt.sealed, tt.owner)
			if tt.wantErr {
				if !errors.Is(err, ErrUnseal) {
					t.Errorf("Open: got %q, %v; want ErrUnseal", got, err)
				}
				return
			}
			if err != nil || !bytes.Equal(got, plain) {
				t.Errorf("Open: got %q, %v; want %q", got, err, plain)
			}
		})
	}
	for _, n := range []int{0, 16, 31, 33} {
		if _, err := NewSealer(make([]byte, n)); err == nil {
			t.Errorf("NewSealer(%d bytes): got no error, want one", n)
		}
	}
}

func TestLoadOrCreateSealer(t *testing.T) {
	path := filepath.Join(t.TempDir(), "seal.key")
	s1, err := LoadOrCreateSealer(path)
	if err != nil {
		t.Fatal(err)
	}
	if st, _ := os.Stat(path); st.Mode().Perm() != 0o600 || st.Size() != 32 {
		t.Errorf("key file: got mode %o size %d, want 600 and 32", st.Mode().Perm(), st.Size())
	}
	sealed, _ := s1.Seal([]byte("secret"), "n1")
	s2, err := LoadOrCreateSealer(path)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := s2.Open(sealed, "n1"); err != nil || string(got) != "secret" {
		t.Errorf("reloaded sealer: got %q, %v, want %q", got, err, "secret")
	}
	short := filepath.Join(t.TempDir(), "short.key")
	os.WriteFile(short, []byte("too short"), 0o600)
	if _, err := LoadOrCreateSealer(short); err == nil {
		t.Errorf("short key file: got no error, want one")
	}
}

// testKey returns a fresh ed25519 public key in authorized_keys form
// (without the trailing newline).
func testKey(t testing.TB) (gossh.PublicKey, string) {
	t.Helper()
	pub, _, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	sp, err := gossh.NewPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	return sp, strings.TrimSpace(string(gossh.MarshalAuthorizedKey(sp)))
}

func TestParseAuthorizedKey(t *testing.T) {
	pub, line := testKey(t)
	fp := Fingerprint(pub)
	_, line2 := testKey(t)
	cert := certLine(t, pub)
	tests := []struct {
		name        string
		in          string
		wantErr     error
		wantLine    string
		wantComment string
	}{
		{name: "bare", in: line, wantLine: line},
		{name: "comment", in: line + " alice@laptop", wantLine: line + " alice@laptop", wantComment: "alice@laptop"},
		{name: "surrounding space", in: "  " + line + " c  \n", wantLine: line + " c", wantComment: "c"},
		{name: "comment with spaces", in: line + " my  key", wantLine: line + " my  key", wantComment: "my  key"},
		{name: "control characters stripped", in: line + " a\x1b[2Jb\x07c", wantLine: line + " a[2Jbc", wantComment: "a[2Jbc"},
		{name: "long comment cut", in: line + " " + strings.Repeat("é", 200), wantLine: line + " " + strings.Repeat("é", 128), wantComment: strings.Repeat("é", 128)},
		{name: "empty", in: "", wantErr: ErrKeyMalformed},
		{name: "blank", in: " \t ", wantErr: ErrKeyMalformed},
		{name: "garbage", in: "hello world", wantErr: ErrKeyMalformed},
		{name: "bad base64", in: "ssh-ed25519 AAAA!!!!", wantErr: ErrKeyMalformed},
		{name: "type only", in: "ssh-ed25519", wantErr: ErrKeyMalformed},
		{name: "type mismatch", in: "ssh-rsa " + strings.Fields(line)[1], wantErr: ErrKeyMalformed},
		{name: "truncated key", in: line[:len(line)-8], wantErr: ErrKeyMalformed},
		{name: "options", in: `command="/bin/sh" ` + line, wantErr: ErrKeyOptions},
		{name: "from option", in: `from="10.0.0.0/8" ` + line, wantErr: ErrKeyOptions},
		{name: "two lines", in: line + "\n" + line2, wantErr: ErrKeyMultiLine},
		{name: "carriage return", in: line + "\r" + line2, wantErr: ErrKeyMultiLine},
		{name: "certificate", in: cert, wantErr: ErrKeyCertificate},
		{name: "too long", in: line + " " + strings.Repeat("x", MaxAuthorizedKeyLine), wantErr: ErrKeyTooLong},
		{name: "huge", in: strings.Repeat("A", 10<<20), wantErr: ErrKeyTooLong},
		{name: "comment line", in: "# " + line, wantErr: ErrKeyMalformed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseAuthorizedKey(tt.in)
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("got %v, want %v", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("got %v, want no error", err)
			}
			if got.Fingerprint != Fingerprint(got.Key) || (strings.HasPrefix(tt.in, "  "+line) || strings.HasPrefix(tt.in, line)) && got.Fingerprint != fp {
				t.Errorf("fingerprint: got %s, want %s", got.Fingerprint, fp)
			}
			if got.Line != tt.wantLine {
				t.Errorf("line: got %q, want %q", got.Line, tt.wantLine)
			}
			if got.Comment != tt.wantComment {
				t.Errorf("comment: got %q, want %q", got.Comment, tt.wantComment)
			}
		})
	}
}

// Error texts never echo the line (it is shown to an administrator and
// may be anything).
func TestParseAuthorizedKeyErrorsDoNotEcho(t *testing.T) {
	for _, in := range []string{"\x1b[31msecret-ish", `command="x" ` + "ssh-ed25519 AAAA", "a\nb"} {
		_, err := ParseAuthorizedKey(in)
		if err == nil {
			t.Fatalf("%q: got no error", in)
		}
		if strings.Contains(err.Error(), "secret-ish") || strings.ContainsAny(err.Error(), "\x1b\n") {
			t.Errorf("%q: error %q echoes the input", in, err)
		}
	}
}

func certLine(t *testing.T, pub gossh.PublicKey) string {
	t.Helper()
	_, caPriv, _ := ed25519.GenerateKey(rand.Reader)
	ca, err := gossh.NewSignerFromKey(caPriv)
	if err != nil {
		t.Fatal(err)
	}
	c := &gossh.Certificate{Key: pub, CertType: gossh.UserCert, ValidPrincipals: []string{"n1"},
		ValidBefore: gossh.CertTimeInfinity}
	if err := c.SignCert(rand.Reader, ca); err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(gossh.MarshalAuthorizedKey(c)))
}

package certs

// Helpers of the certificate tests (login_test.go): an OpenSSH CA run
// with Debian's ssh-keygen, its certificates as files for `ssh -o
// CertificateFile=` and as x/crypto signers, and the audit rows they leave.

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/obmd/obmd/bastion/e2e/obmdtest"

	gossh "golang.org/x/crypto/ssh"

	"github.com/obmd/obmd/bastion/daemon"
	"github.com/obmd/obmd/sol/soltest/ipmisim"
)

// issuer is an OpenSSH user CA and one tenant's key pair, made by
// ssh-keygen in a test's directory.
type issuer struct {
	t     testing.TB
	dir   string
	key   string // the tenant's private key file (ssh -i)
	ca    string // the CA's public key line
	user  gossh.Signer
	certs int
}

// newIssuer makes a CA and a tenant key.
func newIssuer(t testing.TB) *issuer {
	t.Helper()
	ipmisim.Require(t, "ssh-keygen", "ssh")
	k := &issuer{t: t, dir: t.TempDir()}
	k.run("-q", "-t", "ed25519", "-N", "", "-C", "ca", "-f", "ca")
	k.run("-q", "-t", "ed25519", "-N", "", "-C", "tenant", "-f", "id")
	k.key = filepath.Join(k.dir, "id")
	k.ca = strings.TrimSpace(string(k.read("ca.pub")))
	var err error
	if k.user, err = gossh.ParsePrivateKey(k.read("id")); err != nil {
		t.Fatal(err)
	}
	return k
}

func (k *issuer) run(args ...string) {
	k.t.Helper()
	cmd := exec.Command("ssh-keygen", args...)
	cmd.Dir = k.dir
	if out, err := cmd.CombinedOutput(); err != nil {
		k.t.Fatalf("ssh-keygen %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

func (k *issuer) read(name string) []byte {
	k.t.Helper()
	b, err := os.ReadFile(filepath.Join(k.dir, name))
	if err != nil {
		k.t.Fatal(err)
	}
	return b
}

// sign runs `ssh-keygen -s ca ARGS id.pub` and returns the path of the
// certificate, a file of its own.
func (k *issuer) sign(args ...string) string {
	k.t.Helper()
	k.run(append(append([]string{"-q", "-s", "ca"}, args...), "id.pub")...)
	k.certs++
	path := filepath.Join(k.dir, "cert-"+strconv.Itoa(k.certs)+".pub")
	if err := os.Rename(filepath.Join(k.dir, "id-cert.pub"), path); err != nil {
		k.t.Fatal(err)
	}
	return path
}

// signer is the x/crypto signer of the certificate at path.
func (k *issuer) signer(path string) gossh.Signer {
	k.t.Helper()
	s, err := gossh.NewCertSigner(certAt(k.t, path), k.user)
	if err != nil {
		k.t.Fatal(err)
	}
	return s
}

// certAt parses the certificate file at path.
func certAt(t testing.TB, path string) *gossh.Certificate {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	pub, _, _, _, err := gossh.ParseAuthorizedKey(b)
	if err != nil {
		t.Fatal(err)
	}
	cert, ok := pub.(*gossh.Certificate)
	if !ok {
		t.Fatalf("%s is not a certificate", path)
	}
	return cert
}

// validAfter is the start of the certificate at path.
func validAfter(t testing.TB, path string) time.Time {
	t.Helper()
	return time.Unix(int64(certAt(t, path).ValidAfter), 0)
}

// args are the OpenSSH client arguments that log in with the certificate
// at path.
func (k *issuer) args(path string) []string {
	return []string{"-i", k.key, "-o", "CertificateFile=" + path}
}

// window is ssh-keygen's -V for an absolute validity from from to to.
func window(from, to time.Time) string {
	const f = "20060102150405Z"
	return from.UTC().Format(f) + ":" + to.UTC().Format(f)
}

// trust adds k's CA as name and returns its fingerprint.
func trust(a *obmdtest.Admin, k *issuer, name string) string {
	a.T.Helper()
	var out struct{ Fingerprint string }
	if err := json.Unmarshal(a.MustAPI(201, "POST", "/v1/cas", map[string]string{"key": k.ca, "name": name}), &out); err != nil {
		a.T.Fatalf("add CA: %v", err)
	}
	return out.Fingerprint
}

// certObmd starts a daemon on dsn ("": SQLite) with opts, trusting a new
// issuer's CA as "hil"; it returns the CA's fingerprint too.
func certObmd(t *testing.T, dsn string, opts ...func(*daemon.Config)) (*obmdtest.Daemon, *issuer, string) {
	t.Helper()
	k := newIssuer(t) // first: it needs OpenSSH's tools, which -short skips
	o := obmdtest.Start(t, append([]func(*daemon.Config){func(c *daemon.Config) { c.DB.DSN = dsn }}, opts...)...)
	return o, k, trust(o.Admin, k, "hil")
}

// certOpens checks that the certificate at cert (of k) runs power-status
// on label through OpenSSH; what names the case.
func certOpens(o *obmdtest.Daemon, k *issuer, label, cert, what string) {
	o.T.Helper()
	if res := o.OpenSSH(label, "", k.args(cert), "power-status"); res.Code != 0 || res.Stdout != label+": power on\n" {
		o.T.Errorf("%s: got %v, want exit 0 and the power status", what, res)
	}
}

// certRefused checks that OpenSSH cannot log in to label with the
// certificate at cert (of k).
func certRefused(o *obmdtest.Daemon, k *issuer, label, cert, what string) {
	o.T.Helper()
	if res := o.OpenSSH(label, "", k.args(cert), "power-status"); res.Code != 255 || !strings.Contains(res.Stderr, "Permission denied") {
		o.T.Errorf("%s: got %v, want permission denied", what, res)
	}
}

// certDenied reports whether node's audit has a denied certificate login
// whose detail contains why, after the events seen before (by ID).
func certDenied(o *obmdtest.Daemon, node, why string, after int64) bool {
	for _, e := range o.Audit(node) {
		if e.ID > after && e.Actor == "ssh:cert" && e.Action == "auth" && e.Result == "denied" && strings.Contains(e.Detail, why) {
			return true
		}
	}
	return false
}

// lastAudit is the ID of node's latest audit event (0: none).
func lastAudit(o *obmdtest.Daemon, node string) int64 {
	ev := o.Audit(node)
	if len(ev) == 0 {
		return 0
	}
	return ev[len(ev)-1].ID
}

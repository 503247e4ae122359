package obmdtest

import (
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	gossh "golang.org/x/crypto/ssh"

	"github.com/obmd/obmd/bastion/access/authlimit"
	"github.com/obmd/obmd/bastion/daemon"
)

// NoLimits lifts the guessing limits for tests that fail on purpose many
// times from one address.
func NoLimits(c *daemon.Config) {
	c.AuthLimits = authlimit.Config{PerSource: 1 << 20, PerNode: 1 << 20, Window: time.Minute, Lockout: time.Minute}
}

// DialFrom connects from the local address src (127.0.0.2, ...), so tests
// can act as several clients.
func (o *Daemon) DialFrom(src, user string, auth ...gossh.AuthMethod) (*gossh.Client, error) {
	return DialFrom(o.SSHAddr(), src, user, auth...)
}

// DialFrom connects to addr from the local address src as user.
func DialFrom(addr, src, user string, auth ...gossh.AuthMethod) (*gossh.Client, error) {
	return DialWrapped(addr, src, user, func(c net.Conn) net.Conn { return c }, auth...)
}

// DialWrapped is dialFrom with the client's socket wrapped (a slow link).
func DialWrapped(addr, src, user string, wrap func(net.Conn) net.Conn, auth ...gossh.AuthMethod) (*gossh.Client, error) {
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: 10 * time.Second}
	raw, err := d.Dial("tcp", addr)
	if err != nil {
		return nil, err
	}
	nc := wrap(raw)
	nc.SetDeadline(time.Now().Add(30 * time.Second))
	conn, chans, reqs, err := gossh.NewClientConn(nc, addr, &gossh.ClientConfig{
		User: user, Auth: auth, HostKeyCallback: gossh.InsecureIgnoreHostKey(),
	})
	if err != nil {
		nc.Close()
		return nil, err
	}
	nc.SetDeadline(time.Time{})
	return gossh.NewClient(conn, chans, reqs), nil
}

// TryFrom authenticates from src with token and, if that works, runs
// power-status; it returns the authentication error.
func (o *Daemon) TryFrom(t *testing.T, src, user, token string) error {
	t.Helper()
	c, err := o.DialFrom(src, user, gossh.Password(token))
	if err != nil {
		return err
	}
	defer c.Close()
	res, err := RunSession(c, "power-status")
	if err != nil || res.Code != 0 {
		t.Errorf("power-status from %s on %s: got %v, %v; want exit 0", src, user, res, err)
	}
	return nil
}

// Impostor offers a registered public key but signs with another key: it
// does not hold the registered key's private half.
type Impostor struct {
	Key    gossh.PublicKey
	Signer gossh.Signer
}

// PublicKey is the registered key i claims.
func (i Impostor) PublicKey() gossh.PublicKey { return i.Key }

// Sign signs with i's own key, not the registered one.
func (i Impostor) Sign(r io.Reader, data []byte) (*gossh.Signature, error) {
	return i.Signer.Sign(r, data)
}

// KeyboardInteractive answers obmd's one keyboard-interactive prompt with token; any
// other challenge (more prompts, an echoed one) fails the login.
func KeyboardInteractive(token string) gossh.AuthMethod {
	return gossh.KeyboardInteractive(func(name, instruction string, questions []string, echos []bool) ([]string, error) {
		if len(questions) != 1 || echos[0] || !strings.Contains(questions[0], "token") {
			return nil, fmt.Errorf("unexpected challenge %q (echo %v)", questions, echos)
		}
		return []string{token}, nil
	})
}

// Exec runs line on user@obmd with the given authentication.
func (o *Daemon) Exec(user, line string, auth ...gossh.AuthMethod) (Result, error) {
	return ExecSSH(o.SSHAddr(), user, line, auth...)
}

// Must fails t on a transport or authentication error:
// Must(t)(o.execGo(...)).
func Must(t *testing.T) func(Result, error) Result {
	return func(res Result, err error) Result {
		t.Helper()
		if err != nil {
			t.Fatalf("ssh: %v", err)
		}
		return res
	}
}

// Package bare is the ceiling obmd's SSH front door is measured against: a
// bare gliderlabs/ssh server.
//
// It has the same host key type and the same password authentication as
// obmd, but no database, no session registry and no console hub.
// bench/baressh runs it as a process (for CPU and RSS); the bench also runs
// it in-process next to an in-process obmd.
//
// It answers
//
//	power-status   "node: power on\n", exit 0 (what obmd prints)
//	stream N       N bytes of 80-byte console lines, exit 0 (throughput ceiling)
//	(shell)        every byte it reads, echoed (keystroke-echo floor)
package bare

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/subtle"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/gliderlabs/ssh"
	gossh "golang.org/x/crypto/ssh"
)

// New returns a server that accepts any user with password pass, with a
// fresh ed25519 host key. Serve it on a listener; Close stops it.
func New(pass string) (*ssh.Server, error) {
	if pass == "" {
		return nil, errors.New("bare: empty password")
	}
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("bare: host key: %w", err)
	}
	signer, err := gossh.NewSignerFromKey(priv)
	if err != nil {
		return nil, fmt.Errorf("bare: host key: %w", err)
	}
	srv := &ssh.Server{
		Handler: handle,
		PasswordHandler: func(_ ssh.Context, p string) bool {
			return subtle.ConstantTimeCompare([]byte(p), []byte(pass)) == 1
		},
	}
	srv.AddHostKey(signer)
	return srv, nil
}

func handle(s ssh.Session) {
	cmd := s.RawCommand()
	switch {
	case cmd == "power-status":
		io.WriteString(s, "node: power on\n")
		s.Exit(0)
	case strings.HasPrefix(cmd, "stream "):
		n, err := strconv.Atoi(strings.TrimPrefix(cmd, "stream "))
		if err != nil || n < 0 {
			s.Exit(2)
			return
		}
		stream(s, n)
		s.Exit(0)
	case cmd == "":
		io.Copy(s, s) // echo until the client closes
	default:
		io.WriteString(s.Stderr(), "unknown command\n")
		s.Exit(2)
	}
}

// stream writes n bytes of 80-byte lines in 16 KiB writes. (No pty: with
// one, gliderlabs would turn "\n" into "\r\n" and change the count.)
func stream(w io.Writer, n int) {
	line := strings.Repeat("x", 78) + "\r\n"
	buf := []byte(strings.Repeat(line, (16<<10)/len(line)+1))[:16<<10]
	for n > 0 {
		k := min(n, len(buf))
		if _, err := w.Write(buf[:k]); err != nil {
			return
		}
		n -= k
	}
}

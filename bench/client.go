package main

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	gossh "golang.org/x/crypto/ssh"
)

func randomHex(n int) (string, error) {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("random: %w", err)
	}
	return hex.EncodeToString(b), nil
}

// kex is the one key exchange every client offers, so every server does
// the same handshake work: curve25519-sha256 is what OpenSSH 9.2 and
// x/crypto have in common (x/crypto would otherwise pick ML-KEM with obmd
// and the bare server, which sshd 9.2 lacks).
var kex = []string{"curve25519-sha256"}

// dial opens an SSH connection as user (x/crypto client, host key not
// checked: loopback, a server this program started).
func dial(addr, user string, auth gossh.AuthMethod) (*gossh.Client, error) {
	return dialFrom(nil, addr, user, auth)
}

// dialFrom is dial from local address from (nil: the system's choice), so
// that a server sees each client under an address of its own.
func dialFrom(from net.IP, addr, user string, auth gossh.AuthMethod) (*gossh.Client, error) {
	cfg := &gossh.ClientConfig{
		User: user, Auth: []gossh.AuthMethod{auth},
		HostKeyCallback: gossh.InsecureIgnoreHostKey(), Timeout: 10 * time.Second,
		Config: gossh.Config{KeyExchanges: kex},
	}
	if from == nil {
		return gossh.Dial("tcp", addr, cfg)
	}
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: from}, Timeout: cfg.Timeout}
	conn, err := d.Dial("tcp", addr)
	if err != nil {
		return nil, err
	}
	// Bound the handshake too (gossh.Dial bounds the TCP connect only).
	conn.SetDeadline(time.Now().Add(cfg.Timeout))
	c, chans, reqs, err := gossh.NewClientConn(conn, addr, cfg)
	if err != nil {
		conn.Close()
		return nil, err
	}
	conn.SetDeadline(time.Time{})
	return gossh.NewClient(c, chans, reqs), nil
}

// execOnce is one whole client connection: connect, authenticate, run cmd,
// read its output, close. It fails unless the exit status is 0 and the
// output contains want.
func execOnce(addr, user string, auth gossh.AuthMethod, cmd, want string) error {
	return execFrom(nil, addr, user, auth, cmd, want)
}

// execFrom is execOnce from local address from (nil: the system's choice).
func execFrom(from net.IP, addr, user string, auth gossh.AuthMethod, cmd, want string) error {
	c, err := dialFrom(from, addr, user, auth)
	if err != nil {
		return err
	}
	defer c.Close()
	s, err := c.NewSession()
	if err != nil {
		return err
	}
	defer s.Close()
	var stderr syncBuf
	s.Stderr = &stderr
	out, err := s.Output(cmd)
	if err != nil {
		return fmt.Errorf("%s: %w: %s", cmd, err, strings.TrimSpace(stderr.String()))
	}
	if !strings.Contains(string(out), want) {
		return fmt.Errorf("%s: got %q, want %q", cmd, out, want)
	}
	return nil
}

// syncBuf is a bytes.Buffer safe for one writer and many readers.
type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func (s *syncBuf) Contains(sub string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return bytes.Contains(s.b.Bytes(), []byte(sub))
}

// viewer is an interactive console session (pty-req + shell), as `ssh -t
// node@obmd` opens.
type viewer struct {
	c      *gossh.Client
	s      *gossh.Session
	in     io.WriteCloser
	out    io.Reader // nil once a reader goroutine owns it
	stderr *syncBuf
	done   chan struct{} // closed when the session ended (Wait returned)
	ended  atomic.Int64  // UnixNano when done was closed
}

// openViewer connects and starts a console session. stderr is collected
// (obmd's banner and notices go there).
func openViewer(addr, user string, auth gossh.AuthMethod) (*viewer, error) {
	c, err := dial(addr, user, auth)
	if err != nil {
		return nil, err
	}
	s, err := c.NewSession()
	if err != nil {
		c.Close()
		return nil, err
	}
	v := &viewer{c: c, s: s, stderr: &syncBuf{}, done: make(chan struct{})}
	s.Stderr = v.stderr
	if v.in, err = s.StdinPipe(); err == nil {
		v.out, err = s.StdoutPipe()
	}
	if err == nil {
		err = s.RequestPty("xterm", 24, 80, gossh.TerminalModes{})
	}
	if err == nil {
		err = s.Shell()
	}
	if err != nil {
		c.Close()
		return nil, err
	}
	go func() { // owned by the viewer: ends when the session ends (Close, or the server cuts it)
		s.Wait()
		v.ended.Store(time.Now().UnixNano())
		close(v.done)
	}()
	return v, nil
}

// discard reads and drops the viewer's output in a goroutine (idle viewers
// still read, as a terminal does). It ends when the session does.
func (v *viewer) discard() {
	r := v.out
	v.out = nil
	go io.Copy(io.Discard, r) // ends when the channel closes
}

// waitStderr waits until the viewer's stderr contains sub.
func (v *viewer) waitStderr(sub string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for !v.stderr.Contains(sub) {
		select {
		case <-v.done:
			if v.stderr.Contains(sub) {
				return nil
			}
			return fmt.Errorf("session ended before %q", sub)
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no %q within %v", sub, timeout)
		}
		time.Sleep(5 * time.Millisecond)
	}
	return nil
}

// Close ends the session and the connection.
func (v *viewer) Close() { v.c.Close() }

// openViewers opens n viewers with conc workers; user(i) and auth(i) pick
// each one's node and credential. Each waits for obmd's banner. On error,
// the viewers opened so far are closed.
func openViewers(n, conc int, addr string, user func(int) string, auth func(int) gossh.AuthMethod, timeout time.Duration) ([]*viewer, error) {
	vs := make([]*viewer, n)
	err := forEach(n, conc, time.Now().Add(timeout), func(i int) error {
		v, err := openViewer(addr, user(i), auth(i))
		if err == nil {
			if err = v.waitStderr("console of", 20*time.Second); err != nil {
				v.Close()
			}
		}
		if err != nil {
			return fmt.Errorf("viewer %d: %w", i, err)
		}
		vs[i] = v
		return nil
	})
	if err == nil && slices.Contains(vs, nil) {
		err = fmt.Errorf("opening %d viewers took longer than %v", n, timeout)
	}
	if err != nil {
		closeViewers(vs)
		return nil, err
	}
	return vs, nil
}

// forEach runs f(0), ..., f(n-1) on conc goroutines, each index once, in
// order of start, until all have run, one has failed (no index starts
// after) or deadline has passed (the zero time: no deadline). It returns
// the first error.
func forEach(n, conc int, deadline time.Time, f func(i int) error) error {
	var next atomic.Int64
	var mu sync.Mutex
	var firstErr error
	var wg sync.WaitGroup
	for range conc {
		wg.Add(1)
		go func() { // owned by forEach
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= n || !deadline.IsZero() && time.Now().After(deadline) {
					return
				}
				if err := f(i); err != nil {
					mu.Lock()
					if firstErr == nil {
						firstErr = err
					}
					mu.Unlock()
					next.Store(int64(n)) // no other index starts
					return
				}
			}
		}()
	}
	wg.Wait()
	return firstErr
}

// closeViewers closes every viewer and waits (bounded) for their sessions
// to end.
func closeViewers(vs []*viewer) {
	for _, v := range vs {
		if v != nil {
			v.Close()
		}
	}
	deadline := time.After(10 * time.Second)
	for _, v := range vs {
		if v == nil {
			continue
		}
		select {
		case <-v.done:
		case <-deadline:
			return
		}
	}
}

// errNotMeasured marks a row that could not be measured because something
// it needs is missing (as opposed to a failure).
type errNotMeasured struct{ what string }

func (e errNotMeasured) Error() string { return "not measured: " + e.what }

func notMeasured(format string, a ...any) error {
	return errNotMeasured{fmt.Sprintf(format, a...)}
}

func isNotMeasured(err error) bool {
	var e errNotMeasured
	return errors.As(err, &e)
}

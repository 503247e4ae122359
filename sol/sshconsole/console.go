package sshconsole

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sirupsen/logrus"
	"golang.org/x/crypto/ssh"

	"github.com/obmd/obmd/sol"
)

// Errors of a Console.
var (
	// ErrLinkLost: the BMC ended the console session, or stopped
	// answering. Read wraps it.
	ErrLinkLost = errors.New("SSH console link lost")
	// ErrClosed: the console was closed.
	ErrClosed = errors.New("console closed")
	// ErrBusy: the manager CLI says another session holds the console. It
	// is sol.ErrPayloadActive (errors.Is), so that the console hub frees
	// the console (DeactivateConsole) and tries again.
	ErrBusy = sol.ErrConsoleHeld
	// ErrNoBreak: the BMC's SSH service does not take a break request. It
	// is sol.ErrNotSupported.
	ErrNoBreak error = noBreak{}
)

type noBreak struct{}

func (noBreak) Error() string { return "the BMC's SSH service does not take a break" }
func (noBreak) Unwrap() error { return sol.ErrNotSupported }

// Bounds of attaching the console once logged in.
const (
	promptQuiet = time.Second            // output quiet this long after some: the prompt is there
	promptWait  = 3 * time.Second        // no output this long: type the command anyway
	echoWait    = 300 * time.Millisecond // how long the CLI's echo of a typed command may take
	maxBanner   = 64 << 10               // CLI output read while attaching, at most
	breakLength = 500                    // ms, as OpenSSH's ~B sends
	readBuf     = 32 << 10               // the most output one read takes
)

// Console is one node's host console over its BMC's SSH service. It
// implements sol.Console.
//
// Ownership: three goroutines started by Open, waited for by Close: pump
// reads the session's output into out (closing it when the session ends),
// wait reaps the session (closing ended), and keepalive probes the BMC
// (failing the console when it stops answering). Close alone ends the SSH
// connection. Read runs in the hub's read loop only.
type Console struct {
	c     *Client
	t     Target
	d     *dialed
	s     *ssh.Session
	in    io.WriteCloser
	out   chan []byte   // console output; closed by pump
	pre   []byte        // output read while attaching, past the CLI's banner
	ended chan struct{} // closed by wait when the session has ended

	done      chan struct{} // closed by Close: the goroutines stop
	closeOnce sync.Once
	wg        sync.WaitGroup

	wmu     sync.Mutex // serialises Write, Break and Close's leave; guards enc, broken, closing
	enc     encoder
	wbuf    []byte
	broken  bool // a write failed: the vendor's escape state is unknown
	closing bool

	fmu  sync.Mutex
	fail error // why the console failed (keepalive), for Read's error
}

var _ sol.Console = (*Console)(nil)

// session is a logged-in session with a pty, its input and output.
type session struct {
	s   *ssh.Session
	in  io.WriteCloser
	out chan []byte // closed when the output ends; read by attach, then by the Console
	// pumpErr is the output's end, set before out is closed.
	pumpErr error
}

// Open connects to t's BMC, checks its host key (pinning it on first
// contact), logs in and attaches the host console (sol.BMC.OpenConsole):
// ctx bounds all of it; the console lives until its Close.
func (c *Client) Open(ctx context.Context, t Target) (*Console, error) {
	d, _, err := c.dial(ctx, t, true)
	if err != nil {
		return nil, err
	}
	return c.start(ctx, t, d)
}

// start attaches the console on the connection d, which it owns from then.
func (c *Client) start(ctx context.Context, t Target, d *dialed) (*Console, error) {
	con := &Console{c: c, t: t, d: d, ended: make(chan struct{}), done: make(chan struct{}), enc: newEncoder(t.Preset)}
	s, pre, err := con.attach(ctx)
	if err != nil {
		con.abort()
		return nil, err
	}
	con.s, con.in, con.out, con.pre = s.s, s.in, s.out, pre
	d.settle()
	con.wg.Add(2)
	go con.wait()
	go con.keepalive()
	c.log.WithFields(logrus.Fields{"node": t.Node, "vendor": t.Preset.Name}).Debug("ssh_console_attached")
	return con, nil
}

// abort ends a console that failed to open: its connection and pump.
func (con *Console) abort() {
	close(con.done)
	con.d.close()
	con.wg.Wait()
}

// newSession opens a session with a pty and starts pumping its output.
func (con *Console) newSession(ctx context.Context) (*session, error) {
	addr := con.t.Addr()
	s, err := con.d.client.NewSession()
	if err != nil {
		return nil, con.sessionError(ctx, "open a session on", err)
	}
	modes := ssh.TerminalModes{ssh.ECHO: 0, ssh.TTY_OP_ISPEED: 115200, ssh.TTY_OP_OSPEED: 115200}
	if err := s.RequestPty("vt100", 24, 80, modes); err != nil {
		s.Close()
		return nil, con.sessionError(ctx, "request a pty on", err)
	}
	in, err := s.StdinPipe()
	if err == nil {
		var r io.Reader
		if r, err = s.StdoutPipe(); err == nil {
			ss := &session{s: s, in: in, out: make(chan []byte, 4)}
			con.wg.Add(1)
			go con.pump(ss, r)
			return ss, nil
		}
	}
	s.Close()
	return nil, sol.NewError(sol.FaultUnknown, fmt.Errorf("session on %s: %w", addr, err))
}

// pump reads the session's output into s.out until it ends or the console
// closes. Each read is sent as a copy of its size: a console's output
// comes a few bytes a packet, and a buffer a read would be mostly waste.
func (con *Console) pump(s *session, r io.Reader) {
	defer con.wg.Done()
	defer close(s.out)
	buf := make([]byte, readBuf)
	for {
		n, err := r.Read(buf)
		if n > 0 {
			select {
			case s.out <- bytes.Clone(buf[:n]):
			case <-con.done:
				s.pumpErr = ErrClosed
				return
			}
		}
		if err != nil {
			s.pumpErr = err
			return
		}
	}
}

// attach starts the console on a new session: the command run, or typed
// at the CLI's prompt; then the CLI's banner up to its Ready text is read
// and dropped. pre is host output read meanwhile.
func (con *Console) attach(ctx context.Context) (s *session, pre []byte, err error) {
	s, err = con.newSession(ctx)
	if err != nil {
		return nil, nil, err
	}
	defer func() {
		if err != nil {
			s.s.Close()
		}
	}()
	t := con.t
	typed := t.Preset.Shell && t.Command != ""
	switch {
	case t.Command == "":
		err = s.s.Shell() // the session is the console
	case typed:
		err = s.s.Shell()
	default:
		if err = s.s.Start(t.Command); err != nil && strings.HasPrefix(err.Error(), "ssh: command") {
			// Refused as a command: the BMC offers a shell only.
			typed = true
			err = s.s.Shell()
		}
	}
	if err != nil {
		return nil, nil, con.sessionError(ctx, "start the console on", err)
	}
	var prompt string
	if typed {
		if prompt, err = con.waitPrompt(ctx, s); err != nil {
			return nil, nil, err
		}
		if _, err = s.in.Write([]byte(t.Command + "\r")); err != nil {
			return nil, nil, con.sessionError(ctx, "type the console command on", err)
		}
	}
	if t.Preset.Ready != "" {
		pre, err = con.waitReady(ctx, s, prompt)
	} else if typed {
		pre, err = con.skipEcho(ctx, s)
	}
	return s, pre, err
}

// next is the session's next output within wait (nil, nil when none came:
// timed out); io.EOF when the output ended.
func (con *Console) next(ctx context.Context, s *session, wait time.Duration) ([]byte, error) {
	timer := time.NewTimer(wait)
	defer timer.Stop()
	select {
	case b, ok := <-s.out:
		if !ok {
			return nil, io.EOF
		}
		return b, nil
	case <-timer.C:
		return nil, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// waitPrompt reads the CLI's greeting until its prompt: output that ends
// like one ("->", ">", "#", "$"), or that stays quiet for promptQuiet;
// with no output at all, promptWait. It returns the prompt (the last
// line, "" if it does not look like one).
func (con *Console) waitPrompt(ctx context.Context, s *session) (string, error) {
	var seen []byte
	for {
		wait := promptWait
		if len(seen) > 0 {
			wait = promptQuiet
		}
		b, err := con.next(ctx, s, wait)
		switch {
		case err != nil:
			return "", con.attachError(ctx, "wait for the CLI's prompt", seen, err)
		case b == nil:
			return promptOf(seen), nil
		}
		seen = append(seen, b...)
		if p := promptOf(seen); p != "" {
			return p, nil
		}
		if len(seen) > maxBanner {
			return "", con.attachError(ctx, "wait for the CLI's prompt", seen, errors.New("too much output"))
		}
	}
}

// promptOf is the prompt out ends with, as a CLI's does (">", "#", "$"),
// without trailing spaces; "" if it ends otherwise.
func promptOf(out []byte) string {
	s := strings.TrimRight(string(out), " ")
	if i := strings.LastIndexAny(s, "\r\n"); i >= 0 {
		s = s[i+1:]
	}
	if s == "" || !strings.ContainsAny(s[len(s)-1:], ">#$") {
		return ""
	}
	return s
}

// waitReady reads the CLI's output until the preset's Ready text and the
// end of its line; what follows is host output. A Busy text first is
// ErrBusy; the CLI's prompt again (prompt: the one it showed before the
// command) is the command refused.
func (con *Console) waitReady(ctx context.Context, s *session, prompt string) ([]byte, error) {
	var seen, low []byte // low: seen, its ASCII letters lowered
	ready := foldASCII(nil, []byte(con.t.Preset.Ready))
	for {
		if i := bytes.Index(low, ready); i >= 0 {
			rest := seen[i+len(ready):]
			if j := bytes.IndexByte(rest, '\n'); j >= 0 {
				return bytes.Clone(rest[j+1:]), nil
			}
			if len(rest) > 256 { // no end of line: the banner's rest is output
				return bytes.Clone(rest), nil
			}
		} else if con.busy(low) {
			return nil, sol.NewError(sol.FaultRejected, fmt.Errorf("attach the console of %s: %w (%s)",
				con.t.Addr(), ErrBusy, shown(seen)))
		} else if prompt != "" && promptOf(seen) == prompt {
			return nil, sol.NewError(sol.FaultRejected, fmt.Errorf("attach the console of %s: the CLI took %q and did not attach it; %s",
				con.t.Addr(), con.t.Command, shown(seen)))
		}
		b, err := con.next(ctx, s, time.Hour) // ctx bounds it
		if err != nil {
			return nil, con.attachError(ctx, "wait for the console ("+strconv.Quote(con.t.Preset.Ready)+")", seen, err)
		}
		seen, low = append(seen, b...), foldASCII(low, b)
		if len(seen) > maxBanner {
			return nil, con.attachError(ctx, "wait for the console", seen, errors.New("too much output"))
		}
	}
}

// skipEcho drops the CLI's echo of a typed command (its first line, if it
// holds the command) from what follows within echoWait (at most about
// maxBanner of it); a Busy text there is ErrBusy. The rest is host output.
func (con *Console) skipEcho(ctx context.Context, s *session) ([]byte, error) {
	var seen []byte
	deadline := time.Now().Add(echoWait)
	for {
		if i := bytes.IndexByte(seen, '\n'); i >= 0 && bytes.Contains(seen[:i], []byte(con.t.Command)) {
			seen = seen[i+1:]
			break
		}
		left := time.Until(deadline)
		if left <= 0 || len(seen) > maxBanner { // the rest waits in the session's output
			break
		}
		b, err := con.next(ctx, s, left)
		if err != nil {
			return nil, con.attachError(ctx, "attach the console", seen, err)
		}
		if b == nil {
			break
		}
		seen = append(seen, b...)
	}
	if con.busy(foldASCII(nil, seen)) {
		return nil, sol.NewError(sol.FaultRejected, fmt.Errorf("attach the console of %s: %w (%s)", con.t.Addr(), ErrBusy, shown(seen)))
	}
	return bytes.Clone(seen), nil
}

// busy reports whether the CLI's output (low: foldASCII'ed) says another
// session holds the console.
func (con *Console) busy(low []byte) bool {
	for _, b := range con.t.Preset.Busy {
		if bytes.Contains(low, foldASCII(nil, []byte(b))) {
			return true
		}
	}
	return false
}

// foldASCII appends b to dst with its ASCII letters lowered, byte for
// byte, so that an index in the result is one in b. (strings.ToLower is
// not: it changes the length of text that is not UTF-8, which a BMC's
// banner may be.) Presets' texts are ASCII.
func foldASCII(dst, b []byte) []byte {
	for _, c := range b {
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		dst = append(dst, c)
	}
	return dst
}

// shown is the CLI's output in an error: its last line but a prompt,
// quoted, bounded (the admin's to read).
func shown(out []byte) string {
	s := strings.TrimSpace(string(out))
	if p := promptOf([]byte(s)); p != "" && len(p) < len(s) {
		s = strings.TrimSpace(s[:len(s)-len(p)])
	}
	if i := strings.LastIndexAny(s, "\r\n"); i >= 0 {
		s = s[i+1:]
	}
	if len(s) > 120 {
		s = s[len(s)-120:]
	}
	return "the BMC said " + strconv.QuoteToASCII(s)
}

// sessionError classifies a failure after login.
func (con *Console) sessionError(ctx context.Context, op string, err error) error {
	f := sol.FaultRejected
	if ctx.Err() != nil {
		f = sol.FaultNoAnswer
	}
	return sol.NewError(f, fmt.Errorf("%s %s: %w", op, con.t.Addr(), err))
}

// attachError classifies a failure to attach the console: the session
// ended (the command refused), or nothing came in time.
func (con *Console) attachError(ctx context.Context, op string, seen []byte, err error) error {
	switch {
	case ctx.Err() != nil:
		return sol.NewError(sol.FaultNoAnswer, fmt.Errorf("%s on %s: %w; %s", op, con.t.Addr(), ctx.Err(), shown(seen)))
	case errors.Is(err, io.EOF):
		return sol.NewError(sol.FaultRejected, fmt.Errorf("%s on %s: the session ended; %s", op, con.t.Addr(), shown(seen)))
	}
	return sol.NewError(sol.FaultRejected, fmt.Errorf("%s on %s: %w; %s", op, con.t.Addr(), err, shown(seen)))
}

// wait reaps the session: ended closes when the BMC ends it.
func (con *Console) wait() {
	defer con.wg.Done()
	con.s.Wait()
	close(con.ended)
}

// keepalive asks the BMC for an answer every Keepalive; when one takes
// KeepaliveCount times that, the console fails (its connection is
// closed, so Read and Write fail).
func (con *Console) keepalive() {
	defer con.wg.Done()
	cfg := con.c.cfg
	tick := time.NewTicker(cfg.Keepalive)
	defer tick.Stop()
	for {
		select {
		case <-con.done:
			return
		case <-tick.C:
		}
		dead := time.AfterFunc(cfg.Keepalive*time.Duration(cfg.KeepaliveCount), func() {
			con.failWith(fmt.Errorf("no answer from %s to keepalive for %v", con.t.Addr(), cfg.Keepalive*time.Duration(cfg.KeepaliveCount)))
		})
		_, _, err := con.d.client.SendRequest("keepalive@openssh.com", true, nil)
		dead.Stop()
		if err != nil {
			return // the connection ended: Read says why
		}
	}
}

// failWith records why the console failed and ends its connection.
func (con *Console) failWith(err error) {
	con.fmu.Lock()
	if con.fail == nil {
		con.fail = err
	}
	con.fmu.Unlock()
	con.d.client.Close()
}

// Read returns host output. It fails when the session ends (ErrLinkLost,
// with the BMC's silence or the session's end as the reason) or the
// console is closed (ErrClosed). Only one goroutine reads.
func (con *Console) Read(p []byte) (int, error) {
	if len(con.pre) == 0 {
		b, ok := <-con.out
		if !ok {
			return 0, con.readError()
		}
		con.pre = b
	}
	n := copy(p, con.pre)
	con.pre = con.pre[n:]
	return n, nil
}

func (con *Console) readError() error {
	select {
	case <-con.done:
		return ErrClosed
	default:
	}
	con.fmu.Lock()
	why := con.fail
	con.fmu.Unlock()
	if why != nil {
		return sol.NewError(sol.FaultNoAnswer, fmt.Errorf("%w: %w", ErrLinkLost, why))
	}
	return fmt.Errorf("%w: the BMC %s ended the console session", ErrLinkLost, con.t.Addr())
}

// Write sends keys to the host, the vendor's escape neutralised (encoder).
// On failure it returns how many of p's bytes reached the BMC.
func (con *Console) Write(p []byte) (int, error) {
	con.wmu.Lock()
	defer con.wmu.Unlock()
	if con.closing {
		return 0, ErrClosed
	}
	before := con.enc
	con.wbuf = con.enc.encode(con.wbuf[:0], p)
	n, err := con.in.Write(con.wbuf)
	if err != nil {
		con.broken = true
		return before.consumed(p, n), fmt.Errorf("write to the console on %s: %w", con.t.Addr(), err)
	}
	return len(p), nil
}

// Break sends an RFC 4335 break request, as OpenSSH's ~B does; a BMC that
// refuses it is ErrNoBreak.
func (con *Console) Break(ctx context.Context) error {
	con.wmu.Lock()
	defer con.wmu.Unlock()
	if con.closing {
		return ErrClosed
	}
	type reply struct {
		ok  bool
		err error
	}
	res := make(chan reply, 1)
	con.wg.Add(1)
	go func() { // ends when the BMC answers or the connection closes (Close)
		defer con.wg.Done()
		ok, err := con.s.SendRequest("break", true, ssh.Marshal(struct{ Length uint32 }{breakLength}))
		res <- reply{ok, err}
	}()
	select {
	case r := <-res:
		switch {
		case r.err != nil:
			return fmt.Errorf("send a break to %s: %w", con.t.Addr(), r.err)
		case !r.ok:
			return fmt.Errorf("send a break to %s: %w", con.t.Addr(), ErrNoBreak)
		}
		return nil
	case <-ctx.Done():
		return fmt.Errorf("send a break to %s: %w", con.t.Addr(), ctx.Err())
	}
}

// Close leaves the console as the vendor's CLI expects (its escape, then
// the end of the session), so that the BMC's console is free at once for
// the next session, within LeaveTimeout; then it ends the connection. It
// unblocks Read and Write and waits for the console's goroutines.
func (con *Console) Close() error {
	con.closeOnce.Do(func() {
		bound := con.c.cfg.LeaveTimeout
		con.d.conn.SetDeadline(time.Now().Add(bound)) // unblocks a Write waiting for window
		con.wmu.Lock()
		con.closing = true
		var leave []byte
		if !con.broken {
			leave = con.enc.leave(con.t.Preset)
		}
		if len(leave) > 0 {
			if _, err := con.in.Write(leave); err != nil {
				con.c.log.WithError(err).WithField("node", con.t.Node).Debug("ssh_console_leave_failed")
			}
		}
		con.in.Close() // EOF: the CLI, back at its prompt, ends the session
		con.wmu.Unlock()
		t := time.NewTimer(bound)
		select {
		case <-con.ended:
		case <-t.C:
		}
		t.Stop()
		close(con.done)
		con.d.client.Close()
		con.wg.Wait()
	})
	return nil
}

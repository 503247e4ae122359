package sshdoor

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/gliderlabs/ssh"
	"github.com/sirupsen/logrus"
	gossh "golang.org/x/crypto/ssh"

	"github.com/obmd/obmd/bastion/access"
	"github.com/obmd/obmd/bastion/access/sessions"
	"github.com/obmd/obmd/commands"
	"github.com/obmd/obmd/db"
)

// channel serves one SSH "session" channel. Ownership: serve runs in the
// goroutine gliderlabs starts per channel; it starts the request reader and,
// through run, the console or exec goroutines (all in wg), and waits for all
// of them before returning. serve alone closes ch.
type channel struct {
	s      *Server
	ctx    ssh.Context // the connection's; done when it closes
	a      *authInfo
	label  string
	remote string
	ch     gossh.Channel
	log    logrus.FieldLogger
	conn   *conn // the connection it is open on

	pty    bool          // set by the request reader before it sends the start
	closed chan struct{} // closed when the client closed the channel (requests ended)
	wg     sync.WaitGroup
	// cmd tracks the exec command's goroutine: serve waits for it before the
	// registry counts the session as ended, so a cut power operation is no
	// longer running when the admin call that cut it returns.
	cmd sync.WaitGroup
	// sess is the admitted session (nil until then); serve finishes and
	// ends it.
	sess *access.Session

	mu      sync.Mutex
	onBreak func() bool // set while a console runs: sends a break, or says why not (false)
}

// start is a shell or exec request.
type start struct {
	exec bool
	line string
}

// session is the ChannelHandler for "session" channels: it counts the
// channel on its connection (refused past the connection's limit, or once
// it is cut) and serves it.
func (s *Server) session(_ *ssh.Server, _ *gossh.ServerConn, nc gossh.NewChannel, ctx ssh.Context) {
	conn := connFrom(ctx)
	a := conn.login()
	if a == nil {
		nc.Reject(gossh.Prohibited, "not authenticated")
		return
	}
	defer conn.channelEnded()
	if why, msg, ok := conn.channelOpened(); !ok {
		nc.Reject(why, msg)
		return
	}
	ch, reqs, err := nc.Accept()
	if err != nil {
		return
	}
	c := &channel{s: s, ctx: ctx, a: a, label: ctx.User(), remote: remoteString(ctx), ch: ch,
		conn: conn, closed: make(chan struct{}), log: conn.log.WithField("method", a.Method)}
	c.serve(reqs)
}

func (c *channel) serve(reqs <-chan *gossh.Request) {
	starts := make(chan start, 1)
	readerDone := make(chan struct{})
	go func() { // owned by serve, which waits on readerDone
		defer close(readerDone)
		c.requests(reqs, starts)
	}()
	var code int
	select {
	case st := <-starts:
		code = c.run(st)
	case <-c.closed:
	case <-c.ctx.Done():
	case <-c.conn.cutC: // no session to cut: the channel ends with its connection
		fmt.Fprintf(c.ch.Stderr(), "obmd: %v\n", c.conn.cutCause())
		code = commands.ExitNotAllowed
	}
	if code >= 0 {
		c.ch.SendRequest("exit-status", false, gossh.Marshal(struct{ Code uint32 }{uint32(code)}))
	}
	c.ch.Close()
	if c.sess != nil {
		c.sess.Finish() // its last words are sent: the cut watchdog stands down
	}
	c.cmd.Wait()
	if c.sess != nil {
		c.sess.End() // the registry now counts this session as ended
	}
	c.wg.Wait()
	<-readerDone
}

// requests answers the channel's requests until the client closes it. Only
// pty-req, window-change, shell, exec and break are accepted; env, x11-req,
// auth-agent-req@openssh.com, subsystem (sftp) and the rest are refused.
func (c *channel) requests(reqs <-chan *gossh.Request, starts chan<- start) {
	defer close(c.closed)
	started := false
	for req := range reqs {
		ok := false
		var st *start
		switch req.Type {
		case "pty-req":
			ok = !started && c.a.console() // no PTY without permit-pty, as sshd
			if ok {
				c.pty = true
			}
		case "window-change":
			ok = true // accepted; a serial console has no window size
		case "shell":
			if !started {
				st = &start{}
			}
		case "exec":
			var p struct{ Command string }
			if !started && gossh.Unmarshal(req.Payload, &p) == nil {
				st = &start{exec: true, line: p.Command}
			}
		case "break":
			c.mu.Lock()
			f := c.onBreak
			c.mu.Unlock()
			if f != nil {
				ok = f()
			}
		}
		if st != nil {
			ok, started = true, true
		}
		if req.WantReply {
			req.Reply(ok, nil)
		}
		if st != nil {
			starts <- *st // buffered; sent once
		}
	}
}

// run authorises and runs the session; it returns the exit code (-1: none
// to send). An admitted session is c.sess.
func (c *channel) run(st start) int {
	stdout, stderr := io.Writer(c.ch), io.Writer(c.ch.Stderr())
	if c.pty {
		stdout, stderr = crlfWriter{stdout}, crlfWriter{stderr}
	}
	cmd := commands.Command{Name: commands.CmdConsole}
	if st.exec {
		argv, err := commands.Split(st.line)
		if err == nil {
			cmd, err = commands.Parse(argv)
		}
		if err != nil {
			return commands.WriteError(stdout, stderr, c.label, cmd, err)
		}
	}
	if cmd.UsesConsole() && !c.a.console() {
		return c.noConsole(stdout, stderr, cmd) // cert.go
	}
	if cmd.Name == commands.CmdConsoleLog && !cmd.JSON {
		stdout = c.ch // the console's bytes as the node sent them, as a console shows them
	}
	kind := sessions.KindExec
	if cmd.Name == commands.CmdConsole {
		kind = sessions.KindConsole
	}
	info := sessions.Info{Node: c.label, Kind: kind, User: c.a.User, Remote: c.remote, Epoch: c.a.Epoch, Mark: c.a.Mark,
		Work: workOf(cmd), Credential: c.a.credential()}
	if cl := c.a.Cert; cl != nil {
		info.Cert, info.Expires = cl.certInfo(), cl.grant.Expires
	}
	// Open registers the session (any access change from now on cuts it),
	// refuses it if one came since the login, and clears away older
	// sessions and their console output (even if the change was made on
	// another replica) before it starts. A cut session whose client stops
	// reading has its connection closed.
	sess, err := c.s.sessions.Open(c.ctx, info, remoteHost(c.ctx.RemoteAddr()), c.closeConn)
	switch {
	case errors.Is(err, sessions.ErrTooMany):
		fmt.Fprintf(stderr, "obmd: %v\n", err)
		return commands.ExitNotAllowed
	case errors.Is(err, sessions.ErrBusy): // a cap on concurrent work: busy, as a power operation in flight
		fmt.Fprintf(stderr, "obmd: %v\n", err)
		return commands.ExitBusy
	case err != nil && access.IsCut(err): // refused, or cut while being admitted
		fmt.Fprintf(stderr, "obmd: %v\n", err)
		return exitFor(err)
	case errors.Is(err, access.ErrUnverified):
		c.log.WithError(err).Error("epoch_check_failed")
		fmt.Fprintln(stderr, "obmd: cannot verify access right now; try again")
		return commands.ExitFailed
	case err != nil:
		return commands.ExitFailed // the client left
	}
	c.sess = sess
	if c.a.Cert != nil {
		if code := c.recheckCert(stderr); code >= 0 { // cert.go
			return code
		}
	}
	sctx, info := sess.Context(), sess.Info()
	c.log = c.log.WithField("session", info.ID)
	began := c.s.cfg.Now()
	c.log.WithField("kind", kind).Info("session_start")
	c.audit(sctx, "session.start", "ok", string(kind))
	if kind == sessions.KindConsole {
		code, cause := c.console(sctx, info, cmd, stderr)
		return c.ended(sctx, kind, began, code, cause, stderr)
	}
	code, cause := c.exec(sctx, info, cmd, stdout, stderr)
	return c.ended(sctx, kind, began, code, cause, stderr)
}

// workOf is the work cmd does, for the registry's caps on concurrent work:
// automation watches or types on the console for one command (wait-for,
// send, expect, --wait-for, console-log --follow); the power commands and
// doctor call the BMC. A console session is bounded by the session caps
// alone.
func workOf(cmd commands.Command) sessions.Work {
	switch {
	case cmd.OnConsole(), cmd.Name == commands.CmdConsoleLog && cmd.Follow:
		return sessions.WorkAutomation
	}
	switch cmd.Name {
	case commands.CmdPowerStatus, commands.CmdPowerOn, commands.CmdPowerOff, commands.CmdPowerCycle,
		commands.CmdPowerReset, commands.CmdBootdev, commands.CmdDoctor:
		return sessions.WorkBMC
	}
	return ""
}

// ended records the end of a session that ran, telling its user why if it
// was cut; it returns the exit code.
func (c *channel) ended(sctx context.Context, kind sessions.Kind, began time.Time, code int, cause error, stderr io.Writer) int {
	result, why := "ok", ""
	if access.IsCut(cause) {
		result, why = "cut", "; cut: "+cutReason(cause)
		fmt.Fprintf(stderr, "\nobmd: %v\n", cause)
		code = exitFor(cause)
	}
	took := c.s.cfg.Now().Sub(began).Round(time.Millisecond)
	c.log.WithFields(logrus.Fields{"kind": kind, "exit": code, "took": took}).Info("session_end")
	c.audit(sctx, "session.end", result, fmt.Sprintf("%s exit %d after %v%s", kind, code, took, why))
	return code
}

// closeConn closes the session's connection: what unblocks a cut session
// whose client stopped reading (SSH flow control holds its writes).
func (c *channel) closeConn() {
	if conn, ok := c.ctx.Value(ssh.ContextKeyConn).(gossh.Conn); ok {
		conn.Close()
	}
}

func (c *channel) audit(ctx context.Context, action, result, detail string) {
	c.s.audit(ctx, db.AuditEvent{Node: safe(c.label), Actor: c.a.Actor, Action: action,
		Source: c.remote, Result: result, Detail: detail})
}

// cutReason is why a session was cut, as its audit row says it: the
// access change ("token rotated"), "kicked by admin", or the cause's text.
func cutReason(cause error) string {
	var r *sessions.RevokedError
	if errors.As(cause, &r) {
		return r.Why
	}
	return cause.Error()
}

func exitFor(cause error) int {
	var r *sessions.RevokedError
	if errors.As(cause, &r) {
		return commands.ExitNotAllowed
	}
	return commands.ExitFailed
}

// crlfWriter turns "\n" into "\r\n", as a terminal's output processing does:
// with a PTY the client's terminal is raw.
type crlfWriter struct{ w io.Writer }

func (w crlfWriter) Write(p []byte) (int, error) {
	if bytes.IndexByte(p, '\n') < 0 {
		return w.w.Write(p)
	}
	out := make([]byte, 0, len(p)+8)
	for i, b := range p {
		if b == '\n' && (i == 0 || p[i-1] != '\r') {
			out = append(out, '\r')
		}
		out = append(out, b)
	}
	if _, err := w.w.Write(out); err != nil {
		return 0, err
	}
	return len(p), nil
}

package ipmitool

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/sirupsen/logrus"
	"golang.org/x/sys/unix"

	"github.com/obmd/obmd/sol"
	"github.com/obmd/obmd/sol/rmcp"
)

// Errors of a Console.
var (
	// ErrLinkLost: ipmitool left (the BMC closed the session, stopped
	// answering, or ipmitool failed). Read wraps it.
	ErrLinkLost = errors.New("SOL link lost")
	// ErrClosed: the console was closed.
	ErrClosed = errors.New("console closed")
	// ErrBreakMidLine: Break was asked while the last byte sent was not CR
	// or LF. ipmitool only takes its break command at a line start, and
	// sending a CR first would submit whatever was typed on the node's
	// line, so the driver refuses rather than guess. Nothing was sent.
	// It is sol's, so that tenants are told.
	ErrBreakMidLine = sol.ErrBreakMidLine
)

// readBuf is the size of one read from the pty.
const readBuf = 32 << 10

// Console is one `ipmitool sol activate` child under a pseudo-terminal. It
// implements sol.Console.
//
// Ownership: one goroutine per console (own, started by OpenConsole) owns
// the child: it drains ipmitool's stderr, reaps the child and then closes
// exited. Close waits for it. Read runs in the caller's goroutine (the
// hub's Link) and also carries the keepalive probe. The pty master is
// closed by Close only, after the child is gone.
type Console struct {
	b      *BMC
	log    logrus.FieldLogger
	cmd    *exec.Cmd
	master *os.File // pty master, in the runtime poller (deadlines and Close interrupt I/O)
	errR   *os.File // ipmitool's stderr; read and closed by own

	life   context.Context // cancelled by Close; bounds keepalive probes
	cancel context.CancelFunc

	wg      sync.WaitGroup
	exited  chan struct{} // closed by own after the child is reaped
	waitErr error         // written by own before exited is closed
	stderr  capped        // written by own before exited is closed

	pmu    sync.Mutex
	reaped bool   // the child is about to be reaped: never signal its pid again
	reason string // why we killed the child, for Read's error

	// wsem serialises the input side (Write, Break, Close's terminate
	// escape) and guards enc and broken. A channel so that Break can give
	// up on ctx.
	wsem      chan struct{}
	enc       encoder
	broken    bool      // a write failed: ipmitool's escape state is unknown
	lastInput time.Time // when the last Write reached the pty

	rmu     sync.Mutex // serialises Read; guards the fields below
	rbuf    []byte
	pending []byte // filtered output not yet returned
	rerr    error
	lastOut time.Time
	noPing  bool // the BMC answers IPMI but not RMCP ping

	fmu  sync.Mutex // guards filt: Read feeds it, Break and Close announce lines
	filt filter

	closeOnce sync.Once
	closeErr  error
	closing   chan struct{} // closed when Close starts
}

var _ sol.Console = (*Console)(nil)

// OpenConsole starts `ipmitool sol activate` under a pty and waits until
// ipmitool reports the session operational (bounded by ctx and
// CallTimeout). A payload active on another session is sol.ErrPayloadActive
// (wrapped). SOL needs the lanplus interface; with lan it is
// sol.ErrNotSupported.
func (b *BMC) OpenConsole(ctx context.Context) (sol.Console, error) {
	if b.iface != "lanplus" {
		return nil, fmt.Errorf("activate SOL on %s: interface %s: %w", b.label, b.iface, sol.ErrNotSupported)
	}
	if err := context.Cause(ctx); err != nil {
		// Do not start an activation that would be killed half-way.
		return nil, fmt.Errorf("activate SOL on %s: %w", b.label, err)
	}
	var c *Console
	start := func(ctx context.Context, suite int) error {
		var err error
		c, err = b.startConsole(ctx, suite)
		return err
	}
	suite, err := b.withSuite(ctx, start)
	err = b.retryEnabled(ctx, suite, err, start)
	if err != nil {
		return nil, fmt.Errorf("activate SOL on %s: %w", b.label, err)
	}
	b.log.WithFields(logrus.Fields{"pid": c.cmd.Process.Pid, "cipher": suite}).Info("sol_activated")
	return c, nil
}

func (b *BMC) activateArgs() []string {
	if b.cfg.GetDeviceIDKeepalive {
		return []string{"sol", "activate"}
	}
	return []string{"sol", "activate", "usesolkeepalive"}
}

func (b *BMC) startConsole(ctx context.Context, suite int) (*Console, error) {
	master, tty, err := openPTY()
	if err != nil {
		return nil, err
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		master.Close()
		tty.Close()
		return nil, fmt.Errorf("stderr pipe: %w", err)
	}
	cmd := exec.Command(b.cfg.Path, b.args(suite, b.activateArgs()...)...)
	cmd.Env = b.env()
	cmd.Stdin, cmd.Stdout, cmd.Stderr = tty, tty, errW
	// A session of its own with the pty as controlling terminal: the child
	// is its own process group, and if obmd dies the kernel hangs the pty
	// up and ipmitool gets SIGHUP instead of lingering.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	err = cmd.Start()
	tty.Close()
	errW.Close()
	if err != nil {
		master.Close()
		errR.Close()
		return nil, fmt.Errorf("start ipmitool: %w", err)
	}
	life, cancel := context.WithCancel(context.Background())
	c := &Console{
		b: b, log: b.log.WithField("pid", cmd.Process.Pid), cmd: cmd, master: master, errR: errR,
		life: life, cancel: cancel,
		exited: make(chan struct{}), closing: make(chan struct{}),
		wsem: make(chan struct{}, 1), enc: newEncoder(b.cfg.Escape),
		rbuf: make([]byte, readBuf),
	}
	c.wg.Add(1)
	go c.own()
	hctx, abort := context.WithCancelCause(ctx)
	defer abort(nil)
	stop := b.watch(hctx, abort)
	err = c.handshake(hctx)
	probe := stop()
	if err != nil {
		c.abort() // the child is reaped: its stderr is complete
		var off *solOffError
		switch {
		case errors.Is(err, sol.ErrPayloadActive):
			return nil, err
		case errors.As(err, &off):
			off.endpoint = b.endpoint()
			return nil, off
		}
		timedOut := ctx.Err() != nil || errors.Is(err, context.DeadlineExceeded)
		return nil, b.failure(suite, timedOut, probe, err, c.stderr.Bytes())
	}
	return c, nil
}

// own is the console's owner goroutine: it drains stderr until ipmitool
// closes it, waits for the child to exit without reaping it, forbids
// further signals (so that kill never hits a recycled pid), then reaps it.
func (c *Console) own() {
	defer c.wg.Done()
	buf := make([]byte, 1024)
	for {
		n, err := c.errR.Read(buf)
		if n > 0 {
			c.stderr.Write(buf[:n])
			c.log.WithField("stderr", strings.TrimSpace(string(buf[:n]))).Debug("ipmitool_stderr")
		}
		if err != nil {
			break
		}
	}
	c.errR.Close()
	pid := c.cmd.Process.Pid
	for {
		var info unix.Siginfo
		err := unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WNOWAIT, nil)
		if err != unix.EINTR {
			break
		}
	}
	c.pmu.Lock()
	c.reaped = true
	c.pmu.Unlock()
	c.waitErr = c.cmd.Wait()
	close(c.exited)
}

// kill ends the child's process group (once it is not yet reaped) and
// records why, for Read's error.
func (c *Console) kill(reason string) {
	c.pmu.Lock()
	defer c.pmu.Unlock()
	if c.reason == "" {
		c.reason = reason
	}
	if !c.reaped {
		syscall.Kill(-c.cmd.Process.Pid, syscall.SIGKILL)
	}
}

// handshake waits for ipmitool's banner. Output after it is console data.
func (c *Console) handshake(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, c.b.cfg.CallTimeout)
	defer cancel()
	interrupted := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		defer close(interrupted)
		c.master.SetReadDeadline(time.Now())
	})
	defer func() {
		if !stop() {
			<-interrupted
		}
	}()
	banner := bannerLine(c.b.cfg.Escape)
	var got []byte
	for {
		n, err := c.master.Read(c.rbuf)
		got = append(got, c.rbuf[:n]...)
		if i := bytes.Index(got, banner); i >= 0 {
			if i > 0 {
				c.log.WithField("discarded", string(got[:i])).Debug("sol_output_before_banner")
			}
			c.pending = append(c.pending, got[i+len(banner):]...)
			c.lastOut = time.Now()
			return nil
		}
		if len(got) > 4*len(banner) {
			got = got[len(got)-len(banner):]
		}
		if err != nil {
			if ctx.Err() != nil {
				return context.Cause(ctx)
			}
			return c.startError()
		}
	}
}

// startError explains why ipmitool left before the banner.
func (c *Console) startError() error {
	select {
	case <-c.exited:
	case <-time.After(c.b.cfg.CloseTimeout):
		c.kill("no banner")
		<-c.exited
	}
	stderr := c.stderr.Bytes()
	if bytes.Contains(stderr, []byte("SOL payload already active on another session")) {
		return fmt.Errorf("ipmitool: %w", sol.ErrPayloadActive)
	}
	if err := solOff(stderr, c.b.opts.SOLEnable); err != nil {
		return err
	}
	return &toolError{line: firstLine(stderr), err: c.waitErr}
}

// abort ends a console that never opened.
func (c *Console) abort() {
	c.kill("activation aborted")
	c.wg.Wait()
	c.cancel()
	c.master.Close()
}

// Read returns console output: bytes from the node's serial port, without
// ipmitool's own lines. It returns an error wrapping ErrLinkLost once
// ipmitool has left, or ErrClosed after Close. While the console is silent
// for Config.Keepalive, Read probes the BMC; a dead BMC makes it kill
// ipmitool and fail (ipmitool itself would take ~25-100 s to notice).
func (c *Console) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	c.rmu.Lock()
	defer c.rmu.Unlock()
	for len(c.pending) == 0 {
		if c.rerr != nil {
			return 0, c.rerr
		}
		c.fill()
	}
	n := copy(p, c.pending)
	c.pending = c.pending[n:]
	return n, nil
}

// fill reads the pty once (or probes the BMC after a silence) and appends
// to pending, or sets rerr.
func (c *Console) fill() {
	var deadline time.Time
	if ka := c.b.cfg.Keepalive; ka > 0 {
		deadline = c.lastOut.Add(ka)
	}
	c.fmu.Lock()
	heldUntil, holding := c.filt.holding()
	c.fmu.Unlock()
	if holding && (deadline.IsZero() || heldUntil.Before(deadline)) {
		deadline = heldUntil
	}
	c.master.SetReadDeadline(deadline)
	n, err := c.master.Read(c.rbuf)
	now := time.Now()
	c.fmu.Lock()
	if n > 0 {
		c.lastOut = now
		c.pending = c.filt.feed(c.pending, c.rbuf[:n], now)
	} else if _, holding := c.filt.holding(); holding && !now.Before(heldUntil) {
		c.pending = c.filt.flush(c.pending)
	}
	c.fmu.Unlock()
	switch {
	case err == nil:
	case errors.Is(err, os.ErrDeadlineExceeded):
		if ka := c.b.cfg.Keepalive; ka > 0 && now.Sub(c.lastOut) >= ka {
			c.probe()
			c.lastOut = time.Now()
		}
	default:
		c.rerr = c.linkError(err)
	}
}

// linkError explains a failed pty read: Close, or ipmitool has left.
func (c *Console) linkError(err error) error {
	select {
	case <-c.closing:
		return ErrClosed
	default:
	}
	select {
	case <-c.exited:
	case <-time.After(c.b.cfg.CloseTimeout):
		// The tty is gone but the child is not: do not leave it running.
		c.kill(fmt.Sprintf("pty read failed: %v", err))
		<-c.exited
	}
	c.pmu.Lock()
	reason := c.reason
	c.pmu.Unlock()
	if reason == "" {
		reason = firstLine(c.stderr.Bytes())
	}
	if reason == "" {
		reason = fmt.Sprintf("ipmitool exited: %v", c.waitErr)
	}
	c.log.WithField("reason", reason).Info("sol_link_lost")
	return fmt.Errorf("%w: %s", ErrLinkLost, reason)
}

// probe checks that the BMC is still there: an RMCP presence ping, or
// `power status` when the BMC has shown it does not answer pings. If
// neither answers within KeepaliveTimeout, it kills ipmitool so that Read
// fails.
func (c *Console) probe() {
	to := c.b.cfg.KeepaliveTimeout
	if !c.noPing {
		ctx, cancel := context.WithTimeout(c.life, to)
		err := rmcp.Ping(ctx, c.b.info.Addr, c.b.port)
		cancel()
		if err == nil || c.life.Err() != nil {
			return
		}
	}
	ctx, cancel := context.WithTimeout(c.life, to)
	_, err := c.b.run(ctx, "power", "status")
	cancel()
	if c.life.Err() != nil {
		return
	}
	if err == nil {
		if !c.noPing {
			c.log.Info("bmc_ignores_rmcp_ping")
			c.noPing = true
		}
		return
	}
	c.log.WithError(err).Warn("sol_keepalive_failed")
	c.kill(fmt.Sprintf("BMC did not answer keepalive within %v", to))
}

// acquire takes the input side, giving up when ctx ends or Close starts.
func (c *Console) acquire(ctx context.Context) error {
	select {
	case c.wsem <- struct{}{}:
	case <-ctx.Done():
		return context.Cause(ctx)
	case <-c.closing:
		return ErrClosed
	}
	select {
	case <-c.closing:
		<-c.wsem
		return ErrClosed
	default:
	}
	if c.broken {
		<-c.wsem
		return fmt.Errorf("%w: console input failed earlier", ErrLinkLost)
	}
	return nil
}

func (c *Console) release() { <-c.wsem }

// drainInput waits until ipmitool has taken every input byte from the pty
// and inputDrain has passed since it was last seen with some left (or since
// the last input), bounded by CloseTimeout, so that ipmitool sends what it
// was given before it is told to leave or is killed. On a loaded machine
// ipmitool may not run for a while after the last input: a fixed wait
// after it lost bytes that send had reported written. The caller
// (terminate) holds the input side.
func (c *Console) drainInput() {
	if c.lastInput.IsZero() {
		return
	}
	deadline := time.Now().Add(c.b.cfg.CloseTimeout)
	seen := c.lastInput
	// One descriptor for every poll; without it, a fixed inputDrain.
	tty, perr := ttyPeer(c.master)
	if perr == nil {
		defer unix.Close(tty)
	}
	for {
		now := time.Now()
		if n, err := unread(tty); perr == nil && err == nil && n > 0 {
			seen = now
		}
		wait := min(inputDrain-now.Sub(seen), deadline.Sub(now))
		if wait <= 0 {
			return
		}
		select {
		case <-time.After(min(wait, drainPoll)):
		case <-c.exited:
			return
		}
	}
}

// drainPoll is how often drainInput looks at the pty.
const drainPoll = 20 * time.Millisecond

// Write sends p to the node's serial port, with ipmitool's escape
// character doubled where ipmitool would take it as a command. It blocks
// while ipmitool is not reading (flow control from the BMC). A failed write
// leaves ipmitool's escape state unknown, so the console is then killed.
func (c *Console) Write(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	if err := c.acquire(context.Background()); err != nil {
		return 0, err
	}
	defer c.release()
	before := c.enc
	out := c.enc.encode(make([]byte, 0, len(p)+8), p)
	n, err := c.master.Write(out)
	if err != nil {
		c.broken = true
		c.kill("console input failed")
		return before.consumed(p, n), fmt.Errorf("%w: write: %v", ErrLinkLost, err)
	}
	c.lastInput = time.Now()
	return len(p), nil
}

// inputDrain is how long after the last input Close lets ipmitool run
// before it ends it: ipmitool has taken the bytes from the pty but may not
// have sent them to the BMC yet (it sends them as SOL packets and waits for
// each one's acknowledgement), and neither its terminate escape nor a kill
// waits for that. A few SOL round trips.
const inputDrain = 500 * time.Millisecond

// Break sends a serial break: ipmitool's "esc B" command, possible only
// right after CR or LF (else ErrBreakMidLine, and nothing is sent).
func (c *Console) Break(ctx context.Context) error {
	if err := c.acquire(ctx); err != nil {
		return fmt.Errorf("send break on %s: %w", c.b.label, err)
	}
	defer c.release()
	if !c.enc.lineStart {
		return fmt.Errorf("send break on %s: %w", c.b.label, ErrBreakMidLine)
	}
	if err := c.command(ctx, 'B', breakLine(c.b.cfg.Escape)); err != nil {
		return fmt.Errorf("send break on %s: %w", c.b.label, err)
	}
	return nil
}

// command sends "esc cmd" and tells the filter to expect ipmitool's echo
// line. The caller holds the input side and checked enc.lineStart.
func (c *Console) command(ctx context.Context, cmd byte, echo []byte) error {
	c.fmu.Lock()
	c.filt.expectLine(echo, time.Now())
	c.fmu.Unlock()
	deadline, _ := ctx.Deadline()
	c.master.SetWriteDeadline(deadline)
	defer c.master.SetWriteDeadline(time.Time{})
	if _, err := c.master.Write([]byte{c.b.cfg.Escape, cmd}); err != nil {
		c.broken = true
		c.kill("console input failed")
		return fmt.Errorf("%w: write: %v", ErrLinkLost, err)
	}
	return nil
}

// Close ends the session: ipmitool's terminate command when the input side
// is at a line start (ipmitool then deactivates the payload itself),
// otherwise, or if ipmitool does not leave within CloseTimeout, a kill of
// its process group followed by `sol deactivate` (bounded by CloseTimeout)
// so that the BMC frees the payload. It waits for the owner goroutine,
// unblocks Read and returns the deactivation error, if any.
//
// Deactivation is not tied to a session: Close must return before the next
// OpenConsole for the same node (the hub's Link guarantees it), or it could
// end the new session.
func (c *Console) Close() error {
	c.closeOnce.Do(func() { c.closeErr = c.close() })
	return c.closeErr
}

func (c *Console) close() error {
	close(c.closing)
	c.cancel()
	graceful := c.terminate()
	if graceful {
		select {
		case <-c.exited:
		case <-time.After(c.b.cfg.CloseTimeout):
			graceful = false
		}
	}
	c.kill("console closed")
	c.wg.Wait()
	c.master.Close() // the child is gone: unblocks Read
	c.pmu.Lock()
	bmcDead := strings.HasPrefix(c.reason, "BMC did not answer")
	c.pmu.Unlock()
	clean := graceful && c.waitErr == nil && !bytes.Contains(c.stderr.Bytes(), []byte("e-activat"))
	log := c.log.WithField("graceful", graceful)
	if clean || bmcDead {
		log.Info("sol_closed")
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.b.cfg.CloseTimeout)
	defer cancel()
	if err := c.b.deactivate(ctx); err != nil {
		log.WithError(err).Warn("sol_deactivate_failed")
		return fmt.Errorf("deactivate SOL on %s: %w", c.b.label, err)
	}
	log.Info("sol_closed")
	return nil
}

// terminate sends ipmitool's terminate command if that is safe: the input
// side is free (a Write blocked on a full pty is interrupted), ipmitool's
// escape state is known and at a line start, and the child is running.
func (c *Console) terminate() bool {
	got := false
	select {
	case c.wsem <- struct{}{}:
		got = true
	case <-time.After(100 * time.Millisecond):
		c.master.SetWriteDeadline(time.Now()) // the blocked Write fails and kills
		select {
		case c.wsem <- struct{}{}:
			got = true
		case <-time.After(c.b.cfg.CloseTimeout):
		}
	}
	if !got {
		return false
	}
	// The input side stays held: nothing may be written after this.
	c.drainInput()
	select {
	case <-c.exited:
		return false
	default:
	}
	if c.broken || !c.enc.lineStart {
		return false
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	return c.command(ctx, '.', terminateLine(c.b.cfg.Escape)) == nil
}

package ipmi

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/bougou/go-ipmi/pkg/client"
	"github.com/bougou/go-ipmi/pkg/command/transport"
	"github.com/bougou/go-ipmi/pkg/types"
	"github.com/sirupsen/logrus"

	"github.com/obmd/obmd/sol"
)

// IPMI completion codes this driver branches on.
const (
	ccPayloadActive   = 0x80 // Activate Payload: already active; Deactivate: already inactive
	ccPayloadDisabled = 0x81 // Activate Payload: payload type disabled (SOL off)
	ccPrivilege       = 0xd4 // insufficient privilege (goipmi-server: no payload access)
	solInstance       = 1
)

// Console bounds.
const (
	// maxPending bounds console output received but not yet Read; past it
	// the console stops acknowledging and the BMC retransmits later.
	maxPending = 1 << 20
	// maxRetransmits: a SOL packet unacknowledged after this many resends
	// means the link is dead.
	maxRetransmits = 6
	// probeFailures: consecutive failed keepalive probes that mean the BMC
	// is gone (one failure may be go-ipmi's own keepalive racing ours).
	probeFailures = 2
)

var (
	// errClosed is the cause when Close ends the console.
	errClosed = errors.New("SOL console closed")
	// errLost: the payload was deactivated or taken by another session.
	errLost = errors.New("SOL payload deactivated by the BMC or another session")
)

// Console is an active SOL session on its own RMCP+ session.
//
// Ownership: one goroutine (run, started by OpenConsole) owns the session:
// it alone sends SOL packets, handles what the BMC sends, probes, and at the
// end deactivates the payload and closes the session. Read and Write talk to
// it through the out buffer and the writes/breaks channels; Close cancels
// its context and waits for it. Besides it, the demuxConn's reader goroutine
// and go-ipmi's session keepalive run until the session is closed, which the
// owner does before it exits. No channel here is ever closed except done and
// failed (by the owner).
type Console struct {
	b     *BMC
	log   logrus.FieldLogger
	debug bool // log every packet
	s     *session
	conn  *demuxConn
	chunk int // characters per SOL packet (the BMC's inbound payload size)

	// ownerID is the payload owner's session ID as the BMC reports it in
	// Get Payload Instance Info right after activation; 0 if unsupported.
	ownerID uint32

	// ctx is the session's own context, cancelled with errClosed by Close;
	// it also aborts a keepalive probe in progress.
	ctx    context.Context
	cancel context.CancelCauseFunc

	writes chan *writeReq  // Write -> owner; unbuffered
	breaks chan chan error // Break -> owner; unbuffered
	st     solState        // owned by the owner goroutine
	seqWin seqProbe        // owned by the owner goroutine

	mu     sync.Mutex
	out    []byte        // output not yet Read
	err    error         // terminal error, set once by fail
	ready  chan struct{} // capacity 1: output or err became available
	failed chan struct{} // closed by fail
	done   chan struct{} // closed when the owner has torn the session down

	closeOnce sync.Once
}

var _ sol.Console = (*Console)(nil)

// writeReq is one Write waiting for the BMC to accept all of data.
type writeReq struct {
	data     []byte
	accepted int
	done     chan error // capacity 1; the owner sends exactly once
}

// OpenConsole opens a session, activates SOL payload instance 1 and starts
// the owner goroutine. An already active payload is sol.ErrPayloadActive.
func (b *BMC) OpenConsole(ctx context.Context) (sol.Console, error) {
	ctx, cancel := context.WithTimeout(ctx, b.cfg.CallTimeout)
	defer cancel()
	log := b.log.WithField("op", "console")
	s, err := b.dial(ctx)
	if err != nil {
		return nil, fmt.Errorf("open console of %s: %w", b.label, err)
	}
	s, res, err := b.activate(ctx, s)
	if err != nil {
		return nil, fmt.Errorf("open console of %s: %w", b.label, err)
	}
	c := b.newConsole(s, res, log)
	// Learn how the BMC names the payload's owner (us), so that a probe can
	// tell when someone else deactivated or took it. Its round trip also
	// sizes the sequence probe's window.
	start := time.Now()
	info, err := s.c.GetPayloadInstanceInfo(ctx, types.PayloadTypeSOL, solInstance)
	rtt := time.Since(start)
	switch _, isCC := completionCode(err); {
	case err != nil && !isCC: // no answer: give the payload back and fail
		c.deactivate(ctx)
		b.closeSession(s)
		return nil, fmt.Errorf("open console of %s: %w", b.label, b.bmcError(ctx, s.d, true, "get SOL payload owner from", err))
	case err == nil && !b.noOwnerInfo:
		c.ownerID = info.SessionID
	}
	if err := c.startSeqProbe(rtt); err != nil {
		c.deactivate(ctx)
		b.closeSession(s)
		return nil, fmt.Errorf("open console of %s: %w", b.label, err)
	}
	log.WithFields(logrus.Fields{"chunk": c.chunk, "owner_id": c.ownerID}).Info("sol_activated")
	go c.run() // owner goroutine; Close waits for it through done
	return c, nil
}

func (b *BMC) newConsole(s *session, res *transport.ActivatePayloadResponse, log logrus.FieldLogger) *Console {
	// The inbound payload size includes the 4-byte SOL header; the accepted
	// character count is one byte, so at most 255 characters per packet.
	// Implausible sizes (some BMCs report garbage) fall back to 255 and
	// rely on the accepted-character count.
	chunk := 255
	if in := int(res.InboundPayloadSize); in >= 5 && in <= 259 {
		chunk = in - 4
	}
	ctx, cancel := context.WithCancelCause(context.Background())
	debug := true
	if e, ok := log.(*logrus.Entry); ok {
		debug = e.Logger.IsLevelEnabled(logrus.DebugLevel)
	}
	return &Console{
		b:      b,
		log:    log,
		debug:  debug,
		s:      s,
		conn:   s.d.get(),
		chunk:  chunk,
		ctx:    ctx,
		cancel: cancel,
		writes: make(chan *writeReq),
		breaks: make(chan chan error),
		st:     solState{nextSeq: 1, lastRx: time.Now()},
		ready:  make(chan struct{}, 1),
		failed: make(chan struct{}),
		done:   make(chan struct{}),
	}
}

// integrityCipher reports whether the suite has an integrity algorithm.
func integrityCipher(c int) bool {
	switch c {
	case 2, 3, 7, 8, 11, 12, 16, 17:
		return true
	}
	return false
}

// DeactivateConsole frees SOL payload instance 1 from whoever holds it, in a
// session of its own. A payload that is not active is not an error.
func (b *BMC) DeactivateConsole(ctx context.Context) error {
	return b.do(ctx, "deactivate console", freshSession, func(ctx context.Context, c *client.Client) error {
		_, err := c.DeactivatePayload(ctx, &transport.DeactivatePayloadRequest{
			PayloadType: types.PayloadTypeSOL, PayloadInstance: solInstance,
		})
		if cc, ok := completionCode(err); ok && cc == ccPayloadActive {
			return nil // already inactive
		}
		return err
	})
}

// Read returns console output; after the link fails or Close, it returns
// what was already received, then the error. Meant for one reader.
func (c *Console) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	for {
		c.mu.Lock()
		if len(c.out) > 0 {
			n := copy(p, c.out)
			c.out = c.out[n:]
			if len(c.out) == 0 {
				c.out = nil
			}
			c.mu.Unlock()
			return n, nil
		}
		if c.err != nil {
			err := c.err
			c.mu.Unlock()
			return 0, err
		}
		c.mu.Unlock()
		<-c.ready
	}
}

// Write sends p to the node's serial port, in SOL packets of up to 255
// characters, and returns when the BMC has accepted all of it (or the link
// failed: then with the count the BMC acknowledged, so that the caller can
// send the rest on another console). It does not keep p.
func (c *Console) Write(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	req := &writeReq{data: p, done: make(chan error, 1)}
	select {
	case c.writes <- req:
	case <-c.failed:
		return 0, c.termErr()
	}
	// The owner answers every request it took, also when it fails.
	if err := <-req.done; err != nil {
		return req.accepted, err
	}
	return len(p), nil
}

// Break sends a serial break (the SOL "generate break" operation).
func (c *Console) Break(ctx context.Context) error {
	req := make(chan error, 1)
	select {
	case c.breaks <- req:
	case <-c.failed:
		return c.termErr()
	case <-ctx.Done():
		return fmt.Errorf("send break: %w", ctx.Err())
	}
	return <-req
}

// Close deactivates the payload (if it is still ours), closes the session
// and waits for the owner goroutine. It unblocks a pending Read and Write.
// Idempotent; later calls wait for the first.
func (c *Console) Close() error {
	c.closeOnce.Do(func() { c.cancel(errClosed) })
	<-c.done
	return nil
}

func (c *Console) termErr() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// deliver appends output for Read; false if the buffer is full.
func (c *Console) deliver(p []byte) bool {
	if len(p) == 0 {
		return true
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.out)+len(p) > maxPending {
		return false
	}
	c.out = append(c.out, p...)
	c.signal()
	return true
}

// fail records the terminal error (once) and wakes Read, Write and Break.
func (c *Console) fail(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		return
	}
	if errors.Is(err, errClosed) {
		c.err = fmt.Errorf("console of %s: %w", c.b.label, err)
	} else {
		c.err = fmt.Errorf("SOL link to %s lost: %w", c.b.label, err)
	}
	close(c.failed)
	c.signal()
}

// signal wakes the reader; c.mu is held.
func (c *Console) signal() {
	select {
	case c.ready <- struct{}{}:
	default:
	}
}

// run is the owner goroutine: the packet loop, then the teardown.
func (c *Console) run() {
	defer close(c.done)
	err := c.loop()
	c.fail(err)
	c.finishWrite(c.termErr())
	if errors.Is(err, errClosed) {
		c.log.Info("sol_closed")
	} else {
		c.log.WithError(err).Info("sol_link_lost")
	}
	c.teardown(err)
}

// teardown gives the payload back if it is still ours and closes the
// session, politely only if the BMC is still answering.
func (c *Console) teardown(cause error) {
	ctx, cancel := context.WithTimeout(context.Background(), min(c.b.cfg.CallTimeout, 3*time.Second))
	defer cancel()
	var dead *deadError
	switch {
	case errors.As(cause, &dead):
		cancel() // the BMC is gone: just close the socket
	case errors.Is(cause, errLost):
		// Not ours any more: deactivating would end someone else's console.
	default:
		if c.stillOwner(ctx) {
			c.deactivate(ctx)
		}
	}
	c.s.close(ctx)
	if n := c.conn.Dropped(); n > 0 {
		c.log.WithField("dropped", n).Debug("sol_datagrams_dropped")
	}
}

// stillOwner reports whether the BMC still lists our session as the
// payload's owner (true if it cannot tell us: no owner known, or a
// completion code).
func (c *Console) stillOwner(ctx context.Context) bool {
	if c.ownerID == 0 {
		return true
	}
	lost, err := c.probe(ctx)
	if err != nil {
		_, isCC := completionCode(err)
		return isCC
	}
	return !lost
}

func (c *Console) deactivate(ctx context.Context) {
	_, err := c.s.c.DeactivatePayload(ctx, &transport.DeactivatePayloadRequest{
		PayloadType: types.PayloadTypeSOL, PayloadInstance: solInstance,
	})
	if err != nil {
		c.log.WithError(err).Debug("sol_deactivate_failed")
	}
}

// deadError marks failures that mean the BMC no longer answers.
type deadError struct{ err error }

func (e *deadError) Error() string { return e.err.Error() }
func (e *deadError) Unwrap() error { return e.err }

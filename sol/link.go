package sol

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/obmd/obmd/sol/history"
	"github.com/obmd/obmd/sol/screen"
)

const (
	readBuf  = 4 << 10  // one Console.Read
	maxWrite = 4 << 10  // one coalesced Console.Write
	maxInput = 64 << 10 // pending input per node; Write blocks beyond it
)

// Link states, logged with the field "state".
const (
	stateConnecting   = "connecting"
	stateOpen         = "open"
	stateOpenFailed   = "open_failed"
	stateDeactivating = "deactivating"
	stateLost         = "lost"
	stateClosed       = "closed"
)

// Notices sent to viewers.
const (
	noticeLost     = "console link lost, reconnecting"
	noticeRestored = "console link restored"
	noticeUp       = "console connected"
)

// node is one console: its viewers, scrollback, history recording, pending
// input and the link owner goroutine (run). A node lives from the first
// Attach (or Hold) until it is retired (linger expired, Cut, Close); a
// later Attach makes a new node.
type node struct {
	m      *Manager
	label  string
	log    logrus.FieldLogger
	cancel context.CancelCauseFunc // cancels run's ctx; called by retireLocked
	// prev is closed when the previous link of this label has fully closed
	// (nil if none); run waits for it before opening.
	prev     <-chan struct{}
	linkDone chan struct{} // closed by run when it returns
	wake     chan struct{} // cap 1: the viewer set changed (sent by anyone, drained by run)
	inReady  chan struct{} // cap 1: input is pending (sent by Write, drained by writeLoop)
	room     chan struct{} // cap 1: a viewer's queue shrank or a viewer left (drained by readLoop)
	breaks   chan breakReq // Break requests, received by writeLoop

	// lingerT is armed while the node has no viewer. Owned by run.
	lingerT *time.Timer
	// size is the screen size the resolver gave when the link last
	// opened. Owned by run.
	size screen.Size

	mu        sync.Mutex
	retired   bool
	viewers   []*Viewer // attach order
	writer    *Viewer   // nil: nobody writes
	ring      ring
	in        []byte        // pending input, at most maxInput
	flying    int           // input taken by the writer loop and not yet written (or put back)
	inDrained chan struct{} // closed (and replaced) when a full input buffer drains or the writer changes
	up        bool          // a console is established
	exclusive bool          // the BMC is Exclusive: one viewer at a time, no linger
	status    string        // current trouble notice, repeated to new viewers; "" if none
	held      bool          // held for capture (Manager.Hold): no linger
	// relay: the last console established relays another replica's link
	// (Seeded): replays come from the ring, which it seeded. Set by run.
	relay bool
	// rec records the node's output: this replica holds its link. Set by
	// run when a console it holds comes up, closed by finish.
	rec     *history.Recording
	waiting []*replayJob // replays waiting for the link to come up (replay.go)
	scr     nodeScreen   // the node's screen (screens.go)

	// The arbitration of the writer across hubs (roles.go): the
	// established console if it is an Arbiter, the messages queued for it
	// and how many were queued (the link's writer loop sends them), the
	// writer when it is no viewer of this hub, and the channel
	// AwaitRole waits on (closed when a role is decided).
	linked       bool // the established console's part has begun (startRolesLocked)
	arb          Arbiter
	ctl          []ctlMsg
	told         uint64
	remoteWriter Who
	decidedC     chan struct{}
}

// ctlMsg is a RoleMsg queued for the node's Arbiter; reply (buffered 1),
// if set, gets Tell's result (RoleReturn: whether the holder confirms the
// input), or an error if the message is dropped.
type ctlMsg struct {
	m     RoleMsg
	reply chan error
}

type breakReq struct {
	ctx   context.Context
	from  *Viewer    // the writer that asked
	reply chan error // buffered 1
}

func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// run owns the link: it opens the console, serves it until it is lost or
// the node retires, and reopens it with backoff while anyone is attached.
func (n *node) run(ctx context.Context) {
	defer n.m.wg.Done()
	defer n.finish()
	if n.prev != nil {
		select {
		case <-n.prev:
		case <-ctx.Done():
			return
		}
	}
	n.checkIdle()
	b := backoff{min: n.m.cfg.Backoff.Min, max: n.m.cfg.Backoff.Max}
	lost := false
	for {
		n.state(stateConnecting)
		con, err := n.open(ctx)
		if ctx.Err() != nil {
			if err == nil {
				n.closeConsole(con)
			}
			return
		}
		if errors.Is(err, ErrHeldElsewhere) {
			n.log.WithError(err).Info("console capture held elsewhere")
			if n.letGo() {
				return
			}
			continue // a viewer attached meanwhile: open for it
		}
		if err == nil {
			err = n.linkUp(ctx, con, lost)
		}
		if err != nil {
			n.m.st.openErrors.Add(1)
			n.log.WithField("state", stateOpenFailed).WithError(err).Warn("console link state")
			if errors.Is(err, ErrNotSupported) { // no console to open (ErrNoConsole): final
				n.giveUp(err)
				return
			}
			n.trouble("cannot open console: " + TenantText(err) + "; retrying")
			if !n.sleep(ctx, b.next()) {
				return
			}
			continue
		}
		n.m.st.opens.Add(1)
		n.state(stateOpen)
		n.setUp(true, lost)
		lost = false
		if n.idleRelay() {
			n.letGo() // its holder captures it; serve stops at once
		}
		upAt := time.Now()
		err = n.serve(ctx, con)
		n.setUp(false, false)
		if err == nil {
			return
		}
		// A link that opens and drops at once keeps backing off; one that
		// held for a while reconnects quickly.
		if time.Since(upAt) >= n.m.cfg.Backoff.Max {
			b.reset()
		}
		lost = true
		n.m.st.reconnects.Add(1)
		n.log.WithField("state", stateLost).WithError(err).Warn("console link state")
		n.mark(history.LinkLost())
		n.trouble(noticeLost)
		if !n.sleep(ctx, b.next()) {
			return
		}
	}
}

// giveUp retires the node with err, a failure no retry mends: its viewers
// end with it (and say so), and a later viewer tries again afresh. Owner
// only.
func (n *node) giveUp(err error) {
	m := n.m
	m.mu.Lock()
	defer m.mu.Unlock()
	n.mu.Lock()
	defer n.mu.Unlock()
	m.retireLocked(n, err)
}

// finish runs when the owner returns: the next link of this label may open.
func (n *node) finish() {
	m := n.m
	m.mu.Lock()
	if m.tails[n.label] == n.linkDone {
		delete(m.tails, n.label)
	}
	m.mu.Unlock()
	if n.lingerT != nil {
		n.lingerT.Stop()
	}
	n.mu.Lock()
	rec := n.rec
	n.rec = nil
	n.mu.Unlock()
	if rec != nil {
		rec.Close()
	}
	m.st.links.Add(-1)
	n.state(stateClosed)
	close(n.linkDone)
}

// linkUp completes the opening of con: a console this replica holds is
// recorded in the node's history (its recording opened on the first one,
// which verifies the node's access epoch: a failure closes con and fails
// the open), a relay seeds the ring with the holder's replay; the replays
// waiting for the link then read from the one or the other. Owner only.
func (n *node) linkUp(ctx context.Context, con Console, wasLost bool) error {
	seeded, relay := con.(Seeded)
	var rec *history.Recording
	if !relay && n.m.hist != nil && n.recording() == nil {
		octx, cancel := context.WithTimeout(ctx, n.m.cfg.OpenTimeout)
		r, err := n.m.hist.Open(octx, n.label)
		cancel()
		if err != nil {
			n.closeConsole(con)
			return fmt.Errorf("open console history: %w", err)
		}
		rec = r
	}
	n.mu.Lock()
	old := rec
	if relay {
		old, n.rec = n.rec, nil // the holder records it now
		n.ring.reset()
		n.ring.write(seeded.Seed())
	} else if rec != nil {
		old, n.rec = nil, rec
	}
	wasRelay := n.relay
	n.relay = relay
	if wasLost && n.rec != nil {
		n.rec.Mark(history.LinkRestored())
	}
	// The screen starts from the holder's (a relay), or from the history
	// (a new link here, a takeover from a relay, a new size); a link that
	// comes back keeps it. Before the waiting replays choose: their
	// screens come after it.
	switch {
	case n.m.noScreens:
	case relay:
		feed := seeded.Seed()
		if ss, ok := con.(ScreenSeeded); ok && len(ss.ScreenSeed()) > 0 {
			feed = ss.ScreenSeed()
		}
		n.screenResetLocked(n.size, feed, false)
	case wasRelay || !n.scr.settled || n.size != n.scr.size:
		n.screenResetLocked(n.size, nil, true)
	}
	n.chooseWaitingLocked()
	n.mu.Unlock()
	if old != nil {
		old.Close()
	}
	return nil
}

// recording returns the node's recording, nil if this replica does not
// record it.
func (n *node) recording() *history.Recording {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.rec
}

// mark records m in the node's history, if this replica records it.
func (n *node) mark(m history.Marker) {
	if rec := n.recording(); rec != nil {
		rec.Mark(m)
	}
}

func (n *node) state(s string) {
	n.log.WithField("state", s).Info("console link state")
}

// open resolves the node's BMC and activates SOL. A payload left active by
// someone else is deactivated and the open retried once at once.
func (n *node) open(ctx context.Context) (Console, error) {
	t := n.m.cfg.OpenTimeout
	rctx, cancel := context.WithTimeout(ctx, t)
	bmc, err := n.m.r.Resolve(rctx, n.label)
	cancel()
	if err != nil {
		return nil, fmt.Errorf("resolve BMC: %w", err)
	}
	sctx, cancel := context.WithTimeout(ctx, t)
	n.size = n.screenSize(sctx)
	cancel()
	if x, ok := bmc.(Exclusive); ok && x.Exclusive() {
		n.mu.Lock()
		n.exclusive = true
		n.mu.Unlock()
		n.checkIdle() // a timer armed meanwhile may be too long
	}
	n.mu.Lock()
	own := n.held && len(n.viewers) == 0 // a capture: never relay
	n.mu.Unlock()
	con, err := openConsole(ctx, bmc, t, own)
	if errors.Is(err, ErrPayloadActive) {
		n.state(stateDeactivating)
		dctx, cancel := context.WithTimeout(ctx, t)
		derr := bmc.DeactivateConsole(dctx)
		cancel()
		if derr != nil {
			return nil, fmt.Errorf("deactivate stale SOL: %w", derr)
		}
		con, err = openConsole(ctx, bmc, t, own)
	}
	if errors.Is(err, ErrHeldElsewhere) {
		return nil, err
	}
	if err != nil {
		return nil, fmt.Errorf("open SOL: %w", err)
	}
	return con, nil
}

// openConsole calls OpenConsole (OpenOwnConsole if own and the BMC has
// it) with its own timeout; the ctx given to the driver bounds only the
// opening, never the console's life.
func openConsole(ctx context.Context, bmc BMC, t time.Duration, own bool) (Console, error) {
	octx, cancel := context.WithTimeout(ctx, t)
	defer cancel()
	if o, ok := bmc.(OwnConsoler); ok && own {
		return o.OpenOwnConsole(octx)
	}
	return bmc.OpenConsole(octx)
}

func (n *node) closeConsole(con Console) {
	if err := con.Close(); err != nil {
		n.log.WithError(err).Debug("close console")
	}
}

// serve runs one established console until it fails (returned error) or
// the node retires or lingers out (nil). It alone closes con (after closed,
// if the node retired), then waits for the reader and writer it started.
func (n *node) serve(ctx context.Context, con Console) error {
	arb, _ := con.(Arbiter)
	if arb != nil {
		arb.Arbitrate(func(r Roles) { n.applyRoles(arb, r) },
			func(id uint64, msg string) { n.holderNotice(arb, id, msg) })
	}
	n.mu.Lock()
	n.startRolesLocked(arb)
	n.mu.Unlock()
	defer func() {
		n.mu.Lock()
		n.stopRolesLocked()
		n.mu.Unlock()
	}()
	cctx, cancel := context.WithCancel(ctx)
	lost := make(chan error, 2) // one send each from reader and writer, never blocks
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		lost <- n.readLoop(cctx, con)
	}()
	go func() {
		defer wg.Done()
		if err := n.writeLoop(cctx, con); err != nil {
			lost <- err
		}
	}()
	_, err := n.watch(ctx, lost, nil) // nil when the node retires or lingers out
	cancel()
	if ctx.Err() != nil {
		// Retired: nothing more is published (or recorded). Its history is
		// marked, and stored if handed off, before the console closes,
		// which in a cluster releases the SOL lease for the next holder.
		n.closed(ctx)
	}
	n.closeConsole(con) // unblocks Read and Write
	wg.Wait()
	if ctx.Err() != nil {
		return nil
	}
	return err
}

// sleep waits d; false means the node retired or lingered out meanwhile
// and the owner must stop.
func (n *node) sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	stop, _ := n.watch(ctx, nil, t.C)
	return !stop
}

// watch waits for the first of: the node retiring or lingering out (stop),
// a lost console (err), or timeout firing, minding the linger timer
// meanwhile. A nil channel is never ready. Owner only.
func (n *node) watch(ctx context.Context, lost <-chan error, timeout <-chan time.Time) (stop bool, err error) {
	for {
		select {
		case <-ctx.Done():
			return true, nil
		case err := <-lost:
			return false, err
		case <-timeout:
			return false, nil
		case <-n.wake:
			if n.idleRelay() {
				n.letGo() // its holder captures it; ctx ends now
			}
			n.checkIdle()
		case <-n.lingerC():
			if n.lingerExpired() {
				return true, nil
			}
		}
	}
}

// idleRelay reports whether n is held with nobody attached while its link
// relays another replica's: that replica captures it.
func (n *node) idleRelay() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.held && n.relay && n.up && len(n.viewers) == 0
}

// checkIdle arms the linger timer when the last viewer has gone (and the
// node is not held) and disarms it when one is back; an Exclusive node's
// timer fires at once. Owner only.
func (n *node) checkIdle() {
	n.mu.Lock()
	idle, d := len(n.viewers) == 0 && !n.held, n.m.cfg.Linger
	if n.exclusive {
		d = 0
	}
	n.mu.Unlock()
	switch {
	case idle && n.lingerT != nil && d == 0:
		n.lingerT.Reset(0)
	case idle && n.lingerT == nil:
		n.lingerT = time.NewTimer(d)
	case !idle && n.lingerT != nil:
		n.lingerT.Stop()
		n.lingerT = nil
	}
}

func (n *node) lingerC() <-chan time.Time {
	if n.lingerT == nil {
		return nil
	}
	return n.lingerT.C
}

// lingerExpired retires the node if it still has no viewer. Owner only.
func (n *node) lingerExpired() bool {
	n.lingerT = nil
	m := n.m
	m.mu.Lock()
	defer m.mu.Unlock()
	n.mu.Lock()
	defer n.mu.Unlock()
	if (len(n.viewers) > 0 || n.held) && !n.retired {
		return false
	}
	m.retireLocked(n, ErrDetached)
	return true
}

// readLoop reads the console and publishes until Read fails or ctx ends.
func (n *node) readLoop(ctx context.Context, con Console) error {
	n.mu.Lock()
	exclusive := n.exclusive // set by open, before serve
	n.mu.Unlock()
	buf := make([]byte, readBuf)
	for {
		p := buf
		if exclusive {
			room, err := n.waitRoom(ctx)
			if err != nil {
				return err
			}
			p = buf[:min(len(buf), room)]
		}
		k, err := con.Read(p)
		if k > 0 {
			n.m.st.bytesOut.Add(uint64(k))
			if n.publish(p[:k]) {
				runtime.Gosched() // the screen's owner is behind: let it run
			}
		}
		if err != nil {
			return fmt.Errorf("read console: %w", err)
		}
	}
}

// waitRoom waits until every viewer's queue has room and returns how many
// console bytes fit in the fullest one. An Exclusive console belongs to its
// one viewer, so it is read only as fast as that viewer takes its output:
// flow control end to end (the mock's counter is made as it is read), and
// the viewer never has to skip ahead. (Any other console is read as fast as
// the BMC sends: a slow viewer never slows the others.)
func (n *node) waitRoom(ctx context.Context) (int, error) {
	for {
		n.mu.Lock()
		room := n.m.cfg.QueueBytes
		for _, v := range n.viewers {
			room = min(room, n.m.cfg.QueueBytes-v.backlog())
		}
		n.mu.Unlock()
		if room > 0 {
			return room, nil
		}
		select {
		case <-n.room:
		case <-ctx.Done():
			return 0, fmt.Errorf("wait for a viewer to read: %w", context.Cause(ctx))
		}
	}
}

// writeLoop sends pending input, coalesced into writes of up to maxWrite
// bytes, and serves Break requests in order with it, until ctx is done.
func (n *node) writeLoop(ctx context.Context, con Console) error {
	arb, _ := con.(Arbiter)
	buf := make([]byte, 0, maxWrite)
	for {
		select {
		case <-ctx.Done():
			return nil
		case req := <-n.breaks:
			// Role messages and input written before the Break go first
			// (select picks at random when both are ready): "Enter, then
			// break" must reach the node in that order (ipmitool takes a
			// break only at a line start).
			err := n.sendCtl(arb)
			for left := n.pendingInput(); left > 0 && err == nil; {
				buf, err = n.sendInput(con, buf[:0], left)
				left -= len(buf)
				if err == nil && len(buf) == 0 {
					if n.pendingInput() == 0 {
						break
					}
					err = n.sendCtl(arb) // queued meanwhile: they go before the input behind them
				}
			}
			if err != nil {
				req.reply <- err
				return err
			}
			bctx, cancel := context.WithCancel(req.ctx)
			stop := context.AfterFunc(ctx, cancel)
			if arb != nil {
				req.reply <- arb.BreakAs(bctx, req.from.id)
			} else {
				req.reply <- con.Break(bctx)
			}
			stop()
			cancel()
		case <-n.inReady:
			err := n.sendCtl(arb)
			if err == nil {
				buf, err = n.sendInput(con, buf[:0], maxWrite)
			}
			if err != nil {
				return err
			}
		}
	}
}

// publish appends console output to the scrollback, the history, the
// screen's queue and every viewer's queue. It never blocks on a viewer
// (nor on the screen, behind reports whether it lags).
func (n *node) publish(p []byte) (screenBehind bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.retired {
		return false
	}
	n.ring.write(p)
	if n.rec != nil {
		n.rec.Write(p) // never waits for the database
	}
	screenBehind = n.screenFeedLocked(p)
	cfg := &n.m.cfg
	var slow []*Viewer
	for _, v := range n.viewers {
		skipped, drop := v.push(p, cfg.QueueBytes, cfg.DropSlow)
		if skipped > 0 || drop {
			n.m.st.overflows.Add(1)
			n.m.st.skipped.Add(uint64(skipped))
		}
		if drop {
			slow = append(slow, v)
		}
	}
	for _, v := range slow {
		n.log.WithField("viewer", v.name).Info("slow console viewer dropped")
		n.removeLocked(v, ErrSlowViewer)
	}
	return screenBehind
}

// addLocked subscribes v (its replay first if asked: replay.go). It
// becomes the writer if nobody writes, as far as this hub knows; the
// holder of a relayed console is told (and decides).
func (n *node) addLocked(v *Viewer, o AttachOptions) {
	n.viewers = append(n.viewers, v)
	n.m.st.viewers.Add(1)
	if !o.ReadOnly && !o.Relay && n.writer == nil && n.remoteWriter == (Who{}) {
		n.setWriterLocked(v)
	}
	switch {
	case o.Relay:
	case n.arb != nil:
		v.joinSeq = n.tellLocked(RoleMsg{Op: RoleJoin, Viewer: v.id, Who: v.Who(), Want: !o.ReadOnly})
	case n.linked:
		v.decided = true
	}
	if o.Replay {
		n.replayLocked(v, replayAttach)
	}
	if n.status != "" {
		v.notice(n.status)
	}
	signal(n.wake)
}

// removeLocked unsubscribes v and ends it with cause.
func (n *node) removeLocked(v *Viewer, cause error) {
	for i, w := range n.viewers {
		if w == v {
			n.viewers = append(n.viewers[:i], n.viewers[i+1:]...)
			n.m.st.viewers.Add(-1)
			signal(n.wake)
			signal(n.room)
			break
		}
	}
	n.leaveLocked(v)
	if v.relay {
		v.endMembersLocked(cause)
	} else {
		n.tellLocked(RoleMsg{Op: RoleLeave, Viewer: v.id})
	}
	v.end(cause)
}

// trouble tells viewers about a link problem, once per distinct message.
func (n *node) trouble(msg string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.retired || msg == n.status {
		return
	}
	n.status = msg
	for _, v := range n.viewers {
		v.notice(msg)
	}
}

// setUp records whether a console is established; on the way up it tells
// viewers that were told of trouble that the console works again.
func (n *node) setUp(up, wasLost bool) {
	if up {
		n.m.st.linksUp.Add(1)
	} else {
		n.m.st.linksUp.Add(-1)
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	n.up = up
	if !up || n.status == "" {
		return
	}
	n.status = ""
	msg := noticeUp
	if wasLost {
		msg = noticeRestored
	}
	if n.retired {
		return
	}
	for _, v := range n.viewers {
		v.notice(msg)
	}
}

// backoff is exponential with jitter: each wait is drawn from [d/2, d], d
// doubling from min to max.
type backoff struct {
	min, max, cur time.Duration
}

func (b *backoff) next() time.Duration {
	if b.cur == 0 {
		b.cur = b.min
	} else {
		b.cur = min(2*b.cur, b.max)
	}
	half := b.cur / 2
	return half + rand.N(b.cur-half+1)
}

func (b *backoff) reset() { b.cur = 0 }

package sol

import (
	"context"
	"sync"
	"time"
)

// maxNotices bounds the notices queued for one viewer; more are dropped.
const maxNotices = 32

// Chunk is one delivery to a viewer: console bytes or a notice, never both.
type Chunk struct {
	// Data is console output, untouched. The receiver owns it.
	Data []byte
	// Notice is a one-line message for the viewer's stderr, e.g.
	// "console link lost, reconnecting".
	Notice string
	// Skipped > 0: this many console bytes were dropped just before Data
	// because the viewer fell behind.
	Skipped int
	// Roles (relay viewers only, alone in its chunk): the node's writer
	// changed; Viewer.Roles says who it is now. Any number of changes since
	// the last such chunk come as one.
	Roles bool
	// Replay marks Data as the viewer's replay (AttachOptions.Replay,
	// Viewer.Replay), not live output. A relay viewer gets its replays
	// even when empty: its replica waits for the first one.
	Replay bool
	// Screen, with Replay, for a relay viewer or one attached with
	// AttachOptions.Screen, and for Viewer.Redraw: the node's screen where
	// the replay ends, as a redraw for a terminal (screen.Terminal.ANSI);
	// nil when the node has none yet (its link did not come up in time),
	// or when it is blank (a replay of a viewer that is no relay: its Data
	// alone draws the screen).
	Screen []byte
	// For (relay viewers only, with Notice): the notice is for the
	// relay's member viewer For (its ID on the relaying hub), whose hub
	// tells it (Arbiter's notice function).
	For uint64

	job *replayJob // in the queue only: a replay to deliver here
}

// Viewer is one subscriber of a node's console. Its methods are safe for
// concurrent use. A viewer ends when it closes itself, when its node is cut,
// when it is too slow with Config.DropSlow, or when the Manager closes; Err
// then says why.
type Viewer struct {
	m       *Manager
	n       *node
	name    string
	session string // AttachOptions.Session
	since   time.Time
	id      uint64 // unique in the Manager: the viewer's name to an Arbiter (RoleMsg.Viewer)
	relay   bool   // AttachOptions.Relay: carries another hub's viewers (roles.go)
	epoch   int64  // AttachOptions.Epoch: the tenancy its replays read
	// wantScreen: its replays carry the node's screen (AttachOptions.Screen).
	wantScreen bool
	out        chan Chunk    // closed by pump when the viewer has ended; nil for a member
	done       chan struct{} // closed by end
	ready      chan struct{} // cap 1: the queue is not empty (sent by push/notice, drained by pump)

	// A member (roles.go) is a viewer of another hub that relay viewer
	// carrier carries, known there as remote. It has no queue and no pump:
	// it gets no output and no notices (its own hub tells its viewer).
	carrier *Viewer
	remote  uint64

	// Guarded by the node's mu. A relay viewer's members (by remote ID,
	// and in join order) and how many RoleMsgs it applied; on a relaying
	// hub, the sequence number of the viewer's RoleJoin on the current
	// Arbiter, and whether its role is decided (AwaitRole).
	members    map[uint64]*Viewer
	memberList []*Viewer
	seq        uint64
	joinSeq    uint64
	decided    bool
	// lender is the viewer whose role v borrowed (AsWriter, RoleBorrow),
	// which gets it back; dropped says that input v wrote was dropped
	// (the role moved, or the node retired, before it went to the link).
	lender  *Viewer
	dropped bool

	mu         sync.Mutex
	err        error
	q          []Chunk // pending deliveries; adjacent console bytes are merged
	queued     int     // console bytes in q
	notes      int     // notices in q
	rolesDirty bool    // relay viewer: a Roles chunk is due (markRoles)
}

func newViewer(m *Manager, n *node, name string, since time.Time) *Viewer {
	return &Viewer{
		m:     m,
		n:     n,
		name:  name,
		since: since,
		out:   make(chan Chunk),
		done:  make(chan struct{}),
		ready: make(chan struct{}, 1),
	}
}

// Output delivers the viewer's chunks in order. It is closed once the viewer
// has ended; chunks still queued then are dropped.
func (v *Viewer) Output() <-chan Chunk { return v.out }

// Done is closed when the viewer ends.
func (v *Viewer) Done() <-chan struct{} { return v.done }

// Err is why the viewer ended (nil before Done is closed).
func (v *Viewer) Err() error {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.err
}

// Name is the name given at Attach.
func (v *Viewer) Name() string { return v.name }

// Write queues p for the node's console; the link coalesces queued input
// into few Console.Write calls. Only the writer may write (ErrReadOnly); a
// relay viewer never is the writer (its members write: WriteAs).
// Write blocks while too much input is pending (a long paste into a slow or
// reconnecting link) until it drains, the viewer stops being the writer, or
// the viewer ends. Input is dropped if the node is cut. Input that a lost
// link had not delivered goes to the next link, in order; the part of it
// the BMC may have received without acknowledging it (at most one SOL
// packet) may then arrive twice.
func (v *Viewer) Write(p []byte) (int, error) {
	n := v.n
	written := 0
	for len(p) > 0 {
		n.mu.Lock()
		if err := v.Err(); err != nil {
			n.mu.Unlock()
			return written, err
		}
		if n.writer != v {
			n.mu.Unlock()
			return written, ErrReadOnly
		}
		if space := maxInput - len(n.in); space > 0 {
			k := min(space, len(p))
			n.in = append(n.in, p[:k]...)
			p = p[k:]
			written += k
			signal(n.inReady)
			n.mu.Unlock()
			continue
		}
		if n.inDrained == nil {
			n.inDrained = make(chan struct{})
		}
		drained := n.inDrained
		n.mu.Unlock()
		select {
		case <-drained:
		case <-v.done:
		}
	}
	return written, nil
}

// Flush waits until the input v wrote has gone to the node's console link
// (written to it, not only queued), v ends, or Config.OpenTimeout passes:
// what a console whose client ended its input waits for before it ends.
// It is ErrInputLost if some of v's input did not go (dropped, or still
// pending); nil at once if v is not the writer and lost nothing.
func (v *Viewer) Flush() error {
	n := v.n
	n.mu.Lock()
	writer := n.writer == v
	n.mu.Unlock()
	if writer {
		v.awaitInput(v.m.cfg.OpenTimeout)
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if v.dropped || n.writer == v && n.unsentLocked() > 0 {
		return ErrInputLost
	}
	return nil
}

// TakeWrite makes v the writer. The previous writer, if any, gets a notice
// and becomes read-only, wherever in the cluster it is (roles.go). It does
// nothing once v has ended, or for a relay viewer.
func (v *Viewer) TakeWrite() {
	n := v.n
	n.mu.Lock()
	defer n.mu.Unlock()
	if v.Err() != nil || n.retired || v.relay {
		return
	}
	n.takeWriteLocked(v)
	n.tellLocked(RoleMsg{Op: RoleTake, Viewer: v.id})
}

// ReadOnly gives up writing. Nobody writes until someone takes over.
func (v *Viewer) ReadOnly() {
	n := v.n
	n.mu.Lock()
	defer n.mu.Unlock()
	if v.Err() != nil || n.retired || v.relay {
		return
	}
	n.releaseLocked(v)
	n.tellLocked(RoleMsg{Op: RoleRelease, Viewer: v.id})
}

// Writer reports whether v is the writer.
func (v *Viewer) Writer() bool {
	n := v.n
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.writer == v
}

// Break sends a serial break on the node's console, in order with input
// written before it. Like input, it is the writer's privilege (ErrReadOnly
// otherwise); ErrLinkDown when no console is established. ctx bounds it, as
// does Config.OpenTimeout.
func (v *Viewer) Break(ctx context.Context) error {
	n := v.n
	n.mu.Lock()
	err := v.Err()
	switch {
	case err != nil:
	case n.writer != v:
		err = ErrReadOnly
	case !n.up:
		err = ErrLinkDown
	}
	n.mu.Unlock()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, v.m.cfg.OpenTimeout)
	defer cancel()
	req := breakReq{ctx: ctx, from: v, reply: make(chan error, 1)}
	select {
	case n.breaks <- req:
	case <-ctx.Done():
		return context.Cause(ctx)
	case <-v.done:
		return v.Err()
	}
	select {
	case err := <-req.reply:
		return err
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// Replay queues the node's replay for v again (the `r` escape), in order
// with live output: the history's last Config.Scrollback bytes as of now
// (AttachOptions.Replay says where they come from).
func (v *Viewer) Replay() { v.again(replayOutput) }

// again queues a replay job of kind for v, unless v has maxReplaysQueued
// waiting already.
func (v *Viewer) again(kind replayKind) {
	n := v.n
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.retired || v.Err() != nil || v.replaysQueued() >= maxReplaysQueued {
		return
	}
	n.replayLocked(v, kind)
}

// maxReplaysQueued bounds the replays and redraws a viewer has queued
// (each reads the history or copies the screen): more asked for while
// they wait are dropped, as a key held down or pasted asks again and
// again.
const maxReplaysQueued = 2

// replaysQueued is how many replay jobs v has queued and not delivered.
func (v *Viewer) replaysQueued() int {
	v.mu.Lock()
	defer v.mu.Unlock()
	k := 0
	for _, c := range v.q {
		if c.job != nil {
			k++
		}
	}
	return k
}

// Redraw queues the node's screen for v (the `r` escape of a terminal),
// in order with live output: a replay (Chunk.Replay) whose Screen is the
// redraw of the screen as of now, blank or not, and with no Data. It
// comes with no Screen if the node has none in time (its link did not
// come up), and then with nothing at all for a viewer that relays no
// other hub's.
func (v *Viewer) Redraw() { v.again(replayScreen) }

// Close detaches v (cause ErrDetached). It is idempotent; Output is closed
// shortly after. When v was the last viewer of an Exclusive node, the node
// is retired before Close returns, so a following Attach opens a new console.
func (v *Viewer) Close() {
	n, m := v.n, v.m
	m.mu.Lock()
	defer m.mu.Unlock()
	n.mu.Lock()
	defer n.mu.Unlock()
	n.removeLocked(v, ErrDetached)
	if n.exclusive && len(n.viewers) == 0 {
		m.retireLocked(n, ErrDetached)
	}
}

// end records cause and closes done, once. Queued chunks are dropped.
func (v *Viewer) end(cause error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.err != nil {
		return
	}
	v.err = cause
	v.q, v.queued, v.notes = nil, 0, 0
	close(v.done)
}

// push queues console bytes without ever blocking. When they do not fit in
// limit, either the viewer must be dropped (dropSlow: drop is true) or it
// skips ahead: queued console bytes are discarded (notices stay), only the
// newest limit bytes of p are kept, and the gap is reported in the next
// chunk's Skipped. skipped counts the bytes newly discarded.
func (v *Viewer) push(p []byte, limit int, dropSlow bool) (skipped int, drop bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	size := len(p)
	if v.err != nil || size == 0 {
		return 0, false
	}
	if v.queued+size <= limit {
		v.queued += size
		if k := len(v.q); k > 0 && v.q[k-1].Notice == "" && v.q[k-1].job == nil {
			v.q[k-1].Data = append(v.q[k-1].Data, p...)
		} else {
			v.q = append(v.q, Chunk{Data: append([]byte(nil), p...)})
		}
		signal(v.ready)
		return 0, false
	}
	if dropSlow {
		return size, true
	}
	gap := 0
	kept := v.q[:0]
	for _, c := range v.q {
		if c.Notice != "" || c.job != nil {
			kept = append(kept, c)
			continue
		}
		gap += c.Skipped + len(c.Data)
		skipped += len(c.Data)
	}
	clear(v.q[len(kept):])
	v.q = kept
	if cut := size - limit; cut > 0 { // keep the newest limit bytes
		gap += cut
		skipped += cut
		p = p[cut:]
		size = limit
	}
	v.q = append(v.q, Chunk{Data: append([]byte(nil), p...), Skipped: gap})
	v.queued = size
	signal(v.ready)
	return skipped, false
}

// queueReplay queues replay job j, in order with what is queued (it is
// kept on overflow, as notices are).
func (v *Viewer) queueReplay(j *replayJob) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.err != nil {
		return
	}
	v.q = append(v.q, Chunk{job: j})
	signal(v.ready)
}

// concat returns a new slice holding a then b.
func concat(a, b []byte) []byte {
	return append(append(make([]byte, 0, len(a)+len(b)), a...), b...)
}

// noticeFor queues a notice for relay viewer v's member remote (Chunk.For).
func (v *Viewer) noticeFor(remote uint64, msg string) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.err != nil || v.notes >= maxNotices || !v.relay {
		return
	}
	v.q = append(v.q, Chunk{Notice: msg, For: remote})
	v.notes++
	signal(v.ready)
}

// notice queues a one-line message.
func (v *Viewer) notice(msg string) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.err != nil || v.notes >= maxNotices || v.carrier != nil {
		return
	}
	v.q = append(v.q, Chunk{Notice: msg})
	v.notes++
	signal(v.ready)
}

// take removes the first queued chunk.
func (v *Viewer) take() (Chunk, bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.err == nil && v.rolesDirty {
		v.rolesDirty = false
		return Chunk{Roles: true}, true
	}
	if v.err != nil || len(v.q) == 0 {
		return Chunk{}, false
	}
	c := v.q[0]
	v.q[0] = Chunk{}
	v.q = v.q[1:]
	switch {
	case c.Notice != "":
		v.notes--
	case c.job == nil:
		v.queued -= len(c.Data)
	}
	return c, true
}

// backlog is how many console bytes v has queued.
func (v *Viewer) backlog() int {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.queued
}

// pump moves queued chunks to Output until the viewer ends, then closes
// Output. Owned by the Manager's WaitGroup.
func (v *Viewer) pump() {
	defer v.m.wg.Done()
	defer close(v.out)
	for {
		c, ok := v.take()
		if !ok {
			select {
			case <-v.ready:
				continue
			case <-v.done:
				return
			}
		}
		if c.job != nil {
			select { // what was queued after it waits
			case <-c.job.done:
			case <-v.done:
				return
			}
			c = Chunk{Data: c.job.data, Replay: true, Screen: c.job.screen}
			if len(c.Data) == 0 && len(c.Screen) == 0 && !v.relay {
				continue
			}
		}
		if c.Notice == "" && !c.Roles {
			signal(v.n.room) // the queue shrank: an Exclusive link may read again
		}
		select {
		case v.out <- c:
		case <-v.done:
			return
		}
	}
}

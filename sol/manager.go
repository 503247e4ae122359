package sol

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/obmd/obmd/sol/history"
)

// Errors of the console hub. Their texts are shown to users as they are.
var (
	// ErrReadOnly: the viewer is not the writer (Write and Break).
	ErrReadOnly = errors.New("console is read-only for this session; take over writing first")
	// ErrShutdown ends every viewer when the Manager closes, and refuses
	// Attach afterwards.
	ErrShutdown = errors.New("obmd is shutting down")
	// ErrDetached is the cause of a viewer that closed itself.
	ErrDetached = errors.New("console detached")
	// ErrSlowViewer ends a viewer whose output queue overflowed when
	// Config.DropSlow is set.
	ErrSlowViewer = errors.New("console output overflowed: this session reads too slowly")
	// ErrCut is the cause Cut uses when it is given none.
	ErrCut = errors.New("console access ended")
	// ErrDisplaced ends the viewer of an Exclusive console (the mock type)
	// when a new viewer attaches: one reader at a time, as obmd had.
	ErrDisplaced = errors.New("another reader opened this console (it allows one at a time)")
	// ErrLinkDown: Break while the node's console link is not established.
	ErrLinkDown = errors.New("console link is not up")
)

// Backoff bounds the delay between attempts to (re)open a console link. The
// delay doubles from Min up to Max; each wait is drawn from [d/2, d].
type Backoff struct {
	Min time.Duration `yaml:"min"`
	Max time.Duration `yaml:"max"`
}

// Config tunes the Manager (the YAML section console). Zero fields take the
// documented defaults.
//
// There is no keepalive here: drivers detect a silent or dead BMC themselves
// and make Console.Read fail, which the Manager treats as a lost link.
type Config struct {
	// Scrollback is the size of each node's scrollback ring (default 16 KiB).
	Scrollback int `yaml:"scrollback"`
	// Linger keeps a link open this long after its last viewer leaves
	// (default 2 s), so a quick reconnect finds the link and its scrollback.
	Linger time.Duration `yaml:"linger"`
	// QueueBytes bounds each viewer's pending output (default 256 KiB).
	// A viewer that falls further behind skips ahead (Chunk.Skipped), or is
	// ended with ErrSlowViewer when DropSlow is set. An Exclusive console's
	// link instead stops reading while its viewer's queue is full, so its
	// viewer never falls behind.
	QueueBytes int `yaml:"viewer_queue"`
	// DropSlow ends a viewer on overflow instead of skipping ahead.
	DropSlow bool `yaml:"drop_slow_viewers"`
	// OpenTimeout bounds each step of opening a link: Resolve, OpenConsole,
	// DeactivateConsole (default 10 s). It also bounds a Break.
	OpenTimeout time.Duration `yaml:"open_timeout"`
	// Backoff paces reopen attempts (default 250 ms .. 10 s).
	Backoff Backoff `yaml:"backoff"`
	// Capture is the daemon's default of a node's capture, for nodes whose
	// registration sets none: "always" (its link is held open with nobody
	// attached, so its history records everything it prints), "attached"
	// (open while someone watches), or "" (always for ipmi and ipmitool
	// nodes, attached for the others). The hub holds the links it is told
	// to (Hold); the wiring applies this setting.
	Capture string `yaml:"capture"`
	// RelayWait, in cluster mode (set by the wiring), is how long an
	// attach replay waits for a link that is being opened to show whether
	// this replica holds the node's link (the replay then comes from the
	// history) or relays it (from the holder's replay, Seeded). Zero: it
	// never waits (a single replica holds every link).
	RelayWait time.Duration `yaml:"-"`
	// ScreenRebuild is how much of a node's recent output rebuilds its
	// screen (screen_rebuild, default 64 KiB, at most 16 MiB) when a link
	// opens where the screen is not known yet: a restart, another
	// replica's link taken over, the first viewer after linger. The screen
	// shows what the last ScreenRebuild bytes of the tenancy's history
	// draw.
	ScreenRebuild int `yaml:"screen_rebuild"`
	// Now is the clock for ViewerInfo.Since (default time.Now).
	Now func() time.Time `yaml:"-"`
}

// WithDefaults returns c with its unset fields at their defaults, or an
// error for a value out of bounds.
func (c Config) WithDefaults() (Config, error) {
	err := c.setDefaults()
	return c, err
}

func (c *Config) setDefaults() error {
	if c.Scrollback < 0 || c.QueueBytes < 0 || c.Linger < 0 || c.OpenTimeout < 0 ||
		c.Backoff.Min < 0 || c.Backoff.Max < 0 || c.RelayWait < 0 || c.ScreenRebuild < 0 {
		return errors.New("negative size or duration")
	}
	if c.ScreenRebuild > maxScreenRebuild {
		return fmt.Errorf("screen_rebuild %d above %d", c.ScreenRebuild, maxScreenRebuild)
	}
	if c.ScreenRebuild == 0 {
		c.ScreenRebuild = 64 << 10
	}
	switch c.Capture {
	case "", CaptureAlways, CaptureAttached:
	default:
		return fmt.Errorf("capture %q: want %q or %q", c.Capture, CaptureAlways, CaptureAttached)
	}
	if c.Scrollback == 0 {
		c.Scrollback = 16 << 10
	}
	if c.Linger == 0 {
		c.Linger = 2 * time.Second
	}
	if c.QueueBytes == 0 {
		c.QueueBytes = 256 << 10
	}
	if c.OpenTimeout == 0 {
		c.OpenTimeout = 10 * time.Second
	}
	if c.Backoff.Min == 0 {
		c.Backoff.Min = 250 * time.Millisecond
	}
	if c.Backoff.Max == 0 {
		c.Backoff.Max = 10 * time.Second
	}
	if c.Backoff.Max < c.Backoff.Min {
		return fmt.Errorf("backoff max %v below min %v", c.Backoff.Max, c.Backoff.Min)
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return nil
}

// maxScreenRebuild bounds Config.ScreenRebuild: the CPU and database
// reads of rebuilding every node's screen at a restart.
const maxScreenRebuild = 16 << 20

// Capture settings (Config.Capture, and a node's own).
const (
	CaptureAlways   = "always"
	CaptureAttached = "attached"
)

// History is the console history the hub records its links' output in and
// takes replays from (the daemon's history.Recorder, with the node's
// access epoch from the access fence).
type History interface {
	// Open starts recording label's output in the node's current tenancy
	// (its access epoch, verified): the hub calls it when a link of label
	// opens on this replica as the node's holder, not as a relay. An error
	// fails the open (no console without verified access); it is retried
	// with the link.
	Open(ctx context.Context, label string) (*history.Recording, error)
	// Cut takes a cut of the history for a replay (history.Recorder.Cut):
	// it never blocks.
	Cut(q history.Query) (*history.Cut, error)
	// Flush stores what was recorded so far (history.Recorder.Flush): the
	// hub calls it when a link it handed off (HandOff) has closed, so that
	// its last output is stored before the next holder's.
	Flush(ctx context.Context) error
}

// Manager is the console hub: at most one SOL link per node, opened when the
// first viewer attaches (or when the node is held for capture, Hold) and
// closed Linger after the last one leaves, its output recorded in the
// node's console history (History), kept in a scrollback ring and fanned
// out to every viewer without ever waiting for one (except the one viewer
// of an Exclusive console, which sets its console's pace). A viewer's
// replay (on attach, and Viewer.Replay) comes from the history of its
// tenancy where the hub has one, else from the ring.
//
// Goroutines: one owner per link (open, reconnect, linger, Close of the
// Console), which runs a reader (Read, scrollback, fan-out) and a writer
// (coalesced input, Break) per established console and waits for both; one
// pump per viewer (queue -> Output channel); one reader per replay (its
// history cut, read at once). The Manager's WaitGroup tracks owners, pumps
// and replay readers; Close waits for them.
//
// Locks: Manager.mu, then node.mu, then Viewer.mu; none is held across BMC
// I/O or a channel send that can block.
type Manager struct {
	cfg  Config
	r    Resolver
	hist History // nil: no history, replays from the ring
	log  logrus.FieldLogger
	wg   sync.WaitGroup
	st   counters
	// nextID numbers viewers (Viewer.id).
	nextID atomic.Uint64
	// noScreens: no screens (the benchmarks' reference). Set before use.
	noScreens bool

	mu     sync.Mutex
	closed bool
	nodes  map[string]*node
	// holds are the labels held for capture (Hold): their nodes keep their
	// links with nobody attached, and come back after a Cut.
	holds map[string]bool
	// tails holds, per label, the done channel of the newest link owner
	// still running (possibly retired): a new link waits for it so that two
	// links never hold the same node's SOL payload.
	tails map[string]chan struct{}
}

// NewManager validates cfg and returns an idle Manager over the resolver r
// and the history hist (nil: none; replays come from the scrollback ring).
// It starts nothing: links open on Attach and Hold.
func NewManager(cfg Config, r Resolver, hist History, log logrus.FieldLogger) (*Manager, error) {
	if r == nil {
		return nil, errors.New("new console manager: nil resolver")
	}
	if log == nil {
		return nil, errors.New("new console manager: nil logger")
	}
	if err := cfg.setDefaults(); err != nil {
		return nil, fmt.Errorf("new console manager: %w", err)
	}
	return &Manager{
		cfg:   cfg,
		r:     r,
		hist:  hist,
		log:   log,
		nodes: map[string]*node{},
		holds: map[string]bool{},
		tails: map[string]chan struct{}{},
	}, nil
}

// AttachOptions says who attaches and how.
type AttachOptions struct {
	// Session is the viewer's session ID in obmd's session registry ("12"),
	// so that `sessions` can tell which session writes; "" for a viewer
	// that is no session of this replica (a relay).
	Session string
	// Name is how other viewers are told of this one (banners, takeover
	// notices): never an address or a credential. Default "#" and the
	// session ID, as `sessions` lists it (Who).
	Name string
	// ReadOnly: never becomes writer by itself (it may still TakeWrite).
	ReadOnly bool
	// Replay delivers the node's replay first, atomically with the
	// subscription: no byte is lost or repeated between replay and live.
	// It is the last Config.Scrollback bytes of the history of tenancy
	// Epoch (where the hub has a history and Epoch is set), else the
	// scrollback ring.
	Replay bool
	// Epoch is the access epoch the viewer's session was admitted at: the
	// tenancy whose history its replays read. 0: replays from the ring.
	Epoch int64
	// Screen: the replay on attach (with Replay) also carries the node's
	// screen at its end (Chunk.Screen), unless it is blank, for a viewer
	// whose terminal can be redrawn (Viewer.Redraw redraws it again).
	Screen bool
	// Relay marks a viewer that carries another obmd replica's console
	// (its viewers reach this node's link through this one). It is no
	// person: it never writes, and Viewers does not list it. The viewers it
	// carries join it (Arbitrate) and write and break through it (WriteAs,
	// BreakAs), arbitrated with this hub's own (roles.go).
	Relay bool
}

// ViewerInfo describes an attached viewer, as AttachOptions named it
// (Session and Name: its Who).
type ViewerInfo struct {
	Session string    `json:"session,omitempty"`
	Name    string    `json:"name"`
	Writer  bool      `json:"writer"`
	Since   time.Time `json:"since"`
	// Remote: a viewer of another hub, relayed through this one (Session
	// and Name are what that hub calls it, never a replica's name).
	// Relay viewers themselves are not listed.
	Remote bool `json:"remote,omitempty"`
}

// Others names the viewers other than self, as a door tells a viewer
// who else is attached: by name, the writer marked "(writing)", and a
// writer no viewer here is (writer: Manager.Writer, wherever in the
// cluster it writes) added as "(writing, on another replica)".
func Others(viewers []ViewerInfo, writer, self Who) []string {
	var out []string
	for _, o := range viewers {
		switch o.Who() {
		case self:
		case writer:
			writer = Who{}
			out = append(out, o.Name+" (writing)")
		default:
			out = append(out, o.Name)
		}
	}
	if writer != (Who{}) && writer != self {
		out = append(out, writer.Name+" (writing, on another replica)")
	}
	return out
}

// Attach subscribes a viewer to label's console, starting the link if this
// is the first viewer. It never waits for the BMC: the link opens in the
// background and the viewer is told (Chunk.Notice) only about failures. ctx
// bounds only the attach itself. The viewer becomes writer if nobody writes
// and o.ReadOnly is false. After Close it returns ErrShutdown (wrapped).
// ctx is checked under the Manager's lock, where Cut retires the node: a
// session whose context is cancelled before its node is cut (as access
// changes do) never subscribes to the node of the tenancy that follows.
func (m *Manager) Attach(ctx context.Context, label string, o AttachOptions) (*Viewer, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("attach to %s: %w", label, err)
	}
	if label == "" {
		return nil, errors.New("attach: empty node label")
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("attach to %s: %w", label, err)
	}
	if m.closed {
		return nil, fmt.Errorf("attach to %s: %w", label, ErrShutdown)
	}
	n, start := m.nodes[label], func() {}
	if n != nil {
		n.mu.Lock()
		displace := n.exclusive
		if displace {
			m.retireLocked(n, ErrDisplaced) // one reader at a time: the new one gets a new console
		}
		n.mu.Unlock()
		if displace {
			n.log.Info("console displaced by a new reader")
			n = nil
		}
	}
	if n == nil {
		n, start = m.newNodeLocked(label)
	}
	v := newViewer(m, n, nameOf(o), m.cfg.Now())
	v.id = m.nextID.Add(1)
	v.session = o.Session
	if v.relay = o.Relay; v.relay {
		v.members = map[uint64]*Viewer{}
	}
	v.epoch = o.Epoch
	v.wantScreen = o.Screen
	m.wg.Add(1)
	go v.pump()
	n.mu.Lock()
	n.addLocked(v, o)
	n.mu.Unlock()
	start() // after the first viewer subscribed: it sees the link's first byte
	return v, nil
}

// Viewers lists who is attached to label, in attach order: this hub's
// viewers, and in place of each relay viewer the viewers of the replica it
// carries (Remote).
func (m *Manager) Viewers(label string) []ViewerInfo {
	m.mu.Lock()
	n := m.nodes[label]
	m.mu.Unlock()
	if n == nil {
		return nil
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	out := make([]ViewerInfo, 0, len(n.viewers))
	for _, v := range n.viewers {
		if !v.relay {
			out = append(out, ViewerInfo{Session: v.session, Name: v.name, Writer: n.writer == v, Since: v.since})
			continue
		}
		for _, mv := range v.memberList {
			out = append(out, ViewerInfo{Session: mv.session, Name: mv.name, Writer: n.writer == mv, Since: mv.since, Remote: true})
		}
	}
	return out
}

// LinkUp reports whether label's link has an established console: this
// hub holds the node's SOL payload (or, in a cluster, a relay to the
// replica that does). Doctor asks it to tell obmd's payload from another's.
func (m *Manager) LinkUp(label string) bool {
	m.mu.Lock()
	n := m.nodes[label]
	m.mu.Unlock()
	return n != nil && n.established()
}

// established reports whether n's console is up and n still serves.
func (n *node) established() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.up && !n.retired
}

// Scrollback returns a copy of label's scrollback: what the node printed
// since its link (or the last Cut) began, up to Config.Scrollback bytes.
// It is empty when the node has no link.
func (m *Manager) Scrollback(label string) []byte {
	m.mu.Lock()
	n := m.nodes[label]
	m.mu.Unlock()
	if n == nil {
		return nil
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.retired {
		return nil
	}
	return n.ring.bytes()
}

// Cut ends every viewer of label with cause (ErrCut if nil), wipes the
// node's scrollback and closes its link at once, without linger. When it
// returns every viewer's Done is closed and the scrollback is empty; the link
// finishes closing in the background, and a new link for label waits until
// it has. Output read from the old link is never shown to a later viewer.
// A node held for capture gets a new link at once (for the next tenancy),
// also one whose link had given up.
func (m *Manager) Cut(label string, cause error) {
	if cause == nil {
		cause = ErrCut
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if n := m.nodes[label]; n != nil {
		n.mu.Lock()
		k := len(n.viewers)
		m.retireLocked(n, cause)
		n.mu.Unlock()
		n.log.WithField("viewers", k).WithError(cause).Info("console cut")
	}
	if m.holds[label] && !m.closed {
		// Held for capture: a new link records the next tenancy, once
		// this one has closed.
		_, start := m.newNodeLocked(label)
		start()
	}
}

// Close ends every viewer with ErrShutdown, closes every link (Console.Close
// deactivates SOL) and waits for all the Manager's goroutines, or until ctx
// is done. Attach fails afterwards. Close may be called more than once.
func (m *Manager) Close(ctx context.Context) error {
	m.mu.Lock()
	if !m.closed {
		m.closed = true
		for _, n := range m.nodes {
			n.mu.Lock()
			m.retireLocked(n, ErrShutdown)
			n.mu.Unlock()
		}
	}
	m.mu.Unlock()
	done := make(chan struct{})
	go func() { // ends when the last owner and pump have; closes done
		m.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("close console manager: %w", context.Cause(ctx))
	}
}

// newNodeLocked creates label's node; start starts its link owner. m.mu
// held for both.
func (m *Manager) newNodeLocked(label string) (n *node, start func()) {
	ctx, cancel := context.WithCancelCause(context.Background())
	n = &node{
		m:        m,
		label:    label,
		log:      m.log.WithField("node", label),
		cancel:   cancel,
		prev:     m.tails[label],
		held:     m.holds[label],
		linkDone: make(chan struct{}),
		wake:     make(chan struct{}, 1),
		inReady:  make(chan struct{}, 1),
		room:     make(chan struct{}, 1),
		breaks:   make(chan breakReq),
		ring:     ring{size: m.cfg.Scrollback},
		scr:      nodeScreen{settledC: make(chan struct{})},
	}
	m.nodes[label] = n
	m.tails[label] = n.linkDone
	m.st.links.Add(1)
	return n, func() {
		m.wg.Add(1)
		go n.run(ctx)
	}
}

// retireLocked takes n out of service: it leaves the map, its viewers end
// with cause, its scrollback and pending input are dropped and its link
// owner is told to close. m.mu and n.mu held.
func (m *Manager) retireLocked(n *node, cause error) {
	if n.retired {
		return
	}
	n.retired = true
	if m.nodes[n.label] == n {
		delete(m.nodes, n.label)
	}
	for _, v := range n.viewers {
		if v.relay {
			v.endMembersLocked(cause)
		}
		v.end(cause)
	}
	m.st.viewers.Add(-int64(len(n.viewers)))
	n.dropInputLocked()
	n.viewers = nil
	n.writer = nil
	n.ring.reset()
	n.screenRetireLocked()
	n.endReplaysLocked()
	n.cancel(cause)
}

// Stats is a snapshot of the Manager's counters (for metrics).
type Stats struct {
	Links      int64  // nodes with a link owner (opening, open or reconnecting)
	LinksUp    int64  // links with an established console
	Viewers    int64  // attached viewers
	Opens      uint64 // consoles opened
	OpenErrors uint64 // failed open attempts
	Reconnects uint64 // established links lost while in use
	BytesOut   uint64 // bytes read from BMC consoles
	BytesIn    uint64 // bytes written to BMC consoles
	Overflows  uint64 // viewer queue overflows
	Skipped    uint64 // bytes slow viewers skipped
	// CapturedUp and CapturedDown count the links held for capture
	// (Hold) whose console is established, and those opening or
	// reconnecting (a BMC that does not answer).
	CapturedUp, CapturedDown int64
	// HandOffs counts the held links given up for another replica to
	// capture (HandOff).
	HandOffs uint64
	// ScreenRebuilds counts the screens that fell behind their node's
	// output and were rebuilt from its history instead.
	ScreenRebuilds uint64
}

type counters struct {
	links, linksUp, viewers               atomic.Int64
	opens, openErrors, reconnects         atomic.Uint64
	bytesOut, bytesIn, overflows, skipped atomic.Uint64
	handoffs, screenRebuilds              atomic.Uint64
}

// Stats returns the current counters.
func (m *Manager) Stats() Stats {
	s := &m.st
	up, down := m.captured()
	return Stats{
		CapturedUp:     up,
		CapturedDown:   down,
		Links:          s.links.Load(),
		LinksUp:        s.linksUp.Load(),
		Viewers:        s.viewers.Load(),
		Opens:          s.opens.Load(),
		OpenErrors:     s.openErrors.Load(),
		Reconnects:     s.reconnects.Load(),
		BytesOut:       s.bytesOut.Load(),
		BytesIn:        s.bytesIn.Load(),
		Overflows:      s.overflows.Load(),
		Skipped:        s.skipped.Load(),
		HandOffs:       s.handoffs.Load(),
		ScreenRebuilds: s.screenRebuilds.Load(),
	}
}

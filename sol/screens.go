package sol

import (
	"context"
	"errors"
	"fmt"

	"github.com/obmd/obmd/sol/history"
	"github.com/obmd/obmd/sol/screen"
)

// ErrNoScreen: this hub has no console link of the node, so no screen of
// it (Manager.Screen; a viewer attached here opens one).
var ErrNoScreen = errors.New("the node's console is not open here")

// maxParked bounds the snapshot requests a screen keeps until it settles.
const maxParked = 16

// spareBytes bounds the buffer a screen keeps for the output to come: a
// console read's worth (readBuf), so a node's screen holds no more when
// its output comes in bursts.
const spareBytes = readBuf

// ScreenSizer may be implemented by a Resolver: the size of a node's screen
// (its screen_size setting; the zero Size is the default 80x25). The hub
// asks it each time it opens the node's link.
type ScreenSizer interface {
	ScreenSize(ctx context.Context, label string) (screen.Size, error)
}

// ScreenSeeded may be implemented by a Seeded console (a relay): the
// holder's screen as the relay began, as a redraw (screen.Terminal.ANSI)
// taken where the seed ends (the holder's Chunk.Screen); empty if the
// holder sent none, and then the relay's screen starts from the seed's
// bytes.
type ScreenSeeded interface {
	ScreenSeed() []byte
}

// nodeScreen is a node's screen: a terminal emulator fed the output its
// link publishes. Publishing only queues the output (screenFeedLocked); an
// owner goroutine (runScreen), started when there is something to do and
// gone when there is not, feeds the emulator outside the node's lock, so
// at most one goroutine at a time uses it. Resets (a link up), rebuilds
// and snapshot requests go through the same queue, so each takes effect at
// its place in the output.
type nodeScreen struct {
	// Guarded by node.mu.
	items    []screenItem
	queued   int  // output bytes in items
	running  bool // an owner runs
	settled  bool // a link came up and reset the screen: it shows the node
	settledC chan struct{}
	size     screen.Size // of the last reset
	// spare is an output buffer the owner is done with, for the next
	// item (at most spareBytes of capacity).
	spare []byte
	// parked are snapshot requests made before the screen settled (a
	// replay asked as the link is being opened), at most maxParked: they
	// are answered right after the first reset.
	parked []func(*screen.Terminal, bool)
	// term is the emulator: used only by the owner that runs (handed from
	// one to the next under node.mu). nil until the first reset.
	term *screen.Terminal
}

// screenItem is one entry of a screen's queue: output, a reset, or a
// snapshot request.
type screenItem struct {
	data []byte
	// reset starts a new screen of size: fed feed (a relay's seed), or
	// rebuilt from the node's history (rebuild) as it is when the owner
	// comes to it.
	reset   bool
	rebuild bool
	size    screen.Size
	feed    []byte
	// A rebuild reads cut (or feed, the ring) if sourced when it was
	// queued (a link up), else what they are when the owner comes to it.
	sourced bool
	cut     *history.Cut
	// look is given the screen at this point, or ok false if the node
	// retires first. The owner calls it: it must not block, nor keep t
	// (what it needs of the screen, it copies: Snapshot, Text, ANSI).
	look func(t *screen.Terminal, ok bool)
}

// minScreenQueue is the least output a screen queues before it is
// rebuilt instead, whatever Config.QueueBytes: a rebuild reads the
// database.
const minScreenQueue = 64 << 10

// screenFeedLocked queues output p (published by the link); it reports
// whether the screen is behind (more than half its queue). The queue is
// bounded as a viewer's is (Config.QueueBytes, at least minScreenQueue):
// past it, the queued output is dropped and the screen rebuilt instead
// (from the history, where this replica records the node), so a screen
// that falls behind never slows the link. n.mu is held.
func (n *node) screenFeedLocked(p []byte) (behind bool) {
	s := &n.scr
	if !s.settled {
		return false // nothing to draw on yet: the reset to come reads the history
	}
	limit := max(n.m.cfg.QueueBytes, minScreenQueue)
	if s.queued+len(p) > limit {
		// Fallen behind: the output queued goes, and one rebuild (which
		// reads it all in the history when the owner comes to it) replaces
		// it.
		n.screenDropOutputLocked()
		for _, it := range s.items {
			if it.rebuild && !it.sourced {
				return true
			}
		}
		n.m.st.screenRebuilds.Add(1)
		n.screenQueueLocked(screenItem{reset: true, rebuild: true, size: s.size})
		return true
	}
	s.queued += len(p)
	if k := len(s.items); k > 0 && s.items[k-1].data != nil && len(s.items[k-1].data)+len(p) <= cap(s.items[k-1].data) {
		s.items[k-1].data = append(s.items[k-1].data, p...) // room left: no copy of what is queued
	} else {
		buf := s.spare
		s.spare = nil
		if cap(buf) < len(p) {
			buf = make([]byte, 0, max(len(p), spareBytes))
		}
		n.screenQueueLocked(screenItem{data: append(buf, p...)})
	}
	return s.queued > limit/2
}

// screenResetLocked queues a new screen of size: fed feed, or rebuilt from
// the node's history as it is now (a link up: the output before it). The
// screen is settled from then on. n.mu is held.
func (n *node) screenResetLocked(size screen.Size, feed []byte, rebuild bool) {
	s := &n.scr
	n.screenDropOutputLocked()
	s.size = size
	it := screenItem{reset: true, rebuild: rebuild, size: size, feed: feed}
	if rebuild {
		it.cut, it.feed = n.rebuildSourceLocked()
		it.sourced = true
	}
	n.screenQueueLocked(it)
	if !s.settled {
		s.settled = true
		close(s.settledC)
		for _, f := range s.parked {
			n.screenQueueLocked(screenItem{look: f})
		}
		s.parked = nil
	}
}

// screenDropOutputLocked drops the output queued (a reset or rebuild
// comes after it). n.mu is held.
func (n *node) screenDropOutputLocked() {
	s := &n.scr
	kept := s.items[:0]
	for _, it := range s.items {
		if it.data == nil {
			kept = append(kept, it)
		}
	}
	clear(s.items[len(kept):])
	s.items, s.queued = kept, 0
}

// screenQueueLocked queues it and starts an owner if none runs. n.mu is
// held.
func (n *node) screenQueueLocked(it screenItem) {
	s := &n.scr
	s.items = append(s.items, it)
	if !s.running && !n.retired {
		s.running = true
		n.m.wg.Add(1)
		go n.runScreen() // owned by m.wg; returns when the queue is empty
	}
}

// screenRetireLocked drops the screen of a retiring node: its queue goes,
// and its requests are answered with nothing; those waiting for it to
// settle (snapshot) are woken, to find it retired. n.mu is held.
func (n *node) screenRetireLocked() {
	s := &n.scr
	if !s.settled {
		s.settled = true
		close(s.settledC)
	}
	for _, it := range s.items {
		switch {
		case it.look != nil:
			it.look(nil, false)
		case it.cut != nil:
			it.cut.Close()
		}
	}
	for _, f := range s.parked {
		f(nil, false)
	}
	s.items, s.queued, s.parked, s.spare = nil, 0, nil, nil
}

// runScreen is the screen's owner: it feeds the queue's items to the
// emulator, in order, until the queue is empty.
func (n *node) runScreen() {
	defer n.m.wg.Done()
	s := &n.scr
	for {
		n.mu.Lock()
		if len(s.items) == 0 || n.retired {
			s.running = false
			s.items = nil
			n.mu.Unlock()
			return
		}
		it := s.items[0]
		s.items[0] = screenItem{}
		s.items = s.items[1:]
		s.queued -= len(it.data)
		if it.rebuild && !it.sourced {
			// Everything published so far is in the history (or the
			// ring) now: what is queued would be fed twice.
			n.screenDropOutputLocked()
			it.cut, it.feed = n.rebuildSourceLocked()
		}
		term := s.term
		n.mu.Unlock()
		switch {
		case it.look != nil:
			if term == nil { // never: a reset is queued before any look
				term, _ = screen.New(screen.Size{})
			}
			it.look(term, true)
		case it.reset:
			n.resetScreen(it)
		default:
			term.Write(it.data)
			if cap(it.data) <= spareBytes {
				n.mu.Lock()
				s.spare = it.data[:0]
				n.mu.Unlock()
			}
		}
	}
}

// rebuildSourceLocked is where a rebuild reads the node's recent output: a
// cut of its history where this replica records the node, else its ring.
// n.mu is held.
func (n *node) rebuildSourceLocked() (*history.Cut, []byte) {
	if n.rec != nil && n.m.hist != nil {
		q := history.Query{Node: n.label, Epoch: n.rec.Epoch(), MaxBytes: n.m.cfg.ScreenRebuild + history.MaxChunkBytes}
		c, err := n.m.hist.Cut(q)
		if err == nil {
			return c, nil
		}
		n.log.WithError(err).Warn("console_screen_cut_failed")
	}
	return nil, n.ring.bytes()
}

// resetScreen makes the owner's new screen for it (owner only).
func (n *node) resetScreen(it screenItem) {
	term, err := screen.New(it.size)
	if err != nil { // a size the setting's check let through: the default
		n.log.WithError(err).Warn("console_screen_size_refused")
		term, _ = screen.New(screen.Size{})
	}
	feed := it.feed
	if it.cut != nil {
		ctx, cancel := context.WithTimeout(context.Background(), n.m.cfg.OpenTimeout)
		chunks, err := it.cut.Read(ctx) // releases the cut
		cancel()
		if err != nil {
			n.log.WithError(err).Info("console_screen_rebuild_failed") // ErrEnded: the tenancy is over
		}
		feed = lastOutput(chunks, n.m.cfg.ScreenRebuild)
	}
	term.Write(feed)
	n.mu.Lock()
	n.scr.term = term
	n.mu.Unlock()
}

// screenRequestLocked queues a look at the screen at the current point of
// the output; before the screen has settled, it waits for the first reset
// (at most maxParked wait; more are answered with nothing at once). n.mu
// is held.
func (n *node) screenRequestLocked(f func(*screen.Terminal, bool)) {
	s := &n.scr
	switch {
	case s.settled:
		n.screenQueueLocked(screenItem{look: f})
	case len(s.parked) < maxParked:
		s.parked = append(s.parked, f)
	default:
		f(nil, false)
	}
}

// lookAt returns f of n's screen once it is settled (a link came up), at
// the point of the output where it is asked. f runs in the screen's owner
// and copies what it needs (a Snapshot, the Text, a redraw): no copy of
// the whole screen where a part of it is enough. ctx is checked under the
// node's lock, where a cut retires the node: a session whose context is
// cancelled before its node is cut (as access changes do) never sees the
// screen of the tenancy that follows.
func lookAt[T any](ctx context.Context, n *node, f func(*screen.Terminal) T) (T, error) {
	type answer struct {
		v  T
		ok bool
	}
	var zero T
	for {
		n.mu.Lock()
		switch {
		case ctx.Err() != nil:
			n.mu.Unlock()
			return zero, context.Cause(ctx)
		case n.retired:
			n.mu.Unlock()
			return zero, ErrNoScreen
		case !n.scr.settled:
			c := n.scr.settledC
			n.mu.Unlock()
			select {
			case <-c:
				continue
			case <-ctx.Done():
				return zero, fmt.Errorf("wait for the console: %w", context.Cause(ctx))
			}
		}
		reply := make(chan answer, 1)
		n.screenRequestLocked(func(t *screen.Terminal, ok bool) {
			a := answer{ok: ok}
			if ok {
				a.v = f(t)
			}
			reply <- a
		})
		n.mu.Unlock()
		select {
		case a := <-reply:
			if !a.ok {
				return zero, ErrNoScreen
			}
			return a.v, nil
		case <-ctx.Done():
			return zero, context.Cause(ctx)
		}
	}
}

// Screen returns label's screen: what the node's console shows, as this
// hub's terminal emulator of it holds it, at this point of its output. A
// node's screen lives with its link: it starts from the node's history
// where this replica holds the link (the last Config.ScreenRebuild bytes of
// the tenancy: a restart or a takeover), from the holder's screen where it
// relays another replica's, and is blank again after a Cut. Screen waits
// (within ctx) for a link being opened to come up. Without a link of label
// here it returns ErrNoScreen (wrapped): attach a viewer first.
func (m *Manager) Screen(ctx context.Context, label string) (screen.Snapshot, error) {
	m.mu.Lock()
	n := m.nodes[label]
	m.mu.Unlock()
	if n == nil {
		return screen.Snapshot{}, fmt.Errorf("screen of %s: %w", label, ErrNoScreen)
	}
	s, err := lookAt(ctx, n, (*screen.Terminal).Snapshot)
	if err != nil {
		return s, fmt.Errorf("screen of %s: %w", label, err)
	}
	return s, nil
}

// Screen returns the screen of v's node (Manager.Screen), or v's error
// once it has ended.
func (v *Viewer) Screen(ctx context.Context) (screen.Snapshot, error) {
	return viewerLook(ctx, v, (*screen.Terminal).Snapshot)
}

// ScreenText is the text of v's node's screen (Viewer.Screen's Text),
// without a copy of the whole screen: what a wait on the screen looks at.
func (v *Viewer) ScreenText(ctx context.Context) (string, error) {
	return viewerLook(ctx, v, (*screen.Terminal).Text)
}

// viewerLook is lookAt of v's node, or v's error once it has ended.
func viewerLook[T any](ctx context.Context, v *Viewer, f func(*screen.Terminal) T) (T, error) {
	if err := v.Err(); err != nil {
		var zero T
		return zero, err
	}
	s, err := lookAt(ctx, v.n, f)
	if errors.Is(err, ErrNoScreen) && v.Err() != nil {
		return s, v.Err()
	}
	return s, err
}

// screenSize is label's screen size, as the resolver says (the default if
// it cannot say). Owner only.
func (n *node) screenSize(ctx context.Context) screen.Size {
	sz, ok := n.m.r.(ScreenSizer)
	if !ok {
		return screen.Size{}.OrDefault()
	}
	s, err := sz.ScreenSize(ctx, n.label)
	if err == nil {
		err = s.OrDefault().Check()
	}
	if err != nil {
		n.log.WithError(err).Warn("console_screen_size_failed")
		return screen.Size{}.OrDefault()
	}
	return s.OrDefault()
}

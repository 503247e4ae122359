package sol

import (
	"context"
	"errors"
	"time"
)

// ErrWriterBusy: another viewer writes the console (Viewer.AsWriter
// without force).
var ErrWriterBusy = errors.New("another session is writing to this console")

// AsWriter runs f (a Write or a Break of v) with v as the node's writer,
// then hands the role back: to the viewer of this hub that wrote before,
// if it is still attached (told "you are writing again"), else to nobody.
// While another viewer writes, anywhere in the cluster, it returns
// ErrWriterBusy without running f, unless force: then that viewer is told
// (here: that v is sending input; on another replica: that v took over)
// and is read-only while f runs; a writer on another replica does not get
// the role back. The role moves through the node's arbitration (roles.go)
// like TakeWrite's, and is held until the input f queued has gone to the
// link (at most Config.OpenTimeout), so that it is sent as v's. It is how a
// one-off `send` writes without becoming a console's writer.
func (v *Viewer) AsWriter(force bool, f func() error) error {
	n := v.n
	n.mu.Lock()
	if err := v.Err(); err != nil {
		n.mu.Unlock()
		return err
	}
	prev := n.writer
	if prev == v {
		prev = nil
	}
	if (prev != nil || n.remoteWriter != "") && !force {
		n.mu.Unlock()
		return ErrWriterBusy
	}
	n.setWriterLocked(v)
	n.remoteWriter = ""
	n.tellLocked(RoleMsg{Op: RoleTake, Viewer: v.id})
	if prev != nil && prev.carrier == nil {
		prev.notice(v.name + " is sending input; you are read-only meanwhile")
	}
	n.mu.Unlock()
	err := f()
	if err == nil {
		v.awaitInput(n.m.cfg.OpenTimeout)
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.writer != v || n.retired {
		return err // someone took over meanwhile
	}
	if prev != nil && prev.Err() == nil {
		n.setWriterLocked(prev)
		n.tellLocked(RoleMsg{Op: RoleTake, Viewer: prev.id})
		if prev.carrier == nil {
			prev.notice("you are writing again")
		}
		return err
	}
	n.setWriterLocked(nil)
	n.tellLocked(RoleMsg{Op: RoleRelease, Viewer: v.id})
	return err
}

// upPoll is how often WaitUp looks at the link.
const upPoll = 10 * time.Millisecond

// WaitUp waits until the node's console is established (the link is up),
// v ends (its error) or ctx ends: what a command that acts on the node and
// then reads its answer (power-cycle --wait-for) waits for first, so that
// nothing the node prints is missed while the link opens.
func (v *Viewer) WaitUp(ctx context.Context) error {
	t := time.NewTicker(upPoll)
	defer t.Stop()
	for {
		v.n.mu.Lock()
		up := v.n.up
		v.n.mu.Unlock()
		if up {
			return nil
		}
		select {
		case <-t.C:
		case <-v.done:
			return v.Err()
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
}

// awaitInput waits until the node's pending input has gone to the link,
// v ends, or d passes.
func (v *Viewer) awaitInput(d time.Duration) {
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	t := time.NewTicker(upPoll)
	defer t.Stop()
	for v.n.pendingInput() > 0 {
		select {
		case <-t.C:
		case <-v.done:
			return
		case <-deadline.C:
			return
		}
	}
}

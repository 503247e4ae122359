package sol

import (
	"context"
	"errors"
	"time"
)

// ErrWriterBusy: another viewer writes the console (Viewer.AsWriter
// without force).
var ErrWriterBusy = errors.New("another session is writing to this console")

// ErrInputLost: input a viewer wrote for AsWriter did not all reach the
// node's console link: the link was down or closing for longer than
// Config.OpenTimeout, the node was cut, another viewer took over before
// it went, or (on a relaying hub) the holder did not confirm it (also when
// the link changed meanwhile). Some of it may have reached the node.
var ErrInputLost = errors.New("the console link did not take the input, or obmd could not confirm it did (some or all of it may not have been sent)")

// AsWriter runs f (a Write or a Break of v) with v as the node's writer,
// then hands the role back to the viewer that wrote before (its lender),
// wherever in the cluster it is, if it is still attached (told "you are
// writing again"), else to nobody. While another viewer writes, anywhere
// in the cluster, it returns ErrWriterBusy without running f, unless
// force: then that viewer is told that v is sending input and is
// read-only while f runs. The role moves through the node's arbitration
// (roles.go: RoleBorrow, RoleReturn), and is held until the input f
// queued has gone to the link (at most Config.OpenTimeout; on a relaying
// hub, until the holder confirms it went to its link), so that it is sent
// as v's. Input that did not is ErrInputLost: AsWriter never reports
// success for input it dropped. It is how a one-off `send` writes without
// becoming a console's writer.
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
	if (prev != nil || n.remoteWriter != Who{}) && !force {
		n.mu.Unlock()
		return ErrWriterBusy
	}
	remote, arb := n.remoteWriter, n.arb
	v.dropped = false
	n.borrowLocked(v)
	n.tellLocked(RoleMsg{Op: RoleBorrow, Viewer: v.id})
	n.mu.Unlock()
	err := f()
	if err == nil {
		v.awaitInput(n.m.cfg.OpenTimeout)
	}
	confirmed, lost := v.giveBack(remote, arb)
	if err != nil {
		return err
	}
	if lost || confirmed != nil && !v.awaitReturn(confirmed) {
		return ErrInputLost
	}
	return nil
}

// giveBack ends v's borrowed write (AsWriter): the role goes back to its
// lender, and the holder is told (RoleReturn) if this hub relays. lost: v's
// input did not all reach the link here, or the link changed since the
// borrow (arb: its Arbiter then); confirmed gets the holder's answer (nil:
// no holder to ask).
func (v *Viewer) giveBack(remote Who, arb Arbiter) (confirmed chan error, lost bool) {
	n := v.n
	n.mu.Lock()
	defer n.mu.Unlock()
	lost = v.dropped || n.writer == v && n.unsentLocked() > 0 || n.arb != arb
	if n.writer != v || n.retired {
		v.lender = nil
		return nil, lost
	}
	if n.giveBackLocked(v) == nil && n.arb != nil {
		n.remoteWriter = remote // the holder gives it back to that writer; its answer says
	}
	if n.arb != nil {
		confirmed = make(chan error, 1)
	}
	n.tellReplyLocked(RoleMsg{Op: RoleReturn, Viewer: v.id}, confirmed)
	return confirmed, lost
}

// awaitReturn waits for the holder's answer to v's RoleReturn: whether
// v's input all went to its link. The holder waits for its link up to its
// own Config.OpenTimeout; this waits twice this hub's.
func (v *Viewer) awaitReturn(confirmed chan error) bool {
	t := time.NewTimer(2 * v.m.cfg.OpenTimeout)
	defer t.Stop()
	select {
	case err := <-confirmed:
		return err == nil
	case <-t.C:
		return false
	}
}

// borrowLocked makes v the writer for one write (AsWriter, RoleBorrow),
// remembering its lender: the writer before it, or that one's lender if
// it was borrowing too. The lender is told. n.mu held.
func (n *node) borrowLocked(v *Viewer) {
	prev := n.writer
	if prev == v {
		return // it writes already, and keeps its lender
	}
	lender, told := prev, false
	if prev != nil && prev.lender != nil {
		lender, told = prev.lender, true
		prev.lender = nil
	}
	n.setWriterLocked(v)
	n.remoteWriter = Who{}
	v.lender = lender
	if lender != nil && !told {
		n.lendNoticeLocked(lender, v.name+" is sending input; you are read-only meanwhile")
	}
}

// giveBackLocked ends v's borrowed write: if v still writes, the role
// goes to its lender if that one is still attached (it is told), else to
// nobody. It returns the new writer. n.mu held.
func (n *node) giveBackLocked(v *Viewer) *Viewer {
	lender := v.lender
	v.lender = nil
	if n.writer != v {
		return nil
	}
	if lender == nil || lender.Err() != nil {
		n.setWriterLocked(nil)
		return nil
	}
	n.setWriterLocked(lender)
	n.lendNoticeLocked(lender, "you are writing again")
	return lender
}

// releaseLocked makes v read-only (ReadOnly, RoleRelease): a lender that
// leaves the role does not get it back. n.mu held.
func (n *node) releaseLocked(v *Viewer) {
	if n.writer == v {
		n.setWriterLocked(nil)
	}
	n.forgetLenderLocked(v)
}

// leaveLocked takes v, which is leaving, out of the arbitration: the role
// it borrowed goes back to its lender, the role it lent is not given back.
// n.mu held.
func (n *node) leaveLocked(v *Viewer) {
	if n.writer == v {
		n.giveBackLocked(v)
	}
	n.forgetLenderLocked(v)
}

// forgetLenderLocked: the borrowed writes lent by v do not give it the
// role back. n.mu held.
func (n *node) forgetLenderLocked(v *Viewer) {
	for _, w := range n.viewers {
		if w.lender == v {
			w.lender = nil
		}
		for _, mv := range w.memberList {
			if mv.lender == v {
				mv.lender = nil
			}
		}
	}
}

// lendNoticeLocked tells lender v that a borrowed write took its role, or
// gave it back. The holder tells every lender: its own viewers, and
// through their relay the members (Chunk.For); a relaying hub leaves it
// to the holder, which decides. n.mu held.
func (n *node) lendNoticeLocked(v *Viewer, msg string) {
	switch {
	case v.carrier != nil:
		v.carrier.noticeFor(v.remote, msg)
	case n.arb == nil:
		v.notice(msg)
	}
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

// awaitInput waits until the node's pending input has gone to the link
// (written, not only taken: unsentLocked), v ends, or d passes.
func (v *Viewer) awaitInput(d time.Duration) {
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	t := time.NewTicker(upPoll)
	defer t.Stop()
	for v.n.unsent() > 0 {
		select {
		case <-t.C:
		case <-v.done:
			return
		case <-deadline.C:
			return
		}
	}
}

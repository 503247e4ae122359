package sol

import (
	"context"
	"errors"
	"fmt"
	"unicode/utf8"
)

// One writer per node in a cluster of hubs. A node's console link is held
// by one hub (the replica holding its SOL lease); another replica's hub
// reaches it through a relay: a Console on its side that is an Arbiter, a
// relay viewer (AttachOptions.Relay) on the holder's. The holder arbitrates
// the write role for every viewer in the cluster, its own and those each
// relay carries (members), with the rules of a single hub: the first viewer
// that may write writes, TakeWrite takes the role from whoever has it (and
// tells them), ReadOnly gives it up, and only the writer's input and breaks
// reach the node.
//
// The relaying hub tells the holder of every viewer it has and of what they
// do (RoleMsg, through Arbiter.Tell, in order with their input), and sends
// each input and break as its viewer's own (WriteAs, BreakAs): the holder
// checks each against its writer, so input from a viewer that is not the
// writer never reaches the node, however the role moved meanwhile. The
// holder answers every message with the node's Roles (who writes, and how
// many messages it has applied), and sends them again whenever the writer
// changes (Chunk.Roles on the relay viewer). The relaying hub acts on a
// role change at once for its own viewers (a takeover or a read-only
// escape is not delayed by a round trip) and then follows the holder's
// answers, ignoring those that predate a message it has sent.
//
// When the link changes (the holder died and another replica took over),
// the relaying hub tells the new holder of every viewer again, its writer
// claiming the role back (RoleMsg.Want): the surviving writer keeps it,
// unless the new holder has one already. A hub that becomes the holder
// keeps its own writer, and grants the role to a relayed viewer's claim
// only if it has none.
//
// A borrowed write (Viewer.AsWriter, `send`) is RoleBorrow then
// RoleReturn: the holder remembers whom the role was borrowed from (the
// lender) and gives it back at the return, telling the lender both times
// (a relayed lender through its relay: Chunk.For, Arbiter's notice
// function; Roles.Lender keeps its hub from also calling it a takeover).
// It answers the return (Tell's error) with whether the borrower's input
// all went to its link, having waited for it to: a new writer's role
// drops pending input.

// RoleOp is what a RoleMsg says a viewer did.
type RoleOp uint8

// Role operations.
const (
	// RoleJoin: the viewer attached (or the link changed): it takes part
	// in the arbitration from now on.
	RoleJoin RoleOp = iota + 1
	// RoleLeave: the viewer detached.
	RoleLeave
	// RoleTake: the viewer takes over writing.
	RoleTake
	// RoleRelease: the viewer becomes read-only.
	RoleRelease
	// RoleBorrow: the viewer takes the role for one write (a `send`):
	// as RoleTake, and the holder remembers whom it took the role from
	// (the lender, told that the viewer is sending input).
	RoleBorrow
	// RoleReturn: the borrowed write is done: if the viewer still
	// writes, the role goes back to its lender if that one is still
	// attached (told that it writes again), else to nobody.
	RoleReturn
)

// maxMembers bounds the viewers one relay may join on the holder: far more
// than a hub's session limits let a replica have on one node.
const maxMembers = 1024

// maxNameLen bounds a member's name and session ID (Who), as the holder
// keeps them.
const maxNameLen = 64

// RoleMsg is one thing a relaying hub tells the holder about one of its
// viewers.
type RoleMsg struct {
	Op RoleOp
	// Viewer is the viewer's ID on the relaying hub (never 0).
	Viewer uint64
	// Who (RoleJoin) is how it is known beyond its hub: its session and
	// the name other viewers are told of it.
	Who Who
	// Want (RoleJoin): it becomes the writer if nobody writes.
	Want bool
}

// Roles is who writes a node's console, as its holder tells a relay.
type Roles struct {
	// Writer is the writer's Viewer ID on the relaying hub if the writer is
	// one of the relay's viewers; 0 otherwise.
	Writer uint64
	// Who is the writer, wherever it is; zero when nobody writes.
	Who Who
	// Seq is how many of the relay's RoleMsgs the holder had applied.
	Seq uint64
	// Lender is the relay's viewer the writer borrowed the role from
	// (RoleBorrow, or AsWriter on the holder), which gets it back when
	// the borrowed write is done; 0 if none of the relay's. The holder
	// tells it itself (the notice function given to Arbitrate), so its
	// hub does not tell it of a takeover.
	Lender uint64
}

// Arbiter is a Console whose write role is decided at its other end: a
// relay through the hub that holds the node's link. While it is the node's
// established console the hub tells it every RoleMsg (in order with input
// and breaks: all go through the link's writer), sends input with WriteAs
// and breaks with BreakAs in the name of the viewer that gave them, and
// learns who writes from the function roles given to Arbitrate, which the
// console calls (from Read, or from Tell) with each Roles it receives; it
// calls notice with what the holder tells one of the hub's viewers (that
// a borrowed write took its role, or gave it back).
type Arbiter interface {
	Console
	// Arbitrate is called once, before the first Read.
	Arbitrate(roles func(Roles), notice func(viewer uint64, msg string))
	Tell(m RoleMsg) error
	WriteAs(viewer uint64, p []byte) (int, error)
	BreakAs(ctx context.Context, viewer uint64) error
}

// errNotRelay: Arbitrate, WriteAs or BreakAs on a viewer that is no relay
// viewer.
var errNotRelay = errors.New("not a relay viewer")

// ---- the holder's side: a relay viewer and its members ----

// Arbitrate applies msg from the hub whose viewers relay viewer v carries:
// a RoleJoin makes a member (a viewer of the node here that receives no
// output, v carrying it, and writes only as the writer), the others act
// for the member they name as Close, TakeWrite and ReadOnly would. Every
// message counts in Roles.Seq, refused or not; one for an unknown member
// does nothing. Members end with v.
func (v *Viewer) Arbitrate(msg RoleMsg) error {
	n := v.n
	if msg.Op == RoleReturn && v.relay {
		// The borrowed write's input goes to the link first: a new
		// writer would drop it.
		v.awaitInput(v.m.cfg.OpenTimeout)
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if !v.relay {
		return errNotRelay
	}
	v.seq++
	if err := v.Err(); err != nil {
		return err
	}
	mv := v.members[msg.Viewer]
	switch msg.Op {
	case RoleJoin:
		switch {
		case msg.Viewer == 0 || mv != nil:
			return fmt.Errorf("join viewer %d: no ID, or joined already", msg.Viewer)
		case len(v.memberList) >= maxMembers:
			return fmt.Errorf("join viewer %d: the relay has %d viewers already", msg.Viewer, maxMembers)
		}
		who := msg.Who.clip()
		mv = &Viewer{m: v.m, n: n, name: who.Name, session: who.Session, since: v.m.cfg.Now(), carrier: v,
			remote: msg.Viewer, done: make(chan struct{})}
		v.members[msg.Viewer] = mv
		v.memberList = append(v.memberList, mv)
		if msg.Want && n.writer == nil {
			n.setWriterLocked(mv)
		}
	case RoleLeave:
		if mv != nil {
			v.dropMemberLocked(mv, ErrDetached)
		}
	case RoleTake:
		if mv != nil {
			n.takeWriteLocked(mv)
		}
	case RoleRelease:
		if mv != nil {
			n.releaseLocked(mv)
		}
	case RoleBorrow:
		if mv != nil {
			mv.dropped = false
			n.borrowLocked(mv)
		}
	case RoleReturn:
		if mv == nil {
			return ErrInputLost
		}
		lost := mv.dropped || n.writer == mv && n.unsentLocked() > 0
		mv.dropped = false
		n.giveBackLocked(mv)
		if lost {
			return ErrInputLost
		}
	default:
		return fmt.Errorf("unknown role operation %d", msg.Op)
	}
	return nil
}

// WriteAs writes p as member viewer (relay viewer v's), with Write's
// rules: ErrReadOnly unless it is the writer.
func (v *Viewer) WriteAs(viewer uint64, p []byte) (int, error) {
	mv, err := v.member(viewer)
	if err != nil {
		return 0, err
	}
	k, err := mv.Write(p)
	if errors.Is(err, ErrReadOnly) {
		v.n.mu.Lock()
		mv.dropped = true // a borrowed write's RoleReturn reports it
		v.n.mu.Unlock()
	}
	return k, err
}

// BreakAs sends a break as member viewer, with Break's rules.
func (v *Viewer) BreakAs(ctx context.Context, viewer uint64) error {
	mv, err := v.member(viewer)
	if err != nil {
		return err
	}
	return mv.Break(ctx)
}

func (v *Viewer) member(viewer uint64) (*Viewer, error) {
	v.n.mu.Lock()
	defer v.n.mu.Unlock()
	if !v.relay {
		return nil, errNotRelay
	}
	if err := v.Err(); err != nil {
		return nil, err
	}
	mv := v.members[viewer]
	if mv == nil {
		return nil, ErrReadOnly // never joined, or left: it writes nothing
	}
	return mv, nil
}

// Roles returns who writes the node's console as relay viewer v's hub
// must be told.
func (v *Viewer) Roles() Roles {
	n := v.n
	n.mu.Lock()
	defer n.mu.Unlock()
	r := Roles{Seq: v.seq}
	if w := n.writer; w != nil {
		r.Who = w.Who()
		if w.carrier == v {
			r.Writer = w.remote
		}
		if l := w.lender; l != nil && l.carrier == v {
			r.Lender = l.remote
		}
	}
	return r
}

// dropMemberLocked ends member mv of relay viewer v. n.mu held.
func (v *Viewer) dropMemberLocked(mv *Viewer, cause error) {
	delete(v.members, mv.remote)
	for i, w := range v.memberList {
		if w == mv {
			v.memberList = append(v.memberList[:i], v.memberList[i+1:]...)
			break
		}
	}
	v.n.leaveLocked(mv)
	mv.end(cause)
}

// endMembersLocked ends every member of relay viewer v, with v. n.mu held.
func (v *Viewer) endMembersLocked(cause error) {
	for len(v.memberList) > 0 {
		v.dropMemberLocked(v.memberList[0], cause)
	}
}

// markRoles tells relay viewer v's reader (a Chunk with Roles) that the
// writer changed; never blocks, and one pending mark covers any number of
// changes.
func (v *Viewer) markRoles() {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.err != nil {
		return
	}
	v.rolesDirty = true
	signal(v.ready)
}

// ---- both sides: the writer ----

// setWriterLocked makes w (nil: nobody) the writer. Input still pending
// from the previous writer is dropped: it is not the writer's any more.
// Relay viewers are told (markRoles), unless n is retiring. n.mu held.
func (n *node) setWriterLocked(w *Viewer) {
	if n.writer == w {
		return
	}
	n.dropInputLocked()
	n.writer = w
	n.wakeWritersLocked() // the previous writer may be blocked in Write
	if n.retired {
		// Its relays end with it: their hubs keep their writer for the
		// next holder (a retiring holder's "nobody writes" is no news).
		return
	}
	for _, v := range n.viewers {
		if v.relay {
			v.markRoles()
		}
	}
}

// takeWriteLocked makes v the writer and tells the previous one, if it is
// a viewer of this hub (a member's hub tells it: Roles). n.mu held.
func (n *node) takeWriteLocked(v *Viewer) {
	prev := n.writer
	n.setWriterLocked(v)
	n.remoteWriter = Who{}
	if prev != nil && prev != v {
		prev.notice(v.name + " took over writing; you are read-only")
	}
}

// ---- the relaying side ----

// tellLocked queues m for the node's Arbiter (none: dropped, as the next
// Arbiter is told everything: startRolesLocked) and wakes the link's writer
// loop, which sends it before any input. It returns m's sequence number.
// n.mu held.
func (n *node) tellLocked(m RoleMsg) uint64 { return n.tellReplyLocked(m, nil) }

// tellReplyLocked is tellLocked; reply (buffered 1, may be nil) gets the
// Arbiter's answer, or an error if m is dropped. n.mu held.
func (n *node) tellReplyLocked(m RoleMsg, reply chan error) uint64 {
	if n.arb == nil {
		if reply != nil {
			reply <- errNoHolder
		}
		return 0
	}
	n.told++
	n.ctl = append(n.ctl, ctlMsg{m: m, reply: reply})
	signal(n.inReady)
	return n.told
}

// errNoHolder answers a role message dropped because the link to its
// holder changed.
var errNoHolder = errors.New("the console link to the node's holder changed")

// startRolesLocked begins a newly established console's part in the
// arbitration. An Arbiter is told of every viewer (the writer claiming
// the role back); with any other console this hub arbitrates itself, and
// every viewer's role is decided. n.mu held.
func (n *node) startRolesLocked(arb Arbiter) {
	n.linked, n.arb, n.ctl, n.told = true, arb, nil, 0
	if arb == nil {
		n.remoteWriter = Who{}
		for _, v := range n.viewers {
			v.decided = true
		}
		n.rolesDecidedLocked()
		return
	}
	for _, v := range n.viewers {
		if !v.relay {
			v.joinSeq = n.tellLocked(RoleMsg{Op: RoleJoin, Viewer: v.id, Who: v.Who(), Want: n.writer == v})
			v.lender = nil // the new holder never lent it its role
		}
	}
}

// stopRolesLocked ends an established console's part in the arbitration:
// the writer stays (it claims the role on the next link). n.mu held.
func (n *node) stopRolesLocked() {
	for _, c := range n.ctl {
		if c.reply != nil {
			c.reply <- errNoHolder
		}
	}
	n.linked, n.arb, n.ctl = false, nil, nil
}

// sendCtl sends the role messages queued for arb (none without one).
func (n *node) sendCtl(arb Arbiter) error {
	if arb == nil {
		return nil
	}
	msgs := n.takeCtl(arb)
	for i, c := range msgs {
		err := arb.Tell(c.m)
		if c.reply != nil {
			c.reply <- err
		}
		if err != nil && !errors.Is(err, ErrInputLost) {
			for _, c := range msgs[i+1:] {
				if c.reply != nil {
					c.reply <- errNoHolder
				}
			}
			return fmt.Errorf("tell the console's holder: %w", err)
		}
	}
	return nil
}

// takeCtl removes the role messages queued for arb.
func (n *node) takeCtl(arb Arbiter) []ctlMsg {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.arb != arb {
		return nil
	}
	msgs := n.ctl
	n.ctl = nil
	return msgs
}

// applyRoles follows what the holder said through arb (Arbiter.Arbitrate's
// function). Roles from before a message this hub queued since are stale
// for the writer (the holder answers that message too), but still decide
// the viewers that joined before them.
func (n *node) applyRoles(arb Arbiter, r Roles) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.arb != arb || n.retired {
		return
	}
	prev := n.writer
	told := prev != nil && prev.decided // it was told it writes
	changed := false
	for _, v := range n.viewers {
		if !v.decided && v.joinSeq != 0 && v.joinSeq <= r.Seq {
			v.decided, changed = true, true
		}
	}
	if changed {
		n.rolesDecidedLocked()
	}
	if r.Seq < n.told {
		return
	}
	var w *Viewer
	if r.Writer != 0 {
		for _, v := range n.viewers {
			if v.id == r.Writer {
				w = v
			}
		}
	}
	n.setWriterLocked(w)
	n.remoteWriter = Who{}
	if w == nil {
		n.remoteWriter = r.Who.clip()
	}
	if told && prev != w && r.Lender != prev.id { // a lender is told by the holder
		who := "another viewer"
		if r.Who.Name != "" {
			who = clip(r.Who.Name, maxNameLen)
		}
		prev.notice(who + " took over writing; you are read-only")
	}
}

// rolesDecidedLocked wakes AwaitRole. n.mu held.
func (n *node) rolesDecidedLocked() {
	if n.decidedC != nil {
		close(n.decidedC)
		n.decidedC = nil
	}
}

// AwaitRole waits until v's write role is decided, or ctx ends: the node's
// console is established and, if that is a relay, its holder has answered
// v's arrival. A viewer's role is decided at once on a hub that holds the
// link, and then may still change as on any hub (takeovers). In a cluster
// the first viewer on a replica waits for the link, so that what it is
// told first (the banner) says who writes. It reports whether the role is
// decided.
func (v *Viewer) AwaitRole(ctx context.Context) bool {
	n := v.n
	for {
		n.mu.Lock()
		decided := v.decided || n.retired || v.Err() != nil
		if n.decidedC == nil {
			n.decidedC = make(chan struct{})
		}
		wake := n.decidedC
		n.mu.Unlock()
		if decided {
			return true
		}
		select {
		case <-wake:
		case <-v.done:
		case <-ctx.Done():
			return false
		}
	}
}

// Writer returns label's writer, wherever in the cluster it is (zero
// when nobody writes, or the node has no console).
func (m *Manager) Writer(label string) Who {
	m.mu.Lock()
	n := m.nodes[label]
	m.mu.Unlock()
	if n == nil {
		return Who{}
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.writer != nil {
		return n.writer.Who()
	}
	return n.remoteWriter
}

// clip bounds s to n bytes, without cutting a character in two.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// holderNotice tells this hub's viewer id what the holder said through arb
// (Arbiter.Arbitrate's notice function).
func (n *node) holderNotice(arb Arbiter, id uint64, msg string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.arb != arb || n.retired {
		return
	}
	for _, v := range n.viewers {
		if v.id == id && !v.relay {
			v.notice(clip(msg, maxNoticeLen))
		}
	}
}

// maxNoticeLen bounds a notice a holder sends for a viewer.
const maxNoticeLen = 200

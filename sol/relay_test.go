package sol_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"

	"github.com/obmd/obmd/sol"
	"github.com/obmd/obmd/sol/sim"
)

// The write role across hubs (roles.go), with the relay between them in
// memory: a relaying hub's console is a relay viewer on the holder's hub,
// driven as bastion/cluster's peer server drives it.

// relayTo is a Resolver whose consoles relay through hub (the holder);
// set swaps the holder, or makes the consoles local (a lab: this hub
// becomes the holder).
type relayTo struct {
	mu    sync.Mutex
	hub   *sol.Manager
	local sol.Resolver
	live  []*memRelay
	// tellHook, if set before a relay opens, runs at the start of each of
	// its Tells (on the relaying hub's writer loop).
	tellHook func(sol.RoleMsg)
}

func (r *relayTo) set(hub *sol.Manager, local sol.Resolver) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.hub, r.local = hub, local
}

// drop ends every relay made so far (their holder "died").
func (r *relayTo) drop() {
	r.mu.Lock()
	live := r.live
	r.live = nil
	r.mu.Unlock()
	for _, c := range live {
		c.Close()
	}
}

func (r *relayTo) Resolve(ctx context.Context, label string) (sol.BMC, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.local != nil {
		return r.local.Resolve(ctx, label)
	}
	return &relayBMC{r: r, hub: r.hub, label: label}, nil
}

type relayBMC struct {
	noOps
	r     *relayTo
	hub   *sol.Manager
	label string
}

func (b *relayBMC) OpenConsole(ctx context.Context) (sol.Console, error) {
	v, err := b.hub.Attach(ctx, b.label, sol.AttachOptions{Name: "peer", Relay: true})
	if err != nil {
		return nil, err
	}
	b.r.mu.Lock()
	c := &memRelay{v: v, hook: b.r.tellHook}
	b.r.live = append(b.r.live, c)
	b.r.mu.Unlock()
	return c, nil
}

// memRelay is both ends of a relay: the relaying hub's Arbiter, and what
// the peer server does with the holder's relay viewer v. mu orders the
// Roles sent, as the peer server's frame lock does.
type memRelay struct {
	v      *sol.Viewer
	mu     sync.Mutex
	roles  func(sol.Roles)
	notice func(viewer uint64, msg string)
	buf    []byte
	// held: the holder's answers are kept back (a slow peer link) until
	// release; late says one is due.
	held, late bool
	hook       func(sol.RoleMsg) // relayTo.tellHook
}

var _ sol.Arbiter = (*memRelay)(nil)

// hold keeps the holder's answers back until release.
func (c *memRelay) hold() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.held = true
}

func (c *memRelay) release() {
	c.mu.Lock()
	c.held = false
	late := c.late
	c.mu.Unlock()
	if late {
		c.sendRoles()
	}
}

func (c *memRelay) Arbitrate(roles func(sol.Roles), notice func(uint64, string)) {
	c.roles, c.notice = roles, notice
}

func (c *memRelay) sendRoles() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.late = c.held; c.held {
		return
	}
	c.roles(c.v.Roles())
}

func (c *memRelay) Read(p []byte) (int, error) {
	for len(c.buf) == 0 {
		ch, ok := <-c.v.Output()
		if !ok {
			return 0, fmt.Errorf("relay ended: %w", c.v.Err())
		}
		if ch.Roles {
			c.sendRoles()
		}
		if ch.For != 0 {
			c.notice(ch.For, ch.Notice)
		}
		c.buf = ch.Data
	}
	n := copy(p, c.buf)
	c.buf = c.buf[n:]
	return n, nil
}

func (c *memRelay) Tell(m sol.RoleMsg) error {
	if c.hook != nil {
		c.hook(m)
	}
	err := c.v.Arbitrate(m) // refused or not, it counts; the peer server logs a refusal
	c.sendRoles()
	if m.Op == sol.RoleReturn && errors.Is(err, sol.ErrInputLost) {
		return err // the peer server's answer to a RoleReturn
	}
	return nil
}

// WriteAs drops a non-writer's input, as the peer server does.
func (c *memRelay) WriteAs(viewer uint64, p []byte) (int, error) {
	if _, err := c.v.WriteAs(viewer, p); err != nil && !errors.Is(err, sol.ErrReadOnly) {
		return 0, err
	}
	return len(p), nil
}

func (c *memRelay) BreakAs(ctx context.Context, viewer uint64) error { return c.v.BreakAs(ctx, viewer) }
func (c *memRelay) Write([]byte) (int, error)                        { return 0, errors.New("no viewer") }
func (c *memRelay) Break(context.Context) error                      { return errors.New("no viewer") }
func (c *memRelay) Close() error                                     { c.v.Close(); return nil }

// cluster is a holder over a simulated BMC and two relaying hubs.
func newCluster(t *testing.T) (b *sim.BMC, lab *sim.Lab, holder *sol.Manager, relays [2]*sol.Manager, via [2]*relayTo) {
	lab = sim.NewLab()
	b = lab.BMC("n1", sim.ModeNormal)
	holder = newManager(t, sol.Config{}, lab)
	for i := range relays {
		via[i] = &relayTo{hub: holder}
		relays[i] = newManager(t, sol.Config{}, via[i])
	}
	return b, lab, holder, relays, via
}

// attached attaches a viewer, records it, and waits until its role is
// decided.
func attached(t *testing.T, m *sol.Manager, name string, o sol.AttachOptions) (*sol.Viewer, *recorder) {
	t.Helper()
	v := attach(t, m, "n1", name, o)
	r := record(v)
	if !v.AwaitRole(testCtx(t)) {
		t.Fatalf("%s: role not decided", name)
	}
	return v, r
}

// typed writes p as v and waits until the BMC has it.
func typed(t *testing.T, b *sim.BMC, v *sol.Viewer, p string) {
	t.Helper()
	if _, err := v.Write([]byte(p)); err != nil {
		t.Fatalf("%s writes %q: %v", v.Name(), p, err)
	}
	waitFor(t, fmt.Sprintf("%q from %s on the serial side", p, v.Name()), func() bool {
		return strings.Contains(string(b.Typed()), p)
	})
}

// TestClusterOneWriter: the holder arbitrates one writer for its own
// viewers and those of two relaying hubs: the first writes, a takeover from
// any hub moves the role and tells the previous writer wherever it is,
// read-only attaches and escapes work the same everywhere, and the relay
// viewer itself never writes.
func TestClusterOneWriter(t *testing.T) {
	b, _, holder, relays, _ := newCluster(t)
	a1, ra1 := attached(t, holder, "a1", sol.AttachOptions{})
	b1, rb1 := attached(t, relays[0], "b1", sol.AttachOptions{})
	c1, rc1 := attached(t, relays[1], "c1", sol.AttachOptions{})
	c2, _ := attached(t, relays[1], "c2", sol.AttachOptions{ReadOnly: true})
	if !a1.Writer() || b1.Writer() || c1.Writer() || c2.Writer() {
		t.Fatalf("writers: a1 %v b1 %v c1 %v c2 %v, want a1 only (the first)", a1.Writer(), b1.Writer(), c1.Writer(), c2.Writer())
	}
	for i, m := range relays {
		if got := m.Writer("n1").Name; got != "a1" {
			t.Errorf("relaying hub %d: got writer %q, want a1", i, got)
		}
	}
	var remote []string
	for _, vi := range holder.Viewers("n1") {
		if vi.Remote {
			remote = append(remote, vi.Name)
		}
	}
	if want := []string{"b1", "c1", "c2"}; fmt.Sprint(remote) != fmt.Sprint(want) {
		t.Errorf("holder's remote viewers: got %v, want %v (and no relay viewer)", remote, want)
	}
	typed(t, b, a1, "A")
	if _, err := b1.Write([]byte("x")); !errors.Is(err, sol.ErrReadOnly) {
		t.Errorf("b1 (reading) writes: got %v, want %v", err, sol.ErrReadOnly)
	}

	// A takeover on a relaying hub: the holder's writer is told.
	c1.TakeWrite()
	ra1.waitNotice(t, "c1 took over writing; you are read-only")
	typed(t, b, c1, "C")
	if _, err := a1.Write([]byte("x")); !errors.Is(err, sol.ErrReadOnly) {
		t.Errorf("a1 after the takeover: got %v, want %v", err, sol.ErrReadOnly)
	}
	// A takeover on the other relaying hub: c1 is told by its own hub.
	b1.TakeWrite()
	rc1.waitNotice(t, "b1 took over writing; you are read-only")
	waitFor(t, "c1 to be read-only", func() bool { return !c1.Writer() })
	typed(t, b, b1, "B")
	if err := b1.Break(testCtx(t)); err != nil {
		t.Errorf("the writer's break: %v", err)
	}
	if err := c1.Break(testCtx(t)); !errors.Is(err, sol.ErrReadOnly) {
		t.Errorf("a reader's break: got %v, want %v", err, sol.ErrReadOnly)
	}
	waitFor(t, "one break", func() bool { return b.Breaks() == 1 })

	// Read-only escape: nobody writes, everywhere.
	b1.ReadOnly()
	waitFor(t, "nobody writing", func() bool {
		return holder.Writer("n1").Name == "" && relays[0].Writer("n1").Name == "" && relays[1].Writer("n1").Name == ""
	})
	for _, v := range []*sol.Viewer{a1, b1, c1, c2} {
		if _, err := v.Write([]byte("x")); !errors.Is(err, sol.ErrReadOnly) {
			t.Errorf("%s with nobody writing: got %v, want %v", v.Name(), err, sol.ErrReadOnly)
		}
	}
	if got := string(b.Typed()); got != "ACB" {
		t.Errorf("typed on the serial side: got %q, want %q", got, "ACB")
	}
	if n := rb1.Notices(); len(n) != 0 {
		t.Errorf("b1 got notices %q, want none (it left the role itself)", n)
	}
}

// TestClusterWriterWho: every hub knows the writer by its session and
// its name, wherever it is, and the holder lists relayed viewers by both:
// a viewer attached with a session alone is named "#" and the session.
func TestClusterWriterWho(t *testing.T) {
	_, _, holder, relays, _ := newCluster(t)
	b1, _ := attached(t, relays[0], "", sol.AttachOptions{Session: "r0-7"})
	attached(t, relays[1], "c1", sol.AttachOptions{})
	want := sol.Who{Session: "r0-7", Name: "#r0-7"}
	if got := b1.Who(); got != want {
		t.Fatalf("got viewer %+v, want %+v", got, want)
	}
	for i, m := range []*sol.Manager{holder, relays[0], relays[1]} {
		if got := m.Writer("n1"); got != want {
			t.Errorf("hub %d: got writer %+v, want %+v", i, got, want)
		}
	}
	var listed []sol.Who
	for _, vi := range holder.Viewers("n1") {
		listed = append(listed, vi.Who())
	}
	if wantListed := []sol.Who{want, {Name: "c1"}}; fmt.Sprint(listed) != fmt.Sprint(wantListed) {
		t.Errorf("holder lists %+v, want %+v", listed, wantListed)
	}
	b1.ReadOnly()
	waitFor(t, "nobody writing", func() bool {
		return holder.Writer("n1") == sol.Who{} && relays[1].Writer("n1") == sol.Who{}
	})
}

// TestClusterNonWriterInputDropped: input a relaying hub sends in the name
// of a viewer the holder no longer counts as the writer never reaches the
// node, however late that hub learns of the takeover.
func TestClusterNonWriterInputDropped(t *testing.T) {
	b, _, holder, relays, via := newCluster(t)
	b1, _ := attached(t, relays[0], "b1", sol.AttachOptions{})
	c1, _ := attached(t, relays[1], "c1", sol.AttachOptions{})
	typed(t, b, b1, "first:")
	// b1's hub hears nothing from the holder for a while: it still thinks
	// b1 writes when c1 takes over.
	via[0].mu.Lock()
	slow := via[0].live[0]
	via[0].mu.Unlock()
	slow.hold()
	c1.TakeWrite()
	waitFor(t, "the holder to count c1 as the writer", func() bool { return holder.Writer("n1").Name == "c1" })
	if _, err := b1.Write([]byte("late")); err != nil || !b1.Writer() {
		t.Fatalf("b1, not told yet: write %v, writing %v; want its hub to send its keys", err, b1.Writer())
	}
	// The break follows b1's keys to the holder (one order), so when it
	// is refused they were dropped there.
	if err := b1.Break(testCtx(t)); !errors.Is(err, sol.ErrReadOnly) {
		t.Errorf("b1's break, not told yet: got %v, want the holder's %v", err, sol.ErrReadOnly)
	}
	typed(t, b, c1, "c")
	slow.release()
	waitFor(t, "b1 told", func() bool { return !b1.Writer() })
	if got := string(b.Typed()); got != "first:c" {
		t.Errorf("typed on the serial side: got %q, want %q (none of b1's keys after the takeover)", got, "first:c")
	}
	if b.Breaks() != 0 {
		t.Errorf("b1's break reached the node")
	}
}

// TestClusterHolderChange: when the holder goes, the write role is
// re-established on the next one: the surviving writer keeps it, on a new
// holder or on its own hub when that becomes the holder.
func TestClusterHolderChange(t *testing.T) {
	for _, newHolder := range []string{"another hub", "the writer's hub"} {
		t.Run(newHolder, func(t *testing.T) {
			b, lab, holder, relays, via := newCluster(t)
			a1, _ := attached(t, holder, "a1", sol.AttachOptions{})
			b1, _ := attached(t, relays[0], "b1", sol.AttachOptions{})
			b2, _ := attached(t, relays[0], "b2", sol.AttachOptions{})
			c1, _ := attached(t, relays[1], "c1", sol.AttachOptions{})
			b1.TakeWrite()
			waitFor(t, "b1 writing", func() bool { return holder.Writer("n1").Name == "b1" })
			typed(t, b, b1, "1")

			// The holder dies: its viewers and relays end.
			a1.Close()
			next := relays[0]
			if newHolder == "another hub" {
				next = newManager(t, sol.Config{}, lab)
				via[0].set(next, nil)
				via[1].set(next, nil)
				attached(t, next, "d1", sol.AttachOptions{ReadOnly: true})
			} else {
				via[0].set(nil, lab)
				via[1].set(relays[0], nil)
			}
			holder.Cut("n1", errors.New("holder gone"))
			via[0].drop()
			via[1].drop()
			waitFor(t, "c1 relayed through the new holder, b1 writing there", func() bool {
				relayed := false
				for _, vi := range next.Viewers("n1") {
					relayed = relayed || vi.Remote && vi.Name == "c1"
				}
				return relayed && next.Writer("n1").Name == "b1"
			})
			typed(t, b, b1, "2")
			if b2.Writer() || c1.Writer() {
				t.Errorf("after the holder changed: b2 %v, c1 %v writing, want b1 only", b2.Writer(), c1.Writer())
			}
			c1.TakeWrite()
			waitFor(t, "b1 read-only", func() bool { return !b1.Writer() })
			typed(t, b, c1, "3")
		})
	}
}

// TestClusterFirstViewerWrites: a relaying hub's first viewer, attached
// before its relay is up, learns from the holder whether it writes: it
// does if nobody else does, and its role is undecided until then.
func TestClusterFirstViewerWrites(t *testing.T) {
	b, _, holder, relays, _ := newCluster(t)
	b1, _ := attached(t, relays[0], "b1", sol.AttachOptions{})
	if !b1.Writer() || holder.Writer("n1").Name != "b1" {
		t.Fatalf("first viewer in the cluster: writing %v, holder's writer %q, want b1", b1.Writer(), holder.Writer("n1").Name)
	}
	typed(t, b, b1, "b")
	c1, _ := attached(t, relays[1], "c1", sol.AttachOptions{})
	if c1.Writer() || relays[1].Writer("n1").Name != "b1" {
		t.Errorf("second viewer: writing %v, its hub's writer %q, want b1 writing", c1.Writer(), relays[1].Writer("n1").Name)
	}
	b1.Close()
	waitFor(t, "nobody writing once the writer left", func() bool { return holder.Writer("n1").Name == "" })
	if c1.Writer() {
		t.Error("c1 became the writer when b1 left; want nobody")
	}
}

// TestRelayMembersBounded: a relaying replica cannot make the holder keep
// more than 1024 viewers on one relay (maxMembers) nor a name of more than
// 64 bytes (maxNameLen, cut at a character); a member that leaves makes
// room.
func TestRelayMembersBounded(t *testing.T) {
	lab := sim.NewLab()
	lab.BMC("n1", sim.ModeNormal)
	holder := newManager(t, sol.Config{}, lab)
	v := attach(t, holder, "n1", "peer", sol.AttachOptions{Relay: true})
	long := strings.Repeat("é", 100)
	if err := v.Arbitrate(sol.RoleMsg{Op: sol.RoleJoin, Viewer: 1, Who: sol.Who{Name: long}, Want: true}); err != nil {
		t.Fatalf("first join: %v", err)
	}
	if got := holder.Writer("n1").Name; len(got) > 64 || !utf8.ValidString(got) || !strings.HasPrefix(long, got) || got == "" {
		t.Errorf("a %d-byte name kept as %d bytes %q, want at most 64, whole characters", len(long), len(got), got)
	}
	for id := uint64(2); id <= 1024; id++ {
		if err := v.Arbitrate(sol.RoleMsg{Op: sol.RoleJoin, Viewer: id, Who: sol.Who{Name: "m"}}); err != nil {
			t.Fatalf("join %d: %v", id, err)
		}
	}
	if err := v.Arbitrate(sol.RoleMsg{Op: sol.RoleJoin, Viewer: 1025, Who: sol.Who{Name: "m"}}); err == nil {
		t.Fatal("join 1025: accepted, want refused (1024 viewers on the relay)")
	}
	if err := v.Arbitrate(sol.RoleMsg{Op: sol.RoleLeave, Viewer: 7}); err != nil {
		t.Fatalf("leave 7: %v", err)
	}
	if err := v.Arbitrate(sol.RoleMsg{Op: sol.RoleJoin, Viewer: 1025, Who: sol.Who{Name: "m"}}); err != nil {
		t.Errorf("join 1025 after one left: %v", err)
	}
}

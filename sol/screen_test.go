package sol_test

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/obmd/obmd/sol"
	"github.com/obmd/obmd/sol/ipmi"
	"github.com/obmd/obmd/sol/screen"
	"github.com/obmd/obmd/sol/screen/screentest"
	"github.com/obmd/obmd/sol/sim"
	"github.com/obmd/obmd/sol/soltest/ipmisim"
)

// inject prints p on bmc's serial side in pieces of at most 4 KiB, as a
// host would over time.
func inject(bmc *sim.BMC, p []byte) {
	for len(p) > 0 {
		k := min(len(p), 4<<10)
		bmc.Inject(p[:k])
		p = p[k:]
	}
}

// waitScreen waits until get's screen shows want, and returns it.
func waitScreen(t *testing.T, what string, get func(context.Context) (screen.Snapshot, error), want string) screen.Snapshot {
	t.Helper()
	var (
		s   screen.Snapshot
		err error
	)
	deadline := time.Now().Add(wait)
	for {
		s, err = get(testCtx(t))
		if err == nil && s.Text() == want {
			return s
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: timed out; last screen (error %v):\n%s\nwant:\n%s", what, err, s.Text(), want)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// blank is the text of a blank 80x25 screen.
var blank = strings.Repeat("\n", screen.DefaultRows-1)

// screenOf is Manager.Screen of n1, as waitScreen takes it.
func screenOf(m *sol.Manager) func(context.Context) (screen.Snapshot, error) {
	return func(ctx context.Context) (screen.Snapshot, error) { return m.Screen(ctx, "n1") }
}

// TestScreenHoldsTheMenu: a held node's screen shows a whole BIOS setup
// menu that the last 16 KiB of output (the attach replay) no longer draw,
// cell for cell and with its highlight; a viewer's Screen (and its
// ScreenText) is the same.
func TestScreenHoldsTheMenu(t *testing.T) {
	_, _, bmc, m := heldN1(t)
	waitConsole(t, bmc, true)
	bios := screentest.BIOSSetup(10000)
	inject(bmc, bios.Output)
	s := waitScreen(t, "the menu", screenOf(m), bios.Screen)
	if c := s.Cursor(); !c.Visible || s.Size() != (screen.Size{Cols: 80, Rows: 25}) {
		t.Errorf("cursor %+v, size %v", c, s.Size())
	}
	if tail := m.Scrollback("n1"); bytes.Contains(tail, []byte(bios.Menu[0])) {
		t.Fatalf("the scrollback holds the menu's title: the fixture proves nothing")
	}
	v := attach(t, m, "n1", "viewer", sol.AttachOptions{ReadOnly: true})
	vs, err := v.Screen(testCtx(t))
	if err != nil || vs.Text() != bios.Screen {
		t.Errorf("the viewer's screen (error %v):\n%s", err, vs.Text())
	}
	if text, err := v.ScreenText(testCtx(t)); err != nil || text != bios.Screen {
		t.Errorf("the viewer's screen's text (error %v):\n%s", err, text)
	}
	highlighted := false
	for _, sp := range vs.Spans() {
		highlighted = highlighted || sp.Row == bios.Highlight && sp.Reverse && sp.Len == bios.HighlightLen
	}
	if !highlighted {
		t.Errorf("no highlight at row %d: %+v", bios.Highlight, vs.Spans())
	}
}

// TestScreenBlankAfterAccessChange: an access change (a new tenancy, then
// Cut) blanks the screen: the held node's new link starts from the new
// tenancy's history, which is empty, and a viewer of the old node gets no
// screen.
func TestScreenBlankAfterAccessChange(t *testing.T) {
	h, _, bmc, m := heldN1(t)
	waitConsole(t, bmc, true)
	bios := screentest.BIOSSetup(100)
	inject(bmc, bios.Output)
	old := attach(t, m, "n1", "old tenant", sol.AttachOptions{ReadOnly: true})
	waitScreen(t, "the menu", screenOf(m), bios.Screen)
	waitFor(t, "the menu recorded", func() bool { return strings.Contains(h.output(t), bios.Menu[0]) })

	epoch, err := h.store.RevokeToken(testCtx(t), "n1")
	if err != nil {
		t.Fatal(err)
	}
	m.Cut("n1", nil)
	h.rec.SetEpoch("n1", epoch)
	if _, err := old.Screen(testCtx(t)); !errors.Is(err, sol.ErrCut) {
		t.Errorf("the old tenant's screen after the cut: error %v, want %v", err, sol.ErrCut)
	}
	if _, err := old.ScreenText(testCtx(t)); !errors.Is(err, sol.ErrCut) {
		t.Errorf("the old tenant's screen's text after the cut: error %v, want %v", err, sol.ErrCut)
	}
	waitFor(t, "the new link", func() bool { return m.Stats().Opens >= 2 && m.LinkUp("n1") })
	waitScreen(t, "a blank screen", screenOf(m), blank)
	bmc.Inject([]byte("new tenant\r\n"))
	waitScreen(t, "the new tenant's output", screenOf(m), "new tenant"+blank)
}

// TestAttachCancelledAsCut: a session cancelled by an access change just
// as its Attach began (its context checked, the Manager not yet locked)
// does not subscribe to the node the cut opens for the next tenancy: it
// would get that tenancy's screen on attach and its live output.
func TestAttachCancelledAsCut(t *testing.T) {
	_, _, bmc, m := heldN1(t)
	waitConsole(t, bmc, true)
	bmc.Inject([]byte("next tenant's screen\r\n"))
	waitScreen(t, "the screen", screenOf(m), "next tenant's screen"+blank)
	// The revoker cancels the sessions, then cuts: here, the instant after
	// Attach first looked at its context.
	ctx := &cancelledAfterLook{Context: testCtx(t)}
	v, err := m.Attach(ctx, "n1", sol.AttachOptions{Session: "old", ReadOnly: true, Replay: true, Screen: true})
	if err == nil {
		defer v.Close()
		select {
		case c := <-v.Output():
			t.Errorf("a cancelled session attached, and got %q then %q", c.Screen, c.Data)
		case <-time.After(time.Second):
			t.Error("a cancelled session attached")
		}
	}
}

// cancelledAfterLook is a context that is live the first time its Err is
// looked at, cancelled from then on.
type cancelledAfterLook struct {
	context.Context
	looks atomic.Int32
}

func (c *cancelledAfterLook) Err() error {
	if c.looks.Add(1) == 1 {
		return nil
	}
	return context.Canceled
}

// TestScreenRebuiltFromHistory: a restarted hub (or one taking over the
// link) rebuilds the screen from the tenancy's stored history, though its
// ring is empty and the last 16 KiB would not draw the menu; output that
// follows draws on it. A cut of the hub without an access change keeps
// the tenancy, and so the screen.
func TestScreenRebuiltFromHistory(t *testing.T) {
	h, lab, bmc, m := heldN1(t)
	waitConsole(t, bmc, true)
	bios := screentest.BIOSSetup(2500) // about 50 KiB: within the 64 KiB rebuilt
	if tail := bios.Output[len(bios.Output)-16<<10:]; bytes.Contains(tail, []byte(bios.Menu[0])) {
		t.Fatal("the fixture's last 16 KiB hold the menu's title")
	}
	inject(bmc, bios.Output)
	waitScreen(t, "the menu", screenOf(m), bios.Screen)
	waitFor(t, "the output recorded", func() bool { return strings.HasSuffix(h.output(t), string(bios.Output[len(bios.Output)-100:])) })
	if err := m.Close(testCtx(t)); err != nil {
		t.Fatal(err)
	}

	m2 := h.manager(t, lab)
	if _, err := m2.Screen(testCtx(t), "n1"); !errors.Is(err, sol.ErrNoScreen) {
		t.Errorf("a node without a link here: error %v, want %v", err, sol.ErrNoScreen)
	}
	if err := m2.Hold("n1"); err != nil {
		t.Fatal(err)
	}
	waitScreen(t, "the menu rebuilt", screenOf(m2), bios.Screen)
	bmc.Inject([]byte("\x1b[24;3Hchanged"))
	want := strings.Replace(bios.Screen, "  ><: Sel", "  changed", 1)
	waitScreen(t, "live output on the rebuilt screen", screenOf(m2), want)

	m2.Cut("n1", nil) // no access change: the same tenancy
	waitScreen(t, "the screen after a cut in the same tenancy", screenOf(m2), want)
}

// TestScreenSize: the resolver sets a node's screen size (ScreenSizer).
func TestScreenSize(t *testing.T) {
	lab := sim.NewLab()
	bmc := lab.BMC("n1", sim.ModeNormal)
	m := newManager(t, sol.Config{}, sizer{lab, screen.Size{Cols: 132, Rows: 43}})
	attach(t, m, "n1", "v", sol.AttachOptions{})
	waitConsole(t, bmc, true)
	bmc.Inject([]byte("\x1b[43;130Hx"))
	s := waitScreen(t, "x at the bottom right", screenOf(m), strings.Repeat("\n", 42)+strings.Repeat(" ", 129)+"x")
	if got := s.Size(); got != (screen.Size{Cols: 132, Rows: 43}) {
		t.Errorf("size %v, want 132x43", got)
	}
}

type sizer struct {
	*sim.Lab
	size screen.Size
}

func (s sizer) ScreenSize(context.Context, string) (screen.Size, error) { return s.size, nil }

// TestScreenReplay: a viewer attached with Screen gets, with its replay,
// the node's screen as a redraw where the replay ends; fed to a terminal
// it shows the menu, which the replay's bytes do not.
func TestScreenReplay(t *testing.T) {
	h, _, bmc, m := heldN1(t)
	waitConsole(t, bmc, true)
	bios := screentest.BIOSSetup(10000)
	inject(bmc, bios.Output)
	waitScreen(t, "the menu", screenOf(m), bios.Screen)
	v := attach(t, m, "n1", "redraw", sol.AttachOptions{ReadOnly: true, Replay: true, Screen: true, Epoch: h.epoch})
	c := <-v.Output()
	if !c.Replay || bytes.Contains(c.Data, []byte(bios.Menu[0])) {
		t.Fatalf("first chunk: replay %v, %d bytes", c.Replay, len(c.Data))
	}
	term, _ := screen.New(screen.Size{})
	term.Write(c.Screen)
	if got := term.Text(); got != bios.Screen {
		t.Errorf("the redraw shows:\n%s", got)
	}
}

// TestScreenRelay: a relaying hub's screen starts from the holder's
// (ScreenSeeded, from the holder's relay viewer's replay), not from the
// seed's bytes, and follows the relayed output.
func TestScreenRelay(t *testing.T) {
	h, _, bmc, holder := heldN1(t)
	waitConsole(t, bmc, true)
	bios := screentest.BIOSSetup(10000)
	inject(bmc, bios.Output)
	waitScreen(t, "the holder's menu", screenOf(holder), bios.Screen)

	relaying := newManager(t, sol.Config{}, seededRelay{holder: holder, epoch: h.epoch})
	attach(t, relaying, "n1", "remote viewer", sol.AttachOptions{ReadOnly: true})
	waitScreen(t, "the relayed menu", screenOf(relaying), bios.Screen)
	bmc.Inject([]byte("\x1b[24;3Hchanged"))
	want := strings.Replace(bios.Screen, "  ><: Sel", "  changed", 1)
	waitScreen(t, "live output on the relayed screen", screenOf(relaying), want)
}

// seededRelay resolves n1 to a relay through holder, as bastion/cluster's
// peer server and relay console carry it: the holder's relay viewer's
// replay is the seed, its screen the screen seed, then its output.
type seededRelay struct {
	holder *sol.Manager
	epoch  int64
}

func (r seededRelay) Resolve(ctx context.Context, label string) (sol.BMC, error) {
	return seededBMC{r: r, label: label}, nil
}

type seededBMC struct {
	noOps
	r     seededRelay
	label string
}

func (b seededBMC) OpenConsole(ctx context.Context) (sol.Console, error) {
	v, err := b.r.holder.Attach(ctx, b.label, sol.AttachOptions{Name: "peer", Relay: true, Replay: true, Epoch: b.r.epoch})
	if err != nil {
		return nil, err
	}
	select {
	case c := <-v.Output():
		if !c.Replay {
			v.Close()
			return nil, errors.New("the relay viewer's first chunk is no replay")
		}
		return &seededConsole{v: v, seed: c.Data, screen: c.Screen}, nil
	case <-ctx.Done():
		v.Close()
		return nil, ctx.Err()
	}
}

type seededConsole struct {
	v            *sol.Viewer
	seed, screen []byte
	buf          []byte
}

func (c *seededConsole) Seed() []byte       { return c.seed }
func (c *seededConsole) ScreenSeed() []byte { return c.screen }

func (c *seededConsole) Read(p []byte) (int, error) {
	for len(c.buf) == 0 {
		ch, ok := <-c.v.Output()
		if !ok {
			return 0, c.v.Err()
		}
		c.buf = ch.Data
	}
	k := copy(p, c.buf)
	c.buf = c.buf[k:]
	return k, nil
}

func (c *seededConsole) Write(p []byte) (int, error)     { return len(p), nil }
func (c *seededConsole) Break(ctx context.Context) error { return nil }
func (c *seededConsole) Close() error                    { c.v.Close(); return nil }

var (
	_ sol.Seeded       = (*seededConsole)(nil)
	_ sol.ScreenSeeded = (*seededConsole)(nil)
)

// TestScreenOverIPMISim: a BIOS menu printed on a real BMC's serial side
// (OpenIPMI's ipmi_sim), through the native IPMI driver's SOL, shows whole
// on the held node's screen.
func TestScreenOverIPMISim(t *testing.T) {
	s := ipmisim.Start(t)
	b, err := ipmi.New("n1", s.Info(), ipmi.Config{}, quietLog())
	if err != nil {
		t.Fatal(err)
	}
	h := newHistRig(t)
	m := h.manager(t, oneBMC{b})
	if err := m.Hold("n1"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the SOL link up", func() bool { return m.LinkUp("n1") })
	bios := screentest.BIOSSetup(500)
	for p := bios.Output; len(p) > 0; p = p[min(len(p), 1024):] {
		if err := s.WriteSerial(p[:min(len(p), 1024)]); err != nil {
			t.Fatal(err)
		}
	}
	waitScreen(t, "the menu over SOL", screenOf(m), bios.Screen)
}

// oneBMC resolves every label to b.
type oneBMC struct{ b sol.BMC }

func (o oneBMC) Resolve(context.Context, string) (sol.BMC, error) { return o.b, nil }

// TestScreenEndsWithTheNode: a screen asked for while the node's link is
// being opened is answered as soon as the node is cut (an access change),
// not when the asker gives up.
func TestScreenEndsWithTheNode(t *testing.T) {
	m := newManager(t, sol.Config{}, hangingBMCs{})
	v := attach(t, m, "n1", "v", sol.AttachOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	errc := make(chan error, 2)
	go func() { _, err := v.Screen(ctx); errc <- err }()
	go func() { _, err := m.Screen(ctx, "n1"); errc <- err }()
	time.Sleep(20 * time.Millisecond) // both wait for the link (or come after the cut: the same answer)
	m.Cut("n1", errors.New("access changed"))
	for range 2 {
		select {
		case err := <-errc:
			if err == nil {
				t.Error("a screen of a node cut before its link came up")
			}
		case <-time.After(10 * time.Second):
			t.Fatal("Screen still waits for a node cut 10 s ago")
		}
	}
}

// hangingBMCs resolve every label to a BMC whose console never opens.
type hangingBMCs struct{}

func (hangingBMCs) Resolve(context.Context, string) (sol.BMC, error) { return hangingBMC{}, nil }

type hangingBMC struct{ sol.BMC }

func (hangingBMC) OpenConsole(ctx context.Context) (sol.Console, error) {
	<-ctx.Done()
	return nil, context.Cause(ctx)
}

func (hangingBMC) DeactivateConsole(context.Context) error { return nil }

// TestRedrawsBounded: a viewer that asks for redraws and replays again
// and again while it reads nothing (a key held down, a paste) holds at
// most two of them queued, each a copy of the screen or of the history;
// once it reads, it gets the redraw (the screen alone, no output).
func TestRedrawsBounded(t *testing.T) {
	_, _, bmc, m := heldN1(t)
	waitConsole(t, bmc, true)
	bios := screentest.BIOSSetup(100)
	inject(bmc, bios.Output)
	waitScreen(t, "the menu", screenOf(m), bios.Screen)
	v := attach(t, m, "n1", "v", sol.AttachOptions{ReadOnly: true})
	for range 1000 {
		v.Redraw()
		v.Replay()
	}
	if k := sol.ReplaysQueued(v); k > 2 {
		t.Fatalf("%d replays queued, want at most 2", k)
	}
	select {
	case c := <-v.Output():
		term, _ := screen.New(screen.Size{})
		term.Write(c.Screen)
		if !c.Replay || len(c.Data) != 0 || term.Text() != bios.Screen {
			t.Errorf("the redraw: got %+v, showing\n%s", c, term.Text())
		}
	case <-time.After(wait):
		t.Fatal("no redraw")
	}
}

package sol_test

import (
	"context"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/obmd/obmd/db"
	"github.com/obmd/obmd/sol"
	"github.com/obmd/obmd/sol/history"
	"github.com/obmd/obmd/sol/sim"
)

// histRig is a console history over a real SQLite database holding node
// "n1": the History a Manager records in, as the daemon's.
type histRig struct {
	store *db.Store
	rec   *history.Recorder
	epoch int64
}

func newHistRig(t testing.TB) *histRig {
	t.Helper()
	return newHistRigEvery(t, 50*time.Millisecond)
}

// newHistRigEvery is newHistRig whose recorder flushes every (or when
// asked).
func newHistRigEvery(t testing.TB, every time.Duration) *histRig {
	t.Helper()
	ctx := testCtx(t)
	st, err := db.Open(ctx, filepath.Join(t.TempDir(), "obmd.db"), quietLog())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	if err := st.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	n, err := st.CreateNode(ctx, db.Node{Label: "n1", Type: "sim", InfoSealed: []byte("x")})
	if err != nil {
		t.Fatal(err)
	}
	rec, err := history.New(history.Config{FlushInterval: every}, st, quietLog())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rec.Close(context.Background()) })
	return &histRig{store: st, rec: rec, epoch: n.Epoch}
}

// Open, Cut and Flush are sol.History's.
func (h *histRig) Open(ctx context.Context, label string) (*history.Recording, error) {
	epoch, err := h.store.Epoch(ctx, label)
	if err != nil {
		return nil, err
	}
	return h.rec.Open(label, epoch)
}

func (h *histRig) Cut(q history.Query) (*history.Cut, error) { return h.rec.Cut(q) }

func (h *histRig) Flush(ctx context.Context) error { return h.rec.Flush(ctx) }

// output is n1's recorded output in its tenancy, as its tenant reads it.
func (h *histRig) output(t *testing.T) string {
	t.Helper()
	chunks, err := h.rec.Read(testCtx(t), history.Query{Node: "n1", Epoch: h.epoch})
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, c := range chunks {
		if c.Kind == history.KindOutput {
			b.Write(c.Data)
		}
	}
	return b.String()
}

func (h *histRig) manager(t testing.TB, r sol.Resolver) *sol.Manager {
	t.Helper()
	m, err := sol.NewManager(sol.Config{Linger: 20 * time.Millisecond,
		Backoff: sol.Backoff{Min: 5 * time.Millisecond, Max: 50 * time.Millisecond}}, r, h, quietLog())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close(context.Background()) })
	return m
}

// heldN1 is a hub over a history rig and a simulated n1, holding n1.
func heldN1(t *testing.T) (*histRig, *sim.Lab, *sim.BMC, *sol.Manager) {
	t.Helper()
	h := newHistRig(t)
	lab := sim.NewLab()
	bmc := lab.BMC("n1", sim.ModeNormal)
	m := h.manager(t, lab)
	if err := m.Hold("n1"); err != nil {
		t.Fatal(err)
	}
	return h, lab, bmc, m
}

// TestHoldRecordsWithNoViewer: a held node's link opens with nobody
// attached and what it prints is recorded; Stats counts it up (down while
// its BMC fails); Release lets it close after linger.
func TestHoldRecordsWithNoViewer(t *testing.T) {
	h, _, bmc, m := heldN1(t)
	waitConsole(t, bmc, true)
	bmc.Inject([]byte("printed to nobody\r\n"))
	waitFor(t, "the output recorded", func() bool { return strings.Contains(h.output(t), "printed to nobody") })
	if st := m.Stats(); st.CapturedUp != 1 || st.CapturedDown != 0 || st.Viewers != 0 {
		t.Errorf("stats: got %+v, want one captured link up and no viewer", st)
	}
	m.Release("n1")
	waitConsole(t, bmc, false)
	if got := m.Holding(); len(got) != 0 {
		t.Errorf("holding after release: %v", got)
	}
}

// TestHoldComesBackAfterCut: an access change (Cut) ends the tenancy, not
// the capture: a held node gets a new link.
func TestHoldComesBackAfterCut(t *testing.T) {
	_, _, bmc, m := heldN1(t)
	waitFor(t, "the first link up", func() bool { return m.Stats().Opens == 1 && m.Stats().CapturedUp == 1 })
	m.Cut("n1", nil)
	waitFor(t, "a second link", func() bool { return m.Stats().Opens >= 2 && bmc.ConsoleActive() })
	if got := m.Holding(); len(got) != 1 || got[0] != "n1" {
		t.Errorf("holding after a cut: %v, want [n1]", got)
	}
}

// TestReplayFromHistory: a viewer's replay is its tenancy's history: also
// on a new hub (a restart) whose scrollback ring is empty, and never the
// history of another tenancy.
func TestReplayFromHistory(t *testing.T) {
	h, lab, bmc, m := heldN1(t)
	waitConsole(t, bmc, true)
	bmc.Inject([]byte("before the restart\r\n"))
	waitFor(t, "the output recorded", func() bool { return strings.Contains(h.output(t), "before the restart") })
	if err := m.Close(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	if err := h.rec.Flush(testCtx(t)); err != nil {
		t.Fatal(err)
	}

	m2 := h.manager(t, lab)
	if got := m2.Scrollback("n1"); len(got) != 0 {
		t.Fatalf("a new hub's ring: %q, want empty", got)
	}
	r := record(attach(t, m2, "n1", "after", sol.AttachOptions{Replay: true, Epoch: h.epoch}))
	r.waitData(t, "before the restart\r\n")
	other := record(attach(t, m2, "n1", "other tenancy", sol.AttachOptions{Replay: true, Epoch: h.epoch + 1000}))
	bmc.Inject([]byte("live\r\n"))
	other.waitData(t, "live\r\n")
	if got := other.Data(); strings.Contains(got, "before the restart") {
		t.Errorf("a viewer of another tenancy got %q in its replay", got)
	}
}

// TestHandOff: a held link with nobody attached is handed off at once:
// the hold ends, the console closes, the history says the link was lost
// and Stats counts it; the hub stores the history at once (its recorder
// here flushes only when asked), so that it goes before the next holder's.
// One with a viewer is not handed off (the viewer would see its link
// move), nor a node that is not held.
func TestHandOff(t *testing.T) {
	h := newHistRigEvery(t, time.Hour)
	lab := sim.NewLab()
	bmc := lab.BMC("n1", sim.ModeNormal)
	m := h.manager(t, lab)
	if err := m.Hold("n1"); err != nil {
		t.Fatal(err)
	}
	waitConsole(t, bmc, true)
	v := attach(t, m, "n1", "watching", sol.AttachOptions{})
	if m.HandOff("n1") {
		t.Fatal("a link with a viewer was handed off")
	}
	if got := m.Holding(); len(got) != 1 || !bmc.ConsoleActive() {
		t.Fatalf("after a refused hand-off: holding %v, console active %v; want n1 held and up", got, bmc.ConsoleActive())
	}
	v.Close()
	waitFor(t, "the viewer gone", func() bool { return m.Stats().Viewers == 0 })
	bmc.Inject([]byte("before the hand-off\r\n"))
	waitFor(t, "the output recorded", func() bool { return strings.Contains(h.output(t), "before the hand-off") })
	if !m.HandOff("n1") {
		t.Fatal("a held link with nobody attached was not handed off")
	}
	waitConsole(t, bmc, false)
	if got := m.Holding(); len(got) != 0 {
		t.Errorf("holding after the hand-off: %v", got)
	}
	if st := m.Stats(); st.HandOffs != 1 || st.CapturedUp+st.CapturedDown != 0 {
		t.Errorf("stats after the hand-off: %+v, want one hand-off and nothing captured", st)
	}
	if m.HandOff("n1") {
		t.Error("a node no longer held was handed off")
	}
	// The hub flushed the marker itself: it is in the database (the next
	// holder's output is stored after it).
	waitFor(t, "the link lost marker stored", func() bool {
		chunks, err := h.store.ReadHistory(testCtx(t), history.Query{Node: "n1", Epoch: h.epoch})
		if err != nil {
			t.Fatal(err)
		}
		return len(chunks) > 0 && chunks[len(chunks)-1].Kind == history.KindLinkLost &&
			strings.Contains(string(chunks[0].Data), "before the hand-off")
	})
}

// closeSpy resolves as the lab does, through BMCs whose consoles call
// onClose when they are closed.
type closeSpy struct {
	lab     *sim.Lab
	onClose func()
}

func (s closeSpy) Resolve(ctx context.Context, label string) (sol.BMC, error) {
	b, err := s.lab.Resolve(ctx, label)
	if err != nil {
		return nil, err
	}
	return closeSpyBMC{b, s.onClose}, nil
}

type closeSpyBMC struct {
	sol.BMC
	onClose func()
}

func (b closeSpyBMC) OpenConsole(ctx context.Context) (sol.Console, error) {
	con, err := b.BMC.OpenConsole(ctx)
	if err != nil {
		return nil, err
	}
	return closeSpyConsole{con, b.onClose}, nil
}

type closeSpyConsole struct {
	sol.Console
	onClose func()
}

func (c closeSpyConsole) Close() error {
	c.onClose()
	return c.Console.Close()
}

// TestHandOffStoredBeforeClose: a link handed off has its history (the
// output so far and the link lost marker) stored before its console is
// closed: in a cluster, closing the console releases the node's SOL lease
// (bastion/cluster), and the replica short of its share takes the lease
// at once and records the node in the same history; its chunks must come
// after. (They came after the lease release before: with a database slow
// to store the flush, the next holder's first chunks could go first, and
// two holders wrote the node's history at once.)
func TestHandOffStoredBeforeClose(t *testing.T) {
	h := newHistRigEvery(t, time.Hour)
	lab := sim.NewLab()
	bmc := lab.BMC("n1", sim.ModeNormal)
	var mu sync.Mutex
	var atClose []bool // per Close: the marker stored by then
	spy := closeSpy{lab: lab, onClose: func() {
		chunks, err := h.store.ReadHistory(context.Background(), history.Query{Node: "n1", Epoch: h.epoch})
		mu.Lock()
		defer mu.Unlock()
		atClose = append(atClose, err == nil && len(chunks) > 0 && chunks[len(chunks)-1].Kind == history.KindLinkLost)
	}}
	m, err := sol.NewManager(sol.Config{Linger: 20 * time.Millisecond,
		Backoff: sol.Backoff{Min: 5 * time.Millisecond, Max: 50 * time.Millisecond}}, spy, h, quietLog())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close(context.Background()) })
	if err := m.Hold("n1"); err != nil {
		t.Fatal(err)
	}
	waitConsole(t, bmc, true)
	waitFor(t, "the link up", func() bool { return m.LinkUp("n1") })
	bmc.Inject([]byte("last words\r\n"))
	waitFor(t, "the output read", func() bool { return strings.Contains(string(m.Scrollback("n1")), "last words") })
	if !m.HandOff("n1") {
		t.Fatal("a held link with nobody attached was not handed off")
	}
	waitConsole(t, bmc, false)
	waitFor(t, "the console closed", func() bool { mu.Lock(); defer mu.Unlock(); return len(atClose) > 0 })
	mu.Lock()
	defer mu.Unlock()
	if !atClose[len(atClose)-1] {
		t.Error("the console of the link handed off was closed (its lease released) before its history and link lost marker were stored")
	}
}

package sol_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"reflect"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/obmd/obmd/sol"
	"github.com/obmd/obmd/sol/sim"
)

func TestNewManagerValidates(t *testing.T) {
	lab := sim.NewLab()
	tests := []struct {
		name string
		cfg  sol.Config
		r    sol.Resolver
		ok   bool
	}{
		{"defaults", sol.Config{}, lab, true},
		{"nil resolver", sol.Config{}, nil, false},
		{"negative scrollback", sol.Config{Scrollback: -1}, lab, false},
		{"negative linger", sol.Config{Linger: -time.Second}, lab, false},
		{"max below min", sol.Config{Backoff: sol.Backoff{Min: time.Second, Max: time.Millisecond}}, lab, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := sol.NewManager(tt.cfg, tt.r, nil, quietLog())
			if got := err == nil; got != tt.ok {
				t.Errorf("got ok %v (%v), want %v", got, err, tt.ok)
			}
		})
	}
}

func TestAttachRefused(t *testing.T) {
	m := newManager(t, sol.Config{}, sim.NewLab())
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := m.Attach(cancelled, "n1", sol.AttachOptions{}); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled ctx: got %v, want %v", err, context.Canceled)
	}
	if _, err := m.Attach(testCtx(t), "", sol.AttachOptions{}); err == nil {
		t.Error("empty label: got nil error")
	}
}

func TestFanoutIdentical(t *testing.T) {
	for _, viewers := range []int{2, 10} {
		t.Run(fmt.Sprintf("%d viewers", viewers), func(t *testing.T) {
			lab := sim.NewLab()
			b := lab.BMC("n1", sim.ModeNormal)
			m := newManager(t, sol.Config{}, lab)
			var recs []*recorder
			for i := range viewers {
				recs = append(recs, record(attach(t, m, "n1", fmt.Sprintf("v%d", i), sol.AttachOptions{Replay: true})))
			}
			waitConsole(t, b, true)
			lines := numbered(0, 2000)
			for _, l := range lines {
				b.Inject(l)
			}
			want := string(join(lines))
			for _, r := range recs {
				waitFor(t, r.v.Name()+" to get everything", func() bool { return len(r.Data()) >= len(want) })
				if got := r.Data(); got != want {
					t.Errorf("%s: got %d bytes differing from the %d injected", r.v.Name(), len(got), len(want))
				}
			}
			if got := len(m.Viewers("n1")); got != viewers {
				t.Errorf("got %d viewers, want %d", got, viewers)
			}
		})
	}
}

func TestOnlyWriterReachesSerial(t *testing.T) {
	lab := sim.NewLab()
	b := lab.BMC("n1", sim.ModeNormal)
	m := newManager(t, sol.Config{}, lab)
	v1 := attach(t, m, "n1", "alice", sol.AttachOptions{})
	v2 := attach(t, m, "n1", "bob", sol.AttachOptions{})
	r1, r2 := record(v1), record(v2)
	if !v1.Writer() || v2.Writer() {
		t.Fatalf("got writers %v/%v, want the first viewer only", v1.Writer(), v2.Writer())
	}
	if _, err := v2.Write([]byte("echo bob\r")); !errors.Is(err, sol.ErrReadOnly) {
		t.Errorf("reader's write: got %v, want %v", err, sol.ErrReadOnly)
	}
	if n, err := v1.Write([]byte("echo alice\r")); err != nil || n != 11 {
		t.Fatalf("writer's write: got %d, %v", n, err)
	}
	r1.waitData(t, "\r\nalice\r\n")
	r2.waitData(t, "\r\nalice\r\n")
	if got, want := string(b.Typed()), "echo alice\r"; got != want {
		t.Errorf("got typed %q, want %q", got, want)
	}
	want := []sol.ViewerInfo{{Name: "alice", Writer: true}, {Name: "bob"}}
	got := m.Viewers("n1")
	for i := range got {
		got[i].Since = time.Time{}
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got viewers %+v, want %+v", got, want)
	}
}

func TestTakeWrite(t *testing.T) {
	lab := sim.NewLab()
	b := lab.BMC("n1", sim.ModeNormal)
	m := newManager(t, sol.Config{}, lab)
	alice := attach(t, m, "n1", "alice", sol.AttachOptions{})
	bob := attach(t, m, "n1", "bob", sol.AttachOptions{})
	ra := record(alice)
	record(bob)

	bob.TakeWrite()
	ra.waitNotice(t, "bob took over writing; you are read-only")
	if alice.Writer() || !bob.Writer() {
		t.Errorf("after takeover: got writers %v/%v, want bob only", alice.Writer(), bob.Writer())
	}
	if _, err := alice.Write([]byte("a")); !errors.Is(err, sol.ErrReadOnly) {
		t.Errorf("previous writer: got %v, want %v", err, sol.ErrReadOnly)
	}
	if _, err := bob.Write([]byte("b")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "bob's key on the serial side", func() bool { return string(b.Typed()) == "b" })

	bob.ReadOnly()
	if _, err := bob.Write([]byte("c")); !errors.Is(err, sol.ErrReadOnly) {
		t.Errorf("after ReadOnly: got %v, want %v", err, sol.ErrReadOnly)
	}
	// The writer leaving promotes nobody.
	alice.TakeWrite()
	alice.Close()
	if bob.Writer() {
		t.Error("bob became writer when alice left; want nobody writing")
	}
	for _, vi := range m.Viewers("n1") {
		if vi.Writer {
			t.Errorf("got writer %q, want none", vi.Name)
		}
	}
	if _, err := alice.Write([]byte("d")); !errors.Is(err, sol.ErrDetached) {
		t.Errorf("detached viewer's write: got %v, want %v", err, sol.ErrDetached)
	}
}

// TestBlockedWriteLosesWriter: a Write blocked on a full input queue (the
// link takes nothing) returns ErrReadOnly as soon as its viewer stops being
// the writer, not when the link drains: the bastion parses escapes on the
// goroutine that writes, so they would be dead until then.
func TestBlockedWriteLosesWriter(t *testing.T) {
	tests := []struct {
		name   string
		demote func(w, other *sol.Viewer)
	}{
		{"another takes over", func(_, other *sol.Viewer) { other.TakeWrite() }},
		{"read-only", func(w, _ *sol.Viewer) { w.ReadOnly() }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := &gateBMC{gate: make(chan struct{})} // never opened: the link's first Write never returns
			m := newManager(t, sol.Config{}, g)
			w := attach(t, m, "n1", "w", sol.AttachOptions{})
			other := attach(t, m, "n1", "other", sol.AttachOptions{ReadOnly: true})
			waitFor(t, "the link", func() bool { return m.Stats().LinksUp == 1 })
			errc := make(chan error, 1)
			go func() {
				_, err := w.Write(make([]byte, 256<<10)) // far more than the input queue holds
				errc <- err
			}()
			select {
			case err := <-errc:
				t.Fatalf("Write returned %v before the queue was full", err)
			case <-time.After(50 * time.Millisecond): // blocked, as it should be
			}
			tt.demote(w, other)
			select {
			case err := <-errc:
				if !errors.Is(err, sol.ErrReadOnly) {
					t.Errorf("blocked Write: got %v, want %v", err, sol.ErrReadOnly)
				}
			case <-time.After(wait):
				t.Fatalf("Write still blocked %v after its viewer stopped being the writer", wait)
			}
		})
	}
}

func TestReadOnlyAttach(t *testing.T) {
	tests := []struct {
		name  string
		first sol.AttachOptions
		want  []bool // writer flags of first and second
	}{
		{"read-only first", sol.AttachOptions{ReadOnly: true}, []bool{false, true}},
		{"writer first", sol.AttachOptions{}, []bool{true, false}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := newManager(t, sol.Config{}, sim.NewLab())
			v1 := attach(t, m, "n1", "one", tt.first)
			v2 := attach(t, m, "n1", "two", sol.AttachOptions{})
			if got := []bool{v1.Writer(), v2.Writer()}; !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got writers %v, want %v", got, tt.want)
			}
		})
	}
	t.Run("read-only alone", func(t *testing.T) {
		m := newManager(t, sol.Config{}, sim.NewLab())
		v := attach(t, m, "n1", "ro", sol.AttachOptions{ReadOnly: true})
		if v.Writer() {
			t.Error("read-only viewer became writer")
		}
		if _, err := v.Write([]byte("x")); !errors.Is(err, sol.ErrReadOnly) {
			t.Errorf("got %v, want %v", err, sol.ErrReadOnly)
		}
	})
}

func TestStalledViewerSkipsAhead(t *testing.T) {
	lab := sim.NewLab()
	b := lab.BMC("n1", sim.ModeNormal)
	m := newManager(t, sol.Config{QueueBytes: 4 << 10}, lab)
	stalled := attach(t, m, "n1", "stalled", sol.AttachOptions{})
	active := record(attach(t, m, "n1", "active", sol.AttachOptions{}))
	waitConsole(t, b, true)

	// The active viewer keeps up with output (lockstep) and gets every byte
	// while the stalled one reads nothing.
	full := join(numbered(0, 20000)) // 240 KB, 60 times the queue
	injectLockstep(t, b, full, active)
	active.checkGaps(t, full)
	if got := active.Data(); got != string(full) {
		t.Errorf("active viewer: got %d bytes, want all %d", len(got), len(full))
	}
	if m.Stats().Overflows == 0 {
		t.Error("got no overflow counted")
	}

	r := record(stalled)
	waitFor(t, "the stalled viewer to catch up", func() bool { return r.seen() >= len(full) })
	r.checkGaps(t, full)
	r.mu.Lock()
	skipped := r.skipped
	r.mu.Unlock()
	if skipped == 0 {
		t.Error("stalled viewer: got Skipped 0, want > 0")
	}
	if isDone(stalled) {
		t.Errorf("stalled viewer ended (%v); want it to skip ahead", stalled.Err())
	}
}

func TestDropSlow(t *testing.T) {
	lab := sim.NewLab()
	b := lab.BMC("n1", sim.ModeNormal)
	m := newManager(t, sol.Config{QueueBytes: 1 << 10, DropSlow: true}, lab)
	stalled := attach(t, m, "n1", "stalled", sol.AttachOptions{})
	active := record(attach(t, m, "n1", "active", sol.AttachOptions{}))
	waitConsole(t, b, true)
	full := join(numbered(0, 1000))
	injectLockstep(t, b, full, active)
	waitFor(t, "the slow viewer to be dropped", func() bool { return isDone(stalled) })
	if !errors.Is(stalled.Err(), sol.ErrSlowViewer) {
		t.Errorf("got cause %v, want %v", stalled.Err(), sol.ErrSlowViewer)
	}
	waitFor(t, "the active viewer to get everything", func() bool { return active.seen() >= len(full) })
	if active.Data() != string(full) {
		t.Error("active viewer lost output")
	}
	if got := len(m.Viewers("n1")); got != 1 {
		t.Errorf("got %d viewers, want 1", got)
	}
}

func TestReplayThenLive(t *testing.T) {
	tests := []struct {
		name       string
		scrollback int
		complete   bool // the replay covers everything before the attach
	}{
		{"whole history", 1 << 20, true},
		{"small ring", 1 << 10, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			lab := sim.NewLab()
			b := lab.BMC("n1", sim.ModeNormal)
			m := newManager(t, sol.Config{Scrollback: tt.scrollback}, lab)
			first := record(attach(t, m, "n1", "first", sol.AttachOptions{}))
			waitConsole(t, b, true)

			lines := numbered(0, 3000)
			full := join(lines)
			half := make(chan struct{})
			go func() {
				for i, l := range lines {
					if i == len(lines)/3 {
						close(half)
					}
					if i%50 == 0 {
						runtime.Gosched()
					}
					b.Inject(l)
				}
			}()
			<-half
			first.waitData(t, "line 00100\r\n") // the attach lands mid-stream
			late := record(attach(t, m, "n1", "late", sol.AttachOptions{Replay: true}))
			last := string(lines[len(lines)-1])
			late.waitData(t, last)
			got := late.Data()
			switch {
			case tt.complete && got != string(full):
				t.Errorf("got %d bytes, want exactly the %d injected", len(got), len(full))
			case !tt.complete && !bytes.HasSuffix(full, []byte(got)):
				t.Errorf("got %d bytes that are not a tail of the stream (loss or duplicate)", len(got))
			}
			if !tt.complete && len(got) >= len(full) {
				t.Errorf("got the whole stream (%d bytes) through a %d-byte ring", len(got), tt.scrollback)
			}
		})
	}
}

func TestLinger(t *testing.T) {
	t.Run("reattach within linger reuses the link", func(t *testing.T) {
		lab := sim.NewLab()
		b := lab.BMC("n1", sim.ModeNormal)
		m := newManager(t, sol.Config{Linger: time.Minute}, lab)
		v := attach(t, m, "n1", "one", sol.AttachOptions{})
		r := record(v)
		waitConsole(t, b, true)
		b.Inject([]byte("hello\r\n"))
		r.waitData(t, "hello\r\n")
		v.Close()
		<-r.closed
		if !b.ConsoleActive() {
			t.Fatal("console closed right after the last viewer left; want it to linger")
		}
		r2 := record(attach(t, m, "n1", "two", sol.AttachOptions{Replay: true}))
		r2.waitData(t, "hello\r\n")
		if _, opens, _ := b.ConsoleStats(); opens != 1 {
			t.Errorf("got %d console opens, want 1", opens)
		}
	})
	t.Run("link closes after linger", func(t *testing.T) {
		lab := sim.NewLab()
		b := lab.BMC("n1", sim.ModeNormal)
		m := newManager(t, sol.Config{Linger: 30 * time.Millisecond}, lab)
		if m.LinkUp("n1") {
			t.Error("LinkUp before any viewer: got true, want false")
		}
		v := attach(t, m, "n1", "one", sol.AttachOptions{})
		waitConsole(t, b, true)
		b.Inject([]byte("hello\r\n"))
		waitFor(t, "scrollback", func() bool { return len(m.Scrollback("n1")) > 0 })
		if !m.LinkUp("n1") || m.LinkUp("n2") {
			t.Errorf("LinkUp with a console open: got n1 %v, n2 %v; want true, false", m.LinkUp("n1"), m.LinkUp("n2"))
		}
		v.Close()
		waitConsole(t, b, false)
		waitFor(t, "the link to go", func() bool { return m.Stats().Links == 0 })
		if m.LinkUp("n1") {
			t.Error("LinkUp after the link closed: got true, want false")
		}
		if got := m.Scrollback("n1"); len(got) != 0 {
			t.Errorf("got scrollback %q after the link closed, want none", got)
		}
	})
}

func TestCut(t *testing.T) {
	lab := sim.NewLab()
	b := lab.BMC("n1", sim.ModeNormal)
	other := lab.BMC("n2", sim.ModeNormal)
	m := newManager(t, sol.Config{Linger: time.Minute}, lab)
	v1 := attach(t, m, "n1", "one", sol.AttachOptions{})
	v2 := attach(t, m, "n1", "two", sol.AttachOptions{ReadOnly: true})
	r1, r2 := record(v1), record(v2)
	bystander := record(attach(t, m, "n2", "bystander", sol.AttachOptions{}))
	waitConsole(t, b, true)
	waitConsole(t, other, true)
	b.Inject([]byte("secret-1\r\n"))
	r1.waitData(t, "secret-1")
	r2.waitData(t, "secret-1")

	cause := errors.New("access to n1 was revoked (token rotated)")
	m.Cut("n1", cause)
	b.Inject([]byte("secret-2\r\n")) // may still reach the old link: never shown
	for _, v := range []*sol.Viewer{v1, v2} {
		if !isDone(v) {
			t.Fatalf("%s not done when Cut returned", v.Name())
		}
		if !errors.Is(v.Err(), cause) {
			t.Errorf("%s: got cause %v, want %v", v.Name(), v.Err(), cause)
		}
	}
	if got := m.Scrollback("n1"); len(got) != 0 {
		t.Errorf("got scrollback %q after Cut, want none", got)
	}
	<-r1.closed
	<-r2.closed

	next := record(attach(t, m, "n1", "next", sol.AttachOptions{Replay: true}))
	waitFor(t, "a second console", func() bool {
		_, opens, _ := b.ConsoleStats()
		return opens == 2 && b.ConsoleActive()
	})
	b.Inject([]byte("fresh\r\n"))
	next.waitData(t, "fresh\r\n")
	if got := next.Data(); strings.Contains(got, "secret") {
		t.Errorf("next tenant saw %q", got)
	}
	if _, _, deacts := b.ConsoleStats(); deacts != 0 {
		t.Errorf("got %d deactivations, want 0 (the new link waits for the old one)", deacts)
	}
	if isDone(bystander.v) {
		t.Error("a viewer of another node was cut")
	}
	m.Cut("unknown", nil) // no-op
}

func TestBreak(t *testing.T) {
	lab := sim.NewLab()
	b := lab.BMC("n1", sim.ModeNormal)
	m := newManager(t, sol.Config{}, lab)
	w := attach(t, m, "n1", "w", sol.AttachOptions{})
	ro := attach(t, m, "n1", "ro", sol.AttachOptions{})
	waitFor(t, "the link", func() bool { return m.Stats().LinksUp == 1 })
	if err := ro.Break(testCtx(t)); !errors.Is(err, sol.ErrReadOnly) {
		t.Errorf("reader's break: got %v, want %v", err, sol.ErrReadOnly)
	}
	if err := w.Break(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	if got := b.Breaks(); got != 1 {
		t.Errorf("got %d breaks, want 1", got)
	}
}

// TestBreakAfterPendingInput: a Break goes to the console after the input
// written before it, even when that input is still queued ("Enter, then
// ~B" must reach the node in that order).
func TestBreakAfterPendingInput(t *testing.T) {
	for round := range 20 {
		g := &gateBMC{gate: make(chan struct{})}
		m := newManager(t, sol.Config{}, g)
		v := attach(t, m, fmt.Sprint("n", round), "w", sol.AttachOptions{})
		if _, err := v.Write([]byte("a")); err != nil { // held at the gate (or queued)
			t.Fatal(err)
		}
		waitFor(t, "the link", func() bool { return m.Stats().LinksUp == 1 })
		if _, err := v.Write([]byte("\r")); err != nil { // queued behind it
			t.Fatal(err)
		}
		errc := make(chan error, 1)
		go func() { errc <- v.Break(testCtx(t)) }()
		time.Sleep(2 * time.Millisecond) // let the Break reach the link (the race, if any, is then on)
		close(g.gate)
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
		if got, want := bytes.Join(g.Writes(), nil), []byte("a\r<break>"); !bytes.Equal(got, want) {
			t.Fatalf("round %d: got %q, want %q", round, got, want)
		}
		v.Close()
	}
}

func TestInputCoalesced(t *testing.T) {
	g := &gateBMC{gate: make(chan struct{})}
	m := newManager(t, sol.Config{}, g)
	v := attach(t, m, "n1", "w", sol.AttachOptions{})
	want := []byte("x")
	if _, err := v.Write(want); err != nil {
		t.Fatal(err)
	}
	// The first write is now held at the gate; keystrokes pile up.
	waitFor(t, "the link", func() bool { return m.Stats().LinksUp == 1 })
	for i := range 200 {
		k := []byte{byte('a' + i%26)}
		want = append(want, k...)
		if _, err := v.Write(k); err != nil {
			t.Fatal(err)
		}
	}
	close(g.gate)
	waitFor(t, "all input", func() bool { return len(bytes.Join(g.Writes(), nil)) == len(want) })
	writes := g.Writes()
	if got := bytes.Join(writes, nil); !bytes.Equal(got, want) {
		t.Errorf("got input %q, want %q", got, want)
	}
	if len(writes) > 3 {
		t.Errorf("got %d Write calls for 201 keystrokes, want them coalesced (<= 3)", len(writes))
	}
}

func TestCloseWaitsForEverything(t *testing.T) {
	before := runtime.NumGoroutine()
	lab := sim.NewLab()
	m, err := sol.NewManager(sol.Config{Linger: time.Minute, OpenTimeout: time.Hour}, lab, nil, quietLog())
	if err != nil {
		t.Fatal(err)
	}
	var bmcs []*sim.BMC
	var recs []*recorder
	for i := range 3 {
		label := fmt.Sprintf("n%d", i)
		bmcs = append(bmcs, lab.BMC(label, sim.ModeNormal))
		for j := range 2 {
			recs = append(recs, record(attach(t, m, label, fmt.Sprintf("v%d", j), sol.AttachOptions{})))
		}
	}
	slow := lab.BMC("slow", sim.ModeNormal) // its open never finishes on its own
	slow.SetDelay(time.Hour)
	recs = append(recs, record(attach(t, m, "slow", "s", sol.AttachOptions{})))
	for _, b := range bmcs {
		waitConsole(t, b, true)
	}
	if err := m.Close(testCtx(t)); err != nil {
		t.Fatalf("close: %v", err)
	}
	for _, r := range recs {
		if !isDone(r.v) || !errors.Is(r.v.Err(), sol.ErrShutdown) {
			t.Errorf("%s: got done %v cause %v, want done with %v", r.v.Name(), isDone(r.v), r.v.Err(), sol.ErrShutdown)
		}
		<-r.closed
	}
	for i, b := range bmcs {
		if b.ConsoleActive() {
			t.Errorf("n%d: console still active after Close", i)
		}
	}
	if _, err := m.Attach(testCtx(t), "n0", sol.AttachOptions{}); !errors.Is(err, sol.ErrShutdown) {
		t.Errorf("attach after close: got %v, want %v", err, sol.ErrShutdown)
	}
	if err := m.Close(testCtx(t)); err != nil {
		t.Errorf("second close: %v", err)
	}
	if s := m.Stats(); s.Links != 0 || s.LinksUp != 0 || s.Viewers != 0 {
		t.Errorf("got stats %+v, want no links or viewers", s)
	}
	waitFor(t, "goroutines to end", func() bool { return runtime.NumGoroutine() <= before })
}

// injectLockstep prints full in 1000-byte pieces, each once r has seen the
// previous one: r reads as fast as output comes, and is never behind by more
// than a piece.
func injectLockstep(t *testing.T, b *sim.BMC, full []byte, r *recorder) {
	t.Helper()
	for off := 0; off < len(full); {
		end := min(off+1000, len(full))
		b.Inject(full[off:end])
		off = end
		waitFor(t, fmt.Sprintf("%s to see %d bytes", r.v.Name(), off), func() bool { return r.seen() >= off })
	}
}

// TestFlush: Flush waits for the writer's input to go to the link and says
// whether it did: input the link does not take within OpenTimeout is
// ErrInputLost; once taken, nil. A viewer that is not the writer has
// nothing to wait for.
func TestFlush(t *testing.T) {
	g := &gateBMC{gate: make(chan struct{})} // held: the link's Write waits
	m := newManager(t, sol.Config{OpenTimeout: 100 * time.Millisecond}, g)
	w := attach(t, m, "n1", "w", sol.AttachOptions{})
	r := attach(t, m, "n1", "r", sol.AttachOptions{ReadOnly: true})
	if _, err := w.Write([]byte("abc")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the link", func() bool { return m.Stats().LinksUp == 1 })
	if err := w.Flush(); !errors.Is(err, sol.ErrInputLost) {
		t.Errorf("Flush with the link's Write held: got %v, want ErrInputLost", err)
	}
	if err := r.Flush(); err != nil {
		t.Errorf("Flush of a viewer that wrote nothing: got %v, want nil", err)
	}
	close(g.gate)
	if err := w.Flush(); err != nil {
		t.Errorf("Flush with the gate open: got %v, want nil", err)
	}
	if got := bytes.Join(g.Writes(), nil); !bytes.Equal(got, []byte("abc")) {
		t.Errorf("console writes: got %q, want abc", got)
	}
}

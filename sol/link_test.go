package sol_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/obmd/obmd/sol"
	"github.com/obmd/obmd/sol/sim"
)

func TestLinkLossReconnects(t *testing.T) {
	lab := sim.NewLab()
	b := lab.BMC("n1", sim.ModeNormal)
	m := newManager(t, sol.Config{}, lab)
	r := record(attach(t, m, "n1", "one", sol.AttachOptions{}))
	waitConsole(t, b, true)
	b.Inject([]byte("before\r\n"))
	r.waitData(t, "before\r\n")

	b.DropLink()
	r.waitNotice(t, "console link lost, reconnecting")
	r.waitNotice(t, "console link restored")
	b.Inject([]byte("after\r\n"))
	r.waitData(t, "after\r\n")
	if got := r.Notices(); len(got) != 2 {
		t.Errorf("got notices %q, want exactly lost and restored", got)
	}
	s := m.Stats()
	if s.Reconnects != 1 || s.Opens != 2 || s.LinksUp != 1 {
		t.Errorf("got stats %+v, want 1 reconnect, 2 opens, 1 link up", s)
	}
	if got := string(m.Scrollback("n1")); got != "before\r\nafter\r\n" {
		t.Errorf("got scrollback %q, want it kept across the reconnect", got)
	}
}

func TestPayloadActiveDeactivatesAndRetries(t *testing.T) {
	lab := sim.NewLab()
	b := lab.BMC("n1", sim.ModeNormal)
	stale, err := b.OpenConsole(testCtx(t)) // a killed client's session
	if err != nil {
		t.Fatal(err)
	}
	m := newManager(t, sol.Config{}, lab)
	r := record(attach(t, m, "n1", "one", sol.AttachOptions{}))
	waitFor(t, "the link", func() bool { return m.Stats().LinksUp == 1 })
	b.Inject([]byte("ok\r\n"))
	r.waitData(t, "ok\r\n")
	if attempts, opens, deacts := b.ConsoleStats(); attempts != 3 || opens != 2 || deacts != 1 {
		t.Errorf("got attempts/opens/deactivations %d/%d/%d, want 3/2/1", attempts, opens, deacts)
	}
	if _, err := stale.Read(make([]byte, 1)); !errors.Is(err, sim.ErrDeactivated) {
		t.Errorf("stale session: got %v, want %v", err, sim.ErrDeactivated)
	}
	if got := r.Notices(); len(got) != 0 {
		t.Errorf("got notices %q, want none (recovered at once)", got)
	}
	if s := m.Stats(); s.OpenErrors != 0 {
		t.Errorf("got %d open errors, want 0", s.OpenErrors)
	}
}

func TestOpenFailuresBackOff(t *testing.T) {
	lab := sim.NewLab()
	b := lab.BMC("n1", sim.ModeNormal)
	b.SetFail(sol.NewError(sol.FaultUnreachable, errors.New("dial udp 192.0.2.8:623: no route to host")))
	m := newManager(t, sol.Config{Backoff: sol.Backoff{Min: 20 * time.Millisecond, Max: 80 * time.Millisecond}}, lab)
	r := record(attach(t, m, "n1", "one", sol.AttachOptions{}))
	time.Sleep(600 * time.Millisecond)
	attempts, _, _ := b.ConsoleStats()
	// Waits are 10-20, 20-40, 40-80, then 40-80 ms: about 10 attempts in
	// 600 ms. A tight loop would make thousands.
	if attempts < 2 || attempts > 25 {
		t.Errorf("got %d open attempts in 600ms, want 2..25", attempts)
	}
	want := "cannot open console: the BMC is unreachable; retrying" // never the address
	if got := r.Notices(); len(got) != 1 || got[0] != want {
		t.Errorf("got notices %q, want once %q", got, want)
	}
	late := record(attach(t, m, "n1", "late", sol.AttachOptions{}))
	late.waitNotice(t, want) // a viewer attaching later learns the state too

	b.SetFail(nil)
	r.waitNotice(t, "console connected")
	waitConsole(t, b, true)
	b.Inject([]byte("up\r\n"))
	r.waitData(t, "up\r\n")
	if s := m.Stats(); s.OpenErrors < 2 {
		t.Errorf("got %d open errors, want >= 2", s.OpenErrors)
	}
}

func TestPayloadActiveTwiceBacksOff(t *testing.T) {
	// The payload is taken again right after each deactivation: the
	// manager must back off, not spin.
	b := &stubbornBMC{BMC: sim.NewLab().BMC("n1", sim.ModeNormal)}
	m := newManager(t, sol.Config{Backoff: sol.Backoff{Min: 20 * time.Millisecond, Max: 80 * time.Millisecond}},
		resolverFunc(func(context.Context, string) (sol.BMC, error) { return b, nil }))
	r := record(attach(t, m, "n1", "one", sol.AttachOptions{}))
	r.waitNotice(t, "SOL payload already active")
	time.Sleep(300 * time.Millisecond)
	if got := b.deacts.Load(); got < 1 || got > 15 {
		t.Errorf("got %d deactivations in 300ms, want 1..15", got)
	}
}

// stubbornBMC always reports the payload active.
type stubbornBMC struct {
	*sim.BMC
	deacts atomic.Int64
}

func (s *stubbornBMC) OpenConsole(context.Context) (sol.Console, error) {
	return nil, fmt.Errorf("stubborn: %w", sol.ErrPayloadActive)
}

func (s *stubbornBMC) DeactivateConsole(context.Context) error {
	s.deacts.Add(1)
	return nil
}

func TestFlappingLinkBacksOff(t *testing.T) {
	// Every console opens fine and dies at once: reconnects must back off.
	b := &flappyBMC{BMC: sim.NewLab().BMC("n1", sim.ModeNormal)}
	m := newManager(t, sol.Config{Backoff: sol.Backoff{Min: 20 * time.Millisecond, Max: 80 * time.Millisecond}},
		resolverFunc(func(context.Context, string) (sol.BMC, error) { return b, nil }))
	r := record(attach(t, m, "n1", "one", sol.AttachOptions{}))
	r.waitNotice(t, "console link lost, reconnecting")
	time.Sleep(600 * time.Millisecond)
	if got := b.opens.Load(); got < 2 || got > 25 {
		t.Errorf("got %d opens in 600ms, want 2..25", got)
	}
}

// flappyBMC opens consoles that are lost at once.
type flappyBMC struct {
	*sim.BMC
	opens atomic.Int64
}

func (f *flappyBMC) OpenConsole(context.Context) (sol.Console, error) {
	f.opens.Add(1)
	return deadConsole{}, nil
}

type deadConsole struct{}

func (deadConsole) Read([]byte) (int, error)    { return 0, io.EOF }
func (deadConsole) Write(p []byte) (int, error) { return len(p), nil }
func (deadConsole) Break(context.Context) error { return nil }
func (deadConsole) Close() error                { return nil }

type resolverFunc func(context.Context, string) (sol.BMC, error)

func (f resolverFunc) Resolve(ctx context.Context, label string) (sol.BMC, error) {
	return f(ctx, label)
}

func TestSlowBMCDoesNotBlockAttach(t *testing.T) {
	lab := sim.NewLab()
	b := lab.BMC("n1", sim.ModeNormal)
	b.SetDelay(time.Hour)
	var mu sync.Mutex
	var deadlines []time.Duration
	res := resolverFunc(func(ctx context.Context, label string) (sol.BMC, error) {
		dl, ok := ctx.Deadline()
		mu.Lock()
		if ok {
			deadlines = append(deadlines, time.Until(dl))
		} else {
			deadlines = append(deadlines, -1)
		}
		mu.Unlock()
		return lab.Resolve(ctx, label)
	})
	m := newManager(t, sol.Config{OpenTimeout: 50 * time.Millisecond}, res)
	start := time.Now()
	r := record(attach(t, m, "n1", "one", sol.AttachOptions{}))
	other := lab.BMC("n2", sim.ModeNormal)
	r2 := record(attach(t, m, "n2", "two", sol.AttachOptions{}))
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("attach took %v with a BMC that never answers", d)
	}
	// Another node is not held up by the slow one.
	waitConsole(t, other, true)
	other.Inject([]byte("fine\r\n"))
	r2.waitData(t, "fine\r\n")
	r.waitNotice(t, "cannot open console: the BMC did not answer; retrying")
	mu.Lock()
	defer mu.Unlock()
	for _, d := range deadlines {
		if d < 0 || d > 50*time.Millisecond {
			t.Errorf("got Resolve deadline in %v, want within the 50ms OpenTimeout", d)
		}
	}
}

func TestMockConsoleThroughManager(t *testing.T) {
	lab := sim.NewLab()
	lab.BMC("m1", sim.ModeMock)
	m := newManager(t, sol.Config{Linger: time.Millisecond}, lab)
	for round := range 2 {
		v := attach(t, m, "m1", "hil", sol.AttachOptions{})
		r := record(v)
		r.waitData(t, "\n10\n")
		if got := r.Data(); !strings.HasPrefix(got, "0\n1\n2\n3\n4\n5\n6\n7\n8\n9\n10\n") {
			t.Errorf("round %d: got %q, want the counter from 0", round, got[:min(len(got), 40)])
		}
		v.Close()
		waitFor(t, "the link to close", func() bool { return m.Stats().Links == 0 })
	}
}

// TestMockConsoleSlowViewer: an Exclusive console (the mock) is read only
// as fast as its one viewer takes its output, however slowly: the viewer
// never skips ahead, so its counter runs on from 0 without a gap, and the
// link reads no further ahead of it than the viewer's queue holds.
func TestMockConsoleSlowViewer(t *testing.T) {
	const queue = 8 << 10
	lab := sim.NewLab()
	lab.BMC("m1", sim.ModeMock)
	m := newManager(t, sol.Config{QueueBytes: queue}, lab)
	v := attach(t, m, "m1", "slow", sol.AttachOptions{})
	var got []byte
	for len(got) < 256<<10 {
		select {
		case c := <-v.Output():
			if c.Skipped > 0 {
				t.Fatalf("after %d bytes: skipped %d, want no gap", len(got), c.Skipped)
			}
			got = append(got, c.Data...)
		case <-time.After(wait):
			t.Fatalf("no output after %d bytes", len(got))
		}
		time.Sleep(time.Millisecond) // a slow reader: the queue fills meanwhile
	}
	time.Sleep(50 * time.Millisecond) // stop reading: the link must stop too
	// Taken by the viewer: got; held by its pump (one chunk) and queue: at
	// most 2*queue.
	if st := m.Stats(); st.BytesOut > uint64(len(got)+2*queue) || st.Overflows != 0 {
		t.Errorf("got %d bytes read from the console and %d overflows after the viewer took %d, want at most %d read, no overflow",
			st.BytesOut, st.Overflows, len(got), len(got)+2*queue)
	}
	if want := counter(len(got)); !bytes.Equal(got, want) {
		i := firstDiff(got, want)
		t.Errorf("counter differs at byte %d: got %q, want %q", i, got[i:min(i+20, len(got))], want[i:min(i+20, len(want))])
	}
	v.Close()
}

// counter returns the mock console's first n bytes: "0\n1\n2\n...".
func counter(n int) []byte {
	var b []byte
	for i := 0; len(b) < n; i++ {
		b = strconv.AppendInt(b, int64(i), 10)
		b = append(b, '\n')
	}
	return b[:n]
}

func firstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

// TestMockConsoleExclusive: an Exclusive BMC (the mock type) gets a new
// console for the next viewer even right after the last one left and with
// a long linger, so every new stream counts from 0; its link closes as the
// last viewer leaves.
func TestMockConsoleExclusive(t *testing.T) {
	lab := sim.NewLab()
	b := lab.BMC("m1", sim.ModeMock)
	m := newManager(t, sol.Config{Linger: time.Hour}, lab)
	for round := range 3 {
		v := attach(t, m, "m1", "hil", sol.AttachOptions{})
		r := record(v)
		r.waitData(t, "\n3\n")
		if got := r.Data(); !strings.HasPrefix(got, "0\n1\n2\n3\n") {
			t.Errorf("round %d: got %q, want the counter from 0", round, got[:min(len(got), 40)])
		}
		v.Close()
		if got := m.Viewers("m1"); len(got) != 0 {
			t.Errorf("round %d: got viewers %v after the last one closed, want none", round, got)
		}
	}
	waitConsole(t, b, false)
	waitFor(t, "the link to go", func() bool { return m.Stats().Links == 0 })
	if _, opens, _ := b.ConsoleStats(); opens != 3 {
		t.Errorf("got %d console opens, want 3 (one per viewer)", opens)
	}
}

// TestMockConsoleDisplaced: a new viewer of an Exclusive console displaces
// the current one (which ends with ErrDisplaced) and counts from 0, even
// when the current one has not left: the server may not yet have noticed
// that an HTTP reader hung up.
func TestMockConsoleDisplaced(t *testing.T) {
	lab := sim.NewLab()
	lab.BMC("m1", sim.ModeMock)
	m := newManager(t, sol.Config{Linger: time.Hour}, lab)
	old := attach(t, m, "m1", "first", sol.AttachOptions{})
	record(old).waitData(t, "\n3\n")
	v := attach(t, m, "m1", "second", sol.AttachOptions{})
	r := record(v)
	r.waitData(t, "\n3\n")
	if got := r.Data(); !strings.HasPrefix(got, "0\n1\n2\n3\n") {
		t.Errorf("new reader: got %q, want the counter from 0", got[:min(len(got), 40)])
	}
	select {
	case <-old.Done():
		if !errors.Is(old.Err(), sol.ErrDisplaced) {
			t.Errorf("displaced reader's cause: got %v, want ErrDisplaced", old.Err())
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the first reader was not displaced")
	}
	if got := m.Viewers("m1"); len(got) != 1 || got[0].Name != "second" {
		t.Errorf("viewers: got %v, want only the new reader", got)
	}
	v.Close()
}

func BenchmarkFanout(b *testing.B) {
	for _, viewers := range []int{1, 10, 100} {
		b.Run(fmt.Sprintf("viewers=%d", viewers), func(b *testing.B) {
			lab := sim.NewLab()
			fanout(b, newManager(b, sol.Config{}, lab), lab, viewers)
		})
	}
}

// fanout measures m's delivery of n1's output at full speed to viewers
// (BenchmarkFanout, BenchmarkFanoutCaptured), reporting the share of
// bytes viewers skipped.
func fanout(b *testing.B, m *sol.Manager, lab *sim.Lab, viewers int) {
	bmc := lab.BMC("n1", sim.ModeNormal)
	counts := make([]atomic.Int64, viewers)
	var wg sync.WaitGroup
	for i := range viewers {
		v := attach(b, m, "n1", fmt.Sprint(i), sol.AttachOptions{})
		wg.Add(1)
		go func() {
			defer wg.Done()
			for c := range v.Output() {
				counts[i].Add(int64(len(c.Data) + c.Skipped))
			}
		}()
	}
	waitConsole(b, bmc, true)
	payload := []byte(strings.Repeat("0123456789abcdef", 256)) // 4 KiB
	// Keep the slowest viewer within a window well under its queue,
	// so the rate measured is delivery, not skipping.
	const window = 128 << 10
	slowest := func() int64 {
		low := counts[0].Load()
		for i := range counts {
			low = min(low, counts[i].Load())
		}
		return low
	}
	b.SetBytes(int64(len(payload)))
	b.ResetTimer()
	for i := range b.N {
		bmc.Inject(payload)
		for int64((i+1)*len(payload))-slowest() > window {
			time.Sleep(20 * time.Microsecond)
		}
	}
	total := int64(b.N * len(payload))
	for i := range counts {
		waitFor(b, "viewers to drain", func() bool { return counts[i].Load() >= total })
	}
	b.StopTimer()
	s := m.Stats()
	b.ReportMetric(float64(s.Skipped)/float64(total*int64(viewers)), "skipped/byte")
	m.Close(context.Background())
	wg.Wait()
}

// BenchmarkMockConsole measures the mock console's throughput through the
// hub: bytes per second one viewer takes from Output (the counter is made
// as the hub reads it, at the viewer's pace).
func BenchmarkMockConsole(b *testing.B) {
	lab := sim.NewLab()
	lab.BMC("m1", sim.ModeMock)
	m := newManager(b, sol.Config{}, lab)
	v := attach(b, m, "m1", "bench", sol.AttachOptions{})
	const chunk = 1 << 20
	b.SetBytes(chunk)
	b.ResetTimer()
	for range b.N {
		for got := 0; got < chunk; {
			c, ok := <-v.Output()
			if !ok {
				b.Fatalf("viewer ended: %v", v.Err())
			}
			got += len(c.Data)
		}
	}
}

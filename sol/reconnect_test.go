package sol_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/obmd/obmd/sol"
)

// TestInputAcrossReconnects: the link is lost many times while input is in
// flight (each console fails in the middle of a Write, having delivered
// part of it); every byte typed reaches the BMC exactly once and in order,
// over the consoles that follow.
func TestInputAcrossReconnects(t *testing.T) {
	b := &dropBMC{failEvery: 3}
	m := newManager(t, sol.Config{Backoff: sol.Backoff{Min: time.Millisecond, Max: time.Millisecond}}, b)
	v := attach(t, m, "n1", "typist", sol.AttachOptions{})
	record(v)
	var want []byte
	for i := 0; len(want) < 256<<10; i++ {
		want = fmt.Appendf(want, "key %06d\r", i)
	}
	for p := want; len(p) > 0; {
		k := min(len(p), 100) // typed in pieces, as a client sends them
		if _, err := v.Write(p[:k]); err != nil {
			t.Fatalf("Write: %v", err)
		}
		p = p[k:]
	}
	waitFor(t, "every key on the serial side", func() bool { return len(b.Typed()) >= len(want) })
	if got := b.Typed(); !bytes.Equal(got, want) {
		i := firstDiff(got, want)
		t.Fatalf("serial side differs at byte %d of %d: got %q, want %q", i, len(want),
			got[i:min(i+24, len(got))], want[i:min(i+24, len(want))])
	}
	if got := m.Stats().Reconnects; got < 20 {
		t.Errorf("got %d reconnects, want at least 20 (input in flight each time)", got)
	}
	if got := m.Stats().BytesIn; got != uint64(len(want)) {
		t.Errorf("BytesIn: got %d, want %d", got, len(want))
	}
}

// dropBMC is a hand-made BMC whose every console breaks in the middle of
// its failEvery-th Write: it accepts half of it, fails, and its Read fails
// too, as a link that dies with input in flight.
type dropBMC struct {
	noOps
	failEvery int

	mu    sync.Mutex
	typed []byte // everything any console accepted, in order
}

var errDropped = errors.New("link dropped with input in flight")

func (b *dropBMC) Resolve(context.Context, string) (sol.BMC, error) { return b, nil }

func (b *dropBMC) OpenConsole(context.Context) (sol.Console, error) {
	return &dropConsole{b: b, dead: make(chan struct{})}, nil
}

// Typed returns what reached the serial side.
func (b *dropBMC) Typed() []byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	return bytes.Clone(b.typed)
}

type dropConsole struct {
	b      *dropBMC
	writes int // only the link's writer calls Write
	once   sync.Once
	dead   chan struct{} // closed when the console fails or closes
}

func (c *dropConsole) Read([]byte) (int, error) {
	<-c.dead
	return 0, errDropped
}

func (c *dropConsole) Write(p []byte) (int, error) {
	select {
	case <-c.dead:
		return 0, errDropped
	default:
	}
	c.writes++
	k := len(p)
	if c.writes%c.b.failEvery == 0 {
		k = len(p) / 2
	}
	c.b.mu.Lock()
	c.b.typed = append(c.b.typed, p[:k]...)
	c.b.mu.Unlock()
	if k < len(p) {
		c.Close()
		return k, errDropped
	}
	return k, nil
}

func (c *dropConsole) Break(context.Context) error { return nil }

func (c *dropConsole) Close() error {
	c.once.Do(func() { close(c.dead) })
	return nil
}

// TestNoConsoleIsFinal: a BMC that has no console (sol.ErrNoConsole from
// OpenConsole) ends its viewers with that, in words a tenant reads, after
// one attempt; it is not retried while they wait.
func TestNoConsoleIsFinal(t *testing.T) {
	b := &noConsoleBMC{}
	m := newManager(t, sol.Config{}, b)
	v := attach(t, m, "n1", "one", sol.AttachOptions{})
	select {
	case <-v.Done():
	case <-time.After(wait):
		t.Fatal("viewer of a node without a console did not end")
	}
	if got, want := sol.TenantText(v.Err()), "this node has no serial console"; got != want {
		t.Errorf("tenant text: got %q, want %q", got, want)
	}
	time.Sleep(100 * time.Millisecond) // the test's backoff would retry within 5 ms
	if got := b.attempts.Load(); got != 1 {
		t.Errorf("OpenConsole calls: got %d, want 1", got)
	}
	if st := m.Stats(); st.Links != 0 || st.Viewers != 0 {
		t.Errorf("stats: got %d links, %d viewers, want none", st.Links, st.Viewers)
	}
}

// noConsoleBMC has no serial console.
type noConsoleBMC struct {
	noOps
	attempts atomic.Int32
}

func (b *noConsoleBMC) Resolve(context.Context, string) (sol.BMC, error) { return b, nil }

func (b *noConsoleBMC) OpenConsole(context.Context) (sol.Console, error) {
	b.attempts.Add(1)
	return nil, fmt.Errorf("node n1 at 192.0.2.5: %w", sol.ErrNoConsole)
}

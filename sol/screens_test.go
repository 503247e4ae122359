package sol

import (
	"bytes"
	"context"
	"errors"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/obmd/obmd/sol/screen"
)

// pipeBMC is a BMC whose console prints what is sent on out (this package's
// tests cannot import sol/sim, which imports it).
type pipeBMC struct {
	out  chan []byte
	once sync.Once
	done chan struct{}
}

func (b *pipeBMC) PowerStatus(context.Context) (string, error)       { return PowerOn, nil }
func (b *pipeBMC) PowerOn(context.Context) error                     { return nil }
func (b *pipeBMC) PowerOff(context.Context, bool) error              { return nil }
func (b *pipeBMC) PowerCycle(context.Context) error                  { return nil }
func (b *pipeBMC) PowerReset(context.Context) error                  { return nil }
func (b *pipeBMC) SetBootDevice(context.Context, string, bool) error { return nil }
func (b *pipeBMC) DeactivateConsole(context.Context) error           { return nil }
func (b *pipeBMC) OpenConsole(context.Context) (Console, error)      { return &pipeConsole{b: b}, nil }
func (b *pipeBMC) Resolve(context.Context, string) (BMC, error)      { return b, nil }

type pipeConsole struct {
	b   *pipeBMC
	buf []byte
}

func (c *pipeConsole) Read(p []byte) (int, error) {
	for len(c.buf) == 0 {
		select {
		case c.buf = <-c.b.out:
		case <-c.b.done:
			return 0, io.EOF
		}
	}
	k := copy(p, c.buf)
	c.buf = c.buf[k:]
	return k, nil
}

func (c *pipeConsole) Write(p []byte) (int, error) { return len(p), nil }
func (c *pipeConsole) Break(context.Context) error { return nil }
func (c *pipeConsole) Close() error                { c.b.once.Do(func() { close(c.b.done) }); return nil }
func (b *pipeBMC) print(p []byte)                  { b.out <- append([]byte(nil), p...) }
func newPipeBMC() *pipeBMC                         { return &pipeBMC{out: make(chan []byte), done: make(chan struct{})} }
func (b *pipeBMC) printAll(p []byte, piece int)    { forPieces(p, piece, b.print) }
func forPieces(p []byte, piece int, f func([]byte)) {
	for len(p) > 0 {
		k := min(len(p), piece)
		f(p[:k])
		p = p[k:]
	}
}

// TestScreenFallsBehind: while a node's screen is stalled, its output is
// still published at once (the viewer gets it all), what the screen has
// not been fed stays within its bound (Config.QueueBytes), and past it the
// screen is rebuilt (from the ring here, a hub without history) instead:
// once it runs again, it shows the node's last screen.
func TestScreenFallsBehind(t *testing.T) {
	log := logrus.New()
	log.SetOutput(io.Discard)
	bmc := newPipeBMC()
	m, err := NewManager(Config{QueueBytes: 1 << 10}, bmc, nil, log) // the screen's floor applies
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	defer m.Close(ctx)
	v, err := m.Attach(ctx, "n1", AttachOptions{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Screen(ctx, "n1"); err != nil {
		t.Fatal(err)
	}

	// Stall the screen's owner on a request of ours.
	stall, stalled := make(chan struct{}), make(chan struct{})
	defer func() {
		select {
		case <-stall:
		default:
			close(stall)
		}
	}()
	n := m.nodes["n1"]
	n.mu.Lock()
	n.screenRequestLocked(func(*screen.Terminal, bool) { close(stalled); <-stall })
	n.mu.Unlock()
	<-stalled

	var out bytes.Buffer
	for i := 0; out.Len() < 1<<20; i++ {
		out.WriteString(strings.Repeat("x", i%70) + "\r\n")
	}
	out.WriteString("\x1b[2J\x1b[Hthe end")
	go bmc.printAll(out.Bytes(), 4<<10)
	var got []byte
	for !bytes.HasSuffix(got, []byte("the end")) {
		select {
		case c := <-v.Output():
			got = append(got, c.Data...)
		case <-ctx.Done():
			t.Fatalf("the viewer got %d bytes of %d while the screen stalled", len(got), out.Len())
		}
	}
	n.mu.Lock()
	queued := n.scr.queued
	n.mu.Unlock()
	if st := m.Stats(); st.ScreenRebuilds == 0 || queued > minScreenQueue {
		t.Errorf("%d rebuilds, %d bytes queued; want some, and at most %d", st.ScreenRebuilds, queued, minScreenQueue)
	}
	close(stall)
	want := "the end" + strings.Repeat("\n", screen.DefaultRows-1)
	for {
		s, err := m.Screen(ctx, "n1")
		if err == nil && s.Text() == want {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("the screen after the stall (error %v):\n%s", err, s.Text())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestScreenParkedBounded: requests for the screen of a node whose link
// has not come up wait for it, at most maxParked of them; the rest get
// nothing at once, and a cut answers the waiting ones.
func TestScreenParkedBounded(t *testing.T) {
	log := logrus.New()
	log.SetOutput(io.Discard)
	m, err := NewManager(Config{}, failing{}, nil, log)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	defer m.Close(ctx)
	if _, err := m.Attach(ctx, "n1", AttachOptions{}); err != nil {
		t.Fatal(err)
	}
	n := m.nodes["n1"]
	answers := make(chan bool, maxParked+5)
	n.mu.Lock()
	for range maxParked + 5 {
		n.screenRequestLocked(func(_ *screen.Terminal, ok bool) { answers <- ok })
	}
	parked := len(n.scr.parked)
	n.mu.Unlock()
	if parked != maxParked || len(answers) != 5 {
		t.Fatalf("%d parked, %d answered, want %d and 5", parked, len(answers), maxParked)
	}
	sctx, scancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer scancel()
	if _, err := m.Screen(sctx, "n1"); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Screen of a node never up: %v, want the context's deadline", err)
	}
	m.Cut("n1", nil)
	for range maxParked + 5 {
		if <-answers {
			t.Fatal("a request answered with a screen")
		}
	}
}

// failing is a resolver whose BMC never answers.
type failing struct{}

func (failing) Resolve(context.Context, string) (BMC, error) {
	return nil, errors.New("no route to the BMC")
}

package sol_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/obmd/obmd/sol"
	"github.com/obmd/obmd/sol/sim"
)

// wait is the generous bound for things that must happen "soon".
const wait = 10 * time.Second

func quietLog() logrus.FieldLogger {
	l := logrus.New()
	l.SetOutput(io.Discard)
	l.SetLevel(logrus.DebugLevel) // exercise the log calls
	return l
}

func testCtx(t testing.TB) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	t.Cleanup(cancel)
	return ctx
}

// newManager returns a Manager over lab, closed at cleanup.
func newManager(t testing.TB, cfg sol.Config, r sol.Resolver) *sol.Manager {
	t.Helper()
	if cfg.Backoff.Min == 0 {
		cfg.Backoff = sol.Backoff{Min: 5 * time.Millisecond, Max: 50 * time.Millisecond}
	}
	m, err := sol.NewManager(cfg, r, nil, quietLog())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), wait)
		defer cancel()
		if err := m.Close(ctx); err != nil {
			t.Errorf("close manager: %v", err)
		}
	})
	return m
}

func attach(t testing.TB, m *sol.Manager, label, name string, o sol.AttachOptions) *sol.Viewer {
	t.Helper()
	o.Name = name
	v, err := m.Attach(testCtx(t), label, o)
	if err != nil {
		t.Fatalf("attach %s to %s: %v", name, label, err)
	}
	return v
}

// waitFor polls cond until it holds or the bound passes.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(wait)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func waitConsole(t testing.TB, b *sim.BMC, active bool) {
	t.Helper()
	if err := b.WaitConsole(testCtx(t), active); err != nil {
		t.Fatal(err)
	}
}

// recorder drains a viewer's Output in its own goroutine, which ends when
// Output is closed.
type recorder struct {
	v      *sol.Viewer
	closed chan struct{} // closed when Output was closed

	mu      sync.Mutex
	chunks  []sol.Chunk
	data    []byte
	notices []string
	skipped int
}

func record(v *sol.Viewer) *recorder {
	r := &recorder{v: v, closed: make(chan struct{})}
	go func() {
		defer close(r.closed)
		for c := range v.Output() {
			r.mu.Lock()
			r.chunks = append(r.chunks, c)
			r.data = append(r.data, c.Data...)
			r.skipped += c.Skipped
			if c.Notice != "" {
				r.notices = append(r.notices, c.Notice)
			}
			r.mu.Unlock()
		}
	}()
	return r
}

func (r *recorder) Data() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return string(r.data)
}

func (r *recorder) Notices() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.notices...)
}

// seen is how many bytes of the stream the viewer has accounted for:
// received plus skipped.
func (r *recorder) seen() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.data) + r.skipped
}

func (r *recorder) waitData(t testing.TB, want string) {
	t.Helper()
	waitFor(t, fmt.Sprintf("%s to see %q", r.v.Name(), want), func() bool {
		return strings.Contains(r.Data(), want)
	})
}

func (r *recorder) waitNotice(t testing.TB, want string) {
	t.Helper()
	waitFor(t, fmt.Sprintf("%s to get notice %q", r.v.Name(), want), func() bool {
		for _, n := range r.Notices() {
			if strings.Contains(n, want) {
				return true
			}
		}
		return false
	})
}

// checkGaps verifies that the chunks are full with gaps: every byte
// received is at its place in full, skips account for the rest.
func (r *recorder) checkGaps(t testing.TB, full []byte) {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	off := 0
	for i, c := range r.chunks {
		off += c.Skipped
		if off+len(c.Data) > len(full) || !bytes.Equal(c.Data, full[off:off+len(c.Data)]) {
			t.Fatalf("chunk %d (skipped %d, %d bytes) is not the stream at offset %d", i, c.Skipped, len(c.Data), off)
		}
		off += len(c.Data)
	}
	if off != len(full) {
		t.Errorf("got %d bytes accounted for, want %d", off, len(full))
	}
}

// numbered returns n lines "line 00000\r\n"... and its concatenation.
func numbered(from, n int) [][]byte {
	out := make([][]byte, 0, n)
	for i := from; i < from+n; i++ {
		out = append(out, fmt.Appendf(nil, "line %05d\r\n", i))
	}
	return out
}

func join(parts [][]byte) []byte { return bytes.Join(parts, nil) }

func isDone(v *sol.Viewer) bool {
	select {
	case <-v.Done():
		return true
	default:
		return false
	}
}

// gateBMC is a hand-made BMC whose console's Write blocks while the gate is
// held, recording each Write call.
type gateBMC struct {
	noOps
	gate chan struct{} // receive to pass one Write; closed = open gate

	mu     sync.Mutex
	writes [][]byte
}

func (g *gateBMC) Resolve(context.Context, string) (sol.BMC, error) { return g, nil }

// noOps gives a hand-made BMC power, boot-device and deactivate
// operations that succeed and do nothing.
type noOps struct{}

func (noOps) PowerStatus(context.Context) (string, error)       { return sol.PowerOn, nil }
func (noOps) PowerOn(context.Context) error                     { return nil }
func (noOps) PowerOff(context.Context, bool) error              { return nil }
func (noOps) PowerCycle(context.Context) error                  { return nil }
func (noOps) PowerReset(context.Context) error                  { return nil }
func (noOps) SetBootDevice(context.Context, string, bool) error { return nil }
func (noOps) DeactivateConsole(context.Context) error           { return nil }

func (g *gateBMC) OpenConsole(context.Context) (sol.Console, error) {
	return &gateConsole{g: g, closed: make(chan struct{})}, nil
}

func (g *gateBMC) Writes() [][]byte {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([][]byte(nil), g.writes...)
}

type gateConsole struct {
	g      *gateBMC
	once   sync.Once
	closed chan struct{}
}

func (c *gateConsole) Read([]byte) (int, error) {
	<-c.closed
	return 0, io.EOF
}

func (c *gateConsole) Write(p []byte) (int, error) {
	select {
	case <-c.g.gate:
	case <-c.closed:
		return 0, io.ErrClosedPipe
	}
	c.g.mu.Lock()
	c.g.writes = append(c.g.writes, append([]byte(nil), p...))
	c.g.mu.Unlock()
	return len(p), nil
}

// Break is recorded among the writes as "<break>".
func (c *gateConsole) Break(context.Context) error {
	c.g.mu.Lock()
	c.g.writes = append(c.g.writes, []byte("<break>"))
	c.g.mu.Unlock()
	return nil
}

func (c *gateConsole) Close() error {
	c.once.Do(func() { close(c.closed) })
	return nil
}

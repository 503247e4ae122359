package sim

import (
	"bytes"
	"context"
	"errors"
	"io"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/obmd/obmd/sol"
)

func ctxT(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// readUntil reads con until the output contains want; it returns all output.
func readUntil(t *testing.T, con io.Reader, want string) string {
	t.Helper()
	type res struct {
		out string
		err error
	}
	ch := make(chan res, 1)
	go func() {
		var out []byte
		buf := make([]byte, 256)
		for !bytes.Contains(out, []byte(want)) {
			n, err := con.Read(buf)
			out = append(out, buf[:n]...)
			if err != nil {
				ch <- res{string(out), err}
				return
			}
		}
		ch <- res{string(out), nil}
	}()
	select {
	case r := <-ch:
		if r.err != nil {
			t.Fatalf("read until %q: got %q, error %v", want, r.out, r.err)
		}
		return r.out
	case <-time.After(5 * time.Second):
		t.Fatalf("read until %q: timed out", want)
	}
	return ""
}

func TestLabSameInstance(t *testing.T) {
	l := NewLab()
	a := l.BMC("n1", ModeNormal)
	if got := l.BMC("n1", ModeNormal); got != a {
		t.Errorf("got a different BMC for the same label and mode")
	}
	if got := l.BMC("n1", ModeMock); got == a || got.Mode() != ModeMock {
		t.Errorf("got %v, want a new mock BMC after a mode change", got.Mode())
	}
	r, err := l.Resolve(ctxT(t), "n1")
	if err != nil || r != sol.BMC(l.BMC("n1", ModeMock)) {
		t.Errorf("Resolve: got %v, %v; want the lab's BMC", r, err)
	}
	l.Forget("n1")
	if _, err := l.Resolve(ctxT(t), "n1"); !errors.Is(err, ErrUnknown) {
		t.Errorf("Resolve after Forget: got %v, want %v", err, ErrUnknown)
	}
}

func TestPowerAndBootDevice(t *testing.T) {
	ctx := ctxT(t)
	b := NewLab().BMC("n1", ModeNormal)
	steps := []struct {
		name string
		do   func() error
		want string // power status after
	}{
		{"off", func() error { return b.PowerOff(ctx, false) }, sol.PowerOff},
		{"on", func() error { return b.PowerOn(ctx) }, sol.PowerOn},
		{"soft off", func() error { return b.PowerOff(ctx, true) }, sol.PowerOff},
		{"cycle", func() error { return b.PowerCycle(ctx) }, sol.PowerOn},
		{"reset", func() error { return b.PowerReset(ctx) }, sol.PowerOn},
		{"bootdev pxe", func() error { return b.SetBootDevice(ctx, sol.BootPXE, true) }, sol.PowerOn},
		{"bootdev disk", func() error { return b.SetBootDevice(ctx, sol.BootDisk, false) }, sol.PowerOn},
	}
	for _, s := range steps {
		if err := s.do(); err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		if got, err := b.PowerStatus(ctx); err != nil || got != s.want {
			t.Errorf("%s: got power %q (%v), want %q", s.name, got, err, s.want)
		}
	}
	want := []string{"power off", "power on", "power off soft", "power cycle", "power reset",
		"bootdev pxe persistent", "bootdev disk"}
	if got := b.Actions(); !reflect.DeepEqual(got, want) {
		t.Errorf("got actions %q, want %q", got, want)
	}
	if err := b.SetBootDevice(ctx, "floppy", false); !errors.Is(err, sol.ErrBadBootDevice) {
		t.Errorf("bootdev floppy: got %v, want %v", err, sol.ErrBadBootDevice)
	}
	// A one-time boot device is consumed by the next boot.
	if err := b.PowerCycle(ctx); err != nil {
		t.Fatal(err)
	}
	if dev, p := b.BootDevice(); dev != sol.BootNone || p {
		t.Errorf("after boot: got bootdev %q persistent %v, want none, false", dev, p)
	}
}

func TestDelayAndFail(t *testing.T) {
	b := NewLab().BMC("n1", ModeNormal)
	boom := errors.New("boom")
	b.SetFail(boom)
	if err := b.PowerOn(ctxT(t)); !errors.Is(err, boom) {
		t.Errorf("got %v, want %v", err, boom)
	}
	b.SetFail(nil)
	b.SetDelay(time.Hour)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if _, err := b.OpenConsole(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("got %v, want %v", err, context.DeadlineExceeded)
	}
	if len(b.Actions()) != 0 {
		t.Errorf("got actions %q, want none", b.Actions())
	}
}

// TestHang: a hung BMC's calls block past their context's end until
// released, counted by Hung meanwhile; then they finish (their context
// ended: with its error) and later calls run.
func TestHang(t *testing.T) {
	b := NewLab().BMC("n1", ModeNormal)
	release := b.Hang()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { _, err := b.PowerStatus(ctx); done <- err }()
	for b.Hung() != 1 {
		time.Sleep(time.Millisecond)
	}
	cancel()
	select {
	case err := <-done:
		t.Fatalf("a hung call returned %v at its context's end", err)
	case <-time.After(50 * time.Millisecond):
	}
	release()
	release() // idempotent
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("released call: got %v, want its context's error", err)
	}
	if n := b.Hung(); n != 0 {
		t.Errorf("Hung after the release: got %d, want 0", n)
	}
	if _, err := b.PowerStatus(ctxT(t)); err != nil {
		t.Errorf("a call after the release: got %v", err)
	}
}

func TestConsoleShell(t *testing.T) {
	ctx := ctxT(t)
	b := NewLab().BMC("n1", ModeNormal)
	con, err := b.OpenConsole(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer con.Close()
	if err := b.PowerCycle(ctx); err != nil {
		t.Fatal(err)
	}
	readUntil(t, con, "sim login: ")
	tests := []struct {
		typed, want string
	}{
		{"echo hello world\r", "echo hello world\r\nhello world\r\nsim$ "},
		{"frobnicate\r\n", "frobnicate\r\nsim: command not found\r\nsim$ "},
		{"\r", "\r\nsim$ "},
		{"echx\x7fo ok\n", "echx\b \bo ok\r\nok\r\nsim$ "},
	}
	for _, tt := range tests {
		if _, err := con.Write([]byte(tt.typed)); err != nil {
			t.Fatal(err)
		}
		if got := readUntil(t, con, tt.want); got != tt.want {
			t.Errorf("typed %q: got %q, want %q", tt.typed, got, tt.want)
		}
	}
	if got, want := string(b.Typed()), "echo hello world\rfrobnicate\r\n\rechx\x7fo ok\n"; got != want {
		t.Errorf("got typed %q, want %q", got, want)
	}
	if err := con.Break(ctx); err != nil || b.Breaks() != 1 {
		t.Errorf("Break: got %v and %d breaks, want nil and 1", err, b.Breaks())
	}
	b.Inject([]byte("kernel: hi\r\n"))
	readUntil(t, con, "kernel: hi\r\n")
}

func TestPoweredOffHostIsSilent(t *testing.T) {
	ctx := ctxT(t)
	b := NewLab().BMC("n1", ModeNormal)
	if err := b.PowerOff(ctx, false); err != nil {
		t.Fatal(err)
	}
	con, err := b.OpenConsole(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer con.Close()
	if _, err := con.Write([]byte("echo x\r")); err != nil {
		t.Fatal(err)
	}
	b.Inject([]byte("marker"))
	if got := readUntil(t, con, "marker"); got != "marker" {
		t.Errorf("got %q, want only the injected marker (no echo while off)", got)
	}
}

func TestPayloadSingleActive(t *testing.T) {
	ctx := ctxT(t)
	b := NewLab().BMC("n1", ModeNormal)
	first, err := b.OpenConsole(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.OpenConsole(ctx); !errors.Is(err, sol.ErrPayloadActive) {
		t.Fatalf("second open: got %v, want %v", err, sol.ErrPayloadActive)
	}
	readErr := make(chan error, 1)
	go func() {
		_, err := first.Read(make([]byte, 10))
		readErr <- err
	}()
	if err := b.DeactivateConsole(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-readErr:
		if !errors.Is(err, ErrDeactivated) {
			t.Errorf("first Read: got %v, want %v", err, ErrDeactivated)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("first console's Read did not fail after deactivation")
	}
	if _, err := first.Write([]byte("x")); !errors.Is(err, ErrConsoleClosed) {
		t.Errorf("write to deactivated console: got %v, want %v", err, ErrConsoleClosed)
	}
	second, err := b.OpenConsole(ctx)
	if err != nil {
		t.Fatalf("open after deactivate: %v", err)
	}
	b.DropLink()
	if _, err := second.Read(make([]byte, 10)); !errors.Is(err, ErrLinkDropped) {
		t.Errorf("Read after DropLink: got %v, want %v", err, ErrLinkDropped)
	}
	if err := b.WaitConsole(ctx, false); err != nil {
		t.Fatal(err)
	}
	third, err := b.OpenConsole(ctx)
	if err != nil {
		t.Fatalf("open after DropLink: %v", err)
	}
	if err := third.Close(); err != nil {
		t.Fatal(err)
	}
	if b.ConsoleActive() {
		t.Error("console still active after Close")
	}
	if a, o, d := b.ConsoleStats(); a != 4 || o != 3 || d != 1 {
		t.Errorf("got stats %d/%d/%d, want 4/3/1", a, o, d)
	}
}

func TestMockMode(t *testing.T) {
	ctx := ctxT(t)
	b := NewLab().BMC("m", ModeMock)
	if got, err := b.PowerStatus(ctx); err != nil || got != "Mock Status" {
		t.Errorf("got power status %q (%v), want %q", got, err, "Mock Status")
	}
	for _, dev := range []string{"A", "B"} {
		if err := b.SetBootDevice(ctx, dev, false); err != nil {
			t.Errorf("bootdev %s: %v", dev, err)
		}
	}
	for _, dev := range []string{"pxe", "a", ""} {
		if err := b.SetBootDevice(ctx, dev, false); !errors.Is(err, sol.ErrBadBootDevice) {
			t.Errorf("bootdev %q: got %v, want %v", dev, err, sol.ErrBadBootDevice)
		}
	}
	if err := b.PowerCycle(ctx); err != nil {
		t.Fatal(err)
	}
	for round := range 2 {
		con, err := b.OpenConsole(ctx)
		if err != nil {
			t.Fatal(err)
		}
		want := "0\n1\n2\n3\n4\n5\n"
		if got := readUntil(t, con, want); !strings.HasPrefix(got, want) {
			t.Errorf("round %d: got %q, want prefix %q", round, got, want)
		}
		if err := con.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if got, want := b.Actions(), []string{"bootdev A", "bootdev B", "power cycle"}; !reflect.DeepEqual(got, want) {
		t.Errorf("got actions %q, want %q", got, want)
	}
}

// TestMockCounterFillsReads: the mock console never waits for its counter:
// every Read is filled to the byte, whatever its size, and lines cut by a
// Read's end continue in the next one, so the stream is the counter from 0
// exactly as fast as the reader takes it.
func TestMockCounterFillsReads(t *testing.T) {
	b := NewLab().BMC("m", ModeMock)
	con, err := b.OpenConsole(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	defer con.Close()
	var want []byte
	for i := 0; len(want) < 400<<10; i++ {
		want = strconv.AppendInt(want, int64(i), 10)
		want = append(want, '\n')
	}
	var got []byte
	for _, size := range []int{1, 2, 3, 7, 64, 4 << 10, 64 << 10, 256 << 10} {
		p := make([]byte, size)
		if n, err := con.Read(p); n != size || err != nil {
			t.Fatalf("Read of %d bytes: got %d, %v, want all of them at once", size, n, err)
		}
		got = append(got, p...)
	}
	if !bytes.Equal(got, want[:len(got)]) {
		t.Errorf("counter: got %q..., want %q...", got[:40], want[:40])
	}
	b.Inject([]byte("injected\n"))
	p := make([]byte, 64)
	if n, err := con.Read(p); string(p[:n]) != "injected\n" || err != nil {
		t.Errorf("after Inject: got %q, %v, want the injected text first", p[:n], err)
	}
}

// TestDiagnose: the simulator's diagnosis passes, names its console's
// holder, and shows an injected failure at the power step, changing
// nothing.
func TestDiagnose(t *testing.T) {
	b := NewLab().BMC("n1", ModeNormal)
	ctx := context.Background()
	names := func(cs []sol.Check) (out []string) {
		for _, c := range cs {
			out = append(out, c.Name)
		}
		return out
	}
	all := []string{sol.CheckAddress, sol.CheckAuth, sol.CheckPower, sol.CheckSOL}
	checks := b.Diagnose(ctx)
	if got := names(checks); !slices.Equal(got, all) || !sol.Passed(checks) || checks[3].Tenant != "console free" {
		t.Fatalf("healthy: got %+v, want every step passed, console free", checks)
	}
	c, err := b.OpenConsole(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if checks := b.Diagnose(ctx); !sol.Passed(checks) || checks[3].Tenant != "console held by obmd's console" {
		t.Errorf("console open: got %+v, want it held by obmd", checks)
	}
	b.SetFail(errors.New("injected"))
	checks = b.Diagnose(ctx)
	if got := names(checks); !slices.Equal(got, all[:3]) || checks[2].OK || checks[2].Hint == "" {
		t.Errorf("injected failure: got %+v, want the power step failed with a hint", checks)
	}
	if got := b.Actions(); len(got) != 0 {
		t.Errorf("actions: got %q, want none", got)
	}
}

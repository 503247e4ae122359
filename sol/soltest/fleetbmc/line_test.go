package fleetbmc

import (
	"bytes"
	"context"
	"testing"
	"time"
)

// fakeClock is a clock the test moves.
type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time      { return c.t }
func (c *fakeClock) add(d time.Duration) { c.t = c.t.Add(d) }
func newFake() *fakeClock                { return &fakeClock{t: time.Unix(1_000_000, 0)} }
func readAll(t *testing.T, c interface{ ReadAvailable([]byte) (int, error) }) []byte {
	t.Helper()
	var out []byte
	buf := make([]byte, 97) // odd, so reads split chunks
	for {
		n, err := c.ReadAvailable(buf)
		if err != nil {
			t.Fatalf("ReadAvailable: %v", err)
		}
		if n == 0 {
			return out
		}
		out = append(out, buf[:n]...)
	}
}

func text(n int) []byte {
	p := make([]byte, n)
	for i := range p {
		p[i] = byte('a' + i%26)
	}
	return p
}

// TestLinePacing: printed bytes reach the BMC at baud/10 bytes a second,
// after what was printed before, and a line idle for a while starts its
// next burst when it is printed to.
func TestLinePacing(t *testing.T) {
	clk := newFake()
	l := newLine(115200, 1<<20, 1024, false, clk.now)
	c, err := l.Open(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	out := text(2304) // 200 ms at 11,520 bytes/s
	start := clk.t
	l.Print(out[:1152])
	l.Print(out[1152:])
	if got := l.stats().LastAt.Sub(start); got != 200*time.Millisecond {
		t.Errorf("last byte leaves after %v, want 200ms", got)
	}
	var got []byte
	for i, want := range []int{0, 576, 1152, 2304, 2304} {
		got = append(got, readAll(t, c)...)
		if len(got) != want {
			t.Fatalf("after %v: got %d bytes, want %d", time.Duration(i)*50*time.Millisecond, len(got), want)
		}
		clk.add(50 * time.Millisecond)
		if i == 2 {
			clk.add(50 * time.Millisecond)
		}
	}
	if !bytes.Equal(got, out) {
		t.Fatalf("bytes differ from what was printed")
	}
	clk.add(time.Hour) // idle: the next print is not "already sent"
	l.Print(text(1152))
	if n := len(readAll(t, c)); n != 0 {
		t.Errorf("a fresh burst delivered %d bytes at once, want 0", n)
	}
	clk.add(100 * time.Millisecond)
	if n := len(readAll(t, c)); n != 1152 {
		t.Errorf("after 100ms: got %d bytes, want 1152", n)
	}
	if s := l.stats(); s.Printed != 3456 || s.Read != 3456 || s.Lost != 0 {
		t.Errorf("stats: got %+v, want 3456 printed and read, none lost", s)
	}
}

// TestLineOverflow: what arrives while the UART buffer is full is lost and
// counted, the oldest bytes are kept, and what arrives after a read fits
// again.
func TestLineOverflow(t *testing.T) {
	clk := newFake()
	l := newLine(115200, 100, 1024, false, clk.now)
	c, _ := l.Open(context.Background())
	out := text(1000)
	l.Print(out)
	clk.add(time.Second) // all 1,000 bytes have left; nobody read
	if got := readAll(t, c); !bytes.Equal(got, out[:100]) {
		t.Fatalf("read %q, want the first 100 bytes", got)
	}
	if s := l.stats(); s.Lost != 900 || s.Read != 100 || s.Printed != 1000 {
		t.Errorf("stats: got %+v, want 1000 printed, 100 read, 900 lost", s)
	}
	more := text(50)
	l.Print(more)
	clk.add(time.Second)
	if got := readAll(t, c); !bytes.Equal(got, more) {
		t.Errorf("after the overflow: read %q, want %q", got, more)
	}
	if len(l.uart) > 100 || cap(l.uart) > 100 {
		t.Errorf("UART buffer grew to len %d cap %d, want at most 100", len(l.uart), cap(l.uart))
	}
}

// TestLinePort: one activation at a time; a closed connection reads and
// writes nothing; typed input is kept up to its bound and counted beyond;
// echo prints it back.
func TestLinePort(t *testing.T) {
	clk := newFake()
	l := newLine(115200, 4096, 8, true, clk.now)
	c, err := l.Open(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Open(context.Background()); err == nil {
		t.Fatal("second Open: got nil error, want the port busy")
	}
	if n, err := c.Write([]byte("root\rpassword\r")); n != 14 || err != nil {
		t.Fatalf("Write: got (%d, %v), want (14, nil)", n, err)
	}
	if got := l.Typed(); string(got) != "root\rpas" {
		t.Errorf("typed: got %q, want the first 8 bytes", got)
	}
	if s := l.stats(); s.Typed != 14 {
		t.Errorf("typed count: got %d, want 14", s.Typed)
	}
	clk.add(time.Second)
	if got := readAll(t, c); string(got) != "root\rpassword\r" {
		t.Errorf("echo: got %q", got)
	}
	c.Close()
	if _, err := c.ReadAvailable(make([]byte, 8)); err == nil {
		t.Error("ReadAvailable after Close: got nil error")
	}
	if _, err := c.Write([]byte("x")); err == nil {
		t.Error("Write after Close: got nil error")
	}
	c2, err := l.Open(context.Background())
	if err != nil {
		t.Fatalf("Open after Close: %v", err)
	}
	c2.Close()
}

package soltest

import (
	"bytes"
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/obmd/obmd/sol"
)

// SerialObserver is the node's side of the serial line. *ipmisim.Sim
// satisfies it.
type SerialObserver interface {
	// WriteSerial prints p on the node's serial port (console output).
	WriteSerial(p []byte) error
	// Serial returns every byte typed into the node's serial port so far.
	Serial() []byte
}

// Generous bounds for the console table.
const (
	ioTimeout    = 15 * time.Second
	pasteTimeout = 3 * time.Minute
	closeBound   = 10 * time.Second
	// PasteSize is the size of the paste check.
	PasteSize = 64 << 10
)

// RunConsole runs the console table. newBMC is called once per subtest and
// must return a driver for a fresh machine whose serial port has seen
// nothing yet and whose SOL payload is free (with sol/soltest/ipmisim: a new Sim per
// call).
func RunConsole(t *testing.T, newBMC func(t *testing.T) (sol.BMC, SerialObserver)) {
	RunConsoleWith(t, ConsoleOptions{}, newBMC)
}

// ConsoleOptions adapt the console table to a BMC's console slot.
type ConsoleOptions struct {
	// Takeover: a second console takes the console over (the first one's
	// Read fails) instead of being refused with sol.ErrPayloadActive, as
	// iDRAC's SSH console does.
	Takeover bool
	// Shared: a second console is attached beside the first, both
	// working, as OpenBMC's host console over SSH is.
	Shared bool
}

// RunConsoleWith runs the console table (RunConsole) with o.
func RunConsoleWith(t *testing.T, o ConsoleOptions, newBMC func(t *testing.T) (sol.BMC, SerialObserver)) {
	t.Run("output", func(t *testing.T) {
		b, ser := newBMC(t)
		r := Open(t, b)
		for i, line := range []string{"BIOS boot text\r\n", "second line, a bit longer than the first\r\n"} {
			if err := ser.WriteSerial([]byte(line)); err != nil {
				t.Fatalf("WriteSerial %d: %v", i, err)
			}
			r.WaitOutput(t, []byte(line), ioTimeout)
		}
	})

	t.Run("input", func(t *testing.T) {
		b, ser := newBMC(t)
		r := Open(t, b)
		for _, keys := range []string{"root\r", "ls -l /\r", "\x03", "\x1b[A"} {
			if _, err := r.Console.Write([]byte(keys)); err != nil {
				t.Fatalf("Write(%q): %v", keys, err)
			}
		}
		WaitSerial(t, ser, []byte("root\rls -l /\r\x03\x1b[A"), ioTimeout)
	})

	t.Run("paste 64KiB", func(t *testing.T) {
		b, ser := newBMC(t)
		r := Open(t, b)
		data := Paste(PasteSize, 1)
		start := time.Now()
		for off := 0; off < len(data); off += 8 << 10 {
			end := min(off+8<<10, len(data))
			n, err := r.Console.Write(data[off:end])
			if err != nil || n != end-off {
				t.Fatalf("Write at %d: got (%d, %v), want (%d, nil)", off, n, err, end-off)
			}
		}
		WaitSerial(t, ser, data, pasteTimeout)
		d := time.Since(start)
		t.Logf("pasted %d bytes in %v (%.1f KiB/s)", len(data), d, float64(len(data))/1024/d.Seconds())
		if got := ser.Serial(); !bytes.Equal(got, data) {
			t.Errorf("serial port: got %d bytes, want exactly the %d pasted (first difference at %d)",
				len(got), len(data), firstDiff(got, data))
		}
	})

	t.Run("payload active", func(t *testing.T) {
		b, ser := newBMC(t)
		first := Open(t, b)
		if o.Shared {
			second := Open(t, b)
			out := []byte("to both\r\n")
			if err := ser.WriteSerial(out); err != nil {
				t.Fatal(err)
			}
			first.WaitOutput(t, out, ioTimeout)
			second.WaitOutput(t, out, ioTimeout)
			second.Close(t)
			first.Close(t)
			return
		}
		if o.Takeover {
			second := Open(t, b)
			first.Wait(t, closeBound) // taken over: its Read fails
			if _, err := second.Console.Write([]byte("after takeover\r")); err != nil {
				t.Fatalf("Write on the new console: %v", err)
			}
			WaitSerial(t, ser, []byte("after takeover\r"), ioTimeout)
			second.Close(t)
			first.Close(t)
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
		defer cancel()
		c, err := b.OpenConsole(ctx)
		if err == nil {
			c.Close()
		}
		if !errors.Is(err, sol.ErrPayloadActive) {
			t.Fatalf("second OpenConsole: got %v, want ErrPayloadActive", err)
		}
		if err := b.DeactivateConsole(ctx); err != nil {
			t.Fatalf("DeactivateConsole: got %v, want nil", err)
		}
		second := Open(t, b)
		if _, err := second.Console.Write([]byte("after steal\r")); err != nil {
			t.Fatalf("Write on the new console: %v", err)
		}
		WaitSerial(t, ser, []byte("after steal\r"), ioTimeout)
		second.Close(t)
		first.Close(t) // the stale console: must return, whatever its error
	})

	t.Run("deactivate idle", func(t *testing.T) {
		b, _ := newBMC(t)
		ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
		defer cancel()
		if err := b.DeactivateConsole(ctx); err != nil {
			t.Fatalf("DeactivateConsole with no active payload: got %v, want nil", err)
		}
		Open(t, b).Close(t)
	})

	t.Run("close then reopen", func(t *testing.T) {
		b, ser := newBMC(t)
		for i, word := range []string{"first\r", "second\r", "third\r"} {
			r := Open(t, b)
			if _, err := r.Console.Write([]byte(word)); err != nil {
				t.Fatalf("Write %d: %v", i, err)
			}
			// Typed once: ipmi_sim drops a new session's first input
			// packet if it reuses the previous session's last sequence
			// number, and a driver must not lose it (sol/ipmi probes
			// around it; sol/ipmitool's tests restart the sim).
			WaitSerial(t, ser, []byte(word), ioTimeout)
			out := []byte("output " + word + "\n")
			if err := ser.WriteSerial(out); err != nil {
				t.Fatalf("WriteSerial %d: %v", i, err)
			}
			r.WaitOutput(t, out, ioTimeout)
			r.Close(t)
		}
		got := ser.Serial()
		for _, word := range []string{"first\r", "second\r", "third\r"} {
			i := bytes.Index(got, []byte(word))
			if i < 0 {
				t.Fatalf("serial port: got %q, want first, second, third in order", ser.Serial())
			}
			got = got[i+len(word):]
		}
	})

	t.Run("close unblocks read", func(t *testing.T) {
		b, _ := newBMC(t)
		r := Open(t, b)
		r.Close(t)
		if err := r.Err(); err == nil {
			t.Errorf("Read after Close: got nil error, want one")
		}
	})
}

// Reader is an open console whose output a goroutine collects.
type Reader struct {
	Console sol.Console

	mu     sync.Mutex
	out    bytes.Buffer
	err    error
	done   chan struct{} // closed when the read loop ends
	closed sync.Once
}

// Open opens b's console (failing t otherwise) and starts collecting its
// output. A t.Cleanup closes it if the test did not.
func Open(t testing.TB, b sol.BMC) *Reader {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	c, err := b.OpenConsole(ctx)
	if err != nil {
		t.Fatalf("OpenConsole: got %v, want nil", err)
	}
	return Collect(t, c)
}

// Collect starts collecting the output of the open console c. A t.Cleanup
// closes it if the test did not (Console.Close must be idempotent).
func Collect(t testing.TB, c sol.Console) *Reader {
	r := &Reader{Console: c, done: make(chan struct{})}
	go r.loop() // ends when Read fails; Close makes it fail
	t.Cleanup(func() { r.Close(t) })
	return r
}

func (r *Reader) loop() {
	defer close(r.done)
	buf := make([]byte, 4096)
	for {
		n, err := r.Console.Read(buf)
		r.mu.Lock()
		r.out.Write(buf[:n])
		if err != nil {
			r.err = err
		}
		r.mu.Unlock()
		if err != nil {
			return
		}
	}
}

// Output returns the console output collected so far.
func (r *Reader) Output() []byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	return bytes.Clone(r.out.Bytes())
}

// Err returns the error that ended the read loop (nil while it runs).
func (r *Reader) Err() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.err
}

// Done is closed when Read has returned an error.
func (r *Reader) Done() <-chan struct{} { return r.done }

// Wait waits until Read has failed and returns its error, or fails t.
func (r *Reader) Wait(t testing.TB, timeout time.Duration) error {
	t.Helper()
	select {
	case <-r.done:
		return r.Err()
	case <-time.After(timeout):
		t.Fatalf("Read still working after %v", timeout)
		return nil
	}
}

// WaitOutput waits until the output contains want, or fails t.
func (r *Reader) WaitOutput(t testing.TB, want []byte, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !bytes.Contains(r.Output(), want) {
		if time.Now().After(deadline) {
			t.Fatalf("console output never contained %q; got %q (read error %v)", want, tail(r.Output()), r.Err())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Close closes the console once and checks that it ends the read loop
// within a bound.
func (r *Reader) Close(t testing.TB) {
	t.Helper()
	r.closed.Do(func() {
		start := time.Now()
		done := make(chan struct{})
		go func() { r.Console.Close(); close(done) }()
		select {
		case <-done:
		case <-time.After(closeBound):
			t.Errorf("Close did not return within %v", closeBound)
			return
		}
		select {
		case <-r.done:
		case <-time.After(closeBound - time.Since(start)):
			t.Errorf("Read still blocked %v after Close", closeBound)
		}
	})
}

// WaitSerial waits until the serial port has received want, or fails t.
func WaitSerial(t testing.TB, ser SerialObserver, want []byte, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !bytes.Contains(ser.Serial(), want) {
		if time.Now().After(deadline) {
			got := ser.Serial()
			t.Fatalf("serial port never received %d bytes %q; got %d bytes ending %q",
				len(want), tail(want), len(got), tail(got))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Paste returns n bytes of pseudo-random printable text in lines of up to 80
// characters, as a paste would be: no '~' (ipmitool's escape character) and
// no control characters other than '\n'. seed makes it reproducible.
func Paste(n int, seed uint64) []byte {
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	const alphabet = " !\"#$%&'()*+,-./0123456789:;<=>?@ABCDEFGHIJKLMNOPQRSTUVWXYZ[\\]^_`abcdefghijklmnopqrstuvwxyz{|}"
	out := make([]byte, n)
	col := 0
	for i := range out {
		if col >= 20 && rng.IntN(60) == 0 || col == 80 {
			out[i], col = '\n', 0
			continue
		}
		out[i] = alphabet[rng.IntN(len(alphabet))]
		col++
	}
	return out
}

func firstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

func tail(b []byte) []byte {
	if len(b) > 120 {
		return b[len(b)-120:]
	}
	return b
}

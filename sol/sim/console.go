package sim

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
)

// Prompts of the simulated host. The login prompt is cosmetic: every line
// typed is run as a command.
const (
	loginPrompt = "sim login: "
	shellPrompt = "sim$ "
)

// console is one active SOL session of a simulated BMC. Host output is
// pushed into buf (unbounded: the reader is the Manager, which drains it).
// In ModeMock, Read makes the counter's lines as it is called, to fill the
// caller's buffer: the counter runs exactly as fast as its reader takes it
// (flow control and nothing else), and nothing is made ahead of the reader.
type console struct {
	b      *BMC
	mock   bool
	notify chan struct{} // cap 1: buf grew
	done   chan struct{} // closed by kill

	mu   sync.Mutex
	buf  []byte
	err  error
	next int    // mock: next number to print
	line []byte // mock: what is left of the line being printed (in lineBuf)
	// lineBuf holds the current counter line: 19 digits of an int64 and '\n'.
	lineBuf [20]byte
}

func newConsole(b *BMC) *console {
	return &console{
		b:      b,
		mock:   b.mode == ModeMock,
		notify: make(chan struct{}, 1),
		done:   make(chan struct{}),
	}
}

func (c *console) push(p []byte) {
	c.mu.Lock()
	if c.err == nil {
		c.buf = append(c.buf, p...)
	}
	c.mu.Unlock()
	select {
	case c.notify <- struct{}{}:
	default:
	}
}

// kill makes Read fail with err from now on (first cause wins).
func (c *console) kill(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err == nil {
		c.err = err
		c.buf = nil
		close(c.done)
	}
}

// Read returns host output; it fails once the console is closed, dropped or
// deactivated. In ModeMock it never waits: after any injected output it
// fills p with the counter.
func (c *console) Read(p []byte) (int, error) {
	for {
		c.mu.Lock()
		if c.err != nil {
			err := c.err
			c.mu.Unlock()
			return 0, err
		}
		if len(c.buf) > 0 {
			n := copy(p, c.buf)
			c.buf = c.buf[n:]
			if len(c.buf) == 0 {
				c.buf = nil
			}
			c.mu.Unlock()
			return n, nil
		}
		if c.mock {
			n := c.countLocked(p)
			c.mu.Unlock()
			return n, nil
		}
		c.mu.Unlock()
		select {
		case <-c.notify:
		case <-c.done:
		}
	}
}

// countLocked fills p with the counter's next lines ("0\n1\n2\n..."); a line
// that does not fit is continued by the next call.
func (c *console) countLocked(p []byte) int {
	n := 0
	for n < len(p) {
		if len(c.line) == 0 {
			c.line = strconv.AppendInt(c.lineBuf[:0], int64(c.next), 10)
			c.line = append(c.line, '\n')
			c.next++
		}
		k := copy(p[n:], c.line)
		c.line = c.line[k:]
		n += k
	}
	return n
}

// Write delivers typed bytes to the serial side. A powered-on ModeNormal
// host echoes them and runs each line.
func (c *console) Write(p []byte) (int, error) {
	b := c.b
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.con != c {
		return 0, fmt.Errorf("sim write console of %s: %w", b.label, ErrConsoleClosed)
	}
	b.typed = append(b.typed, p...)
	if b.mode == ModeNormal && b.power {
		b.emitLocked(b.sh.input(p))
	}
	return len(p), nil
}

// Break records a serial break.
func (c *console) Break(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("sim break on %s: %w", c.b.label, err)
	}
	b := c.b
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.con != c {
		return fmt.Errorf("sim break on %s: %w", b.label, ErrConsoleClosed)
	}
	b.breaks++
	return nil
}

// Close deactivates the console; a pending Read returns ErrConsoleClosed.
func (c *console) Close() error {
	b := c.b
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.con == c {
		b.setConsoleLocked(nil)
	}
	c.kill(ErrConsoleClosed)
	return nil
}

// shell is the simulated host's line discipline and command interpreter.
// Output uses "\r\n" as a serial console does.
type shell struct {
	line   []byte
	prompt string
	cr     bool // the last byte was CR (a following LF is part of the same Enter)
}

// input consumes typed bytes and returns the host's output.
func (s *shell) input(p []byte) []byte {
	var out []byte
	for _, ch := range p {
		switch {
		case ch == '\r', ch == '\n' && !s.cr:
			out = append(out, "\r\n"...)
			out = s.run(out)
		case ch == '\n': // LF after CR
		case ch == 0x7f, ch == 0x08:
			if len(s.line) > 0 {
				s.line = s.line[:len(s.line)-1]
				out = append(out, "\b \b"...)
			}
		case ch == 0x03: // ^C
			s.line = s.line[:0]
			out = append(out, "^C\r\n"...)
			out = append(out, s.prompt...)
		case ch >= 0x20 && ch < 0x7f:
			s.line = append(s.line, ch)
			out = append(out, ch)
		}
		s.cr = ch == '\r'
	}
	return out
}

// run executes the line typed so far and appends its output and the prompt.
func (s *shell) run(out []byte) []byte {
	cmd := strings.TrimSpace(string(s.line))
	s.line = s.line[:0]
	if cmd != "" {
		s.prompt = shellPrompt
		switch name, arg, _ := strings.Cut(cmd, " "); name {
		case "echo":
			out = append(out, strings.TrimSpace(arg)...)
			out = append(out, "\r\n"...)
		default:
			out = append(out, "sim: command not found\r\n"...)
		}
	}
	return append(out, s.prompt...)
}

package fleetbmc

import (
	"bytes"
	"context"
	"errors"
	"sync"
	"time"

	"github.com/bougou/go-ipmi/pkg/hal"
)

// errPortBusy refuses a second activation of one serial port, as a shared
// port cannot serve two (go-ipmi's hal.ConsoleHAL contract).
var errPortBusy = errors.New("serial port already attached")

// errDetached is what a console connection returns once it is closed.
var errDetached = errors.New("serial port detached")

// line is one node's serial port as its BMC sees it.
//
// The node prints into it (Print); the bytes leave the node at the line's
// rate (baud / 10: 8 data bits, a start and a stop bit) and land in the
// BMC's UART buffer, which holds uartCap bytes. What arrives while the
// buffer is full is lost, as on a real UART without flow control, and
// counted. The BMC drains the buffer when it reads (ReadAvailable, called
// by go-ipmi's SOL pump and packet handler). Nothing runs in the
// background: the transmission is computed from the clock whenever the
// line is touched, so an idle line costs nothing and a printing one no
// goroutine.
//
// Memory is bounded per line: the UART buffer (uartCap), the typed input
// kept for Serial (at most maxTyped bytes, the rest counted only) and the
// chunks printed but not yet transmitted, which are the printer's own
// slices (Print does not copy).
type line struct {
	now  func() time.Time
	rate float64 // bytes per second

	mu       sync.Mutex
	queue    [][]byte  // printed, not yet transmitted (queue[0][qoff:] first)
	qoff     int       // offset in queue[0]
	printed  int64     // bytes printed in all
	sent     int64     // bytes transmitted in all (into the UART or lost)
	txBase   int64     // bytes transmitted when the current burst began
	txStart  time.Time // when the current burst began
	lastAt   time.Time // when the last printed byte leaves (or left) the node
	uart     []byte    // arrived, not yet read by the BMC: uart[ustart:]
	ustart   int
	uartCap  int
	lost     int64 // bytes that arrived to a full UART buffer
	read     int64 // bytes the BMC read
	attached bool  // a SOL activation holds the port
	typed    []byte
	typedN   int64 // bytes typed in all (typed keeps the first maxTyped)
	maxTyped int
	breaks   int
	echo     bool // typed bytes are printed back, as a shell's line discipline would
}

func newLine(baud, uartCap, maxTyped int, echo bool, now func() time.Time) *line {
	return &line{now: now, rate: float64(baud) / 10, uartCap: uartCap, maxTyped: maxTyped, echo: echo}
}

// settle moves what has left the node by now into the UART buffer.
// l.mu must be held.
func (l *line) settle(now time.Time) {
	if l.sent == l.printed {
		return
	}
	due := l.txBase + int64(now.Sub(l.txStart).Seconds()*l.rate)
	due = min(due, l.printed)
	n := due - l.sent
	if n <= 0 {
		return
	}
	l.sent = due
	if l.ustart > 0 && l.ustart == len(l.uart) {
		l.uart, l.ustart = l.uart[:0], 0
	}
	for n > 0 {
		chunk := l.queue[0][l.qoff:]
		take := int(min(int64(len(chunk)), n))
		room := l.uartCap - (len(l.uart) - l.ustart)
		keep := min(take, room)
		if keep > 0 {
			if l.uart == nil {
				l.uart = make([]byte, 0, l.uartCap)
			}
			if len(l.uart)+keep > l.uartCap { // compact: room is at the front
				l.uart = append(l.uart[:0], l.uart[l.ustart:]...)
				l.ustart = 0
			}
			l.uart = append(l.uart, chunk[:keep]...)
		}
		l.lost += int64(take - keep)
		n -= int64(take)
		l.qoff += take
		if l.qoff == len(l.queue[0]) {
			l.queue[0] = nil
			l.queue, l.qoff = l.queue[1:], 0
		}
	}
}

// Print queues p on the line: it leaves the node at the line's rate after
// what was printed before. The line keeps p until it is transmitted: the
// caller must not change it.
func (l *line) Print(p []byte) {
	if len(p) == 0 {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.print(p)
}

// print is Print with l.mu held.
func (l *line) print(p []byte) {
	now := l.now()
	l.settle(now)
	if l.sent == l.printed { // idle: a new burst starts now
		l.txBase, l.txStart = l.printed, now
	}
	l.queue = append(l.queue, p)
	l.printed += int64(len(p))
	l.lastAt = l.txStart.Add(time.Duration(float64(l.printed-l.txBase) / l.rate * float64(time.Second)))
}

// Stats is what a line has carried.
type Stats struct {
	Printed int64     // bytes the node printed
	Read    int64     // bytes its BMC read from the UART
	Lost    int64     // bytes lost to a full UART buffer
	LastAt  time.Time // when the last printed byte left the node (may be ahead)
	Typed   int64     // bytes typed into the node
}

func (l *line) stats() Stats {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.settle(l.now())
	return Stats{Printed: l.printed, Read: l.read, Lost: l.lost, LastAt: l.lastAt, Typed: l.typedN}
}

// Open attaches a SOL activation (hal.ConsoleHAL).
func (l *line) Open(context.Context) (hal.ConsoleConn, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.attached {
		return nil, errPortBusy
	}
	l.attached = true
	return &portConn{l: l}, nil
}

// portConn is one activation's hold on the line (hal.ConsoleConn).
type portConn struct {
	l      *line
	closed bool // under l.mu
}

// ReadAvailable drains the UART buffer into p without blocking.
func (c *portConn) ReadAvailable(p []byte) (int, error) {
	l := c.l
	l.mu.Lock()
	defer l.mu.Unlock()
	if c.closed {
		return 0, errDetached
	}
	l.settle(l.now())
	n := copy(p, l.uart[l.ustart:])
	l.ustart += n
	l.read += int64(n)
	return n, nil
}

// Write types p into the node.
func (c *portConn) Write(p []byte) (int, error) {
	l := c.l
	l.mu.Lock()
	defer l.mu.Unlock()
	if c.closed {
		return 0, errDetached
	}
	if room := l.maxTyped - len(l.typed); room > 0 {
		l.typed = append(l.typed, p[:min(room, len(p))]...)
	}
	l.typedN += int64(len(p))
	if l.echo {
		l.print(bytes.Clone(p))
	}
	return len(p), nil
}

// SendBreak counts a serial break.
func (c *portConn) SendBreak(context.Context) error {
	c.l.mu.Lock()
	defer c.l.mu.Unlock()
	c.l.breaks++
	return nil
}

// Close releases the port for the next activation.
func (c *portConn) Close() error {
	c.l.mu.Lock()
	defer c.l.mu.Unlock()
	if !c.closed {
		c.closed = true
		c.l.attached = false
	}
	return nil
}

// Typed returns the bytes typed into the node so far (the first maxTyped).
func (l *line) Typed() []byte {
	l.mu.Lock()
	defer l.mu.Unlock()
	return bytes.Clone(l.typed)
}

// forgetTyped clears the typed record.
func (l *line) forgetTyped() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.typed, l.typedN = nil, 0
}

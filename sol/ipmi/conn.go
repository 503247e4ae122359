package ipmi

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// demuxConn is the UDP socket of one RMCP+ session. go-ipmi dials it through
// our proxy.Dialer (client.WithUDPProxy), so we own the socket: we can close
// it to abort go-ipmi's pending reads at once, and its reader goroutine
// splits what the BMC sends in two queues:
//
//   - SOL payload packets go to sol, read by the console's owner goroutine
//     (go-ipmi's own SOL matching would drop output that arrives while it
//     waits for an acknowledgement);
//   - everything else goes to ipmi, which Read serves to go-ipmi's exchanges
//     (session setup, commands, its 30 s session keepalive).
//
// Ownership: the reader goroutine is started by dial and ends when the
// socket is closed; Close closes the socket and waits for it. Neither queue
// is ever closed: consumers also select on done.
type demuxConn struct {
	udp *net.UDPConn
	aes bool // the cipher suite encrypts with AES-CBC-128: sanity-check lengths

	sol  chan packet // SOL datagrams (or socket errors) for the console
	ipmi chan packet // other datagrams (or socket errors) for go-ipmi

	done    chan struct{} // closed when the reader goroutine has exited
	readErr error         // why the reader exited; read after done

	closeOnce sync.Once
	closed    chan struct{} // closed by Close

	// What the socket has seen, for classifying a failure (fault): any
	// datagram from the BMC, ICMP port unreachable, and an Open Session
	// answer refusing the cipher suite (go-ipmi does not keep the RMCP+
	// status in its errors).
	answered      atomic.Bool
	refused       atomic.Bool
	cipherRefused atomic.Bool

	// want is the payload type of the answer to the session-setup request
	// go-ipmi wrote last (Open Session, RAKP 1, RAKP 3: 0x11, 0x13 or
	// 0x15), 0 once it wrote anything else but SOL. go-ipmi takes the next
	// datagram as the answer to those requests, unmatched, so Read skips
	// what cannot be it: a second answer to an earlier request that
	// go-ipmi sent twice (its retry after a timeout), which comes after the
	// first. (Its other requests are IPMI messages, whose answers it
	// matches by sequence number and command.)
	want atomic.Uint32

	mu       sync.Mutex
	deadline time.Time // read deadline for go-ipmi's Reads
	dropped  int       // datagrams dropped because a queue was full
}

// packet is one datagram, or a socket error (ICMP port unreachable: the
// BMC's IPMI service is gone).
type packet struct {
	data []byte
	err  error
}

// Queue sizes: the BMC keeps at most one SOL data packet in flight (plus
// acknowledgements), and go-ipmi waits for one response at a time, so these
// only overflow on a flood; overflow drops, and the BMC retransmits.
const (
	solQueue  = 64
	ipmiQueue = 16
	// maxDatagram is larger than any RMCP+ packet (255 characters of SOL
	// data plus headers, padding and trailer fit in 400 bytes).
	maxDatagram = 2048
)

// dialer is the proxy.Dialer handed to go-ipmi. It dials once, to the
// address resolved beforehand under the caller's context (go-ipmi's Dial
// takes no context).
type dialer struct {
	raddr *net.UDPAddr
	aes   bool

	mu   sync.Mutex
	conn *demuxConn
	shut bool
}

// Dial implements proxy.Dialer. go-ipmi calls it on its first exchange.
func (d *dialer) Dial(network, addr string) (net.Conn, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.shut || d.conn != nil {
		return nil, errors.New("dial BMC: session socket already used")
	}
	udp, err := net.DialUDP("udp", nil, d.raddr)
	if err != nil {
		return nil, fmt.Errorf("dial BMC: %w", err)
	}
	c := &demuxConn{
		udp:    udp,
		aes:    d.aes,
		sol:    make(chan packet, solQueue),
		ipmi:   make(chan packet, ipmiQueue),
		done:   make(chan struct{}),
		closed: make(chan struct{}),
	}
	go c.readLoop() // ends when Close closes udp; Close waits for it
	d.conn = c
	return c, nil
}

// get returns the dialed connection, or nil if go-ipmi never dialed.
func (d *dialer) get() *demuxConn {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.conn
}

// close closes the socket (if any) and forbids further dials. Idempotent.
func (d *dialer) close() {
	d.mu.Lock()
	d.shut = true
	c := d.conn
	d.mu.Unlock()
	if c != nil {
		c.Close()
	}
}

func (c *demuxConn) readLoop() {
	defer close(c.done)
	buf := make([]byte, maxDatagram) // reused: each queued datagram is a clone of its n bytes
	for {
		n, err := c.udp.Read(buf)
		if err != nil {
			if errors.Is(err, syscall.ECONNREFUSED) {
				// The socket stays usable; tell both consumers.
				c.refused.Store(true)
				c.push(c.sol, packet{err: err})
				c.push(c.ipmi, packet{err: err})
				continue
			}
			c.readErr = err
			return
		}
		c.answered.Store(true)
		p := buf[:n]
		if cipherRefusal(p) {
			c.cipherRefused.Store(true)
		}
		if !c.sane(p) {
			c.countDrop()
			continue
		}
		p = bytes.Clone(p)
		if isSOL(p) {
			c.push(c.sol, packet{data: p})
		} else {
			c.push(c.ipmi, packet{data: p})
		}
	}
}

func (c *demuxConn) push(q chan packet, p packet) {
	select {
	case q <- p:
	default:
		c.countDrop()
	}
}

func (c *demuxConn) countDrop() {
	c.mu.Lock()
	c.dropped++
	c.mu.Unlock()
}

// cipherRefusal reports whether p is an RMCP+ Open Session Response
// (payload type 0x11, sent in the clear) whose status code refuses the
// proposed algorithms (IPMI v2.0 table 13-15: invalid authentication,
// integrity or confidentiality algorithm, no matching payload, no cipher
// suite match). The payload follows a 16-byte header: message tag, then
// status code.
func cipherRefusal(p []byte) bool {
	if len(p) < 18 || p[3] != 0x07 || p[4] != 0x06 || p[5]&0x3f != 0x11 {
		return false
	}
	switch p[17] {
	case 0x04, 0x05, 0x06, 0x07, 0x10, 0x11:
		return true
	}
	return false
}

// isSOL reports whether p is an RMCP (class IPMI) packet in RMCP+ format
// (auth type 6) carrying the SOL payload type.
func isSOL(p []byte) bool { return payloadType(p) == 0x01 }

// payloadType is the payload type of p, an RMCP (class IPMI) packet in
// RMCP+ format (auth type 6); -1 for anything else (IPMI v1.5, ASF).
func payloadType(p []byte) int {
	if len(p) > 5 && p[3] == 0x07 && p[4] == 0x06 {
		return int(p[5] & 0x3f)
	}
	return -1
}

// Session setup's payload types (IPMI v2.0 table 13-16): each request's
// answer is the next type.
const (
	payloadOpenSession = 0x10
	payloadRAKP1       = 0x12
	payloadRAKP3       = 0x14
)

// sane drops datagrams that would make go-ipmi panic while decrypting: an
// AES-CBC payload must hold a 16-byte IV plus whole 16-byte blocks. (go-ipmi
// does not check the integrity code of what it receives; a datagram that
// passes this check but was forged still reaches it.)
func (c *demuxConn) sane(p []byte) bool {
	if len(p) < 5 || p[3] != 0x07 || p[4] != 0x06 {
		return true // ASF, IPMI v1.5: go-ipmi's unpacking checks lengths
	}
	if len(p) < 16 {
		return false
	}
	encrypted := p[5]&0x80 != 0
	if p[5]&0x3f == 0x02 { // OEM explicit payload: longer header, not ours
		return false
	}
	length := int(p[14]) | int(p[15])<<8
	if 16+length > len(p) {
		return false
	}
	if encrypted && c.aes && (length < 32 || length%16 != 0) {
		return false
	}
	return true
}

// Read serves go-ipmi: the next non-SOL datagram that may answer its last
// request (want), honouring the read deadline with a net.Error whose
// Timeout() is true (go-ipmi retries on it).
func (c *demuxConn) Read(b []byte) (int, error) {
	c.mu.Lock()
	dl := c.deadline
	c.mu.Unlock()
	var timeout <-chan time.Time
	if !dl.IsZero() {
		d := time.Until(dl)
		if d <= 0 {
			return 0, c.timeoutErr()
		}
		t := time.NewTimer(d)
		defer t.Stop()
		timeout = t.C
	}
	for {
		select {
		case p := <-c.ipmi:
			if p.err != nil {
				return 0, &net.OpError{Op: "read", Net: "udp", Addr: c.udp.RemoteAddr(), Err: p.err}
			}
			if w := c.want.Load(); w != 0 && payloadType(p.data) != int(w) {
				c.countDrop() // an answer to an earlier request
				continue
			}
			return copy(b, p.data), nil
		case <-timeout:
			return 0, c.timeoutErr()
		case <-c.closed:
			return 0, &net.OpError{Op: "read", Net: "udp", Addr: c.udp.RemoteAddr(), Err: net.ErrClosed}
		case <-c.done:
			return 0, &net.OpError{Op: "read", Net: "udp", Addr: c.udp.RemoteAddr(), Err: c.readErr}
		}
	}
}

func (c *demuxConn) timeoutErr() error {
	return &net.OpError{Op: "read", Net: "udp", Addr: c.udp.RemoteAddr(), Err: os.ErrDeadlineExceeded}
}

// Write sends one datagram. UDP sockets are safe for concurrent writes, so
// go-ipmi and the console's owner goroutine both write directly. It notes
// which answer go-ipmi's request waits for (want); SOL packets are the
// console's.
func (c *demuxConn) Write(b []byte) (int, error) {
	switch pt := payloadType(b); pt {
	case payloadOpenSession, payloadRAKP1, payloadRAKP3:
		c.want.Store(uint32(pt + 1))
	case 0x01: // SOL
	default:
		c.want.Store(0)
	}
	return c.udp.Write(b)
}

// Close closes the socket, which ends the reader goroutine and any pending
// Read, and waits for the reader. Idempotent.
func (c *demuxConn) Close() error {
	c.closeOnce.Do(func() {
		close(c.closed)
		c.udp.Close()
	})
	<-c.done
	return nil
}

// Dropped returns how many datagrams were dropped (full queue, malformed,
// or a late answer to an earlier request of the session setup).
func (c *demuxConn) Dropped() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.dropped
}

// LocalAddr implements net.Conn.
func (c *demuxConn) LocalAddr() net.Addr { return c.udp.LocalAddr() }

// RemoteAddr implements net.Conn.
func (c *demuxConn) RemoteAddr() net.Addr { return c.udp.RemoteAddr() }

// SetDeadline implements net.Conn (only the read deadline matters).
func (c *demuxConn) SetDeadline(t time.Time) error { return c.SetReadDeadline(t) }

// SetReadDeadline implements net.Conn for go-ipmi's Reads.
func (c *demuxConn) SetReadDeadline(t time.Time) error {
	c.mu.Lock()
	c.deadline = t
	c.mu.Unlock()
	return nil
}

// SetWriteDeadline implements net.Conn; UDP writes do not block.
func (c *demuxConn) SetWriteDeadline(time.Time) error { return nil }

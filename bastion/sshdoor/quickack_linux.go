package sshdoor

import (
	"net"
	"syscall"
	"time"
)

// ackAfter is how long a read may go unanswered before its ACK is sent on
// its own. An answer sooner carries the ACK, as any segment does.
const ackAfter = time.Millisecond

// quickAck keeps the kernel from delaying the ACK of what c receives (up
// to 40 ms on Linux) when the server does not answer at once. OpenSSH
// leaves Nagle's algorithm on until a session is interactive, so during
// the handshake each of its small writes that follows another waits for
// the ACK of the previous one: NEWKEYS then SERVICE_REQUEST, the env
// requests then exec. Two delayed ACKs added ~80 ms to every `ssh node
// power-status`.
//
// Setting TCP_QUICKACK sends the pending ACK right away, a segment of its
// own, so doing it after every read cost a system call and a packet each
// way for most of a connection's messages, which the answer would have
// acknowledged anyway. It is set only when a read goes unanswered for
// ackAfter: a write first stops the timer.
func quickAck(c net.Conn) net.Conn {
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return c
	}
	rc, err := tc.SyscallConn()
	if err != nil {
		return c
	}
	q := &quickAckConn{TCPConn: tc, rc: rc}
	q.t = time.AfterFunc(time.Hour, q.arm) // owned by q: stopped on Close
	q.t.Stop()
	return q
}

type quickAckConn struct {
	*net.TCPConn
	rc syscall.RawConn
	t  *time.Timer // arms TCP_QUICKACK when a read goes unanswered
}

func (q *quickAckConn) Read(p []byte) (int, error) {
	n, err := q.TCPConn.Read(p)
	if n > 0 {
		q.t.Reset(ackAfter)
	}
	return n, err
}

func (q *quickAckConn) Write(p []byte) (int, error) {
	q.t.Stop()
	return q.TCPConn.Write(p)
}

func (q *quickAckConn) Close() error {
	q.t.Stop()
	return q.TCPConn.Close()
}

// arm sets TCP_QUICKACK; a failure (the connection closed meanwhile) only
// costs latency, so it is ignored.
func (q *quickAckConn) arm() {
	q.rc.Control(func(fd uintptr) {
		syscall.SetsockoptInt(int(fd), syscall.IPPROTO_TCP, syscall.TCP_QUICKACK, 1)
	})
}

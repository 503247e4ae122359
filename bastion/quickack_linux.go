package bastion

import (
	"net"
	"syscall"
)

// quickAck makes the kernel acknowledge what c receives at once instead of
// delaying the ACK (up to 40 ms on Linux). OpenSSH leaves Nagle's algorithm
// on until a session is interactive, so during the handshake each of its
// small writes that follows another waits for the ACK of the previous one:
// two delayed ACKs added ~80 ms to every `ssh node power-status` (20 ms with
// this). Linux drops quick-ack mode on its own, so it is set again after
// every read.
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
	q.arm()
	return q
}

type quickAckConn struct {
	*net.TCPConn
	rc syscall.RawConn
}

func (q *quickAckConn) Read(p []byte) (int, error) {
	n, err := q.TCPConn.Read(p)
	if n > 0 {
		q.arm()
	}
	return n, err
}

// arm sets TCP_QUICKACK; a failure only costs latency, so it is ignored.
func (q *quickAckConn) arm() {
	q.rc.Control(func(fd uintptr) {
		syscall.SetsockoptInt(int(fd), syscall.IPPROTO_TCP, syscall.TCP_QUICKACK, 1)
	})
}

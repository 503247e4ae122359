// Package rmcp speaks the one RMCP message obmd's IPMI drivers need outside
// a session: the ASF presence ping.
//
// The ping (IPMI v2.0 section 13.2) is answered by every IPMI-over-LAN BMC
// without credentials. The drivers use it as a cheap "is the BMC there"
// (keepalive probes, classifying a failure, doctor's first step).
package rmcp

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"syscall"
	"time"
)

// rmcpPing is an ASF presence ping (RMCP class 6, IANA 4542, type 0x80,
// tag 0xa5). Every IPMI-over-LAN BMC answers it with a presence pong, no
// session needed: the cheapest "are you there".
var rmcpPing = []byte{0x06, 0x00, 0xff, 0x06, 0x00, 0x00, 0x11, 0xbe, 0x80, 0xa5, 0x00, 0x00}

// PingInterval is how often Ping resends while waiting (UDP may drop).
const PingInterval = 250 * time.Millisecond

// Ping sends RMCP presence pings to the BMC at addr and port until one is
// answered by a pong or ctx ends. ICMP port unreachable (nothing listens on the BMC's
// port) ends it at once with an error wrapping syscall.ECONNREFUSED.
func Ping(ctx context.Context, addr string, port int) error {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "udp", net.JoinHostPort(addr, strconv.Itoa(port)))
	if err != nil {
		return fmt.Errorf("ping BMC: %w", err)
	}
	defer conn.Close()
	buf := make([]byte, 128)
	var last error
	for {
		if _, err := conn.Write(rmcpPing); err != nil {
			last = err
		}
		slot := time.Now().Add(PingInterval)
		if d, ok := ctx.Deadline(); ok && d.Before(slot) {
			slot = d
		}
		conn.SetReadDeadline(slot)
		for {
			n, err := conn.Read(buf)
			if err != nil {
				if errors.Is(err, syscall.ECONNREFUSED) {
					return fmt.Errorf("ping BMC: %w", err)
				}
				if !errors.Is(err, context.DeadlineExceeded) && !isTimeout(err) {
					last = err // wait for the slot to end
					select {
					case <-ctx.Done():
					case <-time.After(time.Until(slot)):
					}
				}
				break
			}
			if isPong(buf[:n]) {
				return nil
			}
		}
		if ctx.Err() != nil {
			if last == nil {
				last = context.Cause(ctx)
			}
			return fmt.Errorf("ping BMC: no answer: %w", last)
		}
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// isPong reports whether b is an ASF presence pong (RMCP class 6, IANA
// 4542, message type 0x40).
func isPong(b []byte) bool {
	return len(b) >= 9 && b[0] == 0x06 && b[3]&0x0f == 0x06 &&
		b[4] == 0x00 && b[5] == 0x00 && b[6] == 0x11 && b[7] == 0xbe && b[8] == 0x40
}

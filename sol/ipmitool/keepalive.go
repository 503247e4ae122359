package ipmitool

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

// pingInterval is how often ping resends while waiting (UDP may drop).
const pingInterval = 250 * time.Millisecond

// ping sends RMCP presence pings to the BMC until one is answered by a
// pong or ctx ends. ICMP port unreachable (nothing listens on the BMC's
// port) ends it at once with an error wrapping syscall.ECONNREFUSED.
func ping(ctx context.Context, addr string, port int) error {
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
		slot := time.Now().Add(pingInterval)
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

// probeResult is what a presence probe found while a call ran.
type probeResult int

const (
	probeNone    probeResult = iota // not run: the call ended before it was due
	probePong                       // the BMC answered
	probeRefused                    // ICMP port unreachable: nothing listens on the BMC's port
	probeSilent                     // no answer while the call ran
)

// minSilence is how long a probe must go unanswered to count as silence.
const minSilence = 2 * pingInterval

// errPortClosed ends a call whose probe found the BMC's port closed.
var errPortClosed = errors.New("nothing listens on the BMC's IPMI port (ICMP port unreachable)")

// watch pings the BMC once a call has run for Config.ProbeAfter without
// ending, so that a failure can be classified (ipmitool says the same
// "Unable to establish" for a wrong password, silence and a closed port)
// and a closed port fails the call at once through abort (ipmitool itself
// retries into it until its own timeout). ctx is the call's. The returned
// stop ends the probe, waits for its goroutine (which it owns) and tells
// what it found; the call runs it exactly once.
func (b *BMC) watch(ctx context.Context, abort context.CancelCauseFunc) (stop func() probeResult) {
	if b.cfg.ProbeAfter < 0 {
		return func() probeResult { return probeNone }
	}
	pctx, cancel := context.WithCancel(ctx)
	done := make(chan probeResult, 1)
	go func() {
		t := time.NewTimer(b.cfg.ProbeAfter)
		defer t.Stop()
		select {
		case <-t.C:
		case <-pctx.Done():
			done <- probeNone
			return
		}
		start := time.Now()
		err := ping(pctx, b.info.Addr, b.port)
		switch {
		case err == nil:
			done <- probePong
		case errors.Is(err, syscall.ECONNREFUSED):
			abort(errPortClosed)
			done <- probeRefused
		case time.Since(start) >= minSilence:
			done <- probeSilent
		default:
			done <- probeNone // stopped before silence meant anything
		}
	}()
	return func() probeResult {
		cancel()
		return <-done
	}
}

package ipmitool

import (
	"context"
	"errors"
	"syscall"
	"time"

	"github.com/obmd/obmd/sol/rmcp"
)

// probeResult is what a presence probe found while a call ran.
type probeResult int

const (
	probeNone    probeResult = iota // not run: the call ended before it was due
	probePong                       // the BMC answered
	probeRefused                    // ICMP port unreachable: nothing listens on the BMC's port
	probeSilent                     // no answer while the call ran
)

// minSilence is how long a probe must go unanswered to count as silence.
const minSilence = 2 * rmcp.PingInterval

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
		err := rmcp.Ping(pctx, b.info.Addr, b.port)
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

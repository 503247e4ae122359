package daemon_test

import (
	"fmt"
	"runtime"
	"strings"
	"testing"

	gossh "golang.org/x/crypto/ssh"
)

// TestLimiterNameFloodSSH: failed logins under distinct long user names,
// sent through the SSH door, leave the process's memory flat: its heap
// after a GC (obmd runs in it) grows by far less than the names (25 MiB)
// would take if the guessing limiter kept them, and the limiter tracks
// only the sources, one entry for all the names that are no node, and
// their pairs. Not parallel: it measures the process's heap.
func TestLimiterNameFloodSSH(t *testing.T) {
	o := startObmd(t)
	const names, size, sources, workers = 400, 64 << 10, 50, 8
	heap := func() uint64 {
		runtime.GC()
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	guess := func(i int) {
		name := fmt.Sprintf("%06d", i) + strings.Repeat("x", size)
		if c, err := dialFrom(o.SSHAddr(), fmt.Sprintf("127.0.1.%d", 1+i%sources), name, gossh.Password("guess")); err == nil {
			c.Close()
			t.Errorf("guess %d authenticated", i)
		}
	}
	afParallel(2*workers, workers, guess) // the first logins' allocations are in the baseline
	before := heap()
	afParallel(names, workers, func(i int) { guess(2*workers + i) })
	after := heap()
	const bound = 8 << 20
	if after > before && after-before > bound {
		t.Errorf("heap grew by %d KiB under %d failed logins with %d KiB names, want under %d KiB",
			(after-before)>>10, names, size>>10, bound>>10)
	}
	if got := o.afMetric("obmd_auth_limiter_entries"); got > 2*sources+1 {
		t.Errorf("limiter entries: got %v, want at most %d (sources, their pairs with the unknown names, that one entry)", got, 2*sources+1)
	}
}

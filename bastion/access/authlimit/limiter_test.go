package authlimit

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/obmd/obmd/bastion/access/sessions"
)

func TestLimiter(t *testing.T) {
	now := time.Unix(1000, 0)
	l := New(Config{PerSource: 3, PerNode: 5, Window: time.Minute, Lockout: time.Minute}, func() time.Time { return now })

	for i := 0; i < 3; i++ {
		failOnce(t, l, "10.0.0.1", "n1")
	}
	if ok, which := tryOnce(l, "10.0.0.1", "n2"); ok || which != "source" {
		t.Errorf("locked source on another node: got %v %q, want refused by source", ok, which)
	}
	if ok, _ := tryOnce(l, "10.0.0.2", "n1"); !ok {
		t.Errorf("clean source refused")
	}

	// Two more sources fail once each: the node (limit 5) is now under attack.
	failOnce(t, l, "10.0.0.3", "n1")
	failOnce(t, l, "10.0.0.4", "n1")
	if ok, which := tryOnce(l, "10.0.0.3", "n1"); ok || which != "node" {
		t.Errorf("failed source on attacked node: got %v %q, want refused by node", ok, which)
	}
	if ok, _ := tryOnce(l, "10.0.0.5", "n1"); !ok {
		t.Errorf("clean source refused on attacked node")
	}
	if ok, _ := tryOnce(l, "10.0.0.3", "n2"); !ok {
		t.Errorf("source refused on a node not under attack")
	}

	now = now.Add(2*time.Minute + time.Second)
	if ok, _ := tryOnce(l, "10.0.0.1", "n1"); !ok {
		t.Errorf("lockout did not expire")
	}
}

// TestLimiterFirstRefusal: of the tries a lockout refuses, only the first
// is marked to be audited, once per lockout of the source and once per
// lockout of a node under attack.
func TestLimiterFirstRefusal(t *testing.T) {
	now := time.Unix(1000, 0)
	l := New(Config{PerSource: 2, PerNode: 3, Window: time.Minute, Lockout: time.Minute}, func() time.Time { return now })
	type want struct {
		source, node, which string
		first               bool
	}
	refuse := func(steps ...want) {
		t.Helper()
		for i, w := range steps {
			ok, which, first := try(l, w.source, w.node, false)
			if ok || which != w.which || first != w.first {
				t.Errorf("refusal %d (%s on %s): got ok %v %q first %v, want refused by %q first %v",
					i, w.source, w.node, ok, which, first, w.which, w.first)
			}
		}
	}
	failOnce(t, l, "10.0.0.1", "n1")
	failOnce(t, l, "10.0.0.1", "n1")
	refuse(want{"10.0.0.1", "n1", "source", true}, want{"10.0.0.1", "n1", "source", false},
		want{"10.0.0.1", "n2", "source", false}, want{"10.0.0.1", "n1", "source", false})

	// The next lockout of that source has its own first refusal.
	now = now.Add(2 * time.Minute)
	failOnce(t, l, "10.0.0.1", "n1")
	failOnce(t, l, "10.0.0.1", "n1")
	refuse(want{"10.0.0.1", "n2", "source", true}, want{"10.0.0.1", "n2", "source", false})

	// n3 under attack: three sources failed once each.
	for _, src := range []string{"10.0.0.2", "10.0.0.3", "10.0.0.4"} {
		failOnce(t, l, src, "n3")
	}
	refuse(want{"10.0.0.2", "n3", "node", true}, want{"10.0.0.3", "n3", "node", false},
		want{"10.0.0.2", "n3", "node", false})
}

// TestLimiterFail: a failure that held no try (a connection that offered
// keys and ended without authenticating) counts like a failed try.
func TestLimiterFail(t *testing.T) {
	now := time.Unix(1000, 0)
	l := New(Config{PerSource: 2, PerNode: 100}, func() time.Time { return now })
	l.Fail("10.0.0.1", "n1", true)
	if ok, _ := tryOnce(l, "10.0.0.1", "n1"); !ok {
		t.Fatal("one failure refused the source")
	}
	l.Fail("10.0.0.1", "n2", false)
	if ok, which, first := try(l, "10.0.0.1", "n1", false); ok || which != "source" || !first {
		t.Errorf("after two failures: got %v %q first %v, want refused by source, first", ok, which, first)
	}
}

func TestLimiterMemoryBounded(t *testing.T) {
	now := time.Unix(1000, 0)
	l := New(Config{}, func() time.Time { return now })
	for i := 0; i < maxTracked; i++ {
		l.End(fmt.Sprint(i), "n", true, true)
	}
	now = now.Add(time.Hour)
	failOnce(t, l, "x", "n")
	if got := len(l.src) + len(l.pairs); got > 4 {
		t.Errorf("entries after sweep: got %d, want a handful", got)
	}
}

// try is a whole try of source on node (which exists): Begin, Judge, and
// End as a success (a probe that changes no count). It returns which limit
// refused it, if one did.
func try(l *Limiter, source, node string, failed bool) (ok bool, which string, first bool) {
	if ok, first := l.Begin(context.Background(), source); !ok {
		return false, "source", first
	}
	ok, first = l.Judge(source, node, true)
	l.End(source, node, true, failed && ok)
	if !ok {
		return false, "node", first
	}
	return true, "", false
}

// tryOnce is a try that succeeds if allowed.
func tryOnce(l *Limiter, source, node string) (bool, string) {
	ok, which, _ := try(l, source, node, false)
	return ok, which
}

func failOnce(t *testing.T, l *Limiter, source, node string) {
	t.Helper()
	if ok, which, _ := try(l, source, node, true); !ok {
		t.Fatalf("%s on %s: refused by %s, want a try", source, node, which)
	}
}

// TestLimiterParallel: tries in flight count against the source, so a
// burst sent at once gets PerSource tries, not one per connection; the
// tries beyond that wait for earlier ones to settle instead of being refused.
func TestLimiterParallel(t *testing.T) {
	now := time.Unix(1000, 0)
	l := New(Config{PerSource: 3, PerNode: 100, Window: time.Minute, Lockout: time.Minute}, func() time.Time { return now })
	l.wait = 5 * time.Second
	bg := context.Background()
	for i := 0; i < 3; i++ {
		if ok, _ := l.Begin(bg, "10.0.0.1"); !ok {
			t.Fatalf("try %d refused, want allowed", i)
		}
	}
	// A fourth waits for a slot ...
	fourth := make(chan bool, 1)
	go func() {
		ok, _ := l.Begin(bg, "10.0.0.1")
		fourth <- ok
	}()
	select {
	case ok := <-fourth:
		t.Fatalf("fourth try in flight: got %v at once, want it to wait", ok)
	case <-time.After(50 * time.Millisecond):
	}
	// ... and proceeds when one of the three succeeds.
	l.End("10.0.0.1", "n1", true, false)
	if ok := <-fourth; !ok {
		t.Fatalf("fourth try after a success: refused, want allowed")
	}
	// Others are not slowed by that source's tries.
	if ok, _ := tryOnce(l, "10.0.0.2", "n1"); !ok {
		t.Errorf("another source refused")
	}
	// A fifth waits; the three in flight fail: the source is locked and the
	// waiting try is refused, not let through.
	fifth := make(chan bool, 1)
	go func() {
		ok, _ := l.Begin(bg, "10.0.0.1")
		fifth <- ok
	}()
	// Another source's tries settling do not wake it.
	var waiting chan struct{}
	for deadline := time.Now().Add(10 * time.Second); waiting == nil; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("fifth try: not waiting on its source")
		}
		l.mu.Lock()
		waiting = l.src[sourceKey("10.0.0.1")].settled
		l.mu.Unlock()
	}
	tryOnce(l, "10.0.0.2", "n1")
	select {
	case <-waiting:
		t.Errorf("another source's try settling woke the source's waiting try")
	default:
	}
	for i := 0; i < 3; i++ {
		l.End("10.0.0.1", "n1", true, true)
	}
	if ok := <-fifth; ok {
		t.Errorf("waiting try after 3 failures: allowed, want refused")
	}
	// A success neither counts nor leaks a slot.
	for i := 0; i < 10; i++ {
		if ok, _ := tryOnce(l, "10.0.0.3", "n1"); !ok {
			t.Fatalf("successful try %d refused", i)
		}
	}
}

// TestLimiterQueueLongerThanWait: many correct tries sent at once from one
// address (a cloud controller's power calls for every node) each wait for
// a slot, and all get one even when the queue takes longer than the wait
// bound: the tries ahead keep settling, so none waits the bound without
// progress. Here 40 tries share one slot and each holds it 50 ms: the last
// ones wait about 2 s, twice the bound, and the longest wait between two
// settlements is 50 ms.
func TestLimiterQueueLongerThanWait(t *testing.T) {
	l := New(Config{PerSource: 1, PerNode: 100}, time.Now)
	l.wait = time.Second
	const tries, hold = 40, 50 * time.Millisecond
	var wg sync.WaitGroup
	var refused atomic.Int32
	start := time.Now()
	for range tries {
		wg.Go(func() {
			if ok, _ := l.Begin(context.Background(), "10.0.0.1"); !ok {
				refused.Add(1)
				return
			}
			time.Sleep(hold)
			l.End("10.0.0.1", "n1", true, false)
		})
	}
	wg.Wait()
	if n := refused.Load(); n > 0 {
		t.Errorf("%d of %d correct tries refused after waiting in a queue that moved every %v (took %v in all, bound %v)",
			n, tries, hold, time.Since(start).Round(time.Millisecond), l.wait)
	}
}

// TestLimiterWaitBounded: a try waiting for a slot gives up when none of
// the source's tries settles within the bound, or when its connection
// ends.
func TestLimiterWaitBounded(t *testing.T) {
	l := New(Config{PerSource: 1}, time.Now)
	l.wait = 30 * time.Millisecond
	bg := context.Background()
	if ok, _ := l.Begin(bg, "10.0.0.1"); !ok {
		t.Fatal("first try refused")
	}
	if ok, _ := l.Begin(bg, "10.0.0.1"); ok {
		t.Errorf("second try past the wait bound: allowed, want refused")
	}
	l.wait = time.Minute
	ctx, cancel := context.WithCancel(bg)
	cancel()
	if ok, _ := l.Begin(ctx, "10.0.0.1"); ok {
		t.Errorf("try of a closed connection: got allowed, want refused")
	}
}

// TestLimiterIPv6Prefix: addresses of one /64 share the per-source limit.
func TestLimiterIPv6Prefix(t *testing.T) {
	now := time.Unix(1000, 0)
	l := New(Config{PerSource: 3, PerNode: 100}, func() time.Time { return now })
	for i := 1; i <= 3; i++ {
		failOnce(t, l, sessions.SourceKey(fmt.Sprintf("2001:db8::%d", i)), "n1")
	}
	if ok, which := tryOnce(l, sessions.SourceKey("2001:db8::ffff"), "n1"); ok || which != "source" {
		t.Errorf("fourth address of the /64: got %v %q, want refused by source", ok, which)
	}
	if ok, _ := tryOnce(l, sessions.SourceKey("2001:db8:0:1::1"), "n1"); !ok {
		t.Errorf("another /64 refused")
	}
}

// TestLimiterUnknownNames: every name that is no node counts in one entry,
// which goes under attack like a node: a source that failed on unknown
// names is refused on unknown names while it is, not on nodes that exist.
func TestLimiterUnknownNames(t *testing.T) {
	now := time.Unix(1000, 0)
	l := New(Config{PerSource: 3, PerNode: 4, Window: time.Minute, Lockout: time.Minute}, func() time.Time { return now })
	fail := func(src, name string) {
		t.Helper()
		if ok, _ := l.Begin(context.Background(), src); !ok {
			t.Fatalf("%s: refused by source", src)
		}
		if ok, _ := l.Judge(src, name, false); !ok {
			t.Fatalf("%s on %.10q: refused by node", src, name)
		}
		l.End(src, name, false, true)
	}
	for i := range 4 {
		fail(fmt.Sprintf("10.0.0.%d", i+1), fmt.Sprintf("ghost-%d", i))
	}
	if len(l.node) != 1 || len(l.pairs) != 4 {
		t.Errorf("entries: got %d nodes and %d pairs, want 1 and 4", len(l.node), len(l.pairs))
	}
	if ok, _ := l.Begin(context.Background(), "10.0.0.1"); !ok {
		t.Fatal("source refused after one failure")
	}
	ok, first := l.Judge("10.0.0.1", "another-ghost", false)
	l.End("10.0.0.1", "another-ghost", false, false)
	if ok || !first {
		t.Errorf("failed source on unknown names under attack: got %v first %v, want refused, first", ok, first)
	}
	if ok, which := tryOnce(l, "10.0.0.1", "real"); !ok {
		t.Errorf("failed source on a node that exists: refused by %s, want allowed", which)
	}
	if ok, _ := l.Judge("10.0.0.9", "ghost-0", false); !ok {
		t.Errorf("a source that never failed: refused, want allowed")
	}
}

// TestLimiterNameFlood: distinct long user names, sent at the pace of the
// lockout (each source fails PerSource times, waits out its lockout, and
// goes again), leave the limiter's memory flat: no name is kept. Measured
// as the heap in use after a GC, before and after the flood.
func TestLimiterNameFlood(t *testing.T) {
	now := time.Unix(1000, 0)
	cfg := Config{PerSource: 5, PerNode: 20, Window: time.Minute, Lockout: time.Minute}
	l := New(cfg, func() time.Time { return now })
	heap := func() uint64 {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	const names, nameLen, sources = 20_000, 4 << 10, 64 // 80 MiB of names
	name := []byte(strings.Repeat("x", nameLen))
	before := heap()
	for i := range names {
		src := fmt.Sprintf("10.1.%d.%d", i%sources/250, i%sources%250)
		copy(name, fmt.Sprintf("%08d", i))
		user := string(name) // a new string, as each SSH login's is
		ok, _ := l.Begin(context.Background(), src)
		if !ok {
			t.Fatalf("name %d: source %s refused: the flood's pacing is off", i, src)
		}
		ok, _ = l.Judge(src, user, false)
		l.End(src, user, false, ok)
		if (i+1)%(sources*cfg.PerSource) == 0 { // every source is locked out: wait it out
			now = now.Add(cfg.Window + cfg.Lockout)
		}
	}
	after := heap()
	const bound = 4 << 20
	if after > before && after-before > bound {
		t.Errorf("heap grew by %d KiB under a flood of %d names of %d KiB, want under %d KiB",
			(after-before)>>10, names, nameLen>>10, bound>>10)
	}
	if got := l.Tracked(); got > 2*sources+1 {
		t.Errorf("entries: got %d, want at most %d (sources, one unknown node, pairs)", got, 2*sources+1)
	}
}

// TestLimiterSweepsOnTimer: Run drops expired entries on its own, without
// new failures to trigger a sweep, and stops when its context ends.
func TestLimiterSweepsOnTimer(t *testing.T) {
	var mu sync.Mutex
	now := time.Unix(1000, 0)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	l := New(Config{PerSource: 3, PerNode: 5}, clock)
	l.sweepEvery = 10 * time.Millisecond
	for i := range 100 {
		failOnce(t, l, fmt.Sprintf("10.0.0.%d", i), "n1")
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- l.Run(ctx) }() // waited for below
	time.Sleep(50 * time.Millisecond)
	if got := l.Tracked(); got != 201 {
		t.Errorf("entries before they expire: got %d, want 201", got)
	}
	mu.Lock()
	now = now.Add(3 * time.Minute)
	mu.Unlock()
	deadline := time.Now().Add(10 * time.Second)
	for l.Tracked() != 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if got := l.Tracked(); got != 0 {
		t.Errorf("entries after they expired: got %d, want 0", got)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run: %v", err)
	}
}

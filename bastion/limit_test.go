package bastion

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/obmd/obmd/bastion/sessions"
)

func TestLimiter(t *testing.T) {
	now := time.Unix(1000, 0)
	l := NewLimiter(LimitConfig{PerSource: 3, PerNode: 5, Window: time.Minute, Lockout: time.Minute}, func() time.Time { return now })

	for i := 0; i < 3; i++ {
		if ok, _, _ := l.Begin(context.Background(), "10.0.0.1", "n1"); !ok {
			t.Fatalf("attempt %d refused before the limit", i)
		}
		l.End("10.0.0.1", "n1", true)
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
	l := NewLimiter(LimitConfig{PerSource: 2, PerNode: 3, Window: time.Minute, Lockout: time.Minute}, func() time.Time { return now })
	type want struct {
		source, node, which string
		first               bool
	}
	refuse := func(steps ...want) {
		t.Helper()
		for i, w := range steps {
			ok, which, first := l.Begin(context.Background(), w.source, w.node)
			if ok {
				l.End(w.source, w.node, false)
			}
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
	l := NewLimiter(LimitConfig{PerSource: 2, PerNode: 100}, func() time.Time { return now })
	l.Fail("10.0.0.1", "n1")
	if ok, _ := tryOnce(l, "10.0.0.1", "n1"); !ok {
		t.Fatal("one failure refused the source")
	}
	l.Fail("10.0.0.1", "n2")
	if ok, which, first := l.Begin(context.Background(), "10.0.0.1", "n1"); ok || which != "source" || !first {
		t.Errorf("after two failures: got %v %q first %v, want refused by source, first", ok, which, first)
	}
}

func TestLimiterMemoryBounded(t *testing.T) {
	now := time.Unix(1000, 0)
	l := NewLimiter(LimitConfig{}, func() time.Time { return now })
	for i := 0; i < maxTracked; i++ {
		l.End(fmt.Sprint(i), "n", true)
	}
	now = now.Add(time.Hour)
	failOnce(t, l, "x", "n")
	if got := len(l.src) + len(l.pairs); got > 4 {
		t.Errorf("entries after sweep: got %d, want a handful", got)
	}
}

// tryOnce begins a try and ends it as a success (a probe that changes no
// count).
func tryOnce(l *Limiter, source, node string) (bool, string) {
	ok, which, _ := l.Begin(context.Background(), source, node)
	if ok {
		l.End(source, node, false)
	}
	return ok, which
}

func failOnce(t *testing.T, l *Limiter, source, node string) {
	t.Helper()
	if ok, which, _ := l.Begin(context.Background(), source, node); !ok {
		t.Fatalf("%s on %s: refused by %s, want a try", source, node, which)
	}
	l.End(source, node, true)
}

// TestLimiterParallel: tries in flight count against the source, so a
// burst sent at once gets PerSource tries, not one per connection; the
// tries beyond that wait for earlier ones to settle instead of being refused.
func TestLimiterParallel(t *testing.T) {
	now := time.Unix(1000, 0)
	l := NewLimiter(LimitConfig{PerSource: 3, PerNode: 100, Window: time.Minute, Lockout: time.Minute}, func() time.Time { return now })
	l.wait = 5 * time.Second
	bg := context.Background()
	for i := 0; i < 3; i++ {
		if ok, which, _ := l.Begin(bg, "10.0.0.1", "n1"); !ok {
			t.Fatalf("try %d refused by %s, want allowed", i, which)
		}
	}
	// A fourth waits for a slot ...
	type result struct {
		ok    bool
		which string
	}
	fourth := make(chan result, 1)
	go func() {
		ok, which, _ := l.Begin(bg, "10.0.0.1", "n1")
		fourth <- result{ok, which}
	}()
	select {
	case r := <-fourth:
		t.Fatalf("fourth try in flight: got %v %q at once, want it to wait", r.ok, r.which)
	case <-time.After(50 * time.Millisecond):
	}
	// ... and proceeds when one of the three succeeds.
	l.End("10.0.0.1", "n1", false)
	if r := <-fourth; !r.ok {
		t.Fatalf("fourth try after a success: refused by %s, want allowed", r.which)
	}
	// Others are not slowed by that source's tries.
	if ok, _ := tryOnce(l, "10.0.0.2", "n1"); !ok {
		t.Errorf("another source refused")
	}
	// A fifth waits; the three in flight fail: the source is locked and the
	// waiting try is refused, not let through.
	fifth := make(chan result, 1)
	go func() {
		ok, which, _ := l.Begin(bg, "10.0.0.1", "n1")
		fifth <- result{ok, which}
	}()
	time.Sleep(20 * time.Millisecond)
	for i := 0; i < 3; i++ {
		l.End("10.0.0.1", "n1", true)
	}
	if r := <-fifth; r.ok || r.which != "source" {
		t.Errorf("waiting try after 3 failures: got %v %q, want refused by source", r.ok, r.which)
	}
	// A success neither counts nor leaks a slot.
	for i := 0; i < 10; i++ {
		if ok, _ := tryOnce(l, "10.0.0.3", "n1"); !ok {
			t.Fatalf("successful try %d refused", i)
		}
	}
}

// TestLimiterWaitBounded: a try waiting for a slot gives up at the bound,
// or when its connection ends.
func TestLimiterWaitBounded(t *testing.T) {
	l := NewLimiter(LimitConfig{PerSource: 1}, time.Now)
	l.wait = 30 * time.Millisecond
	bg := context.Background()
	if ok, _, _ := l.Begin(bg, "10.0.0.1", "n1"); !ok {
		t.Fatal("first try refused")
	}
	if ok, which, _ := l.Begin(bg, "10.0.0.1", "n1"); ok || which != "source" {
		t.Errorf("second try past the wait bound: got %v %q, want refused by source", ok, which)
	}
	l.wait = time.Minute
	ctx, cancel := context.WithCancel(bg)
	cancel()
	if ok, _, _ := l.Begin(ctx, "10.0.0.1", "n1"); ok {
		t.Errorf("try of a closed connection: got allowed, want refused")
	}
}

// TestLimiterIPv6Prefix: addresses of one /64 share the per-source limit.
func TestLimiterIPv6Prefix(t *testing.T) {
	now := time.Unix(1000, 0)
	l := NewLimiter(LimitConfig{PerSource: 3, PerNode: 100}, func() time.Time { return now })
	for i := 1; i <= 3; i++ {
		failOnce(t, l, sessions.SourceKey(fmt.Sprintf("2001:db8::%d", i)), "n1")
	}
	if ok, which, _ := l.Begin(context.Background(), sessions.SourceKey("2001:db8::ffff"), "n1"); ok || which != "source" {
		t.Errorf("fourth address of the /64: got %v %q, want refused by source", ok, which)
	}
	if ok, _ := tryOnce(l, sessions.SourceKey("2001:db8:0:1::1"), "n1"); !ok {
		t.Errorf("another /64 refused")
	}
}

package bastion

import (
	"fmt"
	"testing"
	"time"
)

func TestLimiter(t *testing.T) {
	now := time.Unix(1000, 0)
	l := newLimiter(LimitConfig{PerSource: 3, PerNode: 5, Window: time.Minute, Lockout: time.Minute}, func() time.Time { return now })

	for i := 0; i < 3; i++ {
		if ok, _ := l.begin("10.0.0.1", "n1"); !ok {
			t.Fatalf("attempt %d refused before the limit", i)
		}
		l.end("10.0.0.1", "n1", true)
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

func TestLimiterMemoryBounded(t *testing.T) {
	now := time.Unix(1000, 0)
	l := newLimiter(LimitConfig{}, func() time.Time { return now })
	for i := 0; i < maxTracked; i++ {
		l.end(fmt.Sprint(i), "n", true)
	}
	now = now.Add(time.Hour)
	failOnce(t, l, "x", "n")
	if got := len(l.src) + len(l.pairs); got > 4 {
		t.Errorf("entries after sweep: got %d, want a handful", got)
	}
}

// tryOnce begins a try and ends it as a success (a probe that changes no
// count).
func tryOnce(l *limiter, source, node string) (bool, string) {
	ok, which := l.begin(source, node)
	if ok {
		l.end(source, node, false)
	}
	return ok, which
}

func failOnce(t *testing.T, l *limiter, source, node string) {
	t.Helper()
	if ok, which := l.begin(source, node); !ok {
		t.Fatalf("%s on %s: refused by %s, want a try", source, node, which)
	}
	l.end(source, node, true)
}

// TestLimiterParallel: tries in flight count against the source, so a
// burst sent at once gets PerSource tries, not one per connection.
func TestLimiterParallel(t *testing.T) {
	now := time.Unix(1000, 0)
	l := newLimiter(LimitConfig{PerSource: 3, PerNode: 100, Window: time.Minute, Lockout: time.Minute}, func() time.Time { return now })
	allowed := 0
	for i := 0; i < 10; i++ {
		if ok, which := l.begin("10.0.0.1", "n1"); ok {
			allowed++
		} else if which != "source" {
			t.Errorf("refused by %q, want source", which)
		}
	}
	if allowed != 3 {
		t.Fatalf("tries begun in parallel: got %d allowed, want 3", allowed)
	}
	// One succeeds, two fail: a slot is free again until the third failure.
	l.end("10.0.0.1", "n1", false)
	l.end("10.0.0.1", "n1", true)
	l.end("10.0.0.1", "n1", true)
	failOnce(t, l, "10.0.0.1", "n1")
	if ok, which := l.begin("10.0.0.1", "n1"); ok || which != "source" {
		t.Errorf("after 3 failures: got %v %q, want refused by source", ok, which)
	}
	// Others are not slowed by that source's tries.
	if ok, _ := tryOnce(l, "10.0.0.2", "n1"); !ok {
		t.Errorf("another source refused")
	}
	// A success neither counts nor leaks a slot.
	for i := 0; i < 10; i++ {
		if ok, _ := tryOnce(l, "10.0.0.3", "n1"); !ok {
			t.Fatalf("successful try %d refused", i)
		}
	}
}

func TestSourceKey(t *testing.T) {
	cases := []struct{ host, want string }{
		{"192.0.2.7", "192.0.2.7"},
		{"127.0.0.2", "127.0.0.2"},
		{"::ffff:192.0.2.7", "192.0.2.7"}, // IPv4-mapped, from a dual-stack listener
		{"2001:db8:1:2:3:4:5:6", "2001:db8:1:2::/64"},
		{"2001:db8:1:2:ffff::1", "2001:db8:1:2::/64"},
		{"2001:db8:1:3::1", "2001:db8:1:3::/64"},
		{"::1", "::/64"},
		{"not-an-ip", "not-an-ip"},
		{"", ""},
	}
	for _, c := range cases {
		if got := sourceKey(c.host); got != c.want {
			t.Errorf("sourceKey(%q): got %q, want %q", c.host, got, c.want)
		}
	}
}

// TestLimiterIPv6Prefix: addresses of one /64 share the per-source limit.
func TestLimiterIPv6Prefix(t *testing.T) {
	now := time.Unix(1000, 0)
	l := newLimiter(LimitConfig{PerSource: 3, PerNode: 100}, func() time.Time { return now })
	for i := 1; i <= 3; i++ {
		failOnce(t, l, sourceKey(fmt.Sprintf("2001:db8::%d", i)), "n1")
	}
	if ok, which := l.begin(sourceKey("2001:db8::ffff"), "n1"); ok || which != "source" {
		t.Errorf("fourth address of the /64: got %v %q, want refused by source", ok, which)
	}
	if ok, _ := tryOnce(l, sourceKey("2001:db8:0:1::1"), "n1"); !ok {
		t.Errorf("another /64 refused")
	}
}

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
		if ok, _ := l.allow("10.0.0.1", "n1"); !ok {
			t.Fatalf("attempt %d refused before the limit", i)
		}
		l.fail("10.0.0.1", "n1")
	}
	if ok, which := l.allow("10.0.0.1", "n2"); ok || which != "source" {
		t.Errorf("locked source on another node: got %v %q, want refused by source", ok, which)
	}
	if ok, _ := l.allow("10.0.0.2", "n1"); !ok {
		t.Errorf("clean source refused")
	}

	// Two more sources fail once each: the node (limit 5) is now under attack.
	l.fail("10.0.0.3", "n1")
	l.fail("10.0.0.4", "n1")
	if ok, which := l.allow("10.0.0.3", "n1"); ok || which != "node" {
		t.Errorf("failed source on attacked node: got %v %q, want refused by node", ok, which)
	}
	if ok, _ := l.allow("10.0.0.5", "n1"); !ok {
		t.Errorf("clean source refused on attacked node")
	}
	if ok, _ := l.allow("10.0.0.3", "n2"); !ok {
		t.Errorf("source refused on a node not under attack")
	}

	now = now.Add(2*time.Minute + time.Second)
	if ok, _ := l.allow("10.0.0.1", "n1"); !ok {
		t.Errorf("lockout did not expire")
	}
}

func TestLimiterMemoryBounded(t *testing.T) {
	now := time.Unix(1000, 0)
	l := newLimiter(LimitConfig{}, func() time.Time { return now })
	for i := 0; i < maxTracked; i++ {
		l.fail(fmt.Sprint(i), "n")
	}
	now = now.Add(time.Hour)
	l.fail("x", "n")
	if got := len(l.src) + len(l.pairs); got > 4 {
		t.Errorf("entries after sweep: got %d, want a handful", got)
	}
}

package authlimit

import (
	"context"
	"reflect"
	"testing"
	"time"
)

// TestLockouts: the listing names the sources locked out (with when the
// lockout ends, the failures that caused it and the tries refused since)
// and the nodes under attack with the sources they refuse; unknown names
// are one entry without a name; nothing that is not refusing is listed.
func TestLockouts(t *testing.T) {
	now := time.Unix(1000, 0)
	l := New(Config{PerSource: 3, PerNode: 5, Window: time.Minute, Lockout: time.Minute}, func() time.Time { return now })
	if got := l.Lockouts(100); !reflect.DeepEqual(got, Lockouts{}) {
		t.Errorf("nothing failed: got %+v, want no lockouts", got)
	}
	for range 3 {
		failOnce(t, l, "10.0.0.1", "n1")
	}
	tryOnce(l, "10.0.0.1", "n1") // refused
	failOnce(t, l, "10.0.0.3", "n1")
	now = now.Add(time.Second)
	failOnce(t, l, "10.0.0.4", "n1") // n1: 5 failures, under attack
	failOnce(t, l, "10.0.0.5", "n2") // one failure: no lockout
	for _, src := range []string{"10.0.0.6", "10.0.0.7", "10.0.0.8", "10.0.0.9", "10.0.0.10"} {
		failUnknown(t, l, src, "ghost-"+src)
	}
	want := Lockouts{
		Sources: []SourceLockout{{Source: "10.0.0.1", Until: time.Unix(1060, 0), Failures: 3, Refused: 1}},
		Nodes: []NodeLockout{
			{Unknown: true, Until: time.Unix(1061, 0), Failures: 5,
				Sources: []string{"10.0.0.10", "10.0.0.6", "10.0.0.7", "10.0.0.8", "10.0.0.9"}},
			{Node: "n1", Until: time.Unix(1061, 0), Failures: 5, Sources: []string{"10.0.0.1", "10.0.0.3", "10.0.0.4"}},
		},
	}
	if got := l.Lockouts(100); !reflect.DeepEqual(got, want) {
		t.Errorf("got %+v\nwant %+v", got, want)
	}
	// A cut listing says so: one source, one node entry and two of its sources.
	if got := l.Lockouts(4); !got.More || len(got.Sources) != 1 || len(got.Nodes) != 1 || len(got.Nodes[0].Sources) != 2 {
		t.Errorf("cut at 4: got %+v, want 1 source, 1 node with 2 sources, and More", got)
	}
	if got := l.Lockouts(1); !got.More || len(got.Sources) != 1 || len(got.Nodes) != 0 {
		t.Errorf("cut at 1: got %+v, want the source alone, and More", got)
	}
	now = now.Add(time.Minute + time.Second)
	if got := l.Lockouts(100); !reflect.DeepEqual(got, Lockouts{}) {
		t.Errorf("after the lockouts: got %+v, want none", got)
	}
}

// TestUnlock: unlocking a source lets its next try through, on every node
// and on a node under attack that it failed on, and says whether anything
// refused it; unlocking again (or an address never seen) changes nothing.
// An IPv6 address unlocks its /64.
func TestUnlock(t *testing.T) {
	now := time.Unix(1000, 0)
	l := New(Config{PerSource: 3, PerNode: 4, Window: time.Minute, Lockout: time.Minute}, func() time.Time { return now })
	for range 3 {
		failOnce(t, l, "10.0.0.1", "n1")
	}
	failOnce(t, l, "10.0.0.2", "n1") // n1 under attack
	if ok, which := tryOnce(l, "10.0.0.1", "n2"); ok || which != "source" {
		t.Fatalf("before unlock: got %v %q, want refused by source", ok, which)
	}
	if key, was := l.Unlock("10.0.0.1"); key != "10.0.0.1" || !was {
		t.Errorf("unlock: got %q %v, want 10.0.0.1 true", key, was)
	}
	if ok, which := tryOnce(l, "10.0.0.1", "n2"); !ok {
		t.Errorf("after unlock, another node: refused by %s", which)
	}
	if ok, which := tryOnce(l, "10.0.0.1", "n1"); !ok {
		t.Errorf("after unlock, the node under attack: refused by %s", which)
	}
	if _, was := l.Unlock("10.0.0.1"); was {
		t.Errorf("second unlock: said it was locked")
	}
	if _, was := l.Unlock("192.0.2.1"); was {
		t.Errorf("unlock of an address never seen: said it was locked")
	}
	// 10.0.0.2 is refused by n1 alone (its one failure there): unlocking
	// it lifts that.
	if ok, which := tryOnce(l, "10.0.0.2", "n1"); ok || which != "node" {
		t.Fatalf("10.0.0.2 on n1: got %v %q, want refused by node", ok, which)
	}
	if _, was := l.Unlock("10.0.0.2"); !was {
		t.Errorf("unlock of a source a node under attack refuses: said it was not locked")
	}
	if ok, which := tryOnce(l, "10.0.0.2", "n1"); !ok {
		t.Errorf("10.0.0.2 on n1 after unlock: refused by %s", which)
	}

	for i := range 3 {
		failOnce(t, l, sourceKey("2001:db8::"+string(rune('1'+i))), "n3")
	}
	if key, was := l.Unlock("2001:db8::ffff"); key != "2001:db8::/64" || !was {
		t.Errorf("unlock in a /64: got %q %v, want 2001:db8::/64 true", key, was)
	}
}

// TestUnlockInFlight: unlocking a source with a try in flight keeps its
// slot (it still ends), and a try waiting for a slot goes on at once.
func TestUnlockInFlight(t *testing.T) {
	now := time.Unix(1000, 0)
	l := New(Config{PerSource: 2, PerNode: 100, Window: time.Minute, Lockout: time.Minute}, func() time.Time { return now })
	failOnce(t, l, "10.0.0.1", "n1")
	if ok, _ := l.Begin(context.Background(), "10.0.0.1"); !ok {
		t.Fatal("second try refused")
	}
	woke := make(chan bool, 1)
	go func() {
		ok, _ := l.Begin(context.Background(), "10.0.0.1") // waits: one failure, one in flight
		woke <- ok
	}()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		l.mu.Lock()
		waiting := l.src["10.0.0.1"].settled != nil
		l.mu.Unlock()
		if waiting {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("third try: not waiting on its source")
		}
	}
	l.Unlock("10.0.0.1")
	select {
	case ok := <-woke:
		if !ok {
			t.Error("the waiting try was refused, want allowed")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the waiting try was not woken by the unlock")
	}
	l.End("10.0.0.1", "n1", true, false)
	l.End("10.0.0.1", "n1", true, false)
	l.mu.Lock()
	pending := l.src["10.0.0.1"].pending
	l.mu.Unlock()
	if pending != 0 {
		t.Errorf("tries in flight after both ended: got %d, want 0", pending)
	}
}

// failUnknown is a failed try of source on name, which is no node.
func failUnknown(t *testing.T, l *Limiter, source, name string) {
	t.Helper()
	if ok, _ := l.Begin(context.Background(), source); !ok {
		t.Fatalf("%s: refused by source", source)
	}
	if ok, _ := l.Judge(source, name, false); !ok {
		t.Fatalf("%s on %q: refused by node", source, name)
	}
	l.End(source, name, false, true)
}

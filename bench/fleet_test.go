package main

import (
	"errors"
	"net"
	"net/http"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"
)

// BenchmarkFleetListInproc is section 7's `GET /v1/nodes` against an obmd
// in this process (SQLite, defaults) with OBMD_FLEET_NODES sim nodes
// (default 10,000), so that a CPU profile shows where a listing's time
// goes:
//
//	go test -run '^$' -bench FleetListInproc -benchtime 20x -cpuprofile cpu.out ./bench/
//	go tool pprof -top -cum bench.test cpu.out
//
// Registering the nodes is outside the timed part (and the profile's
// largest share: read the listing's own frames).
func BenchmarkFleetListInproc(b *testing.B) {
	n := 10000
	if v, err := strconv.Atoi(os.Getenv("OBMD_FLEET_NODES")); err == nil && v > 0 {
		n = v
	}
	o := testDaemon(b, "")
	tr := &http.Transport{MaxIdleConnsPerHost: fleetWorkers}
	a := admin{o.addr, o.token, &http.Client{Timeout: time.Minute, Transport: tr}}
	if _, err := registerSimNodes(a, fleetLabel, n, 0); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for range b.N {
		var out struct{ Nodes []struct{ Label string } }
		if _, err := a.callSized("GET", "/v1/nodes", nil, &out); err != nil {
			b.Fatal(err)
		}
		if len(out.Nodes) != n {
			b.Fatalf("listed %d nodes, want %d", len(out.Nodes), n)
		}
	}
}

// Section 7's bursts come from as many addresses as operations, all on
// loopback and none 127.0.0.1 (the other sections' clients), so obmd's
// per-source limits see 500 hosts.
func TestBurstAddressesDistinct(t *testing.T) {
	seen := map[string]int{}
	for i := range 500 {
		ip := burstFrom(i)
		if !ip.IsLoopback() || ip.Equal(net.IPv4(127, 0, 0, 1)) || ip.To4()[3] == 0 {
			t.Errorf("client %d: address %v", i, ip)
		}
		if j, dup := seen[ip.String()]; dup {
			t.Errorf("clients %d and %d share %v", j, i, ip)
		}
		seen[ip.String()] = i
	}
}

func TestThousands(t *testing.T) {
	for n, want := range map[int]string{0: "0", 100: "100", 1000: "1,000", 10000: "10,000", 1234567: "1,234,567"} {
		if got := thousands(n); got != want {
			t.Errorf("thousands(%d) = %q, want %q", n, got, want)
		}
	}
}

// forEach runs each index once, and none starts after one has failed.
func TestForEach(t *testing.T) {
	var mu sync.Mutex
	ran := map[int]int{}
	count := func(i int) {
		mu.Lock()
		ran[i]++
		mu.Unlock()
	}
	if err := forEach(100, 4, time.Time{}, func(i int) error { count(i); return nil }); err != nil {
		t.Fatal(err)
	}
	for i := range 100 {
		if ran[i] != 1 {
			t.Errorf("index %d ran %d times", i, ran[i])
		}
	}
	ran = map[int]int{}
	boom := errors.New("boom")
	err := forEach(1000, 1, time.Time{}, func(i int) error { // one worker: the order is fixed
		count(i)
		if i == 10 {
			return boom
		}
		return nil
	})
	if !errors.Is(err, boom) {
		t.Errorf("got %v, want boom", err)
	}
	if len(ran) != 11 {
		t.Errorf("%d indices ran, want 11 (0 to 10, the failure the last)", len(ran))
	}
}

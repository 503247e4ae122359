package main

import (
	"net"
	"net/http"
	"os"
	"strconv"
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
	d := benchDaemon(b)
	tr := &http.Transport{MaxIdleConnsPerHost: fleetWorkers}
	a := admin{d.AdminAddr(), d.AdminToken(), &http.Client{Timeout: time.Minute, Transport: tr}}
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

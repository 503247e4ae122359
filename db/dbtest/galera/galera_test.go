package galera

import (
	"net"
	"strconv"
	"testing"
)

// The cluster itself is exercised by db's tests (TestGalera*): starting one
// here too would cost CI another 20 s.

func TestPickPorts(t *testing.T) {
	ports, err := pickPorts(Size * 4)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int]bool{}
	for _, p := range ports {
		if seen[p] || p < 1024 || p >= ephemeralLow() {
			t.Errorf("port %d: duplicate or outside [1024, %d)", p, ephemeralLow())
		}
		seen[p] = true
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		if err != nil {
			t.Errorf("port %d is not free: %v", p, err)
			continue
		}
		l.Close()
	}
}

package galera

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
)

// pickPorts returns n distinct TCP ports free on 127.0.0.1 now, chosen at
// random below the kernel's ephemeral range: the kernel never hands those
// out to bind(":0") or to outgoing connections, so only a process that
// chooses them on purpose (another cluster) can take one before mariadbd
// binds it, and node.start picks again if that happens.
func pickPorts(n int) ([]int, error) {
	lo, hi := 20000, ephemeralLow()
	if hi-lo < 1000 {
		lo = max(1024, hi-10000)
	}
	seen := map[int]bool{}
	var out []int
	for tries := 0; len(out) < n; tries++ {
		if tries > 1000 {
			return nil, fmt.Errorf("no %d free ports in [%d, %d)", n, lo, hi)
		}
		p := lo + rand.IntN(hi-lo)
		if seen[p] {
			continue
		}
		seen[p] = true
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		if err != nil {
			continue
		}
		_ = l.Close()
		out = append(out, p)
	}
	return out, nil
}

// ephemeralLow is the first port of the kernel's ephemeral range.
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if v, err := strconv.Atoi(f[0]); err == nil {
				return v
			}
		}
	}
	return 32768
}

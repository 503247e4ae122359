package ipmitool

import (
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/obmd/obmd/sol"
	"github.com/obmd/obmd/sol/soltest/ipmisim"
)

// testConfig keeps the keepalive short so that link-loss tests are quick.
func testConfig() Config {
	return Config{
		CallTimeout:      10 * time.Second,
		Keepalive:        time.Second,
		KeepaliveTimeout: time.Second,
		CloseTimeout:     2 * time.Second,
	}
}

func testLogger(t testing.TB) logrus.FieldLogger {
	l := logrus.New()
	l.SetLevel(logrus.DebugLevel)
	l.Out = testWriter{t}
	return l
}

type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// startSim runs ipmi_sim and returns it with a driver for it.
func startSim(t *testing.T) (*ipmisim.Sim, *BMC) {
	t.Helper()
	ipmisim.Require(t, "ipmitool", "ipmi_sim", "socat")
	s := ipmisim.Start(t)
	return s, newDriver(t, s.Info())
}

// newDriver is a driver for the BMC of info, with testConfig.
func newDriver(t *testing.T, info sol.Info) *BMC {
	t.Helper()
	b, err := New("node-1", info, testConfig(), testLogger(t))
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return b
}

func tail(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}

// children lists the pids of this process's ipmitool children (zombies
// included).
func children(t testing.TB) []int {
	t.Helper()
	self := os.Getpid()
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	var pids []int
	for _, f := range stats {
		data, err := os.ReadFile(f)
		if err != nil {
			continue // gone meanwhile
		}
		// pid (comm) state ppid ...
		s := string(data)
		open, shut := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
		if open < 0 || shut < 0 {
			continue
		}
		fields := strings.Fields(s[shut+1:])
		if len(fields) < 2 || s[open+1:shut] != "ipmitool" {
			continue
		}
		if ppid, _ := strconv.Atoi(fields[1]); ppid == self {
			pid, _ := strconv.Atoi(strings.TrimSpace(s[:open]))
			pids = append(pids, pid)
		}
	}
	return pids
}

// noChildren fails t if an ipmitool child (or zombie) is left.
func noChildren(t testing.TB) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Second)
	for {
		pids := children(t)
		if len(pids) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("ipmitool children left: %v", pids)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// silentPort is a UDP port on 127.0.0.1 that receives and never answers: a
// BMC that is there but dead. It is closed when t ends.
func silentPort(t *testing.T) int {
	t.Helper()
	silent, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { silent.Close() })
	return silent.LocalAddr().(*net.UDPAddr).Port
}

// silentBMC is a driver for a BMC at silentPort.
func silentBMC(t *testing.T) *BMC {
	t.Helper()
	b, err := New("node-1", sol.Info{Addr: "127.0.0.1", Port: silentPort(t), User: "u", Pass: "p"}, testConfig(), testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

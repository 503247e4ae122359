package ipmisim

import (
	"net"
	"testing"

	"github.com/obmd/obmd/sol"
	"github.com/obmd/obmd/sol/soltest"
)

// Loopback addresses of the failing BMCs below: not 127.0.0.1, so that a
// test that looks for a BMC's address in what a tenant received cannot
// mistake the tenant's own address (or ipmi_sim's) for it.
const (
	SilentHost = "127.0.0.3"
	ClosedHost = "127.0.0.4"
)

// Silent is a BMC on a UDP port of SilentHost that takes every datagram and
// never answers (a BMC that is there but dead, or a filtered address). The
// port closes when t ends.
func Silent(t testing.TB) sol.Info {
	t.Helper()
	c, err := net.ListenPacket("udp4", net.JoinHostPort(SilentHost, "0"))
	if err != nil {
		t.Fatalf("silent BMC: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return faultInfo(SilentHost, c.LocalAddr().(*net.UDPAddr).Port)
}

// Closed is a BMC on a UDP port of ClosedHost where nothing listens: the
// kernel answers ICMP port unreachable (a BMC whose IPMI service is down).
// The port was free a moment ago; another test could bind it meanwhile,
// but no test binds ClosedHost.
func Closed(t testing.TB) sol.Info {
	t.Helper()
	c, err := net.ListenPacket("udp4", net.JoinHostPort(ClosedHost, "0"))
	if err != nil {
		t.Fatalf("closed BMC: %v", err)
	}
	port := c.LocalAddr().(*net.UDPAddr).Port
	c.Close()
	return faultInfo(ClosedHost, port)
}

func faultInfo(host string, port int) sol.Info {
	c := 3
	return sol.Info{Addr: host, Port: port, User: User, Pass: Pass, Cipher: &c}
}

// WrongPassword is how obmd would reach s with a password s refuses.
func (s *Sim) WrongPassword() sol.Info {
	info := s.Info()
	info.Pass = "wrong-password"
	return info
}

// FaultCases are the BMC failures every driver classifies: s refusing the
// password, a silent BMC and a closed port.
func FaultCases(t testing.TB, s *Sim) []soltest.FaultCase {
	return []soltest.FaultCase{
		{Name: "wrong password", Info: s.WrongPassword(), Want: sol.FaultCredentials},
		{Name: "no answer", Info: Silent(t), Want: sol.FaultNoAnswer},
		{Name: "closed port", Info: Closed(t), Want: sol.FaultUnreachable},
	}
}

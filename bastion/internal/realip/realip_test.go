package realip

import (
	"errors"
	"net"
	"net/netip"
	"strings"
	"testing"
)

func mustTrusted(t testing.TB, list ...string) Trusted {
	t.Helper()
	tr, err := ParseTrusted(list)
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

func TestParseTrusted(t *testing.T) {
	tr := mustTrusted(t, "10.0.0.5", " 10.0.1.0/24", "2001:db8::/64", "::ffff:192.0.2.1")
	for _, c := range []struct {
		addr string
		want bool
	}{
		{"10.0.0.5", true}, {"10.0.0.6", false}, {"10.0.1.77", true}, {"10.0.2.1", false},
		{"2001:db8::99", true}, {"2001:db8:1::1", false}, {"192.0.2.1", true}, {"::ffff:10.0.0.5", true},
	} {
		if got := tr.Contains(netip.MustParseAddr(c.addr)); got != c.want {
			t.Errorf("Contains(%s): got %v, want %v", c.addr, got, c.want)
		}
	}
	if !tr.ContainsAddr(&net.TCPAddr{IP: net.ParseIP("10.0.1.3"), Port: 9}) || tr.ContainsAddr(nil) {
		t.Errorf("ContainsAddr: got the wrong answer")
	}
	for _, bad := range []string{"10.0.0.1/24", "10.0.0", "host.example", "10.0.0.0/33", "fe80::1%eth0", ""} {
		if _, err := ParseTrusted([]string{bad}); err == nil {
			t.Errorf("ParseTrusted(%q): got nil error, want one", bad)
		}
	}
	if (Trusted{}).Contains(netip.MustParseAddr("127.0.0.1")) {
		t.Errorf("the empty list trusts someone")
	}
}

func TestForwarded(t *testing.T) {
	tr := mustTrusted(t, "10.0.0.5", "10.0.1.0/24")
	tests := []struct {
		name, peer string
		xff        []string
		want       string
	}{
		{"untrusted peer: header ignored", "192.0.2.9", []string{"203.0.113.1"}, "192.0.2.9"},
		{"trusted peer, no header", "10.0.0.5", nil, "10.0.0.5"},
		{"one proxy", "10.0.0.5", []string{"203.0.113.1"}, "203.0.113.1"},
		{"spoofed entries left of the client", "10.0.0.5", []string{"1.1.1.1, 2.2.2.2, 203.0.113.1"}, "203.0.113.1"},
		{"two proxies", "10.0.0.5", []string{"1.1.1.1, 203.0.113.1, 10.0.1.9"}, "203.0.113.1"},
		{"several headers", "10.0.0.5", []string{"1.1.1.1", "203.0.113.1", "10.0.1.9"}, "203.0.113.1"},
		{"all trusted", "10.0.0.5", []string{"10.0.1.8, 10.0.1.9"}, "10.0.1.8"},
		{"with port", "10.0.0.5", []string{"[2001:db8::7]:4000"}, "2001:db8::7"},
		{"ipv4 with port", "10.0.0.5", []string{"203.0.113.1:4000"}, "203.0.113.1"},
		{"garbage left of the client", "10.0.0.5", []string{"<script>, 203.0.113.1"}, "203.0.113.1"},
		{"mapped", "::ffff:10.0.0.5", []string{"::ffff:203.0.113.1"}, "203.0.113.1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Forwarded(netip.MustParseAddr(tt.peer), tt.xff, tr)
			if err != nil || got.String() != tt.want {
				t.Errorf("got %v, %v; want %s", got, err, tt.want)
			}
		})
	}
	for _, bad := range [][]string{{"not-an-ip"}, {"203.0.113.1, unknown"}, {"1.1.1.1,,"}} {
		if got, err := Forwarded(netip.MustParseAddr("10.0.0.5"), bad, tr); !errors.Is(err, ErrBadForwardedFor) {
			t.Errorf("X-Forwarded-For %q: got %v, %v; want ErrBadForwardedFor", bad, got, err)
		}
	}
}

// FuzzForwarded: whatever the header, the answer is the peer, or an
// address written in the header; never a panic.
func FuzzForwarded(f *testing.F) {
	f.Add("1.1.1.1, 203.0.113.1, 10.0.1.9", true)
	f.Add("[2001:db8::7]:4000,10.0.0.5", true)
	f.Add("", false)
	tr := mustTrusted(f, "10.0.0.5", "10.0.1.0/24")
	f.Fuzz(func(t *testing.T, xff string, trustedPeer bool) {
		peer := netip.MustParseAddr("192.0.2.9")
		if trustedPeer {
			peer = netip.MustParseAddr("10.0.0.5")
		}
		got, err := Forwarded(peer, []string{xff}, tr)
		if err != nil {
			if !trustedPeer || !errors.Is(err, ErrBadForwardedFor) {
				t.Fatalf("error %v from peer %v", err, peer)
			}
			return
		}
		if got == peer {
			return
		}
		if !trustedPeer {
			t.Fatalf("untrusted peer: got %v, want the peer", got)
		}
		for _, e := range strings.Split(xff, ",") {
			if a, err := parseEntry(strings.TrimSpace(e)); err == nil && a == got {
				return
			}
		}
		t.Fatalf("client %v is not in %q", got, xff)
	})
}

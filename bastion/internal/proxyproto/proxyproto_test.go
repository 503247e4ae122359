package proxyproto

import (
	"bytes"
	"errors"
	"io"
	"net"
	"net/netip"
	"testing"
	"time"
)

var (
	src4 = netip.MustParseAddrPort("192.0.2.7:40001")
	dst4 = netip.MustParseAddrPort("198.51.100.1:2222")
	src6 = netip.MustParseAddrPort("[2001:db8::7]:40001")
	dst6 = netip.MustParseAddrPort("[2001:db8::1]:2222")
)

// v2 builds a version 2 header by hand: byte 12, byte 13, then body.
func v2(verCmd, famProto byte, body ...byte) []byte {
	b := append([]byte(nil), v2Sig...)
	b = append(b, verCmd, famProto, byte(len(body)>>8), byte(len(body)))
	return append(b, body...)
}

func addrBlock4() []byte {
	return []byte{192, 0, 2, 7, 198, 51, 100, 1, 0x9c, 0x41, 0x08, 0xae}
}

func TestParse(t *testing.T) {
	unix := make([]byte, 216)
	tests := []struct {
		name string
		in   []byte
		want Header
		n    int // header length; 0: len(in)
	}{
		{"v1 tcp4", []byte("PROXY TCP4 192.0.2.7 198.51.100.1 40001 2222\r\n"), Header{Version: 1, Source: src4, Dest: dst4}, 0},
		{"v1 tcp6", []byte("PROXY TCP6 2001:db8::7 2001:db8::1 40001 2222\r\n"), Header{Version: 1, Source: src6, Dest: dst6}, 0},
		{"v1 unknown", []byte("PROXY UNKNOWN\r\n"), Header{Version: 1, Local: true}, 0},
		{"v1 unknown with addresses", []byte("PROXY UNKNOWN ffff::1 ffff::2 1 2\r\n"), Header{Version: 1, Local: true}, 0},
		{"v1 then data", []byte("PROXY TCP4 192.0.2.7 198.51.100.1 40001 2222\r\nSSH-2.0-x\r\n"), Header{Version: 1, Source: src4, Dest: dst4}, 46},
		{"v2 inet", v2(0x21, 0x11, addrBlock4()...), Header{Version: 2, Source: src4, Dest: dst4}, 0},
		{"v2 inet6", Header{Version: 2, Source: src6, Dest: dst6}.Append(nil), Header{Version: 2, Source: src6, Dest: dst6}, 0},
		{"v2 inet with TLVs", v2(0x21, 0x11, append(addrBlock4(), 0x05, 0, 2, 'i', 'd', 0x04, 0, 0)...), Header{Version: 2, Source: src4, Dest: dst4}, 0},
		{"v2 local", v2(0x20, 0x00), Header{Version: 2, Local: true}, 0},
		{"v2 local with addresses", v2(0x20, 0x11, addrBlock4()...), Header{Version: 2, Local: true}, 0},
		{"v2 unspec", v2(0x21, 0x00), Header{Version: 2, Local: true}, 0},
		{"v2 unix", v2(0x21, 0x31, unix...), Header{Version: 2, Local: true}, 0},
		{"v2 then data", append(v2(0x21, 0x11, addrBlock4()...), "SSH-2.0-x\r\n"...), Header{Version: 2, Source: src4, Dest: dst4}, 28},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			want := tt.n
			if want == 0 {
				want = len(tt.in)
			}
			h, n, err := Parse(tt.in)
			if err != nil || h != tt.want || n != want {
				t.Errorf("got %+v, %d, %v; want %+v, %d, nil", h, n, err, tt.want, want)
			}
			for i := range want { // every proper prefix asks for more
				if _, _, err := Parse(tt.in[:i]); !errors.Is(err, ErrIncomplete) {
					t.Errorf("prefix of %d bytes: got %v, want ErrIncomplete", i, err)
				}
			}
		})
	}
}

func TestParseInvalid(t *testing.T) {
	long := append([]byte("PROXY UNKNOWN "), bytes.Repeat([]byte("x"), MaxV1)...)
	tests := []struct {
		name string
		in   []byte
	}{
		{"ssh banner", []byte("SSH-2.0-OpenSSH_9.2\r\n")},
		{"http", []byte("GET / HTTP/1.1\r\n")},
		{"lower case", []byte("proxy TCP4 192.0.2.7 198.51.100.1 40001 2222\r\n")},
		{"v1 LF only", []byte("PROXY TCP4 192.0.2.7 198.51.100.1 40001 2222\n")},
		{"v1 no CRLF within the bound", long},
		{"v1 CRLF past the bound", append(append([]byte(nil), long...), "\r\n"...)},
		{"v1 family mismatch", []byte("PROXY TCP4 2001:db8::7 198.51.100.1 40001 2222\r\n")},
		{"v1 tcp6 with ipv4", []byte("PROXY TCP6 192.0.2.7 198.51.100.1 40001 2222\r\n")},
		{"v1 zone", []byte("PROXY TCP6 fe80::1%eth0 2001:db8::1 40001 2222\r\n")},
		{"v1 bad port", []byte("PROXY TCP4 192.0.2.7 198.51.100.1 65536 2222\r\n")},
		{"v1 leading zero", []byte("PROXY TCP4 192.0.2.7 198.51.100.1 040001 2222\r\n")},
		{"v1 signed port", []byte("PROXY TCP4 192.0.2.7 198.51.100.1 +4000 2222\r\n")},
		{"v1 double space", []byte("PROXY TCP4  192.0.2.7 198.51.100.1 40001 2222\r\n")},
		{"v1 extra field", []byte("PROXY TCP4 192.0.2.7 198.51.100.1 40001 2222 9\r\n")},
		{"v1 udp", []byte("PROXY UDP4 192.0.2.7 198.51.100.1 40001 2222\r\n")},
		{"v2 version 1", v2(0x11, 0x11, addrBlock4()...)},
		{"v2 command 2", v2(0x22, 0x11, addrBlock4()...)},
		{"v2 family 4", v2(0x21, 0x41, addrBlock4()...)},
		{"v2 datagram", v2(0x21, 0x12, addrBlock4()...)},
		{"v2 short address block", v2(0x21, 0x21, addrBlock4()...)},
		{"v2 truncated TLV", v2(0x21, 0x11, append(addrBlock4(), 0x05, 0)...)},
		{"v2 TLV past the end", v2(0x21, 0x11, append(addrBlock4(), 0x05, 0, 9, 'x')...)},
		{"v2 too long", append(append([]byte(nil), v2Sig...), 0x21, 0x11, 0xff, 0xff)},
		{"v2 bad signature", []byte("\r\n\r\n\x00\r\nQUIT!xxxx")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if h, n, err := Parse(tt.in); !errors.Is(err, ErrInvalid) {
				t.Errorf("got %+v, %d, %v; want ErrInvalid", h, n, err)
			}
		})
	}
}

// TestAppendRoundTrip: what Append writes, Parse reads back.
func TestAppendRoundTrip(t *testing.T) {
	for _, h := range []Header{
		{Version: 1, Source: src4, Dest: dst4}, {Version: 1, Source: src6, Dest: dst6}, {Version: 1, Local: true},
		{Version: 2, Source: src4, Dest: dst4}, {Version: 2, Source: src6, Dest: dst6}, {Version: 2, Local: true},
	} {
		b := h.Append([]byte("x"))[1:]
		got, n, err := Parse(b)
		if err != nil || got != h || n != len(b) {
			t.Errorf("%+v: got %+v, %d, %v; want it back, %d", h, got, n, err, len(b))
		}
	}
}

// pair returns both ends of a loopback TCP connection.
func pair(t *testing.T) (client, server net.Conn) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	client, err = net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	server, err = l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close(); server.Close() })
	return client, server
}

// TestAccept: the header sets the addresses, what follows it is read as
// the connection's, whether it comes in one write or byte by byte.
func TestAccept(t *testing.T) {
	for _, h := range []Header{{Version: 1, Source: src4, Dest: dst4}, {Version: 2, Source: src6, Dest: dst6}} {
		for _, split := range []bool{false, true} {
			client, server := pair(t)
			msg := append(h.Append(nil), "SSH-2.0-client\r\n"...)
			go func() { // ends with its writes; the connection is closed by the test's cleanup
				if !split {
					client.Write(msg)
					return
				}
				for i := range msg {
					client.Write(msg[i : i+1])
					time.Sleep(time.Millisecond)
				}
			}()
			c, err := Accept(server, 5*time.Second)
			if err != nil {
				t.Fatalf("v%d split %v: %v", h.Version, split, err)
			}
			if c.Header() != h || c.RemoteAddr().String() != h.Source.String() || c.LocalAddr().String() != h.Dest.String() ||
				c.Peer().String() != client.LocalAddr().String() {
				t.Errorf("v%d: got header %+v remote %v local %v peer %v", h.Version, c.Header(), c.RemoteAddr(), c.LocalAddr(), c.Peer())
			}
			got := make([]byte, len("SSH-2.0-client\r\n"))
			if _, err := io.ReadFull(c, got); err != nil || string(got) != "SSH-2.0-client\r\n" {
				t.Errorf("v%d split %v: read %q, %v; want the client's bytes", h.Version, split, got, err)
			}
		}
	}
}

// TestAcceptLocal: a LOCAL header keeps the connection's own addresses.
func TestAcceptLocal(t *testing.T) {
	client, server := pair(t)
	client.Write(Header{Version: 2, Local: true}.Append(nil))
	c, err := Accept(server, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if c.RemoteAddr().String() != client.LocalAddr().String() {
		t.Errorf("got remote %v, want the connection's %v", c.RemoteAddr(), client.LocalAddr())
	}
}

// TestAcceptMapped: an IPv4 client behind a dual-stack balancer is shown
// as IPv4.
func TestAcceptMapped(t *testing.T) {
	client, server := pair(t)
	mapped := netip.AddrPortFrom(netip.AddrFrom16(src4.Addr().As16()), src4.Port())
	client.Write(Header{Version: 2, Source: mapped, Dest: dst6}.Append(nil))
	c, err := Accept(server, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if got := c.RemoteAddr().String(); got != src4.String() {
		t.Errorf("got remote %v, want %v", got, src4)
	}
}

// TestAcceptRefuses: no header, a bad one, or none within the deadline.
func TestAcceptRefuses(t *testing.T) {
	t.Run("ssh without header", func(t *testing.T) {
		client, server := pair(t)
		client.Write([]byte("SSH-2.0-OpenSSH_9.2\r\n"))
		if _, err := Accept(server, 5*time.Second); !errors.Is(err, ErrInvalid) {
			t.Errorf("got %v, want ErrInvalid", err)
		}
	})
	t.Run("endless v1 line", func(t *testing.T) {
		client, server := pair(t)
		go client.Write(append([]byte("PROXY "), bytes.Repeat([]byte("1"), 4*MaxV2)...))
		if _, err := Accept(server, 5*time.Second); !errors.Is(err, ErrInvalid) {
			t.Errorf("got %v, want ErrInvalid", err)
		}
	})
	t.Run("silent", func(t *testing.T) {
		_, server := pair(t)
		start := time.Now()
		_, err := Accept(server, 100*time.Millisecond)
		var ne net.Error
		if !errors.As(err, &ne) || !ne.Timeout() {
			t.Errorf("got %v, want a timeout", err)
		}
		if took := time.Since(start); took > 5*time.Second {
			t.Errorf("gave up after %v, want about the deadline", took)
		}
	})
	t.Run("partial then silent", func(t *testing.T) {
		client, server := pair(t)
		client.Write([]byte("PROXY TCP4 192.0.2.7"))
		if _, err := Accept(server, 100*time.Millisecond); err == nil {
			t.Errorf("got a header, want a timeout")
		}
	})
}

// FuzzParse: Parse never panics, an accepted header lies within b and the
// bounds, every proper prefix of it asks for more, and what it says
// survives Append and Parse again.
func FuzzParse(f *testing.F) {
	f.Add([]byte("PROXY TCP4 192.0.2.7 198.51.100.1 40001 2222\r\nSSH"))
	f.Add([]byte("PROXY TCP6 2001:db8::7 2001:db8::1 40001 2222\r\n"))
	f.Add([]byte("PROXY UNKNOWN\r\n"))
	f.Add(v2(0x21, 0x11, append(addrBlock4(), 0x05, 0, 2, 'i', 'd')...))
	f.Add(Header{Version: 2, Source: src6, Dest: dst6}.Append(nil))
	f.Add(v2(0x20, 0x00))
	f.Fuzz(func(t *testing.T, b []byte) {
		h, n, err := Parse(b)
		if err != nil {
			if !errors.Is(err, ErrIncomplete) && !errors.Is(err, ErrInvalid) {
				t.Fatalf("error %v is neither ErrIncomplete nor ErrInvalid", err)
			}
			return
		}
		if n <= 0 || n > len(b) || (h.Version == 1 && n > MaxV1) || n > MaxV2 {
			t.Fatalf("header length %d of %d bytes, version %d", n, len(b), h.Version)
		}
		for i := range n {
			if _, _, err := Parse(b[:i]); !errors.Is(err, ErrIncomplete) {
				t.Fatalf("prefix of %d of %d bytes: %v, want ErrIncomplete", i, n, err)
			}
		}
		if !h.Local && h.Source.Addr().Is4() != h.Dest.Addr().Is4() {
			t.Fatalf("mixed families %+v", h)
		}
		again, _, err := Parse(h.Append(nil))
		if err != nil || again != h {
			t.Fatalf("round trip of %+v: got %+v, %v", h, again, err)
		}
	})
}

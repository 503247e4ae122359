// Package proxyproto reads the PROXY protocol header a TCP load balancer
// sends, so a server behind it sees the real client.
//
// The header is HAProxy's, versions 1 and 2
// (https://www.haproxy.org/download/2.6/doc/proxy-protocol.txt), sent ahead
// of the client's bytes. Parse reads a header from bytes, Accept reads one
// from a connection within a deadline and a size bound, Listener reads one
// from every connection of listed balancers before its Accept returns it
// (for servers that read the connection themselves: net/http, crypto/tls);
// Header.Append writes one (for tests and tools). Whether a peer may send a
// header at all is the caller's decision: a header from anyone else is a
// forgery.
package proxyproto

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"time"
)

// Errors of Parse and Accept.
var (
	// ErrIncomplete: the bytes so far are a valid beginning of a header.
	ErrIncomplete = errors.New("proxy protocol: incomplete header")
	// ErrInvalid: the bytes are not a header obmd accepts.
	ErrInvalid = errors.New("proxy protocol: invalid header")
)

// Bounds on a header. A version 1 header is at most 107 bytes by the
// specification; a version 2 one is 16 bytes and an address block with
// optional TLVs, which HAProxy keeps small: MaxV2 leaves room for its TLVs
// (unique ID, ALPN, SSL details) while bounding what a connection costs.
const (
	MaxV1 = 107
	MaxV2 = 16 + 1024
)

// v2Sig starts every version 2 header.
var v2Sig = []byte("\r\n\r\n\x00\r\nQUIT\n")

// Header is what a PROXY header says.
type Header struct {
	// Version is 1 or 2.
	Version int
	// Local is set for a connection the balancer made on its own behalf
	// (version 2 LOCAL, e.g. a health check) or for a client whose address
	// it does not know (version 1 UNKNOWN, version 2 UNSPEC or UNIX): the
	// connection's own addresses apply, Source and Dest are zero.
	Local bool
	// Source is the client, Dest the address it connected to.
	Source, Dest netip.AddrPort
}

// Parse reads one header at the start of b and returns it and its length;
// the bytes after it belong to the proxied connection. It returns
// ErrIncomplete if b is a proper prefix of a header that may still be
// valid, and an error wrapping ErrInvalid for anything else.
func Parse(b []byte) (Header, int, error) {
	switch {
	case len(b) == 0:
		return Header{}, 0, ErrIncomplete
	case b[0] == 'P':
		return parseV1(b)
	case b[0] == '\r':
		return parseV2(b)
	}
	return Header{}, 0, fmt.Errorf("%w: no PROXY signature", ErrInvalid)
}

// parseV1 parses "PROXY TCP4 <src> <dst> <sport> <dport>\r\n" (or TCP6, or
// "PROXY UNKNOWN" followed by anything up to CRLF).
func parseV1(b []byte) (Header, int, error) {
	const sig = "PROXY "
	if len(b) < len(sig) {
		if !bytes.HasPrefix([]byte(sig), b) {
			return Header{}, 0, fmt.Errorf("%w: no PROXY signature", ErrInvalid)
		}
		return Header{}, 0, ErrIncomplete
	}
	if !bytes.HasPrefix(b, []byte(sig)) {
		return Header{}, 0, fmt.Errorf("%w: no PROXY signature", ErrInvalid)
	}
	end := bytes.IndexByte(b, '\n')
	if end < 0 {
		if len(b) >= MaxV1 {
			return Header{}, 0, fmt.Errorf("%w: version 1 line longer than %d bytes", ErrInvalid, MaxV1)
		}
		return Header{}, 0, ErrIncomplete
	}
	n := end + 1
	if n > MaxV1 || end == 0 || b[end-1] != '\r' {
		return Header{}, 0, fmt.Errorf("%w: version 1 line not ended by CRLF within %d bytes", ErrInvalid, MaxV1)
	}
	line := string(b[len(sig) : end-1])
	h := Header{Version: 1}
	if line == "UNKNOWN" || strings.HasPrefix(line, "UNKNOWN ") {
		h.Local = true
		return h, n, nil
	}
	f := strings.Split(line, " ")
	if len(f) != 5 || (f[0] != "TCP4" && f[0] != "TCP6") {
		return Header{}, 0, fmt.Errorf("%w: version 1 wants TCP4|TCP6 <src> <dst> <sport> <dport>", ErrInvalid)
	}
	src, err1 := v1Addr(f[1], f[3], f[0] == "TCP4")
	dst, err2 := v1Addr(f[2], f[4], f[0] == "TCP4")
	if err := errors.Join(err1, err2); err != nil {
		return Header{}, 0, err
	}
	h.Source, h.Dest = src, dst
	return h, n, nil
}

// v1Addr parses an address of the family v4 (else IPv6) and a decimal
// port without sign or leading zeros.
func v1Addr(ip, port string, v4 bool) (netip.AddrPort, error) {
	a, err := netip.ParseAddr(ip)
	if err != nil || a.Zone() != "" || a.Is4() != v4 {
		return netip.AddrPort{}, fmt.Errorf("%w: bad address %q", ErrInvalid, ip)
	}
	p, err := strconv.ParseUint(port, 10, 16)
	if err != nil || port[0] == '+' || (len(port) > 1 && port[0] == '0') {
		return netip.AddrPort{}, fmt.Errorf("%w: bad port %q", ErrInvalid, port)
	}
	return netip.AddrPortFrom(a, uint16(p)), nil
}

// parseV2 parses the binary header: signature, version and command,
// family and transport, length, addresses, TLVs.
func parseV2(b []byte) (Header, int, error) {
	if len(b) < len(v2Sig) {
		if !bytes.HasPrefix(v2Sig, b) {
			return Header{}, 0, fmt.Errorf("%w: no PROXY signature", ErrInvalid)
		}
		return Header{}, 0, ErrIncomplete
	}
	if !bytes.HasPrefix(b, v2Sig) {
		return Header{}, 0, fmt.Errorf("%w: no PROXY signature", ErrInvalid)
	}
	if len(b) < 16 {
		return Header{}, 0, ErrIncomplete
	}
	verCmd, famProto, size := b[12], b[13], int(binary.BigEndian.Uint16(b[14:16]))
	if verCmd>>4 != 2 || verCmd&0xf > 1 {
		return Header{}, 0, fmt.Errorf("%w: version 2 byte 0x%02x", ErrInvalid, verCmd)
	}
	n := 16 + size
	if n > MaxV2 {
		return Header{}, 0, fmt.Errorf("%w: version 2 header of %d bytes, more than %d", ErrInvalid, n, MaxV2)
	}
	if len(b) < n {
		return Header{}, 0, ErrIncomplete
	}
	body := b[16:n]
	fam, proto := famProto>>4, famProto&0xf
	if fam > 3 || proto > 2 {
		return Header{}, 0, fmt.Errorf("%w: version 2 family byte 0x%02x", ErrInvalid, famProto)
	}
	h := Header{Version: 2, Local: true}
	addrLen := [4]int{0, 12, 36, 216}[fam]
	if len(body) < addrLen {
		return Header{}, 0, fmt.Errorf("%w: version 2 address block of %d bytes, want %d", ErrInvalid, len(body), addrLen)
	}
	if err := checkTLVs(body[addrLen:]); err != nil {
		return Header{}, 0, err
	}
	if verCmd&0xf == 0 { // LOCAL: the balancer's own connection
		return h, n, nil
	}
	if proto == 2 {
		return Header{}, 0, fmt.Errorf("%w: a datagram header on a stream", ErrInvalid)
	}
	switch fam {
	case 1:
		h.Source = netip.AddrPortFrom(netip.AddrFrom4([4]byte(body[0:4])), binary.BigEndian.Uint16(body[8:10]))
		h.Dest = netip.AddrPortFrom(netip.AddrFrom4([4]byte(body[4:8])), binary.BigEndian.Uint16(body[10:12]))
		h.Local = false
	case 2:
		h.Source = netip.AddrPortFrom(netip.AddrFrom16([16]byte(body[0:16])), binary.BigEndian.Uint16(body[32:34]))
		h.Dest = netip.AddrPortFrom(netip.AddrFrom16([16]byte(body[16:32])), binary.BigEndian.Uint16(body[34:36]))
		h.Local = false
	}
	// UNSPEC and UNIX: no client address to use (Local stays set).
	return h, n, nil
}

// checkTLVs checks that b is a sequence of whole type-length-value
// records (their contents are not used).
func checkTLVs(b []byte) error {
	for len(b) > 0 {
		if len(b) < 3 {
			return fmt.Errorf("%w: truncated TLV", ErrInvalid)
		}
		l := 3 + int(binary.BigEndian.Uint16(b[1:3]))
		if l > len(b) {
			return fmt.Errorf("%w: TLV longer than the header", ErrInvalid)
		}
		b = b[l:]
	}
	return nil
}

// Conn is a connection whose PROXY header has been read: RemoteAddr and
// LocalAddr are the ones the header gives (the connection's own for a
// Local header); Read returns the client's bytes that followed the header.
type Conn struct {
	net.Conn
	hdr           Header
	remote, local net.Addr
	rest          []byte // read with the header, not yet returned
}

// Accept reads the PROXY header that must start c, within timeout, reading
// at most MaxV2 bytes (in practice one read: a balancer sends the header at
// once). On error c is left open for the caller to close. The deadline is
// cleared once the header is read.
func Accept(c net.Conn, timeout time.Duration) (*Conn, error) {
	if err := c.SetReadDeadline(time.Now().Add(timeout)); err != nil {
		return nil, fmt.Errorf("proxy protocol: %w", err)
	}
	buf := make([]byte, MaxV2)
	have := 0
	for {
		if have == len(buf) { // cannot happen: Parse decides within MaxV2 bytes
			return nil, fmt.Errorf("%w: longer than %d bytes", ErrInvalid, MaxV2)
		}
		n, err := c.Read(buf[have:])
		have += n
		h, used, perr := Parse(buf[:have])
		switch {
		case perr == nil:
			if err := c.SetReadDeadline(time.Time{}); err != nil {
				return nil, fmt.Errorf("proxy protocol: %w", err)
			}
			pc := &Conn{Conn: c, hdr: h, remote: c.RemoteAddr(), local: c.LocalAddr()}
			if !h.Local {
				pc.remote, pc.local = tcpAddr(h.Source), tcpAddr(h.Dest)
			}
			if have > used {
				pc.rest = append([]byte(nil), buf[used:have]...)
			}
			return pc, nil
		case !errors.Is(perr, ErrIncomplete):
			return nil, perr
		case err != nil:
			return nil, fmt.Errorf("proxy protocol: read header: %w", err)
		}
	}
}

// tcpAddr is a as a net.Addr, an IPv4-mapped IPv6 address as IPv4 (what a
// dual-stack balancer sends for IPv4 clients).
func tcpAddr(a netip.AddrPort) net.Addr {
	return net.TCPAddrFromAddrPort(netip.AddrPortFrom(a.Addr().Unmap(), a.Port()))
}

// Header is the header the connection started with.
func (c *Conn) Header() Header { return c.hdr }

// RemoteAddr is the client's address (the header's source).
func (c *Conn) RemoteAddr() net.Addr { return c.remote }

// LocalAddr is the address the client connected to (the header's
// destination).
func (c *Conn) LocalAddr() net.Addr { return c.local }

// Peer is the balancer's address: the connection's own remote address.
func (c *Conn) Peer() net.Addr { return c.Conn.RemoteAddr() }

// Read returns what followed the header first, then reads the connection.
func (c *Conn) Read(p []byte) (int, error) {
	if len(c.rest) > 0 {
		n := copy(p, c.rest)
		c.rest = c.rest[n:]
		return n, nil
	}
	return c.Conn.Read(p)
}

// Append appends h encoded in its Version (2 unless 1) to b: what a
// balancer sends. A Local header is v1 UNKNOWN or v2 LOCAL; otherwise
// Source and Dest must be of one family.
func (h Header) Append(b []byte) []byte {
	v4 := h.Source.Addr().Is4()
	if h.Version == 1 {
		switch {
		case h.Local:
			return append(b, "PROXY UNKNOWN\r\n"...)
		case v4:
			b = append(b, "PROXY TCP4 "...)
		default:
			b = append(b, "PROXY TCP6 "...)
		}
		return fmt.Appendf(b, "%s %s %d %d\r\n", h.Source.Addr(), h.Dest.Addr(), h.Source.Port(), h.Dest.Port())
	}
	b = append(b, v2Sig...)
	switch {
	case h.Local:
		return append(b, 0x20, 0x00, 0, 0)
	case v4:
		b = append(b, 0x21, 0x11, 0, 12)
		s, d := h.Source.Addr().As4(), h.Dest.Addr().As4()
		b = append(append(b, s[:]...), d[:]...)
	default:
		b = append(b, 0x21, 0x21, 0, 36)
		s, d := h.Source.Addr().As16(), h.Dest.Addr().As16()
		b = append(append(b, s[:]...), d[:]...)
	}
	b = binary.BigEndian.AppendUint16(b, h.Source.Port())
	return binary.BigEndian.AppendUint16(b, h.Dest.Port())
}

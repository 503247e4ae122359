// Package realip decides who the client of a connection is when obmd runs
// behind load balancers or reverse proxies.
//
// Only peers the operator listed (Trusted) may speak for someone else,
// through the PROXY protocol on the SSH port (bastion/internal/proxyproto)
// or X-Forwarded-For on the admin port (Forwarded). Everything obmd does per
// source (guessing limits, connection and session caps, audit rows, logs)
// uses the address decided here.
package realip

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strings"
)

// Trusted is a list of addresses and networks allowed to speak for their
// clients. The zero value trusts nobody.
type Trusted []netip.Prefix

// ParseTrusted parses addresses ("10.0.0.5", "2001:db8::5") and networks
// ("10.0.1.0/24"). A network with host bits set is refused: it is likely a
// typo for something else.
func ParseTrusted(list []string) (Trusted, error) {
	out := make(Trusted, 0, len(list))
	for _, s := range list {
		s = strings.TrimSpace(s)
		if strings.Contains(s, "/") {
			p, err := netip.ParsePrefix(s)
			if err != nil {
				return nil, fmt.Errorf("%q: not an address or network: %w", s, err)
			}
			if p.Masked() != p {
				return nil, fmt.Errorf("%q: host bits set (the network is %s)", s, p.Masked())
			}
			out = append(out, unmapPrefix(p))
			continue
		}
		a, err := netip.ParseAddr(s)
		if err != nil || a.Zone() != "" {
			return nil, fmt.Errorf("%q: not an address or network", s)
		}
		a = a.Unmap()
		out = append(out, netip.PrefixFrom(a, a.BitLen()))
	}
	return out, nil
}

func unmapPrefix(p netip.Prefix) netip.Prefix {
	if a := p.Addr(); a.Is4In6() && p.Bits() >= 96 {
		return netip.PrefixFrom(a.Unmap(), p.Bits()-96)
	}
	return p
}

// Contains reports whether a is listed.
func (t Trusted) Contains(a netip.Addr) bool {
	a = a.Unmap()
	for _, p := range t {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// ContainsAddr is Contains for a connection's address (a *net.TCPAddr, or
// anything whose String is host:port); false for anything else.
func (t Trusted) ContainsAddr(a net.Addr) bool {
	if len(t) == 0 || a == nil {
		return false
	}
	if ta, ok := a.(*net.TCPAddr); ok {
		return t.Contains(ta.AddrPort().Addr())
	}
	ap, err := netip.ParseAddrPort(a.String())
	return err == nil && t.Contains(ap.Addr())
}

// ErrBadForwardedFor is returned by Forwarded when the entry that names
// the client is not an address.
var ErrBadForwardedFor = errors.New("X-Forwarded-For: the client's entry is not an IP address")

// Forwarded returns the client of a request that came from peer with the
// X-Forwarded-For header values xff (in order; each a comma-separated
// list): peer itself unless peer is trusted; else the rightmost address
// of the list that is not trusted (every proxy appends the address it
// received the request from, so entries left of that one are whatever the
// client chose to send); the leftmost if all are trusted. An entry that
// must be read and is not an address is ErrBadForwardedFor: a listed proxy
// would never write it.
func Forwarded(peer netip.Addr, xff []string, t Trusted) (netip.Addr, error) {
	peer = peer.Unmap()
	if !t.Contains(peer) {
		return peer, nil
	}
	client := peer
	for i := len(xff) - 1; i >= 0; i-- {
		entries := strings.Split(xff[i], ",")
		for j := len(entries) - 1; j >= 0; j-- {
			e := strings.TrimSpace(entries[j])
			if e == "" && len(entries) == 1 {
				continue // an empty header adds nothing
			}
			a, err := parseEntry(e)
			if err != nil {
				return netip.Addr{}, err
			}
			client = a
			if !t.Contains(a) {
				return a, nil
			}
		}
	}
	return client, nil
}

// Request returns r as its client sent it: when r came from a proxy t
// lists, a copy whose RemoteAddr is the client's address from
// X-Forwarded-For (Forwarded; without port: the header gives none); else
// r itself. The HTTP doors (admin, web) call it before anything uses
// RemoteAddr.
func Request(r *http.Request, t Trusted) (*http.Request, error) {
	if len(t) == 0 {
		return r, nil
	}
	peer, err := netip.ParseAddrPort(r.RemoteAddr)
	if err != nil || !t.Contains(peer.Addr()) {
		return r, nil
	}
	c, err := Forwarded(peer.Addr(), r.Header.Values("X-Forwarded-For"), t)
	if err != nil {
		return nil, err
	}
	r2 := new(http.Request)
	*r2 = *r
	r2.RemoteAddr = c.String()
	return r2, nil
}

// parseEntry reads one X-Forwarded-For entry: an address, optionally with a
// port ("192.0.2.7:4000", "[2001:db8::7]:4000"), as some proxies write.
func parseEntry(e string) (netip.Addr, error) {
	if a, err := netip.ParseAddr(e); err == nil && a.Zone() == "" {
		return a.Unmap(), nil
	}
	if ap, err := netip.ParseAddrPort(e); err == nil && ap.Addr().Zone() == "" {
		return ap.Addr().Unmap(), nil
	}
	return netip.Addr{}, ErrBadForwardedFor
}

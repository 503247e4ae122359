package sshcert

import (
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
)

// maxSourceEntry is OpenSSH's bound on one entry of a source-address list:
// INET6_ADDRSTRLEN (46) plus "/128".
const maxSourceEntry = 46 + 3

// cidrChars are the only characters OpenSSH lets through to its address
// parser (addrmatch.c, VALID_CIDR_CHARS): no white space, no zone ("%eth0"),
// no host names.
const cidrChars = "0123456789abcdefABCDEF.:/"

// parseSourceAddress parses the value of a certificate's source-address
// critical option as OpenSSH does (addr_match_cidr_list): a comma-separated
// list of addresses and CIDR prefixes, with no empty entry, no white space,
// and no prefix with host bits set ("10.0.0.1/8" is refused, as ssh-keygen
// refuses to sign it). One bad entry refuses the whole list, whatever the
// others say.
//
// It is stricter than OpenSSH in one place: addresses must be in the usual
// forms (netip): OpenSSH hands entries to getaddrinfo, which on glibc also
// takes legacy IPv4 forms ("10.1", octal "010.0.0.1"). Those are refused
// here: a list obmd cannot read the way its issuer meant refuses the login.
func parseSourceAddress(list string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, entry := range strings.Split(list, ",") {
		p, err := parseSourceEntry(entry)
		if err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	return out, nil
}

func parseSourceEntry(entry string) (netip.Prefix, error) {
	switch {
	case entry == "":
		return netip.Prefix{}, errors.New("empty entry")
	case len(entry) > maxSourceEntry:
		return netip.Prefix{}, fmt.Errorf("entry %s too long", quote(entry, maxSourceEntry))
	case strings.Trim(entry, cidrChars) != "":
		return netip.Prefix{}, fmt.Errorf("entry %s has characters other than %s", quote(entry, maxSourceEntry), cidrChars)
	}
	addr, bits, hasBits := strings.Cut(entry, "/")
	a, err := netip.ParseAddr(addr)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("entry %s is not an address", quote(entry, maxSourceEntry))
	}
	n := a.BitLen()
	if hasBits {
		// As OpenSSH's strtoul: digits only (leading zeros allowed).
		if bits == "" || strings.Trim(bits, "0123456789") != "" {
			return netip.Prefix{}, fmt.Errorf("entry %s has a bad prefix length", quote(entry, maxSourceEntry))
		}
		v, err := strconv.Atoi(bits)
		if err != nil || v > n {
			return netip.Prefix{}, fmt.Errorf("entry %s has a bad prefix length", quote(entry, maxSourceEntry))
		}
		n = v
	}
	p := netip.PrefixFrom(a, n)
	if p.Masked() != p {
		return netip.Prefix{}, fmt.Errorf("entry %s has host bits set", quote(entry, maxSourceEntry))
	}
	return p, nil
}

// sourceAllows reports whether client is within one of prefixes. An IPv4
// client seen as an IPv4-mapped IPv6 address (a dual-stack listener) is
// taken as IPv4, as sshd does; an entry only matches clients of its own
// family, as in OpenSSH (so an IPv4-mapped entry matches no client).
func sourceAllows(prefixes []netip.Prefix, client netip.Addr) bool {
	if !client.IsValid() {
		return false
	}
	client = client.Unmap().WithZone("")
	for _, p := range prefixes {
		if p.Contains(client) {
			return true
		}
	}
	return false
}

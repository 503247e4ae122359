package redfish

import (
	"errors"
	"fmt"
	"net/netip"
	"net/url"
	"reflect"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/bougou/go-ipmi/pkg/rmcpplus"

	"github.com/obmd/obmd/sol"
	"github.com/obmd/obmd/sol/ipmi"
)

// Info is a Redfish node's registered BMC info, as JSON:
//
//	{"addr": "https://bmc-17.example:8443", "user": "obmd", "pass": "...",
//	 "system": "System.Embedded.1", "insecure": false,
//	 "sol": {"port": 623, "cipher": 17}}
//
// addr, user and pass are required; the rest is optional. Check says what
// each field may hold.
type Info struct {
	// Addr is the BMC's Redfish service: "https://host" or
	// "https://host:port" (host a DNS name, an IPv4 address or a bracketed
	// IPv6 address), with no path, query or credentials.
	Addr string `json:"addr"`
	User string `json:"user"`
	Pass string `json:"pass"`
	// System is the ComputerSystem to drive, by Id ("1",
	// "System.Embedded.1") or by path ("/redfish/v1/Systems/1"). Empty means
	// the BMC's only system.
	System string `json:"system,omitempty"`
	// Insecure skips verification of the BMC's TLS certificate.
	Insecure bool `json:"insecure,omitempty"`
	// SOL, when set, gives the node a serial console: IPMI serial-over-LAN
	// on the same BMC host, with the same user and password.
	SOL *SOLInfo `json:"sol,omitempty"`
	// ConsoleInfo is how the node's console is reached: "sol" (IPMI, as
	// SOL says, its defaults when SOL is unset), "ssh" (the BMC's SSH
	// service), "auto" (what the Redfish service says is enabled: IPMI SOL
	// is reached as SOL says). Unset: SOL when SOL is set, else none.
	// sol/transport checks and acts on its fields.
	sol.ConsoleInfo
}

// ipmiConsole reports whether the node's console may be IPMI SOL: its
// user and pass then take IPMI's limits.
func (info Info) ipmiConsole() bool {
	return info.SOL != nil || info.Console == sol.ConsoleSOL || info.Console == sol.ConsoleAuto
}

// SOLInfo is how to reach a Redfish node's serial console over IPMI.
type SOLInfo struct {
	// Port is the RMCP+ UDP port; 0 means 623.
	Port int `json:"port,omitempty"`
	// Cipher pins the IPMI cipher suite; nil or -1 lets the IPMI driver
	// pick (17, then 3: sol.IPMIOptions).
	Cipher *int `json:"cipher,omitempty"`
}

// Limits on Info fields.
const (
	MaxAddrLen   = 255 // bytes of Addr
	MaxUserLen   = 255 // bytes of User (16 with SOL: the IPMI limit)
	MaxPassLen   = 255 // bytes of Pass (20 with SOL: the IPMI limit)
	MaxSystemLen = 255 // bytes of System
	systemsPath  = "/redfish/v1/Systems"
	defaultPort  = "443"
)

// Check validates info as a registration: every bad field is an error that
// names it ("info.addr ..."). Error texts never contain the password, nor the
// address (an address with credentials in it would carry them). Check does
// no I/O.
//
// Rules: addr is required and at most MaxAddrLen bytes, an https URL with a
// host and optionally a port (1-65535), no user info, no path but "/", no
// query or fragment; plain http is refused because the password would cross
// the network in clear. user and pass are required, valid UTF-8 without
// control characters, at most MaxUserLen and MaxPassLen bytes (16 and 20
// when the console may be IPMI SOL: sol is set, or console is "sol" or
// "auto", as IPMI allows). system is empty, an Id of letters,
// digits and "._~-", or "/redfish/v1/Systems/" and such an Id. sol.port is 0
// (623) or 1-65535; sol.cipher is absent, -1 or a suite the IPMI driver
// supports; sol is refused with console "ssh". The console's own fields
// are sol/transport's to check.
func Check(info Info) error {
	if _, _, err := parseAddr("addr", info.Addr); err != nil {
		return err
	}
	userMax, passMax := MaxUserLen, MaxPassLen
	if info.ipmiConsole() {
		userMax, passMax = rmcpplus.MaxUserNameLength, ipmi.MaxPassLen
	}
	if err := checkText("user", info.User, userMax, info.ipmiConsole()); err != nil {
		return err
	}
	if err := checkText("pass", info.Pass, passMax, info.ipmiConsole()); err != nil {
		return err
	}
	if _, err := systemID(info.System); err != nil {
		return err
	}
	if info.Redfish != "" || info.RedfishInsecure {
		return errServiceField
	}
	if info.SOL != nil && info.Console == sol.ConsoleSSH {
		return errors.New(`info.sol applies only with info.console "sol" or "auto"`)
	}
	if info.SOL != nil {
		if _, err := ipmiInfo(info, "localhost"); err != nil {
			return err
		}
	}
	return nil
}

// Canonical returns info with its documented defaults folded in (port 443,
// a trailing "/", a system path, SOL port 623 and cipher -1 become their
// absent forms; scheme and host are lower case), so that two registrations
// of the same BMC compare equal. info must have passed Check.
func (info Info) Canonical() Info {
	if u, err := url.Parse(info.Addr); err == nil {
		host := strings.ToLower(u.Host)
		if p := u.Port(); p == defaultPort {
			host = strings.TrimSuffix(host, ":"+p)
		}
		info.Addr = "https://" + host
	}
	if id, err := systemID(info.System); err == nil {
		info.System = id
	}
	if info.Console == sol.ConsoleSOL {
		info.Console = ""
		if info.SOL == nil {
			info.SOL = &SOLInfo{}
		}
	}
	if info.SOL != nil {
		s := *info.SOL
		if s.Port == ipmi.DefaultPort {
			s.Port = 0
		}
		if s.Cipher != nil && *s.Cipher == -1 {
			s.Cipher = nil
		}
		info.SOL = &s
	}
	return info
}

// BMCs names the BMC services the node uses, normalised: its Redfish
// system ("Redfish https://bmc-17:443 system 1"; without an Id, the BMC's
// only one) and, when its console may be IPMI SOL (sol, or console "sol"
// or "auto"), its IPMI console (sol.IPMIEndpoint). info must have passed
// Check.
func (info Info) BMCs() []string {
	endpoint, host, err := parseAddr("addr", info.Addr)
	if err != nil {
		return nil
	}
	service := "Redfish " + strings.ToLower(endpoint)
	if id, err := systemID(info.System); err == nil && id != "" {
		service += " system " + id
	}
	out := []string{service}
	if info.ipmiConsole() {
		port := 0
		if info.SOL != nil {
			port = info.SOL.Port
		}
		out = append(out, sol.IPMIEndpoint(host, port))
	}
	return out
}

// Equal reports whether a and b register the same BMC the same way.
func (info Info) Equal(other Info) bool {
	return reflect.DeepEqual(info.Canonical(), other.Canonical())
}

// parseAddr checks addr, the info's field named field, and returns the
// service's endpoint ("https://host:port") and the bare host name or
// address (for IPMI).
func parseAddr(field, addr string) (endpoint, host string, err error) {
	bad := func(format string, a ...any) error { return fmt.Errorf("info."+field+" "+format, a...) }
	switch {
	case addr == "":
		return "", "", bad("is required")
	case len(addr) > MaxAddrLen:
		return "", "", bad("is longer than %d bytes", MaxAddrLen)
	case !utf8.ValidString(addr) || strings.IndexFunc(addr, func(r rune) bool {
		return unicode.IsSpace(r) || !unicode.IsGraphic(r)
	}) >= 0:
		return "", "", bad("must not contain spaces or control characters")
	}
	u, err := url.Parse(addr)
	if err != nil {
		return "", "", bad("is not a URL")
	}
	switch {
	case u.Scheme == "http":
		return "", "", bad("must use https: over http the BMC password would cross the network in clear")
	case u.Scheme != "https":
		return "", "", bad(`must be an https URL ("https://host" or "https://host:port")`)
	case u.User != nil:
		return "", "", bad("must not carry credentials: use info.user and info.pass")
	case u.Opaque != "" || (u.Path != "" && u.Path != "/") || u.RawPath != "":
		return "", "", bad("must have no path (the Redfish service is at /redfish/v1 on that host)")
	case u.RawQuery != "" || u.ForceQuery || u.Fragment != "" || strings.Contains(addr, "#"):
		return "", "", bad("must have no query or fragment")
	}
	host = u.Hostname()
	if err := checkHost(host, strings.HasPrefix(u.Host, "[")); err != nil {
		return "", "", bad("%v", err)
	}
	port := u.Port()
	if port == "" && strings.HasSuffix(u.Host, ":") {
		return "", "", bad("has an empty port")
	}
	if port == "" {
		port = defaultPort
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return "", "", bad("port is out of range (1-65535)")
	}
	hostPort := host
	if strings.Contains(host, ":") {
		hostPort = "[" + host + "]"
	}
	return "https://" + hostPort + ":" + port, host, nil
}

// checkHost accepts an IP address (IPv6 only in brackets, no zone) or a DNS
// name of letters, digits, "-" and "_".
func checkHost(host string, bracketed bool) error {
	if host == "" {
		return errors.New("has no host")
	}
	if ip, err := netip.ParseAddr(host); err == nil {
		switch {
		case ip.Zone() != "":
			return errors.New("must not have an IPv6 zone")
		case ip.Is6() != bracketed:
			return errors.New("has a malformed IP address")
		}
		return nil
	}
	if bracketed {
		return errors.New("has a malformed IPv6 address")
	}
	if len(host) > 253 {
		return errors.New("host name is longer than 253 bytes")
	}
	for _, label := range strings.Split(strings.TrimSuffix(host, "."), ".") {
		if label == "" || len(label) > 63 || strings.HasPrefix(label, "-") || strings.HasSuffix(label, "-") ||
			strings.IndexFunc(label, func(r rune) bool {
				return !(r < utf8.RuneSelf && (r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r)))
			}) >= 0 {
			return errors.New("has a malformed host name")
		}
	}
	return nil
}

// checkText checks a required credential field; the error never shows the
// value.
func checkText(field, v string, max int, ipmiLimit bool) error {
	switch {
	case v == "":
		return fmt.Errorf("info.%s is required", field)
	case len(v) > max && ipmiLimit:
		return fmt.Errorf("info.%s is longer than %d bytes, the IPMI limit (the console may be IPMI SOL)", field, max)
	case len(v) > max:
		return fmt.Errorf("info.%s is longer than %d bytes", field, max)
	case !utf8.ValidString(v):
		return fmt.Errorf("info.%s is not valid UTF-8", field)
	case strings.IndexFunc(v, unicode.IsControl) >= 0:
		return fmt.Errorf("info.%s must not contain control characters", field)
	}
	return nil
}

// systemID checks info.system and returns the system's Id ("" for the
// BMC's only system).
func systemID(system string) (string, error) {
	if system == "" {
		return "", nil
	}
	if len(system) > MaxSystemLen {
		return "", fmt.Errorf("info.system is longer than %d bytes", MaxSystemLen)
	}
	id := system
	if strings.HasPrefix(system, "/") {
		id = strings.TrimSuffix(strings.TrimPrefix(system, systemsPath+"/"), "/")
		if id == system || id == strings.TrimSuffix(system, "/") {
			return "", fmt.Errorf("info.system path must be %s/<Id>", systemsPath)
		}
	}
	if id == "" || id == "." || id == ".." || strings.IndexFunc(id, func(r rune) bool {
		return !(r < utf8.RuneSelf && (unicode.IsLetter(r) || unicode.IsDigit(r) || strings.ContainsRune("._~-", r)))
	}) >= 0 {
		return "", fmt.Errorf(`info.system must be a system Id (letters, digits, "._~-") or %s/<Id>`, systemsPath)
	}
	return id, nil
}

// ipmiInfo is the IPMI driver's info for the node's SOL console on host,
// validated by the IPMI driver itself.
func ipmiInfo(info Info, host string) (sol.Info, error) {
	s := info.SOL
	if s == nil {
		s = &SOLInfo{}
	}
	if s.Port < 0 || s.Port > 65535 {
		return sol.Info{}, fmt.Errorf("info.sol.port %d is out of range (1-65535, or 0 for 623)", s.Port)
	}
	si := sol.Info{Addr: host, Port: s.Port, User: info.User, Pass: info.Pass, Cipher: s.Cipher}
	if s.Cipher != nil && *s.Cipher != -1 {
		if err := ipmi.Check(si); err != nil {
			return sol.Info{}, fmt.Errorf("info.sol.cipher %d is not supported by the IPMI driver", *s.Cipher)
		}
	}
	return si, nil
}

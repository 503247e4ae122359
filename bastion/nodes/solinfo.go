package nodes

import (
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"unicode"

	"github.com/sirupsen/logrus"

	"github.com/obmd/obmd/bastion/admin/api"
	"github.com/obmd/obmd/sol"
	"github.com/obmd/obmd/sol/printable"
)

// SolSpec describes a node type whose BMC info is a sol.Info (obmd's
// "addr", "user", "pass", plus "port", "cipher", "interface"): the IPMI
// drivers and the simulator.
type SolSpec struct {
	// Credentials: the type takes user and pass (both required), port
	// and cipher. Without, it takes an address only (the simulator).
	Credentials bool
	// Interface: the type takes "interface" (lan or lanplus).
	Interface bool
	// Check, if set, is the driver's own check, run after the rules every
	// such type shares (see SolKind).
	Check func(sol.Info) error
	// Console, if set, checks the console fields ("console", "ssh_*":
	// sol.ConsoleInfo) and returns them canonical; without it the type
	// takes none.
	Console func(sol.ConsoleInfo) (sol.ConsoleInfo, error)
	// New and Forget are as in Kind.
	New    func(label string, info sol.Info, log logrus.FieldLogger) (sol.BMC, error)
	Forget func(label string)
}

// Limits on sol.Info fields at registration (generous: drivers have their
// own, e.g. IPMI's 16-byte user names and 20-byte passwords).
const (
	maxAddr = 255
	maxUser = 255
	maxPass = 255
)

// SolKind is the Kind of typ, a sol.Info type. Its registration rules,
// shared by every such type before the driver's own Check: addr is
// required, at most 255 bytes, without spaces or control characters and
// not starting with "-"; with credentials, addr is a host name or an IP
// address without a port (bmcHost: an IPv6 address bracketed or not,
// stored without brackets), user and pass are required, at
// most 255 bytes, without control characters, port is 1-65535 (623 is the
// default), cipher -1 (the driver's default) to 17; interface is "lan" or
// "lanplus" (the default); the console fields as SolSpec.Console checks
// them, for a type that takes them. A field the type does not take is refused by
// the strict /v1 API ("info.user does not apply to type mock") and
// ignored by the obmd routes, as obmd did (obmd's mock also carried its
// counter, "NumWrites").
func SolKind(typ Type, s SolSpec) Kind[sol.Info] {
	check := s.Check
	if check == nil { // the shared rules, in Decode, are all the driver has
		check = func(sol.Info) error { return nil }
	}
	return Kind[sol.Info]{
		Decode: func(decode func(any) error, strict bool) (sol.Info, error) {
			var w wireInfo
			if err := decode(&w); err != nil {
				return sol.Info{}, err
			}
			return w.info(typ, s, strict)
		},
		Check:     check,
		Canonical: sol.Info.Canonical,
		Equal:     sol.Info.Equal,
		View: func(i sol.Info) api.BMC {
			v := ConsoleView(i.ConsoleInfo)
			v.Addr, v.User, v.Cipher, v.Interface = i.Addr, i.User, i.Cipher, i.Interface
			if s.Credentials {
				v.Port = i.Port
				if v.Port == 0 {
					v.Port = 623
				}
			}
			return v
		},
		New:    s.New,
		Forget: s.Forget,
		BMCs: func(i sol.Info) []string {
			if !s.Credentials { // the simulator: no BMC to share
				return nil
			}
			return []string{sol.IPMIEndpoint(i.Addr, i.Port)}
		},
	}
}

// ConsoleView is the console fields as the admin API shows them: as
// registered, never ssh_pass.
func ConsoleView(ci sol.ConsoleInfo) api.BMC {
	return api.BMC{Console: ci.Console, SSHPort: ci.SSHPort, SSHUser: ci.SSHUser, SSHCommand: ci.SSHCommand,
		SSHVendor: ci.SSHVendor, SSHHostKey: ci.SSHHostKey, Redfish: ci.Redfish, RedfishInsecure: ci.RedfishInsecure}
}

// wireInfo is the "info" object as sent. Pointers tell absent from zero;
// the console fields' zero values are their defaults.
type wireInfo struct {
	Addr      *string `json:"addr"`
	User      *string `json:"user"`
	Pass      *string `json:"pass"`
	Port      *int    `json:"port"`
	Cipher    *int    `json:"cipher"`
	Interface *string `json:"interface"`
	sol.ConsoleInfo
}

// info validates w as typ's registration (SolKind's rules).
func (w wireInfo) info(typ Type, s SolSpec, strict bool) (sol.Info, error) {
	var info sol.Info
	addr, err := required(w.Addr, "addr", maxAddr)
	if err != nil {
		return info, err
	}
	if strings.IndexFunc(addr, func(r rune) bool { return !unicode.IsGraphic(r) || unicode.IsSpace(r) }) >= 0 {
		return info, fmt.Errorf("info.addr %s must not contain spaces or control characters", quote(addr))
	}
	if strings.HasPrefix(addr, "-") {
		return info, fmt.Errorf("info.addr %s must not start with \"-\"", quote(addr))
	}
	info.Addr = addr
	if !s.Credentials {
		return info, w.noCredentials(typ, strict)
	}
	if info.Addr, err = bmcHost(addr); err != nil {
		return info, err
	}
	if info.User, err = required(w.User, "user", maxUser); err != nil {
		return info, err
	}
	if strings.IndexFunc(info.User, unicode.IsControl) >= 0 {
		return info, fmt.Errorf("info.user %s must not contain control characters", quote(info.User))
	}
	if info.Pass, err = required(w.Pass, "pass", maxPass); err != nil {
		return info, err
	}
	if strings.IndexFunc(info.Pass, unicode.IsControl) >= 0 {
		return info, fmt.Errorf("info.pass must not contain control characters")
	}
	if w.Port != nil {
		if p := *w.Port; p < 1 || p > 65535 {
			return info, fmt.Errorf("info.port %d is out of range (1..65535)", p)
		}
		info.Port = *w.Port
	}
	if w.Cipher != nil {
		if c := *w.Cipher; c < -1 || c > 17 {
			return info, fmt.Errorf("info.cipher %d is out of range (0..17, or -1 for the driver default)", c)
		}
		info.Cipher = w.Cipher
	}
	if w.Interface != nil && *w.Interface != "" {
		switch iface := *w.Interface; {
		case !s.Interface:
			if strict {
				return info, fmt.Errorf("info.interface does not apply to type %s", typ)
			}
		case iface == "lan" || iface == "lanplus":
			info.Interface = iface
		default:
			return info, fmt.Errorf("info.interface %s is not \"lan\" or \"lanplus\"", quote(iface))
		}
	}
	switch f := w.ConsoleInfo.FirstSet(); {
	case s.Console != nil:
		info.ConsoleInfo, err = s.Console(w.ConsoleInfo)
	case f != "" && strict:
		err = fmt.Errorf("info.%s does not apply to type %s", f, typ)
	}
	return info, err
}

// bmcHost checks the addr of a BMC reached over IPMI: a host name or an IP
// address, without a port (that is info.port); an IPv6 address may be
// bracketed. It returns the host as stored: an IP address in its canonical
// form, without brackets.
func bmcHost(addr string) (string, error) {
	bare := addr
	if strings.HasPrefix(addr, "[") && strings.HasSuffix(addr, "]") {
		bare = addr[1 : len(addr)-1]
		if ip, err := netip.ParseAddr(bare); err != nil || !ip.Is6() {
			return "", fmt.Errorf("info.addr %s: brackets hold an IPv6 address", quote(addr))
		}
	}
	if ip, err := netip.ParseAddr(bare); err == nil {
		return ip.String(), nil
	}
	if host, port, err := net.SplitHostPort(addr); err == nil && port != "" {
		if p, err := strconv.Atoi(port); err == nil && p > 0 && p <= 65535 {
			return "", fmt.Errorf("info.addr %s has a port: give the host alone in info.addr (%s) and the port in info.port (%d)",
				quote(addr), quote(host), p)
		}
	}
	if strings.ContainsAny(addr, ":/@[]") {
		return "", fmt.Errorf("info.addr %s is not a host name or an IP address (the port goes in info.port)", quote(addr))
	}
	return addr, nil
}

// noCredentials refuses, when strict, the fields of a type that takes an
// address only.
func (w wireInfo) noCredentials(typ Type, strict bool) error {
	if !strict {
		return nil
	}
	for _, f := range []struct {
		name string
		set  bool
	}{{"user", w.User != nil}, {"pass", w.Pass != nil}, {"port", w.Port != nil},
		{"cipher", w.Cipher != nil}, {"interface", w.Interface != nil}, {w.ConsoleInfo.FirstSet(), w.ConsoleInfo.FirstSet() != ""}} {
		if f.set {
			return fmt.Errorf("info.%s does not apply to type %s", f.name, typ)
		}
	}
	return nil
}

// required checks a mandatory string field: present, non-empty, bounded.
func required(v *string, name string, max int) (string, error) {
	if v == nil || *v == "" {
		return "", fmt.Errorf("info.%s is required", name)
	}
	if len(*v) > max {
		return "", fmt.Errorf("info.%s is longer than %d bytes", name, max)
	}
	return *v, nil
}

// quote echoes a field's value in an error (never the password's).
func quote(s string) string { return printable.Quote(s, 64) }

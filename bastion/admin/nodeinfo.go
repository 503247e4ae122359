package admin

import (
	"encoding/json"
	"strings"
	"unicode"

	"github.com/obmd/obmd/bastion/nodes"
	"github.com/obmd/obmd/db"
	"github.com/obmd/obmd/sol"
)

// Node types (bastion/nodes maps them to drivers).
const (
	TypeIPMI     = nodes.TypeIPMI     // native IPMI v2.0 driver
	TypeIPMITool = nodes.TypeIPMITool // ipmitool under a pty
	TypeMock     = nodes.TypeMock     // simulated BMC, as obmd's mock
	TypeSim      = nodes.TypeSim      // the built-in simulator (demo, tests)
)

// simulated reports whether typ is a simulator type: it needs only an address.
func simulated(typ string) bool { return typ == TypeMock || typ == TypeSim }

// nodeBody is the body of PUT /node/{label} and PUT /v1/nodes/{label}.
type nodeBody struct {
	Type string          `json:"type"`
	Info json.RawMessage `json:"info"`
}

// wireInfo is the "info" object as sent. Pointers tell absent from zero.
type wireInfo struct {
	Addr      *string `json:"addr"`
	User      *string `json:"user"`
	Pass      *string `json:"pass"`
	Port      *int    `json:"port"`
	Cipher    *int    `json:"cipher"`
	Interface *string `json:"interface"`
}

// Limits on info fields (generous: IPMI itself allows 16-byte user names
// and 20-byte passwords, but drivers differ).
const (
	maxAddr = 255
	maxUser = 255
	maxPass = 255
)

// decodeNodeBody parses and validates a node registration body into the
// node's type and canonical BMC info. strict (the /v1 API) refuses unknown
// fields and fields that do not apply to the type; otherwise (the obmd
// route) both are ignored, as obmd did. Error texts never echo the password.
func decodeNodeBody(data []byte, strict bool) (string, sol.Info, error) {
	var b nodeBody
	if err := decode(data, &b, strict, "body"); err != nil {
		return "", sol.Info{}, err
	}
	switch b.Type {
	case TypeIPMI, TypeIPMITool, TypeMock, TypeSim:
	case "":
		return "", sol.Info{}, badBody("field \"type\" is required (ipmi, ipmitool, mock or sim)")
	default:
		return "", sol.Info{}, badBody("unknown type %s (want ipmi, ipmitool, mock or sim)", quote(b.Type))
	}
	if len(b.Info) == 0 || string(b.Info) == "null" {
		return "", sol.Info{}, badBody("field \"info\" is required")
	}
	var wi wireInfo
	if err := decode(b.Info, &wi, strict, "info"); err != nil {
		return "", sol.Info{}, err
	}
	info, err := wi.canonical(b.Type, strict)
	if err != nil {
		return "", sol.Info{}, err
	}
	return b.Type, info, nil
}

// canonical validates wi for typ and returns the info to store, with
// documented defaults folded in (port 623 = absent, interface "lanplus" =
// absent, cipher -1 = absent) so that equal registrations compare equal.
func (wi wireInfo) canonical(typ string, strict bool) (sol.Info, error) {
	var info sol.Info
	addr, err := required(wi.Addr, "addr", maxAddr)
	if err != nil {
		return info, err
	}
	if strings.IndexFunc(addr, func(r rune) bool { return !unicode.IsGraphic(r) || unicode.IsSpace(r) }) >= 0 {
		return info, badBody("info.addr %s must not contain spaces or control characters", quote(addr))
	}
	if strings.HasPrefix(addr, "-") {
		return info, badBody("info.addr %s must not start with \"-\"", quote(addr))
	}
	info.Addr = addr

	if simulated(typ) {
		// The mock needs only an address; obmd's mock also carried its
		// counter ("NumWrites"), ignored here.
		if strict {
			for _, f := range []struct {
				name string
				set  bool
			}{{"user", wi.User != nil}, {"pass", wi.Pass != nil}, {"port", wi.Port != nil},
				{"cipher", wi.Cipher != nil}, {"interface", wi.Interface != nil}} {
				if f.set {
					return info, badBody("info.%s does not apply to type mock", f.name)
				}
			}
		}
		return info, nil
	}

	if info.User, err = required(wi.User, "user", maxUser); err != nil {
		return info, err
	}
	if strings.IndexFunc(info.User, unicode.IsControl) >= 0 {
		return info, badBody("info.user %s must not contain control characters", quote(info.User))
	}
	if info.Pass, err = required(wi.Pass, "pass", maxPass); err != nil {
		return info, err
	}
	if strings.IndexFunc(info.Pass, unicode.IsControl) >= 0 {
		return info, badBody("info.pass must not contain control characters")
	}
	if wi.Port != nil {
		p := *wi.Port
		if p < 1 || p > 65535 {
			return info, badBody("info.port %d is out of range (1..65535)", p)
		}
		if p != 623 {
			info.Port = p
		}
	}
	if wi.Cipher != nil {
		c := *wi.Cipher
		if c < -1 || c > 17 {
			return info, badBody("info.cipher %d is out of range (0..17, or -1 for the driver default)", c)
		}
		if c >= 0 {
			info.Cipher = &c
		}
	}
	if wi.Interface != nil && *wi.Interface != "" {
		iface := *wi.Interface
		switch {
		case typ != TypeIPMITool:
			if strict {
				return info, badBody("info.interface applies only to type ipmitool")
			}
		case iface == "lanplus":
		case iface == "lan":
			info.Interface = iface
		default:
			return info, badBody("info.interface %s is not \"lan\" or \"lanplus\"", quote(iface))
		}
	}
	return info, nil
}

// required checks a mandatory string field: present, non-empty, bounded.
func required(v *string, name string, max int) (string, error) {
	if v == nil || *v == "" {
		return "", badBody("info.%s is required", name)
	}
	if len(*v) > max {
		return "", badBody("info.%s is longer than %d bytes", name, max)
	}
	return *v, nil
}

// sameNode reports whether the stored node n is the registration typ, info.
// Stored info that cannot be opened is never the same.
func (a *API) sameNode(n db.Node, typ string, info sol.Info) (bool, error) {
	if n.Type != typ {
		return false, nil
	}
	stored, err := nodes.OpenInfo(a.sealer, n)
	if err != nil {
		return false, err
	}
	return infoEqual(stored, info), nil
}

// infoEqual compares two infos, folding the documented defaults.
func infoEqual(x, y sol.Info) bool {
	x, y = fold(x), fold(y)
	if (x.Cipher == nil) != (y.Cipher == nil) || (x.Cipher != nil && *x.Cipher != *y.Cipher) {
		return false
	}
	x.Cipher, y.Cipher = nil, nil
	return x == y
}

// fold maps each documented default to its absent form.
func fold(i sol.Info) sol.Info {
	if i.Port == 623 {
		i.Port = 0
	}
	if i.Interface == "lanplus" {
		i.Interface = ""
	}
	if i.Cipher != nil && *i.Cipher < 0 {
		i.Cipher = nil
	}
	return i
}

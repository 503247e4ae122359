package ipmi

import (
	"fmt"

	"github.com/bougou/go-ipmi/pkg/rmcpplus"

	"github.com/obmd/obmd/sol"
)

// MaxPassLen is the longest password IPMI v2.0 carries (20 bytes).
const MaxPassLen = 20

// Check validates info as this driver takes it: every rule New enforces,
// each error naming the registration's field ("info.pass ..."), so that a
// node the driver would refuse is refused when it is registered. Errors
// never contain the password. It does no I/O.
//
// Rules: addr, user and pass are required; user is at most 16 bytes and
// pass at most MaxPassLen (IPMI's limits); port is 0 (623) or 1-65535;
// cipher is absent or -1 (negotiated: Config.Options.CipherOrder) or a
// suite go-ipmi implements; interface
// is empty or "lanplus".
func Check(info sol.Info) error {
	switch {
	case info.Addr == "":
		return fmt.Errorf("info.addr is required")
	case info.User == "":
		return fmt.Errorf("info.user is required")
	case len(info.User) > rmcpplus.MaxUserNameLength:
		return fmt.Errorf("info.user is longer than %d bytes, the IPMI limit", rmcpplus.MaxUserNameLength)
	case info.Pass == "":
		return fmt.Errorf("info.pass is required")
	case len(info.Pass) > MaxPassLen:
		return fmt.Errorf("info.pass is longer than %d bytes, the IPMI limit", MaxPassLen)
	case info.Port < 0 || info.Port > 65535:
		return fmt.Errorf("info.port %d is out of range (1-65535, or 0 for %d)", info.Port, DefaultPort)
	case info.Cipher != nil && *info.Cipher != -1 && !supportedCipher(*info.Cipher):
		return fmt.Errorf("info.cipher %d is not a suite the ipmi driver supports (0-3, 6-8, 11, 12, 15-17)", *info.Cipher)
	case info.Interface != "" && info.Interface != "lanplus":
		return fmt.Errorf("info.interface %q is not supported by the ipmi driver (only lanplus)", info.Interface)
	}
	return nil
}

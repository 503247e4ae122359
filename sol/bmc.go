package sol

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"strings"
)

// Errors that callers branch on. Drivers wrap them (errors.Is works).
var (
	// ErrBadBootDevice: the driver does not know the requested boot device.
	ErrBadBootDevice = errors.New("unsupported boot device")
	// ErrNotSupported: the driver cannot do this operation at all.
	ErrNotSupported = errors.New("operation not supported by this driver")
	// ErrPayloadActive: the BMC reports that SOL is already active on another
	// session (IPMI completion code 0x80). The Manager deactivates and retries.
	ErrPayloadActive = errors.New("SOL payload already active on another session")
	// ErrSOLDisabled: serial-over-LAN is switched off on the BMC (IPMI
	// completion code 0x81 to Activate Payload) and the driver was told not
	// to switch it on (IPMIOptions.SOLEnable "never").
	ErrSOLDisabled = errors.New("serial-over-LAN is disabled on the BMC")
)

// Power states returned by BMC.PowerStatus. The mock driver returns its own
// fixed string ("Mock Status"), as obmd's mock did.
const (
	PowerOn  = "on"
	PowerOff = "off"
)

// Boot devices understood by the IPMI drivers. The mock driver accepts its own
// ("A", "B"), as obmd's mock did.
const (
	BootPXE   = "pxe"
	BootDisk  = "disk"
	BootBIOS  = "bios"
	BootCDROM = "cdrom"
	BootNone  = "none"
)

// BootDevices are the boot devices of the IPMI and Redfish drivers, in the
// order messages list them.
func BootDevices() []string { return []string{BootPXE, BootDisk, BootBIOS, BootCDROM, BootNone} }

// BootDeviceError is a boot device the driver does not know. It is
// ErrBadBootDevice (errors.Is), and it names the devices the driver knows,
// which TenantText shows.
type BootDeviceError struct {
	Device string   // as asked (the log's; never shown to a tenant)
	Valid  []string // what the driver knows
}

// BadBootDevice is the error of device dev, unknown to a driver that knows
// valid.
func BadBootDevice(dev string, valid ...string) error {
	return &BootDeviceError{Device: dev, Valid: valid}
}

func (e *BootDeviceError) Error() string {
	return fmt.Sprintf("boot device %q: %s", e.Device, e.tenantText())
}

// Is makes it ErrBadBootDevice.
func (e *BootDeviceError) Is(target error) bool { return target == ErrBadBootDevice }

func (e *BootDeviceError) tenantText() string {
	return ErrBadBootDevice.Error() + "; valid: " + strings.Join(e.Valid, ", ")
}

// BMC is one node's baseboard management controller, as a driver reaches it.
// Every method honours ctx (cancellation and deadline) and is safe for
// concurrent use; serialising power operations is the caller's job.
type BMC interface {
	// PowerStatus returns PowerOn or PowerOff (or a driver-specific string).
	PowerStatus(ctx context.Context) (string, error)
	PowerOn(ctx context.Context) error
	// PowerOff cuts power, or asks the OS to shut down when soft is true.
	PowerOff(ctx context.Context, soft bool) error
	// PowerCycle turns power off then on again.
	PowerCycle(ctx context.Context) error
	// PowerReset is a hard reset (power stays on).
	PowerReset(ctx context.Context) error
	// SetBootDevice selects the next boot device (every boot if persistent).
	// An unknown device is ErrBadBootDevice.
	SetBootDevice(ctx context.Context, dev string, persistent bool) error
	// OpenConsole activates SOL and returns the live console. An already
	// active payload is ErrPayloadActive (wrapped); a node without a
	// console is ErrNoConsole (wrapped), which the Manager does not retry. ctx bounds only the
	// opening: the Console lives until its Close, not until ctx ends.
	OpenConsole(ctx context.Context) (Console, error)
	// DeactivateConsole frees a SOL payload left active by someone else (a
	// killed client), so that OpenConsole can succeed.
	DeactivateConsole(ctx context.Context) error
}

// Console is one active SOL session. Read returns bytes from the node's
// serial port; Write sends bytes to it (already batched by the caller; a
// driver may split them further) and, when it fails, returns how many of
// them the BMC accepted: the Manager sends the rest on the next console.
// Read returns an error (io.EOF or other) when the link is lost, including
// when the BMC goes silent or dead: the driver runs its own keepalive, the
// Manager only sees Read fail. Read runs concurrently with Write and Break
// (the Manager never overlaps those two). Close deactivates SOL and must
// unblock a pending Read and Write; it is called exactly once, by the link
// goroutine that owns the console.
type Console interface {
	io.Reader
	io.Writer
	// Break sends a serial break (RFC 4335 break request, OpenSSH ~B).
	Break(ctx context.Context) error
	Close() error
}

// Exclusive may be implemented by a BMC whose console belongs to one viewer
// at a time, as obmd's mock did: its counter starts at 0 on every new
// console, and HIL's tests read a stream and expect 0, 1, 2, ... each time.
// When Exclusive reports true, a new viewer displaces the node's current
// ones (they end with ErrDisplaced) and gets a new console, and the console
// closes as its viewer leaves, without Config.Linger. So a new stream never
// joins the previous one mid-count, even before the server has noticed that
// the previous reader hung up. An Exclusive console is also read only as
// fast as its viewer takes the output (flow control end to end, see
// Config.QueueBytes), so that viewer never skips ahead: the mock's counter,
// which its console makes as it is read, reaches it without a gap at any
// reading speed.
type Exclusive interface {
	Exclusive() bool
}

// ErrHeldElsewhere is returned (wrapped) by OwnConsoler.OpenOwnConsole when
// another replica holds the node's console link: that replica captures
// and records it.
var ErrHeldElsewhere = errors.New("another replica holds this node's console link")

// OwnConsoler may be implemented by a BMC whose console can also be reached
// through another replica (a cluster's): OpenOwnConsole opens it only as
// its holder, never through a relay, and returns ErrHeldElsewhere when
// another replica holds it. The Manager opens a link held for capture with
// nobody attached (Hold) this way, and lets the node go on
// ErrHeldElsewhere: a viewer-less relay would only mirror what the holder
// records.
type OwnConsoler interface {
	OpenOwnConsole(ctx context.Context) (Console, error)
}

// Seeded is implemented by a Console that relays another replica's link of
// the node (a cluster's relay). Seed is the holder's replay of the node's
// history as the relay began: the console output just before the relay's
// first byte. The Manager records nothing of a relayed link (the holder
// does) and replays to its viewers the seed and what followed, so that a
// viewer on any replica gets the holder's replay, with no byte lost or
// repeated before live output.
type Seeded interface {
	Seed() []byte
}

// Info is how to reach a node's BMC: what an administrator registers. The JSON
// names are obmd's ("addr", "user", "pass") plus optional extras.
type Info struct {
	Addr string `json:"addr"`
	// Port is the RMCP+ UDP port; 0 means 623.
	Port int    `json:"port,omitempty"`
	User string `json:"user"`
	Pass string `json:"pass"`
	// Cipher pins the IPMI cipher suite; -1 or absent lets the driver pick:
	// it tries IPMIOptions.CipherOrder (17, then 3) and remembers the first
	// suite that opens a session (IPMIOptions.Ciphers).
	Cipher *int `json:"cipher,omitempty"`
	// Interface is the ipmitool interface; empty means "lanplus".
	Interface string `json:"interface,omitempty"`
	// ConsoleInfo is how the node's console is reached: IPMI SOL (the
	// default) or the BMC's SSH service. The IPMI drivers ignore it.
	ConsoleInfo
}

// Canonical returns i with each documented default in its absent form
// (port 623 as 0, cipher -1 as nil, interface "lanplus" as ""), so that two
// registrations of the same BMC compare equal.
func (i Info) Canonical() Info {
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

// IPMIEndpoint names the IPMI service at host and port (0: 623) in one
// normal form, so that two names of one BMC compare equal: an IP address
// in its canonical form (an IPv4-mapped IPv6 address as IPv4), a host name
// in lower case without a final dot. "IPMI 10.0.0.5 port 623".
func IPMIEndpoint(host string, port int) string {
	if port == 0 {
		port = 623
	}
	if ip, err := netip.ParseAddr(strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")); err == nil {
		host = ip.Unmap().String()
	} else {
		host = strings.ToLower(strings.TrimSuffix(host, "."))
	}
	return fmt.Sprintf("IPMI %s port %d", host, port)
}

// Equal reports whether i and other reach the same BMC the same way.
func (i Info) Equal(other Info) bool {
	x, y := i.Canonical(), other.Canonical()
	if (x.Cipher == nil) != (y.Cipher == nil) || x.Cipher != nil && *x.Cipher != *y.Cipher {
		return false
	}
	x.Cipher, y.Cipher = nil, nil
	return x == y
}

// Resolver finds the BMC of a node by label (from the database, with its
// credentials unsealed). The Manager resolves again on every reconnect, so a
// changed BMC address takes effect without a restart.
type Resolver interface {
	Resolve(ctx context.Context, label string) (BMC, error)
}

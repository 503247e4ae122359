// Package sshconsole reaches a node's serial console through its BMC's own
// SSH service: the manager CLI's console command, per vendor preset.
//
// obmd is the SSH client (golang.org/x/crypto/ssh). A Client opens one
// Console per link (Open): TCP, the SSH handshake with the BMC's host key
// checked against the node's pin (the key registered with the node, else
// the one HostKeys recorded on first contact; a changed key is refused,
// FaultHostKey, and reported once), password or keyboard-interactive
// authentication, a pty, then the console command, run as the session's
// command or typed at the CLI's prompt (Preset.Shell, or when the BMC
// refuses it as a command). The CLI's own output up to the preset's Ready
// text is not the host's and is dropped; its Busy text is
// sol.ErrPayloadActive, and Free (DeactivateConsole) runs the vendor's
// command that frees the console. Viewer input is kept from forming the
// vendor's escape (encoder); Close sends that escape, so the BMC's single
// console slot is free at once for the next session, then ends the SSH
// session. A keepalive request detects a silent BMC; breaks are RFC 4335
// break requests.
//
// Errors are *sol.Error values: their text names the BMC's address (for
// the log), sol.TenantText never does.
package sshconsole

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/sirupsen/logrus"
	"golang.org/x/crypto/ssh"

	"github.com/obmd/obmd/keys"
	"github.com/obmd/obmd/sol"
	"github.com/obmd/obmd/sol/printable"
)

// Config tunes the transport (the YAML section ssh_console). Zero values
// take the defaults.
type Config struct {
	// Keepalive is the pause between keepalive requests on an open
	// console; KeepaliveCount requests' time without an answer ends it
	// (default 5 s and 3).
	Keepalive      time.Duration `yaml:"keepalive"`
	KeepaliveCount int           `yaml:"keepalive_count"`
	// LeaveTimeout bounds leaving a console cleanly at Close: the
	// vendor's escape, the end of the session (default 2 s).
	LeaveTimeout time.Duration `yaml:"leave_timeout"`
	// LegacyAlgorithms also offers the SHA-1 and CBC algorithms that old
	// BMC firmware may need (diffie-hellman-group14-sha1, ssh-rsa
	// signatures, hmac-sha1, aes-cbc).
	LegacyAlgorithms bool `yaml:"legacy_algorithms"`
}

// Defaults of Config.
const (
	DefaultKeepalive      = 5 * time.Second
	DefaultKeepaliveCount = 3
	DefaultLeaveTimeout   = 2 * time.Second
)

// WithDefaults validates c and fills its defaults.
func (c Config) WithDefaults() (Config, error) {
	if c.Keepalive < 0 || c.KeepaliveCount < 0 || c.LeaveTimeout < 0 {
		return c, errors.New("ssh_console: durations and counts must not be negative")
	}
	if c.Keepalive == 0 {
		c.Keepalive = DefaultKeepalive
	}
	if c.KeepaliveCount == 0 {
		c.KeepaliveCount = DefaultKeepaliveCount
	}
	if c.LeaveTimeout == 0 {
		c.LeaveTimeout = DefaultLeaveTimeout
	}
	return c, nil
}

// PinnedKey is a BMC host key pinned for a node: an authorized_keys line
// ("ssh-ed25519 AAAA...") and the BMC address ("host:port") it was first
// seen at. A pin applies to that address only: a node moved to another
// BMC pins again.
type PinnedKey struct {
	Key  string
	Addr string
}

// HostKeys stores the host keys pinned on first contact (the database).
type HostKeys interface {
	// PinnedHostKey returns the key pinned for label; ok is false when
	// there is none.
	PinnedHostKey(ctx context.Context, label string) (k PinnedKey, ok bool, err error)
	// PinHostKey pins k for label unless a key is pinned for label at
	// k.Addr already, and returns what is pinned afterwards (k, or the key
	// pinned first by someone else).
	PinHostKey(ctx context.Context, label string, k PinnedKey) (PinnedKey, error)
}

// HostKeyEvent is what a Client reports about a node's host key: pinned
// on first contact, or refused because it changed. Fingerprints are
// SHA256 ones; the BMC's address is the admin's to see.
type HostKeyEvent struct {
	Node    string
	Addr    string
	Changed bool   // false: pinned on first contact
	Offered string // fingerprint the BMC showed
	Pinned  string // fingerprint of the pin (Changed only)
}

// Client opens consoles over BMCs' SSH services. It is safe for concurrent
// use; one serves the whole daemon.
type Client struct {
	cfg    Config
	keys   HostKeys
	notify func(context.Context, HostKeyEvent)
	log    logrus.FieldLogger

	mu       sync.Mutex
	reported map[string]string // node -> offered fingerprint last reported as changed
}

// NewClient returns a client over the host-key store keys. notify, if set,
// is told when a key is pinned and (once per offered key) when one is
// refused as changed; it must return within ctx. It does no I/O.
func NewClient(cfg Config, keys HostKeys, notify func(context.Context, HostKeyEvent), log logrus.FieldLogger) (*Client, error) {
	cfg, err := cfg.WithDefaults()
	if err != nil {
		return nil, err
	}
	if keys == nil || log == nil {
		return nil, errors.New("sshconsole: host-key store and logger are required")
	}
	return &Client{cfg: cfg, keys: keys, notify: notify, log: log, reported: map[string]string{}}, nil
}

// Target is one node's console over its BMC's SSH service, with the
// node's defaults and its vendor's preset applied (TargetOf).
type Target struct {
	Node    string
	Host    string
	Port    int
	User    string
	Pass    string // never logged, never in an error
	Command string // "" with Preset.Shell false: the session is the console
	Preset  Preset
	// HostKey is the key registered with the node (nil: pinned on first
	// contact).
	HostKey ssh.PublicKey
}

// Addr is the BMC's SSH address, "host:port".
func (t Target) Addr() string { return net.JoinHostPort(t.Host, strconv.Itoa(t.Port)) }

// TargetOf is node's SSH console target on the BMC host from its console
// info (Check'ed): ssh_user and ssh_pass default to the node's user and
// pass, the port and command to the vendor preset's.
func TargetOf(node, host, user, pass string, ci sol.ConsoleInfo) (Target, error) {
	if err := Check(ci); err != nil {
		return Target{}, err
	}
	p, _ := Lookup(ci.SSHVendor)
	t := Target{Node: node, Host: host, Port: p.Port, User: user, Pass: pass, Command: p.Command, Preset: p}
	if ci.SSHPort != 0 {
		t.Port = ci.SSHPort
	}
	if ci.SSHUser != "" {
		t.User = ci.SSHUser
	}
	if ci.SSHPass != "" {
		t.Pass = ci.SSHPass
	}
	if ci.SSHCommand != "" {
		t.Command = ci.SSHCommand
	}
	if ci.SSHHostKey != "" {
		t.HostKey, _ = parseHostKey(ci.SSHHostKey) // checked above
	}
	if t.Host == "" || t.User == "" {
		return Target{}, errors.New("ssh console: the BMC host and a user are required")
	}
	return t, nil
}

// Limits on the console info's SSH fields.
const (
	MaxUserLen    = 255
	MaxPassLen    = 255
	MaxCommandLen = 255
	MaxHostKeyLen = 16 << 10
)

// Check validates the SSH fields of a registration's console info: each
// error names its field ("info.ssh_port ..."), never shows the password.
// It does no I/O.
//
// Rules: ssh_port is 0 (the preset's) or 1-65535; ssh_user, ssh_pass and
// ssh_command are valid UTF-8 without control characters, at most 255
// bytes; ssh_vendor is a preset's name (or empty: generic); ssh_host_key
// is one authorized_keys line of a plain key (no options, no certificate).
func Check(ci sol.ConsoleInfo) error {
	if ci.SSHPort < 0 || ci.SSHPort > 65535 {
		return fmt.Errorf("info.ssh_port %d is out of range (1-65535, or 0 for the preset's)", ci.SSHPort)
	}
	if err := checkText("ssh_user", ci.SSHUser, MaxUserLen, true); err != nil {
		return err
	}
	if err := checkText("ssh_pass", ci.SSHPass, MaxPassLen, false); err != nil {
		return err
	}
	if err := checkText("ssh_command", ci.SSHCommand, MaxCommandLen, true); err != nil {
		return err
	}
	if _, ok := Lookup(ci.SSHVendor); !ok {
		return fmt.Errorf("info.ssh_vendor %s is not one of %s", quote(ci.SSHVendor), strings.Join(Vendors(), ", "))
	}
	if ci.SSHHostKey != "" {
		if len(ci.SSHHostKey) > MaxHostKeyLen {
			return fmt.Errorf("info.ssh_host_key is longer than %d bytes", MaxHostKeyLen)
		}
		if _, err := parseHostKey(ci.SSHHostKey); err != nil {
			return fmt.Errorf("info.ssh_host_key: %w", err)
		}
	}
	return nil
}

// Canonical returns ci's SSH fields with their documented defaults in
// their absent forms (the preset's port and command, vendor generic, the
// host key without its comment), so that two registrations of the same
// console compare equal. ci must have passed Check.
func Canonical(ci sol.ConsoleInfo) sol.ConsoleInfo {
	p, _ := Lookup(ci.SSHVendor)
	if ci.SSHVendor == VendorGeneric {
		ci.SSHVendor = ""
	}
	if ci.SSHPort == p.Port {
		ci.SSHPort = 0
	}
	if ci.SSHCommand == p.Command {
		ci.SSHCommand = ""
	}
	if k, err := parseHostKey(ci.SSHHostKey); err == nil {
		ci.SSHHostKey = KeyLine(k)
	}
	return ci
}

// checkText checks an optional text field; the error never shows a
// password's value (show false).
func checkText(field, v string, max int, show bool) error {
	switch {
	case len(v) > max:
		return fmt.Errorf("info.%s is longer than %d bytes", field, max)
	case !utf8.ValidString(v):
		return fmt.Errorf("info.%s is not valid UTF-8", field)
	case strings.IndexFunc(v, unicode.IsControl) >= 0 && show:
		return fmt.Errorf("info.%s %s must not contain control characters", field, quote(v))
	case strings.IndexFunc(v, unicode.IsControl) >= 0:
		return fmt.Errorf("info.%s must not contain control characters", field)
	}
	return nil
}

// quote echoes a value in an error, bounded and printable.
func quote(s string) string { return printable.Quote(s, 64) }

// parseHostKey reads an authorized_keys line of a plain host key (no
// options, no certificate: keys.ParseAuthorizedKey's rules).
func parseHostKey(line string) (ssh.PublicKey, error) {
	k, err := keys.ParseAuthorizedKey(line)
	if errors.Is(err, keys.ErrKeyCertificate) {
		return nil, errors.New("a certificate is not a host key")
	}
	if err != nil {
		return nil, err
	}
	return k.Key, nil
}

// KeyLine is k as an authorized_keys line without a comment.
func KeyLine(k ssh.PublicKey) string {
	return strings.TrimSpace(string(ssh.MarshalAuthorizedKey(k)))
}

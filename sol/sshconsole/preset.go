package sshconsole

import "bytes"

// Vendor presets (sol.ConsoleInfo.SSHVendor).
const (
	VendorIDRAC   = "idrac"
	VendorILO     = "ilo"
	VendorXCC     = "xcc"
	VendorOpenBMC = "openbmc"
	VendorGeneric = "generic"
)

// Preset is how one vendor's BMC gives its host console over SSH: where,
// which command reaches it, how the manager CLI says it is attached or held
// by another session, how the console is left, and which viewer bytes the
// vendor would take as its own escape.
type Preset struct {
	// Name is the vendor's name in ssh_vendor.
	Name string
	// Port is the default SSH port.
	Port int
	// Command is the default console command ("" with Shell false: the
	// SSH session itself is the console, as OpenBMC's port 2200).
	Command string
	// Shell: the command is typed at the manager CLI's prompt; otherwise
	// it is tried as the session's command first, and typed at the prompt
	// only if the BMC refuses it.
	Shell bool
	// Ready, if set, is the text the CLI prints once the console is
	// attached: the output up to the end of its line is the CLI's, not the
	// host's.
	Ready string
	// Busy are texts (matched case-insensitively) by which the CLI says
	// another session holds the console.
	Busy []string
	// Free, if set, is the CLI command that frees the console from
	// another session (sol.BMC.DeactivateConsole).
	Free string
	// Leave returns from the console to the CLI (or ends the console
	// command); LeaveAtLineStart: only after a CR (else it is not sent).
	Leave            []byte
	LeaveAtLineStart bool
	// escape is how viewer input is kept from forming Leave.
	escape escapeKind
}

// escapeKind is a vendor's escape, as the encoder neutralises it.
type escapeKind int

const (
	escapeNone  escapeKind = iota
	escapeByte             // one byte anywhere (iDRAC's Ctrl-\): dropped
	escapeESC              // ESC then '(' (iLO, XCC): the '(' is dropped
	escapeTilde            // CR then "~." (obmc-console-client): "~" doubled after CR
)

// Presets are the vendors obmd knows, by name. What each does is
// documented in docs/operator.md ("Consoles over the BMC's SSH service").
var presets = map[string]Preset{
	VendorIDRAC: {Name: VendorIDRAC, Port: 22, Command: "console com2", Shell: true,
		Ready: "To end type", Busy: []string{"in use"}, Leave: []byte{0x1c}, escape: escapeByte},
	VendorILO: {Name: VendorILO, Port: 22, Command: "vsp", Shell: true,
		Ready: "to return to the CLI", Busy: []string{"in use"}, Free: "stop /system1/oemhp_vsp1",
		Leave: []byte("\x1b("), escape: escapeESC},
	VendorXCC: {Name: VendorXCC, Port: 22, Command: "console 1", Shell: true,
		Busy: []string{"in use"}, Leave: []byte("\x1b("), escape: escapeESC},
	VendorOpenBMC: {Name: VendorOpenBMC, Port: 2200,
		Leave: []byte("~."), LeaveAtLineStart: true, escape: escapeTilde},
	VendorGeneric: {Name: VendorGeneric, Port: 22},
}

// Lookup returns the preset of vendor ("" is generic).
func Lookup(vendor string) (Preset, bool) {
	if vendor == "" {
		vendor = VendorGeneric
	}
	p, ok := presets[vendor]
	return p, ok
}

// Vendors lists the preset names, for error messages.
func Vendors() []string {
	return []string{VendorIDRAC, VendorILO, VendorXCC, VendorOpenBMC, VendorGeneric}
}

// encoder keeps viewer input from forming the vendor's escape, mirroring
// the vendor's escape state across Writes. Every byte a viewer sends
// reaches the host exactly once, except those no vendor lets through
// (iDRAC's Ctrl-\, the '(' right after an ESC on iLO and XCC): those are
// dropped, as the alternative is ending the console for everyone.
type encoder struct {
	kind    escapeKind
	esc     byte
	lastESC bool // the last byte sent was ESC (escapeESC)
	lastCR  bool // the last byte sent was CR (escapeTilde)
}

func newEncoder(p Preset) encoder {
	e := encoder{kind: p.escape}
	if p.escape == escapeByte {
		e.esc = p.Leave[0]
	}
	return e
}

// encode appends the safe form of p to dst and advances the state.
func (e *encoder) encode(dst, p []byte) []byte {
	switch e.kind {
	case escapeNone:
		return append(dst, p...)
	case escapeByte:
		for _, c := range p {
			if c != e.esc {
				dst = append(dst, c)
			}
		}
		return dst
	}
	for _, c := range p {
		switch {
		case e.kind == escapeESC && e.lastESC && c == '(':
			continue // dropped: ESC stays the last byte sent
		case e.kind == escapeTilde && e.lastCR && c == '~':
			// obmc-console-client swallows a '~' after CR and passes
			// the next byte, which resets its state.
			dst = append(dst, '~', '~')
			e.lastCR = false
			continue
		}
		dst = append(dst, c)
		e.lastESC = c == 0x1b
		e.lastCR = c == '\r'
	}
	return dst
}

// consumed returns how many bytes of p (as passed to encode from the state
// before) are fully contained in the first n bytes of their encoding.
func (e encoder) consumed(p []byte, n int) int {
	for i := range p {
		w := len(e.encode(nil, p[i:i+1])) // 0 for a dropped byte
		if n < w {
			return i
		}
		n -= w
	}
	return len(p)
}

// leave is the sequence that leaves the console from the state e is in
// (nil when the vendor has none, or needs a line start e is not at).
func (e encoder) leave(p Preset) []byte {
	if len(p.Leave) == 0 || p.LeaveAtLineStart && !e.lastCR {
		return nil
	}
	return bytes.Clone(p.Leave)
}

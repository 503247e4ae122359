package sol

// Console transports: how a node's serial console is reached
// (ConsoleInfo.Console).
const (
	// ConsoleSOL is IPMI serial-over-LAN through the node's driver (the
	// default of the IPMI node types).
	ConsoleSOL = "sol"
	// ConsoleSSH is the BMC's own SSH service: its manager CLI's console
	// command (sol/sshconsole).
	ConsoleSSH = "ssh"
	// ConsoleAuto is whichever of the two the BMC offers: what its Redfish
	// service says is enabled, else SOL then SSH; the one that worked is
	// remembered (sol/transport).
	ConsoleAuto = "auto"
)

// ConsoleInfo is how a node's serial console is reached, registered beside
// its BMC info (sol.Info and redfish.Info embed it): the transport and the
// details of the BMC's SSH service. It is data only: sol/transport checks
// it (CheckInfo) and acts on it, sol/sshconsole speaks SSH. The JSON names
// are the registration's fields ("console", "ssh_port", ...).
type ConsoleInfo struct {
	// Console is ConsoleSOL, ConsoleSSH or ConsoleAuto; empty is the node
	// type's default.
	Console string `json:"console,omitempty"`
	// SSHPort is the BMC's SSH port; 0 is the vendor preset's (22, 2200 for
	// OpenBMC's host console).
	SSHPort int `json:"ssh_port,omitempty"`
	// SSHUser and SSHPass log in to the BMC's SSH service; empty: the
	// node's user and pass.
	SSHUser string `json:"ssh_user,omitempty"`
	SSHPass string `json:"ssh_pass,omitempty"`
	// SSHCommand reaches the host console once logged in: run as the SSH
	// session's command, or typed at the manager CLI's prompt when the BMC
	// offers only a shell. Empty: the vendor preset's.
	SSHCommand string `json:"ssh_command,omitempty"`
	// SSHVendor names the preset ("idrac", "ilo", "xcc", "openbmc",
	// "generic"): the command, the port, and how the vendor's console is
	// left and its escapes neutralised. Empty: generic.
	SSHVendor string `json:"ssh_vendor,omitempty"`
	// SSHHostKey, if set, is the BMC's SSH host key as an authorized_keys
	// line ("ssh-ed25519 AAAA..."): the only key accepted. Unset, the key
	// the BMC shows on first contact is pinned.
	SSHHostKey string `json:"ssh_host_key,omitempty"`
	// Redfish, for an IPMI node whose console is ConsoleAuto, is the BMC's
	// Redfish service ("https://host[:port]"), which auto asks which
	// console services are enabled, logged in with the node's user and
	// pass; RedfishInsecure skips the verification of its certificate.
	// A Redfish node's own service is its address: it takes neither.
	Redfish         string `json:"redfish,omitempty"`
	RedfishInsecure bool   `json:"redfish_insecure,omitempty"`
}

// FirstSet names the first field ci sets, by its registration name
// ("console", "ssh_port", ...; "" when none is): what an error about a
// field that does not apply names.
func (ci ConsoleInfo) FirstSet() string {
	for _, f := range []struct {
		name string
		set  bool
	}{{"console", ci.Console != ""}, {"ssh_port", ci.SSHPort != 0}, {"ssh_user", ci.SSHUser != ""},
		{"ssh_pass", ci.SSHPass != ""}, {"ssh_command", ci.SSHCommand != ""}, {"ssh_vendor", ci.SSHVendor != ""},
		{"ssh_host_key", ci.SSHHostKey != ""}, {"redfish", ci.Redfish != ""}, {"redfish_insecure", ci.RedfishInsecure}} {
		if f.set {
			return f.name
		}
	}
	return ""
}

// ConsoleServices is what a BMC says of its serial console services (a
// Redfish system's SerialConsole): whether each is known (reported at all),
// enabled, and, for SSH, its port and console entry command (0, "": not
// reported).
type ConsoleServices struct {
	SSH  ConsoleService
	IPMI ConsoleService
}

// ConsoleService is one serial console service as a BMC reports it.
type ConsoleService struct {
	Known   bool
	Enabled bool
	Port    int
	Command string
}

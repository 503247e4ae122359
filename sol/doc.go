// Package sol owns the BMC side of obmd: power and boot-device operations,
// and the shared serial-over-LAN console.
//
// Power and boot-device operations act on a node's BMC; its serial-over-LAN
// console has at most one SOL link per node, shared by every viewer attached
// to it.
//
// Drivers (sol/ipmi, sol/ipmitool, sol/redfish, sol/sim) implement BMC, and
// Diagnoser (the driver's half of doctor: Check steps, each with an
// administrator's detail and a tenant's text); each exports its info's
// Check, which the node types table runs at registration. The Manager
// keeps one Link per node with a scrollback ring and fans its output out to
// Viewers (a viewer's session ID travels in AttachOptions); it knows
// nothing of SSH or HTTP, nor of any driver. A link it holds (not a relay
// of another replica's, Seeded) is recorded in the node's console history
// (History, over sol/history), and viewers' replays come from the history
// of their tenancy (AttachOptions.Epoch); Hold keeps a link open with
// nobody attached (capture always), and HandOff closes a held link nobody
// watches at once for another replica to capture. One viewer per node writes (TakeWrite,
// ReadOnly); Viewer.AsWriter lets a read-only viewer borrow the role for one
// write and hand it back to its writer wherever it is (the `send` and
// `expect` commands), refused with ErrWriterBusy while another viewer
// writes unless forced, and ErrInputLost for input that did not reach the
// link; WaitUp waits for
// the link (power-cycle --wait-for opens it before the power operation).
//
// A node's console may also be reached over its BMC's own SSH service:
// ConsoleInfo (embedded in the IPMI and Redfish infos) names the transport
// ("sol", "ssh", "auto"), sol/sshconsole speaks SSH to the vendor's manager
// CLI, and sol/transport puts a driver behind the transport its node names
// (ConsoleServices is what a BMC's Redfish service says is enabled).
//
// IPMIOptions is what the IPMI drivers share, and the composition root
// owns: the cipher suites tried for a node that pins none and the memory
// of the one that worked (Ciphers, which the admin API can show), and what
// to do when SOL is off on a BMC (SOLEnable, reported through OnSOLEnable
// for the sol.enable audit event).
//
// Errors: a driver classifies a failure of the BMC as an *Error (its Fault:
// credentials refused, no answer, unreachable, request rejected), whose own
// text keeps the detail (the BMC's address) for the log. TenantText is the
// one place any error becomes text a tenant reads; it never shows that
// detail.
package sol

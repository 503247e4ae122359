// Package sol owns the BMC side of obmd: power and boot-device operations on
// a node's BMC, and its serial-over-LAN console, with at most one SOL link
// per node shared by every viewer attached to it.
//
// Drivers (sol/ipmi, sol/ipmitool, sol/sim) implement BMC. The Manager keeps
// one Link per node with a scrollback ring and fans its output out to
// Viewers; it knows nothing of SSH or HTTP.
package sol

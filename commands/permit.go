package commands

// UsesConsole reports whether cmd reads or types on the node's console:
// console, console-log (--follow too), wait-for, send, expect, and
// power-on or power-cycle with --wait-for. A credential that does not
// permit the console (an OpenSSH certificate without permit-pty) may run
// only the others: the power and boot-device commands, power-status,
// sessions, doctor (it checks the BMC's console settings, and shows none
// of the console's output), help and version.
//
// It lists the commands that do not use the console, so that a command
// added later counts as one that does until it is listed here.
func (c Command) UsesConsole() bool {
	switch c.Name {
	case CmdPowerStatus, CmdPowerOff, CmdPowerReset, CmdBootdev, CmdSessions, CmdDoctor, CmdHelp, CmdVersion:
		return false
	case CmdPowerOn, CmdPowerCycle:
		return c.Pattern != ""
	}
	return true
}

// NotAllowedError refuses a command the session's credential does not
// permit; its text ("console-log: this certificate does not permit the
// console (no permit-pty)") is safe to show. ExitCode maps it to
// ExitNotAllowed.
type NotAllowedError struct {
	Command Name
	Why     string
}

func (e *NotAllowedError) Error() string { return string(e.Command) + ": " + e.Why }

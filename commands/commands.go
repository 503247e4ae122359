// Package commands owns the exec grammar shared by every transport: it turns
// argv into a Command, runs it against a node's BMC (serialising power
// operations per node, bounding each call, auditing each action) and renders
// the result as a line a person reads or one JSON object, with an exit code.
// It knows nothing of SSH or SQL.
package commands

import (
	"errors"
	"time"
)

// Exit codes, the contract with scripts.
const (
	ExitOK         = 0 // done
	ExitFailed     = 1 // the BMC or the operation failed
	ExitUsage      = 2 // usage error
	ExitNotAllowed = 3 // not allowed
	ExitBusy       = 4 // another power operation on this node is in flight
)

// Errors callers branch on (HTTP maps them to status codes).
var (
	ErrBusy       = errors.New("another power operation on this node is in flight")
	ErrNotAllowed = errors.New("not allowed")
)

// UsageError is a parse or argument error; its text is safe to show (no raw
// control characters).
type UsageError struct{ Msg string }

func (e *UsageError) Error() string { return e.Msg }

// Command names.
const (
	CmdPowerStatus = "power-status"
	CmdPowerOn     = "power-on"
	CmdPowerOff    = "power-off"
	CmdPowerCycle  = "power-cycle"
	CmdPowerReset  = "power-reset"
	CmdBootdev     = "bootdev"
	CmdConsole     = "console"
	CmdConsoleLog  = "console-log"
	CmdSessions    = "sessions"
	CmdHelp        = "help"
	CmdVersion     = "version"
)

// Command is one parsed command. Only the fields of its Name are meaningful.
type Command struct {
	Name       string
	JSON       bool   // --json
	Soft       bool   // power-off --soft
	Force      bool   // power-cycle --force (hard reset)
	Device     string // bootdev DEVICE
	Persistent bool   // bootdev --persistent
	Lines      int    // console-log --lines N (0 = all)
	ReadOnly   bool   // console --read-only
}

// Request says who runs a command where; it feeds audit records and logs.
type Request struct {
	Node    string
	Actor   string // "ssh:password", "ssh:publickey", "http:token", ...
	Source  string // remote address
	Session string // session id, for logs
}

// Result is the typed outcome of a command, rendered by Render.
type Result struct {
	Node     string        `json:"node"`
	Command  string        `json:"command"`
	Power    string        `json:"power,omitempty"`   // power-status (and after power ops where known)
	Bootdev  string        `json:"bootdev,omitempty"` // bootdev
	Persist  bool          `json:"persistent,omitempty"`
	Took     time.Duration `json:"-"`
	Text     string        `json:"-"` // help, version, console-log, sessions: the text body
	Sessions []SessionInfo `json:"sessions,omitempty"`
	Version  string        `json:"version,omitempty"`
}

// SessionInfo is one live session, as `sessions` lists it.
type SessionInfo struct {
	ID      string    `json:"id"`
	Kind    string    `json:"kind"`
	User    string    `json:"user"`
	Remote  string    `json:"remote"`
	Started time.Time `json:"started"`
	Writer  bool      `json:"writer,omitempty"`
}

// Package commands owns the exec grammar every transport shares: parsing
// argv, running it on a node's BMC, rendering the result.
//
// It turns argv into a Command, runs it against a node's BMC (serialising
// power operations per node, bounding each call, auditing each action) and
// renders the result as a line a person reads or one JSON object, with an
// exit code. It knows nothing of SSH or SQL.
//
// # Flow
//
// A transport calls Split on the exec request line, Parse on the words, and
// then either handles console itself (it is interactive) or calls
// Runner.Run, which prints and returns the exit code. Parse errors go
// through WriteError, so they print like every other error. The HTTP API
// calls Runner.Do and maps errors: ErrBusy to 409, a *UsageError or
// sol.ErrBadBootDevice to 400, anything else to 500, with Message as the
// body's text.
//
// # Text output (stdout, stable)
//
//	power-status                node-17: power on            (mock: "node-17: power Mock Status")
//	power-on                    node-17: powered on
//	power-off                   node-17: powered off
//	power-off --soft            node-17: soft power-off requested
//	power-cycle                 node-17: power cycled
//	power-cycle --force         node-17: reset
//	power-reset                 node-17: reset
//	bootdev pxe                 node-17: next boot from pxe
//	bootdev pxe --persistent    node-17: next boot from pxe (persistent)
//	console-log [--lines N] [--since 10m|RFC3339] [--timestamps] [--follow] [--cast]
//	                            this tenancy's console history: the bytes as the node sent them,
//	                            untouched; --timestamps: lines prefixed with the arrival of their
//	                            first byte, markers as "[obmd: ...]" lines; --cast: asciicast v2;
//	                            --follow: then the live output until the session ends
//	wait-for REGEX [--timeout D] [--since attach|now|DURATION|RFC3339] [--tenancy]
//	                            the line holding the first match (control characters escaped);
//	                            exit 5 when --timeout (5m) passes first
//	wait-for --screen REGEX     the row of the screen holding the first match
//	screen [--ansi]             the screen's rows, trailing spaces trimmed, one a line (the
//	                            node's own characters, untouched); --ansi: a redraw for a
//	                            terminal (clear, the cells with their attributes, the cursor)
//	send TEXT... | --stdin | --hex HEX [--force]
//	                            node-17: sent 5 bytes
//	expect SCRIPT | --stdin [--timeout D] [--force]
//	                            node-17: expect: 4 steps done
//	power-on --wait-for RE      node-17: powered on, then the matching line
//	power-cycle --wait-for RE   node-17: power cycled, then the matching line
//	sessions                    a table: ID KIND USER REMOTE STARTED WRITER ("no sessions" if none)
//	                            of the requester's tenancy; USER and REMOTE only on its own
//	                            sessions ("-" otherwise)
//	doctor                      one line per step checked, "ok" or "FAIL", its name and result (on
//	                            failure "; what to do: " and a hint), then "node-17: doctor: all 4
//	                            checks passed" or "node-17: doctor: sol failed (...)"; the tenant's
//	                            texts only (sol.Check.Tenant): never the BMC's address
//	version                     the version string
//	help [COMMAND]              the usage text
//
// wait-for, send, expect, --wait-for and screen run on the console through the
// transport's Request.OpenConsole (a read-only viewer attached for the
// command); send borrows the write role only for its write, and is
// refused (ExitBusy, sol.ErrWriterBusy) while another session writes
// unless --force. An expect script failing reports "expect: line N (KIND):
// reason". The audit records console.send (the byte count, never the
// bytes), console.wait and console.expect (result ok, timeout, busy or
// error). Their patterns are bounded by compiled size (MaxProgram, and
// MaxScriptProgram for a script's), their searches by slices checked
// against the command's context and a CPU budget (SearchCPU): see
// budget.go.
//
// The node label and any text from a driver are printed with control
// characters escaped (\x1b, \u009b, ...).
//
// # JSON output (--json: one object and a newline on stdout, stable)
//
// Every object has "node" (string), "command" (the command name) and "ok"
// (bool). Then, on success:
//
//	power-status    "power": "on"|"off"|driver string
//	bootdev         "bootdev": "pxe", "persistent": bool
//	console-log     "log": the scrollback as a string (invalid UTF-8 becomes U+FFFD)
//	sessions        "sessions": [{"id","kind","user","remote","started" (RFC 3339),"writer","own"}]:
//	                the requester's tenancy's sessions; "user" and "remote" only with "own":
//	                true (the requester's own session: the same tenancy, credential and
//	                host); "writer" and "own" omitted if false
//	version         "version": string
//	doctor          "checks": [{"name","ok","result","hint"}] (hint only on a failed step),
//	                also when a step failed (then with "ok": false and "error")
//	help            "help": the usage text
//	wait-for, power-on/power-cycle --wait-for, expect (its last wait):
//	                "match": the matched text, "line": its line, "offset": its first byte
//	                counted from the first byte searched, "time": RFC 3339 arrival
//	                (wait-for --screen: "offset" counts in the screen's text)
//	screen          "screen": {"cols","rows","cursor":{"row","col","visible"},"alt_screen",
//	                "lines":[...],"spans":[{"row","col","len","fg","bg","bold",...}]}
//	                (screen.Snapshot's JSON, as the admin API's GET .../screen)
//	send            "bytes": the count written
//	expect          "steps": the steps done
//	power-on, power-off, power-cycle, power-reset: nothing more
//
// For example {"node":"node-17","command":"power-status","ok":true,"power":"on"}
// and {"node":"node-17","command":"power-on","ok":true}.
//
// # Errors
//
// On failure stderr gets "obmd: " and a one-line message (plus the usage for
// a usage error); with --json, stdout also gets
// {"node":"node-17","command":"power-on","ok":false,"error":"..."}; the
// exit code is the same either way (ExitCode). "command" is "" when the
// command name itself was not understood.
//
// The message is Message(err): a failed BMC call says what the BMC did in
// stable words that never name its address ("power on node-17: the BMC
// refused obmd's credentials", "... the BMC did not answer", "... the BMC
// is unreachable", "... the BMC did not answer within 20s"; see
// sol.TenantText). The error's own text, with the driver's detail, goes to
// obmd's log and the audit record.
package commands

import (
	"context"
	"errors"
	"io"
	"time"

	"github.com/obmd/obmd/sol"
	"github.com/obmd/obmd/sol/screen"
)

// Exit codes, the contract with scripts.
const (
	ExitOK         = 0 // done
	ExitFailed     = 1 // the BMC or the operation failed
	ExitUsage      = 2 // usage error
	ExitNotAllowed = 3 // not allowed
	ExitBusy       = 4 // another power operation (or doctor run) on this node is in flight, or (send) another session writes
	ExitTimedOut   = 5 // wait-for, expect or --wait-for: the text did not come in time
)

// Errors callers branch on (HTTP maps them to status codes).
var (
	ErrBusy = errors.New("another power operation on this node is in flight")
	// ErrTimeout: the BMC did not answer within Config.Timeout. The error
	// returned also wraps the driver's own error (usually
	// context.DeadlineExceeded).
	ErrTimeout = errors.New("BMC did not answer in time")
)

// BusyError is ErrBusy (errors.Is) for a power operation in flight on
// another replica, which it names; its text is safe to show.
type BusyError struct {
	Replica string
}

// Error is ErrBusy's text and the replica.
func (e *BusyError) Error() string { return ErrBusy.Error() + " (on replica " + e.Replica + ")" }

// Is makes errors.Is(err, ErrBusy) hold.
func (e *BusyError) Is(target error) bool { return target == ErrBusy }

// ErrDoctorBusy is ErrBusy (errors.Is) for a doctor run on a node that
// this replica is already diagnosing: one run per node at a time, so that
// many of them never hold many of the BMC's few sessions.
var ErrDoctorBusy error = doctorBusy{}

type doctorBusy struct{}

func (doctorBusy) Error() string        { return "another doctor run on this node is in flight" }
func (doctorBusy) Is(target error) bool { return target == ErrBusy }

// UsageError is a parse or argument error; its text is safe to show (no raw
// control characters, one line).
type UsageError struct {
	Msg string
	// Command is the command whose synopsis helps the user ("" when the
	// command itself is unknown or the line could not be split: then the
	// whole usage helps). WriteError prints it after Msg.
	Command Name
}

func (e *UsageError) Error() string { return e.Msg }

// Name is a command's name, as typed ("power-on").
type Name string

// Command names.
const (
	CmdPowerStatus Name = "power-status"
	CmdPowerOn     Name = "power-on"
	CmdPowerOff    Name = "power-off"
	CmdPowerCycle  Name = "power-cycle"
	CmdPowerReset  Name = "power-reset"
	CmdBootdev     Name = "bootdev"
	CmdConsole     Name = "console"
	CmdConsoleLog  Name = "console-log"
	CmdSessions    Name = "sessions"
	CmdDoctor      Name = "doctor"
	CmdHelp        Name = "help"
	CmdVersion     Name = "version"
	CmdWaitFor     Name = "wait-for"
	CmdSend        Name = "send"
	CmdExpect      Name = "expect"
	CmdScreen      Name = "screen"
)

// Command is one parsed command. Only the fields of its Name are meaningful.
type Command struct {
	Name       Name
	JSON       bool   // --json
	Soft       bool   // power-off --soft
	Force      bool   // power-cycle --force (hard reset)
	Device     string // bootdev DEVICE
	Persistent bool   // bootdev --persistent
	Lines      int    // console-log --lines N (0 = all)
	// console-log --since: SinceAgo back from now, or SinceAt (zero: all).
	SinceAgo   time.Duration
	SinceAt    time.Time
	Timestamps bool // console-log --timestamps (text with times and markers)
	Follow     bool // console-log --follow
	Cast       bool // console-log --cast (asciicast v2)
	ReadOnly   bool // console --read-only
	IgnoreEOF  bool // console --ignore-eof: a console without a PTY outlives the end of its input
	// wait-for REGEX, power-on/power-cycle --wait-for REGEX: the pattern,
	// its words joined by single spaces (checked by Parse: RE2, at most
	// MaxPattern bytes and MaxProgram instructions).
	Pattern string
	Timeout time.Duration // wait-for, expect, --wait-for: --timeout (0: DefaultWait)
	// wait-for --since: SinceMode says where the search starts (SinceNow
	// when empty); SinceAgo/SinceAt as for console-log.
	SinceMode string
	Args      []string // send TEXT..., expect SCRIPT... (joined by single spaces)
	Stdin     bool     // send --stdin, expect --stdin
	Hex       bool     // send --hex
	Topic     Name     // help COMMAND, or COMMAND --help: the command to describe ("" = all)
	// Screen: wait-for --screen matches the node's screen (its rows joined
	// by newlines), not its output's bytes.
	Screen bool
	ANSI   bool // screen --ansi: a redraw for a terminal
}

// Request says who runs a command where; it feeds audit records and logs,
// and tells which sessions `sessions` shows (those of its tenancy, Epoch)
// and which in full (the requester's own: the same User from the same host
// as Source, in the same tenancy).
type Request struct {
	Node    string
	Actor   string // "ssh:password", "ssh:publickey", "http:token", ...
	User    string // the credential, as sessions list it: "token", "key SHA256:..." or "cert hil:alice serial 42"
	Source  string // remote address
	Session string // session id, for logs
	// Epoch is the node's access epoch the session was admitted at: the
	// tenancy console-log reads and operations are marked in (0: none;
	// console-log then prints the live scrollback).
	Epoch int64
	// OpenConsole attaches to the node's console for wait-for, send,
	// expect and --wait-for (nil: those fail).
	OpenConsole func(ctx context.Context, o ConsoleOptions) (Console, error)
	// Stdin is the client's input, for send --stdin and expect --stdin.
	Stdin io.Reader
}

// Result is the typed outcome of a command, rendered by Render. Its JSON form
// is its MarshalJSON method's (a fixed set of fields per command; see the
// package documentation), not the field tags.
type Result struct {
	Node     string           `json:"node"`
	Command  Name             `json:"command"`
	Power    string           `json:"power,omitempty"`   // power-status (and after power ops where known)
	Bootdev  string           `json:"bootdev,omitempty"` // bootdev
	Persist  bool             `json:"persistent,omitempty"`
	Took     time.Duration    `json:"-"`
	Text     string           `json:"-"` // the text rendering: a line for power ops; the body for help, version, console-log, sessions
	Sessions []SessionInfo    `json:"sessions,omitempty"`
	Version  string           `json:"version,omitempty"`
	Match    *Match           `json:"-"` // wait-for, --wait-for, expect (its last wait)
	Screen   *screen.Snapshot `json:"-"` // screen
	Bytes    int              `json:"-"` // send
	Steps    int              `json:"-"` // expect: the steps done
	// Checks is a doctor run's diagnosis, in order; also set when its last
	// step failed (Do then returns a *CheckError as well).
	Checks []sol.Check `json:"-"`
	// Error is the failure, safe to show; set only on results that render an
	// error (WriteError). Empty means the command succeeded ("ok": true).
	Error string `json:"error,omitempty"`
}

// SessionInfo is one live session, as `sessions` lists it. User and Remote
// are shown only on the requester's own sessions (Own); of anyone else's,
// a tenant learns the kind, the start and whether it writes.
type SessionInfo struct {
	ID      string    `json:"id"`
	Kind    string    `json:"kind"`
	User    string    `json:"user,omitempty"`
	Remote  string    `json:"remote,omitempty"`
	Started time.Time `json:"started"`
	Writer  bool      `json:"writer,omitempty"`
	Own     bool      `json:"own,omitempty"`
	// Epoch is the node's access epoch the session was admitted at: its
	// tenancy. A tenant is shown the sessions of its own tenancy only.
	Epoch int64 `json:"-"`
}

package commands

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/obmd/obmd/sol"
)

// BMC is what the runner calls on a node's BMC: the power and boot-device
// subset of sol.BMC. Every method must honour ctx; the runner's timeout
// relies on it.
type BMC interface {
	PowerStatus(ctx context.Context) (string, error)
	PowerOn(ctx context.Context) error
	PowerOff(ctx context.Context, soft bool) error
	PowerCycle(ctx context.Context) error
	PowerReset(ctx context.Context) error
	SetBootDevice(ctx context.Context, dev string, persistent bool) error
}

// Resolver finds the BMC of a node by label. (sol.Resolver returns a
// sol.BMC, which satisfies BMC; the wiring adapts one to the other.)
type Resolver interface {
	Resolve(ctx context.Context, label string) (BMC, error)
}

// EpochResolver is a Resolver that can also find a node's BMC as it was
// at an access epoch (nodes.Resolver keeps it, rather than read the
// database for every command): the runner asks it for the epoch the
// request's session was admitted at (Request.Epoch), which names one
// version of the node's BMC info, since every change of it moves the
// epoch and cuts the sessions of the one before.
type EpochResolver interface {
	ResolveAt(ctx context.Context, label string, epoch int64) (BMC, error)
}

// Consoles gives a node's console scrollback (sol.Manager satisfies it).
type Consoles interface {
	Scrollback(label string) []byte
}

// Sessions lists the live sessions of a node.
type Sessions interface {
	Sessions(node string) []SessionInfo
}

// Auditor records audit events. The runner calls it with a context that
// outlives a cut session (its cancellation removed) and has no deadline of
// its own: the Auditor bounds its own wait and must not block for long
// (obmd's, the database's group commit, returns within two commits of 10 s
// each whatever the context).
type Auditor interface {
	Audit(ctx context.Context, e Event)
}

// Event is one audited action. Detail is short text safe to store and show
// (control characters escaped, at most 256 bytes); never a secret. Detail
// is "took 1.2s" on success ("on; took ..." for power-status, "pxe
// (persistent); took ..." for bootdev) and the error text on failure.
type Event struct {
	Node   string
	Actor  string
	Action string // ActionPowerOn, ...
	Source string
	Result string // ResultOK, ResultError, ResultBusy
	Detail string
}

// Audit actions and results.
const (
	ActionPowerStatus   = "power.status"
	ActionPowerOn       = "power.on"
	ActionPowerOff      = "power.off"
	ActionPowerSoftOff  = "power.soft-off"
	ActionPowerCycle    = "power.cycle"
	ActionPowerReset    = "power.reset" // power-reset and power-cycle --force
	ActionBootdev       = "bootdev"
	ActionConsoleSend   = "console.send"   // detail: the byte count, never the bytes
	ActionConsoleWait   = "console.wait"   // wait-for, --wait-for
	ActionConsoleExpect = "console.expect" // an expect script
	ActionConsoleBreak  = "console.break"  // an expect script's break

	ResultOK      = "ok"
	ResultError   = "error"
	ResultBusy    = "busy"
	ResultTimeout = "timeout"
	// ResultRefused: the driver refused the request before reaching the
	// BMC (an unknown boot device, an operation it does not support). The
	// audit counts such refusals rather than writing each (db.Aggregated).
	ResultRefused = "refused"
)

// maxDetail bounds Event.Detail.
const maxDetail = 256

// DefaultTimeout bounds one BMC call when Config.Timeout is zero.
const DefaultTimeout = 20 * time.Second

// Config configures a Runner.
type Config struct {
	// Timeout bounds each BMC call (and the lookup of the node's BMC) on top
	// of the caller's context. Zero means DefaultTimeout.
	Timeout time.Duration
	// Version is what `version` prints. Empty means "unknown".
	Version string
	// Now is the clock (durations, session ages). Nil means time.Now.
	Now func() time.Time
	// Observe, if set, is told of every power and boot-device operation
	// (the audit action, its result and how long it took), for metrics.
	Observe func(action, result string, took time.Duration)
	// History, if set, is what console-log reads (the tenancy of the
	// request's Epoch) and where operations are marked; nil: console-log
	// prints the live scrollback.
	History History
}

// Runner runs commands for every node. It is safe for concurrent use.
type Runner struct {
	cfg      Config
	bmcs     Resolver
	consoles Consoles
	sessions Sessions
	audit    Auditor
	log      logrus.FieldLogger

	// mu guards busy, the nodes with a power operation in flight (and, as
	// "doctor\x00" + label, those with a doctor run). It is held only to
	// test and set an entry, never across BMC I/O.
	mu   sync.Mutex
	busy map[string]struct{}
	// searching holds a token per automation search slice running now
	// (searchSlots: a daemon-wide cap).
	searching chan struct{}
}

// NewRunner checks its arguments and returns a Runner. Every dependency is
// required.
func NewRunner(cfg Config, bmcs Resolver, consoles Consoles, sessions Sessions, audit Auditor, log logrus.FieldLogger) (*Runner, error) {
	switch {
	case cfg.Timeout < 0:
		return nil, fmt.Errorf("new command runner: negative timeout %s", cfg.Timeout)
	case bmcs == nil:
		return nil, errors.New("new command runner: nil resolver")
	case consoles == nil:
		return nil, errors.New("new command runner: nil consoles")
	case sessions == nil:
		return nil, errors.New("new command runner: nil sessions")
	case audit == nil:
		return nil, errors.New("new command runner: nil auditor")
	case log == nil:
		return nil, errors.New("new command runner: nil logger")
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.Version == "" {
		cfg.Version = "unknown"
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Runner{cfg: cfg, bmcs: bmcs, consoles: consoles, sessions: sessions, audit: audit, log: log, busy: map[string]struct{}{},
		searching: searchSlots()}, nil
}

// Do runs cmd for req.Node and returns its result, with Text set to the
// human rendering. Errors wrap their cause (errors.Is works for ErrBusy,
// ErrTimeout, sol.ErrBadBootDevice, context.Canceled and the driver's own
// errors); ExitCode maps them.
//
// Power and boot-device operations on one node are serialised: while one is
// in flight another returns ErrBusy at once (power-status is a read and is
// never busy). Each BMC call is bounded by Config.Timeout and by ctx, so
// cutting a session cancels its call. Every power and boot-device action,
// power-status included, is audited once (result ok, error or busy).
//
// console is interactive and belongs to the transport: Do returns a
// *UsageError for it.
func (r *Runner) Do(ctx context.Context, req Request, cmd Command) (Result, error) {
	res := Result{Node: req.Node, Command: cmd.Name}
	switch cmd.Name {
	case CmdHelp:
		res.Text = CommandUsage(cmd.Topic)
		return res, nil
	case CmdVersion:
		res.Version = r.cfg.Version
		res.Text = clean(r.cfg.Version, 0) + "\n"
		return res, nil
	case CmdConsole:
		return res, usagef(CmdConsole, "console is interactive: connect without a command")
	}
	if req.Node == "" {
		return res, fmt.Errorf("run %s: request names no node", cmd.Name)
	}
	switch cmd.Name {
	case CmdSessions:
		res.Sessions = tenantView(r.sessions.Sessions(req.Node), req)
		res.Text = sessionTable(res.Sessions, r.cfg.Now())
		return res, nil
	case CmdConsoleLog:
		if cmd.Lines < 0 || cmd.Lines > MaxLines {
			return res, usagef(CmdConsoleLog, "--lines wants a number from 1 to %d", MaxLines)
		}
		if r.cfg.History != nil && req.Epoch > 0 {
			text, err := r.historyLog(ctx, req, cmd)
			res.Text = text
			return res, err
		}
		res.Text = string(lastLines(r.consoles.Scrollback(req.Node), cmd.Lines))
		return res, nil
	case CmdWaitFor:
		return r.waitFor(ctx, req, cmd)
	case CmdSend:
		return r.send(ctx, req, cmd)
	case CmdExpect:
		return r.expect(ctx, req, cmd)
	case CmdScreen:
		return r.screen(ctx, req, cmd)
	case CmdPowerOn, CmdPowerCycle:
		if cmd.Pattern != "" {
			return r.powerWait(ctx, req, cmd)
		}
	case CmdBootdev:
		if cmd.Device == "" {
			return res, usagef(CmdBootdev, "bootdev needs a device: pxe, disk, bios, cdrom or none")
		}
	case CmdDoctor:
		return r.doctor(ctx, req)
	}
	op, ok := opFor(cmd)
	if !ok {
		return res, &UsageError{Msg: fmt.Sprintf(`unknown command %s; try "help"`, quote(string(cmd.Name)))}
	}
	return r.power(ctx, req, cmd, op)
}

// powerOp is one BMC operation as the runner audits and reports it.
type powerOp struct {
	action    string // audit action
	verb      string // names the operation in errors: "power on"
	exclusive bool   // takes the node's busy slot
	run       func(ctx context.Context, b BMC) (power string, err error)
	done      string // text after "node: " on success ("" for power-status)
}

func opFor(cmd Command) (powerOp, bool) {
	switch cmd.Name {
	case CmdPowerStatus:
		return powerOp{ActionPowerStatus, "power status of", false, func(ctx context.Context, b BMC) (string, error) {
			return b.PowerStatus(ctx)
		}, ""}, true
	case CmdPowerOn:
		return powerOp{ActionPowerOn, "power on", true, func(ctx context.Context, b BMC) (string, error) {
			return "", b.PowerOn(ctx)
		}, "powered on"}, true
	case CmdPowerOff:
		if cmd.Soft {
			return powerOp{ActionPowerSoftOff, "soft power off", true, func(ctx context.Context, b BMC) (string, error) {
				return "", b.PowerOff(ctx, true)
			}, "soft power-off requested"}, true
		}
		return powerOp{ActionPowerOff, "power off", true, func(ctx context.Context, b BMC) (string, error) {
			return "", b.PowerOff(ctx, false)
		}, "powered off"}, true
	case CmdPowerCycle:
		if !cmd.Force {
			return powerOp{ActionPowerCycle, "power cycle", true, func(ctx context.Context, b BMC) (string, error) {
				return "", b.PowerCycle(ctx)
			}, "power cycled"}, true
		}
		fallthrough
	case CmdPowerReset:
		return powerOp{ActionPowerReset, "reset", true, func(ctx context.Context, b BMC) (string, error) {
			return "", b.PowerReset(ctx)
		}, "reset"}, true
	case CmdBootdev:
		dev, persistent := cmd.Device, cmd.Persistent
		done := "next boot from " + clean(dev, 0)
		if persistent {
			done += " (persistent)"
		}
		return powerOp{ActionBootdev, "set boot device of", true, func(ctx context.Context, b BMC) (string, error) {
			return "", b.SetBootDevice(ctx, dev, persistent)
		}, done}, true
	}
	return powerOp{}, false
}

func (r *Runner) power(ctx context.Context, req Request, cmd Command, op powerOp) (Result, error) {
	res := Result{Node: req.Node, Command: cmd.Name}
	if cmd.Name == CmdBootdev {
		res.Bootdev, res.Persist = cmd.Device, cmd.Persistent
	}
	node := clean(req.Node, 0)
	if op.exclusive {
		if !r.acquire(req.Node) {
			err := &opError{verb: op.verb, node: node, err: ErrBusy}
			r.record(ctx, req, op.action, ResultBusy, ErrBusy.Error(), err, 0)
			return res, err
		}
		defer r.release(req.Node)
	}
	start := r.cfg.Now()
	power, err := r.call(ctx, req, op)
	res.Took = r.cfg.Now().Sub(start)
	took := "took " + res.Took.Round(time.Millisecond).String()
	if err != nil {
		result := ResultError
		switch {
		case errors.Is(err, ErrBusy): // held by another replica
			result = ResultBusy
		case errors.Is(err, sol.ErrBadBootDevice), errors.Is(err, sol.ErrNotSupported):
			result = ResultRefused
		}
		r.record(ctx, req, op.action, result, err.Error()+"; "+took, err, res.Took)
		return res, &opError{verb: op.verb, node: node, err: err}
	}
	res.Power = power
	detail := took
	switch cmd.Name {
	case CmdPowerStatus:
		res.Text = node + ": power " + clean(power, 0) + "\n"
		detail = power + "; " + took
	case CmdBootdev:
		res.Text = node + ": " + op.done + "\n"
		detail = strings.TrimPrefix(op.done, "next boot from ") + "; " + took
	default:
		res.Text = node + ": " + op.done + "\n"
	}
	r.record(ctx, req, op.action, ResultOK, detail, nil, res.Took)
	r.markHistory(req, cmd)
	return res, nil
}

// resolve finds the BMC of req's node, at req's epoch if the resolver
// can (so that a session of an ended tenancy is refused: EpochResolver).
func (r *Runner) resolve(ctx context.Context, req Request) (BMC, error) {
	var (
		bmc BMC
		err error
	)
	if at, ok := r.bmcs.(EpochResolver); ok && req.Epoch > 0 {
		bmc, err = at.ResolveAt(ctx, req.Node, req.Epoch)
	} else {
		bmc, err = r.bmcs.Resolve(ctx, req.Node)
	}
	if err != nil {
		return nil, fmt.Errorf("find BMC: %w", err)
	}
	return bmc, nil
}

// call resolves the BMC of req's node (at req's epoch, if the resolver
// can) and runs op on it, each step bounded by the timeout and by ctx.
func (r *Runner) call(ctx context.Context, req Request, op powerOp) (string, error) {
	bmc, err := bounded(ctx, r.cfg.Timeout, func(ctx context.Context) (BMC, error) { return r.resolve(ctx, req) })
	if err != nil {
		return "", err
	}
	return bounded(ctx, r.cfg.Timeout, func(ctx context.Context) (string, error) {
		return op.run(ctx, bmc)
	})
}

// bounded runs f with ctx limited to d. When that limit (not ctx's own
// deadline or cancellation) ended a failed call, the error says so and
// wraps ErrTimeout as well as f's error.
//
// The limit is judged by the clock as well as by tctx: a driver that gives
// up at the deadline on its own timer (a socket read deadline taken from
// ctx) may return a moment before tctx's timer marks it done.
func bounded[T any](ctx context.Context, d time.Duration, f func(context.Context) (T, error)) (T, error) {
	limit := time.Now().Add(d)
	tctx, cancel := context.WithDeadline(ctx, limit)
	defer cancel()
	v, err := f(tctx)
	if err == nil || ctx.Err() != nil {
		return v, err
	}
	if pd, ok := ctx.Deadline(); ok && pd.Before(limit) && !time.Now().Before(pd) {
		return v, err // the caller's own, earlier deadline ended it
	}
	if tctx.Err() != nil || !time.Now().Before(limit) {
		err = &timeoutError{after: d, err: err}
	}
	return v, err
}

type timeoutError struct {
	after time.Duration
	err   error
}

func (e *timeoutError) Error() string {
	return fmt.Sprintf("the BMC did not answer within %s", e.after)
}
func (e *timeoutError) Unwrap() []error { return []error{ErrTimeout, e.err} }

func (r *Runner) acquire(node string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.busy[node]; ok {
		return false
	}
	r.busy[node] = struct{}{}
	return true
}

func (r *Runner) release(node string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.busy, node)
}

// record audits one action and logs it at Info, as an audit line (the
// caller still returns the error: this is the record, not the handling).
// The audit outlives a cancelled ctx (a cut session's last action is still
// recorded); the Auditor bounds how long it takes (see Auditor).
func (r *Runner) record(ctx context.Context, req Request, action, result, detail string, err error, took time.Duration) {
	if r.cfg.Observe != nil {
		r.cfg.Observe(action, result, took)
	}
	r.note(ctx, req, action, result, detail, err, "power operation")
}

// note audits one action and logs it at Info as msg (record, without the
// power metrics).
func (r *Runner) note(ctx context.Context, req Request, action, result, detail string, err error, msg string) {
	r.audit.Audit(context.WithoutCancel(ctx), Event{
		Node:   req.Node,
		Actor:  req.Actor,
		Action: action,
		Source: req.Source,
		Result: result,
		Detail: clean(detail, maxDetail),
	})
	l := r.log.WithFields(logrus.Fields{
		"node":    req.Node,
		"actor":   req.Actor,
		"remote":  req.Source,
		"session": req.Session,
		"action":  action,
		"result":  result,
	})
	if err != nil {
		l = l.WithError(err)
	}
	l.Info(msg)
}

// lastLines returns the last n lines of b (all of b when n <= 0). A final
// newline ends the last line rather than starting an empty one.
func lastLines(b []byte, n int) []byte {
	if n <= 0 {
		return b
	}
	end := len(b)
	if end > 0 && b[end-1] == '\n' {
		end--
	}
	count := 0
	for i := end - 1; i >= 0; i-- {
		if b[i] == '\n' {
			count++
			if count == n {
				return b[i+1:]
			}
		}
	}
	return b
}

// kindConsole is the session kind that has a writer (bastion/access/sessions).
const kindConsole = "console"

// sessionTable renders sessions, oldest first, as an aligned table.
func sessionTable(list []SessionInfo, now time.Time) string {
	if len(list) == 0 {
		return "no sessions\n"
	}
	sorted := append([]SessionInfo(nil), list...)
	sort.SliceStable(sorted, func(i, j int) bool { return sorted[i].Started.Before(sorted[j].Started) })
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tKIND\tUSER\tREMOTE\tSTARTED\tWRITER")
	for _, s := range sorted {
		age := now.Sub(s.Started).Round(time.Second)
		if age < 0 {
			age = 0
		}
		writer := "-"
		switch {
		case s.Writer:
			writer = "yes"
		case s.Kind == kindConsole:
			writer = "no"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s (%s ago)\t%s\n",
			cell(s.ID), cell(s.Kind), cell(s.User), cell(s.Remote),
			s.Started.UTC().Format(time.RFC3339), age, writer)
	}
	tw.Flush() // writes to a strings.Builder cannot fail
	return b.String()
}

// cell is a table cell: clean, bounded, never empty (tabwriter would
// collapse the column).
func cell(s string) string {
	s = clean(s, 64)
	if s == "" {
		return "-"
	}
	return s
}

// ExitCode maps an error from Parse, Split or Do to an exit code: nil is
// ExitOK; a *UsageError or sol.ErrBadBootDevice is ExitUsage; a
// *NotAllowedError (the transport's refusal of a command the credential
// does not permit) is ExitNotAllowed; ErrBusy is ExitBusy; anything else
// is ExitFailed.
func ExitCode(err error) int {
	var ue *UsageError
	var na *NotAllowedError
	switch {
	case err == nil:
		return ExitOK
	case errors.As(err, &ue), errors.Is(err, sol.ErrBadBootDevice):
		return ExitUsage
	case errors.As(err, &na):
		return ExitNotAllowed
	case errors.Is(err, ErrBusy), errors.Is(err, sol.ErrWriterBusy):
		return ExitBusy
	case errors.Is(err, ErrTimedOut):
		return ExitTimedOut
	default:
		return ExitFailed
	}
}

package commands

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/obmd/obmd/sol"
	"github.com/obmd/obmd/sol/history"
	"github.com/obmd/obmd/sol/screen"
)

// Console is a node's console as wait-for, send, expect and --wait-for use
// it: the transport's read-only viewer of it, attached for one command.
type Console interface {
	// Next blocks for the next console output after the previous one (the
	// first: the first since the console was opened), with the time it
	// arrived, until ctx ends or the console does (its error: a cut).
	Next(ctx context.Context) ([]byte, time.Time, error)
	// Send writes p, taking the write role for the write and handing it
	// back (sol.Viewer.AsWriter): sol.ErrWriterBusy while another session
	// writes, unless force.
	Send(ctx context.Context, p []byte, force bool) error
	// Break sends a serial break, taking the write role the same way.
	Break(ctx context.Context, force bool) error
	// Ready waits until the console is established (the link to the BMC
	// is up), so that what the node prints next is seen.
	Ready(ctx context.Context) error
	// Screen is the node's screen at the point of its output reached
	// now (sol.Viewer.Screen), waiting for the link to come up.
	Screen(ctx context.Context) (screen.Snapshot, error)
	// ScreenText is Screen's Text, without a copy of the whole screen
	// (sol.Viewer.ScreenText): what a wait on the screen looks at.
	ScreenText(ctx context.Context) (string, error)
	// Close detaches.
	Close()
}

// ConsoleOptions says how a command opens the console.
type ConsoleOptions struct {
	// Replay: the console's first output is the replay an attach would
	// show now (the last scrollback bytes of the session's tenancy's
	// history, the same on every replica), then the live output, with
	// nothing between them missed or repeated (wait-for --since attach).
	Replay bool
}

// ErrTimedOut: the text waited for did not come in time (exit 5).
var ErrTimedOut = errors.New("timed out")

// Match is where a wait found its text.
type Match struct {
	Text   string    // the matched bytes
	Line   string    // the line holding the match's start (without the newline)
	Offset int64     // the match's first byte, counted from the first byte searched
	At     time.Time // arrival of the output that completed the match
}

// window bounds the output kept for a match's line; older output is
// forgotten. maxSpan bounds the bytes a match may span: a search after a
// miss starts maxSpan before the new output (at a line start), so a
// console printing fast costs each waiting command a bounded scan per
// chunk, not the whole window.
const (
	window  = 64 << 10
	maxSpan = 8 << 10
)

// matcher searches console output for one pattern after another. The
// first byte searched counts as a line start; after that, `^` matches
// only where a line starts, whatever chunk it started in. Its searches
// are bounded and interruptible (meter).
type matcher struct {
	buf     []byte
	base    int64 // offset of buf[0]
	at      time.Time
	scanned int // len(buf) at the last miss: a match cannot end before it
	// prev is the byte before buf[0] if hasPrev (output a match consumed,
	// or the window dropped): whether buf[0] starts a line.
	prev    byte
	hasPrev bool
	scratch []byte // prev and buf, for a search from buf[0] mid-line
	meter   meter  // the command's search budget (zero: none)
}

// feed adds output that arrived at at.
func (m *matcher) feed(p []byte, at time.Time) {
	m.buf = append(m.buf, p...)
	if over := len(m.buf) - window; over > 0 {
		for i := 0; i < utf8.UTFMax-1 && over < len(m.buf) && !utf8.RuneStart(m.buf[over]); i++ {
			over++ // forget a character whole: buf[0] then starts one
		}
		m.prev, m.hasPrev = m.buf[over-1], true
		m.buf = append(m.buf[:0], m.buf[over:]...)
		m.base += int64(over)
		m.scanned = max(m.scanned-over, 0)
	}
	m.at = at
}

// from is where the next search starts: maxSpan before the output not
// searched yet, at a line start after it if there is one, at a character.
func (m *matcher) from(n int) int {
	if m.scanned <= maxSpan {
		return 0
	}
	from := m.scanned - maxSpan
	if nl := bytes.IndexByte(m.buf[from:m.scanned], '\n'); nl >= 0 {
		from += nl + 1
	}
	for from < n && !utf8.RuneStart(m.buf[from]) {
		from++ // the context byte before it then decodes alone
	}
	return from
}

// due reports whether a search of p should run now rather than wait for
// more output: it fits in one slice, or the output not searched yet is at
// least an amortize-th of what it would search (a console printing tiny
// chunks then costs at most amortize+1 searches of each byte).
func (m *matcher) due(p *pattern) bool {
	n := len(m.buf)
	span := n - m.from(n)
	return span*max(p.size, p.midSize) <= sliceSteps || (n-m.scanned)*amortize >= span
}

// find looks for p in what was fed since the last match; a match
// consumes the output up to its end. It fails only with ctx's cause,
// when ctx ended first (the matcher is then as before the search).
func (m *matcher) find(ctx context.Context, p *pattern) (Match, bool, error) {
	n := m.complete()
	from := m.from(n)
	loc, err := m.search(ctx, p, m.buf[:n], from)
	if err != nil {
		return Match{}, false, err
	}
	if loc == nil {
		m.scanned = n
		return Match{}, false, nil
	}
	start, end := from+loc[0], from+loc[1]
	ls := start
	for ls > 0 && m.buf[ls-1] != '\n' {
		ls--
	}
	le := end
	for le < len(m.buf) && m.buf[le] != '\n' && m.buf[le] != '\r' {
		le++
	}
	if le < end {
		le = end
	}
	line := strings.TrimRight(string(m.buf[ls:le]), "\r\n")
	mt := Match{Text: string(m.buf[start:end]), Line: line, Offset: m.base + int64(start), At: m.at}
	if end > 0 {
		m.prev, m.hasPrev = m.buf[end-1], true
	}
	m.base += int64(end)
	m.buf = append(m.buf[:0], m.buf[end:]...)
	m.scanned = 0
	return mt, true, nil
}

// complete is how much of buf a search sees: all but a UTF-8 sequence at
// its end that the next output may complete (a character split between
// chunks, as SOL packets split them). Searched now, its bytes would each
// be an invalid byte, U+FFFD to RE2: `.`, `\x{FFFD}` or `[^a]` would match
// a piece of a character, where the same output in one chunk holds none,
// and a match's offset and text would depend on how the output was cut.
func (m *matcher) complete() int {
	n := len(m.buf)
	for i := n - 1; i >= max(n-utf8.UTFMax, 0); i-- {
		if utf8.RuneStart(m.buf[i]) {
			if !utf8.FullRune(m.buf[i:]) {
				return i
			}
			break
		}
	}
	return n
}

// search finds p in buf[from:] (buf is m.buf or a prefix): with the byte
// before it as context when that is no line start, so that `^` does not
// match there. buf[from] starts a character (or is an invalid byte), so
// the context byte decodes alone.
func (m *matcher) search(ctx context.Context, p *pattern, buf []byte, from int) ([]int, error) {
	switch {
	case from > 0 && buf[from-1] != '\n':
		return p.findAfter(ctx, &m.meter, buf[from-1:])
	case from == 0 && m.hasPrev && m.prev != '\n':
		m.scratch = append(append(m.scratch[:0], m.prev), buf...)
		return p.findAfter(ctx, &m.meter, m.scratch)
	}
	return p.find(ctx, &m.meter, buf[from:])
}

// scan feeds p, arrived at at, and looks for re after every maxSpan bytes
// of it (a chunk larger than the window is searched whole); what follows
// a match is kept for the next search.
func (m *matcher) scan(ctx context.Context, p []byte, at time.Time, re *pattern) (Match, bool, error) {
	for len(p) > 0 {
		k := min(len(p), maxSpan)
		m.feed(p[:k], at)
		p = p[k:]
		mt, ok, err := m.find(ctx, re)
		if ok {
			m.feed(p, at)
		}
		if ok || err != nil {
			return mt, ok, err
		}
	}
	return Match{}, false, nil
}

// wait reads con until re matches, timeout passes (ErrTimedOut) or ctx
// ends (its cause). A search that costs more than a slice waits for more
// output (matcher.due), at most searchDelay.
func (m *matcher) wait(ctx context.Context, con Console, re *pattern, timeout time.Duration) (Match, error) {
	tctx, cancel := context.WithTimeoutCause(ctx, timeout, &noMatchError{after: timeout})
	defer cancel()
	mt, ok, err := m.find(tctx, re)
	var pending time.Time // when the oldest output not searched yet came (zero: none)
	for !ok && err == nil {
		nctx, ncancel := tctx, context.CancelFunc(func() {})
		if !pending.IsZero() {
			nctx, ncancel = context.WithDeadline(tctx, pending.Add(searchDelay))
		}
		p, at, nerr := con.Next(nctx)
		ncancel()
		switch {
		case nerr == nil && len(p) >= maxSpan: // searched every maxSpan bytes
			pending = time.Time{}
			mt, ok, err = m.scan(tctx, p, at, re)
		case nerr == nil:
			m.feed(p, at)
			if pending.IsZero() {
				pending = time.Now()
			}
			if !m.due(re) && time.Since(pending) < searchDelay {
				continue
			}
			pending = time.Time{}
			mt, ok, err = m.find(tctx, re)
		case tctx.Err() == nil && nctx.Err() != nil: // searchDelay passed
			pending = time.Time{}
			mt, ok, err = m.find(tctx, re)
		default:
			err = nerr
		}
	}
	if err != nil && tctx.Err() != nil {
		err = context.Cause(tctx) // the cut's reason, or the timeout
	}
	return mt, err
}

// openConsole opens req's console with o.
func openConsole(ctx context.Context, req Request, o ConsoleOptions) (Console, error) {
	if req.OpenConsole == nil {
		return nil, errors.New("this transport has no console")
	}
	con, err := req.OpenConsole(ctx, o)
	if err != nil {
		return nil, fmt.Errorf("open the console: %w", err)
	}
	return con, nil
}

// watching is a console opened for one command, with its matcher; the
// caller closes con.
type watching struct {
	con   Console
	m     matcher
	re    *pattern // cmd.Pattern (watchFor)
	start time.Time
}

// watch opens req's console for a command.
func (r *Runner) watch(ctx context.Context, req Request, o ConsoleOptions) (*watching, error) {
	con, err := openConsole(ctx, req, o)
	if err != nil {
		return nil, err
	}
	w := &watching{con: con, start: r.cfg.Now()}
	w.m.meter = r.newMeter()
	return w, nil
}

// watchFor is watch for a command that waits for cmd.Pattern.
func (r *Runner) watchFor(ctx context.Context, req Request, cmd Command) (*watching, error) {
	re, err := compilePattern(cmd.Name, cmd.Pattern)
	if err != nil {
		return nil, err
	}
	w, err := r.watch(ctx, req, ConsoleOptions{Replay: cmd.SinceMode == SinceAttach})
	if err != nil {
		return nil, err
	}
	w.re = re
	return w, nil
}

// waitFor is wait-for: the stored output --since asks for, then the live
// output, until the pattern matches.
func (r *Runner) waitFor(ctx context.Context, req Request, cmd Command) (Result, error) {
	res := Result{Node: req.Node, Command: cmd.Name}
	w, err := r.watchFor(ctx, req, cmd)
	if err != nil {
		return res, err
	}
	defer w.con.Close()
	// The timeout covers the search of the stored output too.
	timeout := waitTimeout(cmd.Timeout)
	tctx, cancel := context.WithTimeoutCause(ctx, timeout, &noMatchError{after: timeout})
	defer cancel()
	var mt Match
	found := false
	if !cmd.Screen {
		mt, found, err = r.searchStored(tctx, req, cmd, w)
	}
	switch {
	case err != nil, found:
	case cmd.Screen:
		mt, err = w.m.waitScreen(tctx, w.con, w.re, timeout)
	default:
		mt, err = w.m.wait(tctx, w.con, w.re, timeout)
	}
	if err != nil && tctx.Err() != nil {
		err = context.Cause(tctx) // the cut's reason, or the timeout
	}
	r.auditWait(ctx, req, ActionConsoleWait, w.start, err)
	if err != nil {
		return res, err
	}
	res.Match = &mt
	res.Text = clean(mt.Line, 0) + "\n"
	return res, nil
}

func waitTimeout(d time.Duration) time.Duration {
	if d <= 0 {
		return DefaultWait
	}
	return d
}

// searchStored searches what wait-for --since asks for before the live
// output: the tenancy's stored history (the live scrollback without one),
// chunk by chunk (a match early in a long history is found). (--since
// attach needs nothing here: the console's replay comes first.)
func (r *Runner) searchStored(ctx context.Context, req Request, cmd Command, w *watching) (Match, bool, error) {
	switch cmd.SinceMode {
	case "", SinceNow, SinceAttach:
		return Match{}, false, nil
	}
	if r.cfg.History == nil || req.Epoch <= 0 {
		return w.m.scan(ctx, r.consoles.Scrollback(req.Node), r.cfg.Now(), w.re)
	}
	q := history.Query{Node: req.Node, Epoch: req.Epoch}
	if cmd.SinceMode == SinceTime {
		q = r.historyQuery(req, cmd)
	}
	chunks, err := r.cfg.History.Read(ctx, q)
	if err != nil {
		return Match{}, false, historyError(err)
	}
	for _, c := range chunks {
		if c.Kind != history.KindOutput {
			continue
		}
		if mt, ok, err := w.m.scan(ctx, c.Data, c.Until(), w.re); ok || err != nil {
			return mt, ok, err
		}
	}
	return Match{}, false, nil
}

// send is send: it writes the bytes as the writer, for the write only.
func (r *Runner) send(ctx context.Context, req Request, cmd Command) (Result, error) {
	res := Result{Node: req.Node, Command: cmd.Name}
	data, err := r.sendInput(req, cmd)
	if err != nil {
		return res, err
	}
	con, err := openConsole(ctx, req, ConsoleOptions{})
	if err != nil {
		return res, err
	}
	defer con.Close()
	if err := r.sendOn(ctx, req, con, data, cmd.Force); err != nil {
		return res, err
	}
	res.Bytes = len(data)
	res.Text = fmt.Sprintf("%s: sent %d bytes\n", clean(req.Node, 0), len(data))
	return res, nil
}

// sendInput is the bytes send writes: its arguments, or stdin.
func (r *Runner) sendInput(req Request, cmd Command) ([]byte, error) {
	if !cmd.Stdin {
		return sendBytes(cmd)
	}
	b, err := readStdin(req, MaxSend)
	if err != nil {
		return nil, err
	}
	if len(b) == 0 {
		return nil, usagef(CmdSend, "send --stdin: nothing on stdin")
	}
	return b, nil
}

// readStdin reads req.Stdin to its end, at most limit bytes.
func readStdin(req Request, limit int) ([]byte, error) {
	if req.Stdin == nil {
		return nil, usagef(CmdSend, "no stdin")
	}
	b, err := io.ReadAll(io.LimitReader(req.Stdin, int64(limit)+1))
	if err != nil {
		return nil, fmt.Errorf("read stdin: %w", err)
	}
	if len(b) > limit {
		return nil, &UsageError{Msg: fmt.Sprintf("stdin holds more than %d bytes", limit)}
	}
	return b, nil
}

// sendOn writes data on con and audits it (the byte count, never the
// bytes).
func (r *Runner) sendOn(ctx context.Context, req Request, con Console, data []byte, force bool) error {
	err := r.ready(ctx, con)
	if err == nil {
		err = con.Send(ctx, data, force)
	}
	result, detail := ResultOK, fmt.Sprintf("%d bytes", len(data))
	switch {
	case errors.Is(err, sol.ErrWriterBusy):
		result = ResultBusy
	case err != nil:
		result, detail = ResultError, detail+": "+err.Error()
	}
	if force {
		detail += " (forced)"
	}
	r.auditConsole(ctx, req, ActionConsoleSend, result, detail)
	if err != nil {
		return fmt.Errorf("send to %s: %w", clean(req.Node, 0), err)
	}
	return nil
}

// ready waits, at most the BMC timeout, for con's link to be up: input
// then goes to an established console, and a power operation's answer is
// seen. Not up in time is no error (the link keeps trying; input waits
// for it, a wait sees what comes once it is up); only ctx's end is.
func (r *Runner) ready(ctx context.Context, con Console) error {
	rctx, cancel := context.WithTimeout(ctx, r.cfg.Timeout)
	defer cancel()
	if err := con.Ready(rctx); err != nil && ctx.Err() != nil {
		return context.Cause(ctx)
	}
	return nil
}

// auditWait audits the end of a wait.
func (r *Runner) auditWait(ctx context.Context, req Request, action string, start time.Time, err error) {
	took := r.cfg.Now().Sub(start).Round(time.Millisecond)
	result, detail := ResultOK, "matched after "+took.String()
	switch {
	case errors.Is(err, ErrTimedOut):
		result, detail = ResultTimeout, "timed out after "+took.String()
	case err != nil:
		result, detail = ResultError, err.Error()
	}
	r.auditConsole(ctx, req, action, result, detail)
}

// auditConsole audits a console action (no metrics: those count BMC calls).
func (r *Runner) auditConsole(ctx context.Context, req Request, action, result, detail string) {
	r.audit.Audit(context.WithoutCancel(ctx), Event{Node: req.Node, Actor: req.Actor, Action: action,
		Source: req.Source, Result: result, Detail: clean(detail, maxDetail)})
}

// powerWait is power-on or power-cycle --wait-for: the console is opened
// before the power operation, so that the wait sees everything printed
// after it.
func (r *Runner) powerWait(ctx context.Context, req Request, cmd Command) (Result, error) {
	res := Result{Node: req.Node, Command: cmd.Name}
	w, err := r.watchFor(ctx, req, cmd)
	if err != nil {
		return res, err
	}
	defer w.con.Close()
	if err := r.ready(ctx, w.con); err != nil {
		return res, err
	}
	op, _ := opFor(cmd)
	res, err = r.power(ctx, req, cmd, op)
	if err != nil {
		return res, err
	}
	w.start = r.cfg.Now()
	mt, err := w.m.wait(ctx, w.con, w.re, waitTimeout(cmd.Timeout))
	r.auditWait(ctx, req, ActionConsoleWait, w.start, err)
	if err != nil {
		return res, fmt.Errorf("%s: %w", clean(req.Node, 0)+": "+op.done+", then", err)
	}
	res.Match = &mt
	res.Text += clean(mt.Line, 0) + "\n"
	return res, nil
}

// noMatchError is a wait that timed out (ErrTimedOut), saying how long
// it waited: what the client is told (it holds no driver text).
type noMatchError struct{ after time.Duration }

func (e *noMatchError) Error() string {
	return fmt.Sprintf("no match within %s: %s", e.after, ErrTimedOut)
}
func (e *noMatchError) Unwrap() error { return ErrTimedOut }

package commands

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
)

// The node's screen (sol/screen): what its console shows, as obmd's
// terminal emulator of it holds it. `screen` prints it; wait-for --screen
// and an expect script's `wait --screen` match it.

// screenPoll is the least time between two looks at the screen while a
// wait --screen waits (searchDelay, as a byte wait's searches): the output
// that comes meanwhile is drawn, and the screen then searched once.
const screenPoll = searchDelay

// errScreenLate: the console did not come up for `screen` in time.
var errScreenLate = errors.New("the console did not come up in time")

// screen is `screen`: the node's screen now, as text (or a redraw), or its
// JSON. It waits for the node's console link at most the BMC timeout.
func (r *Runner) screen(ctx context.Context, req Request, cmd Command) (Result, error) {
	res := Result{Node: req.Node, Command: cmd.Name}
	con, err := openConsole(ctx, req, ConsoleOptions{})
	if err != nil {
		return res, err
	}
	defer con.Close()
	sctx, cancel := context.WithTimeoutCause(ctx, r.cfg.Timeout, fmt.Errorf("%w (%s)", errScreenLate, r.cfg.Timeout))
	defer cancel()
	s, err := con.Screen(sctx)
	if err != nil {
		if sctx.Err() != nil {
			err = context.Cause(sctx) // the cut's reason, or the timeout
		}
		return res, fmt.Errorf("screen of %s: %w", clean(req.Node, 0), err)
	}
	res.Screen = &s
	if cmd.ANSI {
		res.Text = string(s.ANSI())
	} else {
		res.Text = s.Text() + "\n"
	}
	return res, nil
}

// waitScreen waits until con's screen shows re (its rows joined by
// newlines; ^ and $ at each row's ends), timeout passes (ErrTimedOut) or
// ctx ends (its cause). It looks at the screen at once (a screen that
// already shows re matches), then after output comes, at most every
// screenPoll, and searches it only when it changed, with the command's
// search budget (m.meter). A match consumes the output that came before
// it: the script's next byte wait searches what comes after.
func (m *matcher) waitScreen(ctx context.Context, con Console, re *pattern, timeout time.Duration) (Match, error) {
	tctx, cancel := context.WithTimeoutCause(ctx, timeout, &noMatchError{after: timeout})
	defer cancel()
	last, looked := "", false
	for {
		text, err := con.ScreenText(tctx)
		if err != nil {
			return Match{}, waitError(tctx, err)
		}
		at := time.Now()
		if !looked || text != last {
			last, looked = text, true
			loc, err := re.find(tctx, &m.meter, []byte(text))
			if err != nil {
				return Match{}, waitError(tctx, err)
			}
			if loc != nil {
				m.skipAll()
				return screenMatch(text, loc, at), nil
			}
		}
		if err := nextOutput(tctx, con, at.Add(screenPoll)); err != nil {
			return Match{}, waitError(tctx, err)
		}
	}
}

// waitError is a wait's error: ctx's cause once it ended (a cut, the
// timeout), else err.
func waitError(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return context.Cause(ctx)
	}
	return err
}

// nextOutput waits for con's next output, then takes what comes until
// notBefore: the screen draws it meanwhile.
func nextOutput(ctx context.Context, con Console, notBefore time.Time) error {
	if _, _, err := con.Next(ctx); err != nil {
		return err
	}
	for time.Now().Before(notBefore) {
		nctx, cancel := context.WithDeadline(ctx, notBefore)
		_, _, err := con.Next(nctx)
		cancel()
		switch {
		case err == nil:
		case ctx.Err() == nil && nctx.Err() != nil:
			return nil
		default:
			return err
		}
	}
	return nil
}

// screenMatch is the match at loc in a screen's text, seen at at: its
// line is the row holding its start.
func screenMatch(text string, loc []int, at time.Time) Match {
	start, end := loc[0], loc[1]
	ls := strings.LastIndexByte(text[:start], '\n') + 1
	le := strings.IndexByte(text[start:], '\n')
	if le < 0 {
		le = len(text)
	} else {
		le += start
	}
	return Match{Text: text[start:end], Line: text[ls:le], Offset: int64(start), At: at}
}

// skipAll consumes the output fed so far, as a match at its end does.
func (m *matcher) skipAll() {
	if n := len(m.buf); n > 0 {
		m.prev, m.hasPrev = m.buf[n-1], true
		m.base += int64(n)
		m.buf = m.buf[:0]
	}
	m.scanned = 0
}

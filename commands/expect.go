package commands

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// StepError is the first step of an expect script that failed: its line
// and why.
type StepError struct {
	Line int
	Kind StepKind
	Err  error
}

func (e *StepError) Error() string {
	return fmt.Sprintf("expect: line %d (%s): %s", e.Line, e.Kind, Message(e.Err))
}

func (e *StepError) Unwrap() error { return e.Err }

// expect runs an expect script (cmd.Script(), InlineScript, or stdin) on
// the console, step by step, stopping at the first that fails.
func (r *Runner) expect(ctx context.Context, req Request, cmd Command) (Result, error) {
	res := Result{Node: req.Node, Command: cmd.Name}
	var text string
	if cmd.Stdin {
		b, err := readStdin(req, MaxScript)
		if err != nil {
			return res, err
		}
		text = string(b)
	} else {
		text = InlineScript(cmd.Script())
	}
	steps, err := ParseScript(text)
	if err != nil {
		return res, err
	}
	w, err := r.watch(ctx, req, ConsoleOptions{})
	if err != nil {
		return res, err
	}
	defer w.con.Close()
	for _, st := range steps {
		mt, err := r.step(ctx, req, cmd, w, st)
		if err != nil {
			r.auditWait(ctx, req, ActionConsoleExpect, w.start, err)
			return res, &StepError{Line: st.Line, Kind: st.Kind, Err: err}
		}
		res.Steps++
		if mt != nil {
			res.Match = mt
		}
	}
	r.auditWait(ctx, req, ActionConsoleExpect, w.start, nil)
	res.Text = fmt.Sprintf("%s: expect: %d steps done\n", clean(req.Node, 0), res.Steps)
	return res, nil
}

// step runs one step; a wait returns its match.
func (r *Runner) step(ctx context.Context, req Request, cmd Command, w *watching, st Step) (*Match, error) {
	con := w.con
	switch st.Kind {
	case StepWait:
		timeout := st.Timeout
		if timeout == 0 {
			timeout = waitTimeout(cmd.Timeout)
		}
		// Compiled now, dropped after: a script holds one compiled
		// pattern at a time (ParseScript checked them all).
		re, err := compilePattern(CmdExpect, st.Pattern)
		if err != nil {
			return nil, err
		}
		wait := w.m.wait
		if st.Screen {
			wait = w.m.waitScreen
		}
		mt, err := wait(ctx, con, re, timeout)
		if err != nil {
			return nil, err
		}
		return &mt, nil
	case StepSend:
		return nil, r.sendOn(ctx, req, con, st.Data, cmd.Force)
	case StepBreak:
		err := con.Break(ctx, cmd.Force)
		result := ResultOK
		if err != nil {
			result = ResultError
		}
		r.auditConsole(ctx, req, ActionConsoleBreak, result, "expect")
		return nil, err
	case StepSleep:
		t := time.NewTimer(st.Timeout)
		defer t.Stop()
		select {
		case <-t.C:
			return nil, nil
		case <-ctx.Done():
			return nil, context.Cause(ctx)
		}
	}
	return nil, errors.New("unknown step")
}

package sshdoor

import (
	"context"
	"errors"
	"io"
	"sync"
	"time"

	"github.com/obmd/obmd/bastion/access/sessions"
	"github.com/obmd/obmd/commands"
	"github.com/obmd/obmd/sol"
	"github.com/obmd/obmd/sol/screen"
)

// exec runs one command. If the session is cut meanwhile, it returns at once
// with the cause (the caller tells the user and closes the channel); the
// command's goroutine, cancelled through sctx, is waited for by serve.
// Once cut, the command's output is dropped, so nothing follows the reason
// the user is given.
func (c *channel) exec(sctx context.Context, info sessions.Info, cmd commands.Command, stdout, stderr io.Writer) (int, error) {
	req := commands.Request{Node: c.label, Actor: c.a.Actor, User: c.a.User, Source: c.remote, Session: info.ID,
		Epoch: info.Epoch, OpenConsole: c.openConsole(info), Stdin: c.ch}
	if cmd.OnConsole() { // it may wait for hours: it ends when the client leaves
		var stop context.CancelCauseFunc
		sctx, stop = context.WithCancelCause(sctx)
		defer stop(nil)
		c.wg.Add(1)
		go func() { // owned by serve (c.wg); ends with the exec
			defer c.wg.Done()
			select {
			case <-c.closed:
				stop(errClientLeft)
			case <-sctx.Done():
			}
		}()
	}
	out, errOut := &gate{ctx: sctx, w: stdout}, &gate{ctx: sctx, w: stderr}
	done := make(chan int, 1)
	c.cmd.Add(1)
	go func() { // owned by serve, which waits on c.cmd before it ends the session
		defer c.cmd.Done()
		done <- c.s.runner.Run(sctx, req, cmd, out, errOut)
	}()
	select {
	case code := <-done:
		return code, context.Cause(sctx)
	case <-sctx.Done():
		out.close()
		errOut.close()
		if cause := context.Cause(sctx); cause != errClientLeft {
			return commands.ExitFailed, cause
		}
		return commands.ExitFailed, nil
	}
}

// errClientLeft ends an exec whose client closed the channel.
var errClientLeft = errors.New("the client left")

// gate passes writes through until closed or its session's context ends
// (a command cut mid-way reports its own cancellation: that is dropped),
// then drops them. close waits for a write in progress, so nothing passes
// after it returns.
type gate struct {
	ctx    context.Context
	mu     sync.Mutex
	w      io.Writer
	closed bool
}

func (g *gate) Write(p []byte) (int, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed || g.ctx.Err() != nil {
		return len(p), nil
	}
	return g.w.Write(p)
}

func (g *gate) close() {
	g.mu.Lock()
	g.closed = true
	g.mu.Unlock()
}

// viewerConsole is a node's console as the automation commands (wait-for,
// send, expect, --wait-for, screen) use it: a read-only viewer attached for one
// command, with the attach replay first only if asked (wait-for --since
// attach; else the command sees what comes after it starts), that writes
// only through sol.Viewer.AsWriter.
//
// The viewer lives until Close or until the context it was opened with
// ends, whichever comes first: a cut session's command is cancelled, and
// a console call that does not watch its context (a write waiting for a
// full input queue to drain, a send waiting for its input to reach a link
// that is down) ends with its viewer then, not when the cut has done
// waiting and wipes the console.
type viewerConsole struct {
	v    *sol.Viewer
	now  func() time.Time
	stop func() bool // stops closing v when the context ends
}

// openConsole is the Request.OpenConsole of an exec session.
func (c *channel) openConsole(info sessions.Info) func(context.Context, commands.ConsoleOptions) (commands.Console, error) {
	return func(ctx context.Context, o commands.ConsoleOptions) (commands.Console, error) {
		v, err := c.s.consoles.Attach(ctx, c.label, sol.AttachOptions{Session: info.ID, ReadOnly: true,
			Epoch: info.Epoch, Replay: o.Replay})
		if err != nil {
			return nil, err
		}
		// Its goroutine only closes v (Close is idempotent) and is stopped
		// by Close.
		return &viewerConsole{v: v, now: c.s.cfg.Now, stop: context.AfterFunc(ctx, v.Close)}, nil
	}
}

func (vc *viewerConsole) Next(ctx context.Context) ([]byte, time.Time, error) {
	for {
		select {
		case ch, ok := <-vc.v.Output():
			if !ok {
				return nil, time.Time{}, vc.v.Err()
			}
			if len(ch.Data) > 0 {
				return ch.Data, vc.now(), nil
			}
		case <-ctx.Done():
			return nil, time.Time{}, context.Cause(ctx)
		}
	}
}

func (vc *viewerConsole) Send(ctx context.Context, p []byte, force bool) error {
	return vc.v.AsWriter(force, func() error {
		_, err := vc.v.Write(p)
		return err
	})
}

func (vc *viewerConsole) Break(ctx context.Context, force bool) error {
	return vc.v.AsWriter(force, func() error { return vc.v.Break(ctx) })
}

func (vc *viewerConsole) Close() {
	vc.stop()
	vc.v.Close()
}

func (vc *viewerConsole) Ready(ctx context.Context) error { return vc.v.WaitUp(ctx) }

func (vc *viewerConsole) Screen(ctx context.Context) (screen.Snapshot, error) {
	return vc.v.Screen(ctx)
}

func (vc *viewerConsole) ScreenText(ctx context.Context) (string, error) {
	return vc.v.ScreenText(ctx)
}

package sshdoor

import (
	"context"
	"time"

	"github.com/obmd/obmd/bastion/access/sessions"
	"github.com/obmd/obmd/commands"
	"github.com/obmd/obmd/sol"
)

// viewerConsole is a node's console as the automation commands (wait-for,
// send, expect, --wait-for) use it: a read-only viewer attached for one
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

package cluster

import (
	"context"
	"errors"
	"time"

	gossh "golang.org/x/crypto/ssh"

	"github.com/obmd/obmd/sol"
)

// seedRequest is the holder's first message on a console channel, before
// any console byte: its replay of the node's history (the last scrollback
// bytes of the relaying replica's tenancy) as the relay begins. The relay
// replays it to its viewers (sol.Seeded) and records nothing: the holder
// does. So a viewer on any replica gets the holder's replay, ending where
// the relay's first live byte begins.
const seedRequest = "obmd-seed"

// screenRequest follows the seed, before any console byte, from protocol
// version 2 on: the holder's screen where the seed ends, as a redraw
// (sol.Chunk.Screen; empty if the holder has none). The relaying replica's
// screen starts from it (sol.ScreenSeeded), so it shows what the holder's
// does, which the seed's bytes alone may not draw. In protocol 1 the
// relaying replica's screen starts from the seed's bytes.
const screenRequest = "obmd-screen"

// maxSeedScreen bounds the screen sent with a seed: one SSH packet (256
// KiB in x/crypto/ssh and OpenSSH; a larger one fails the whole peer
// connection), less room for the request's framing. The redraw of a large
// screen drawn in many colours (up to a few MiB at 200x100) can exceed it;
// it then goes as none.
const maxSeedScreen = 256<<10 - 1<<10

// Seed is sol.Seeded's: the holder's replay as the relay began.
func (r *relayConsole) Seed() []byte { return r.seed }

// ScreenSeed is sol.ScreenSeeded's: the holder's screen as the relay
// began (nil from a holder that sent none).
func (r *relayConsole) ScreenSeed() []byte { return r.screen }

// awaitSeed reads the holder's seed from a console channel's requests,
// then, in protocol version 2 or later, the holder's screen, within
// DialTimeout.
func (c *Cluster) awaitSeed(ctx context.Context, reqs <-chan *gossh.Request, proto int) (seed, screen []byte, err error) {
	t := time.NewTimer(c.cfg.DialTimeout)
	defer t.Stop()
	next := func(want string) (*gossh.Request, error) {
		var r *gossh.Request
		select {
		case got, ok := <-reqs:
			if !ok {
				return nil, errors.New("the holder closed the console before its " + want)
			}
			r = got
		case <-t.C:
			return nil, errors.New("the holder sent no " + want + " in time")
		case <-ctx.Done():
			return nil, context.Cause(ctx)
		}
		if r.WantReply {
			// None of these wants one; a build that probed for the screen
			// (between versions 1 and 2) learns that this replica will not
			// take one in protocol 1.
			r.Reply(false, nil)
		}
		return r, nil
	}
	r, err := next("replay")
	if err != nil {
		return nil, nil, err
	}
	if r.Type != seedRequest {
		return nil, nil, errors.New("the holder sent no replay first")
	}
	if proto < 2 {
		return r.Payload, nil, nil
	}
	s, err := next("screen")
	if err != nil {
		return nil, nil, err
	}
	if s.Type != screenRequest {
		return nil, nil, errors.New("the holder sent no screen after its replay")
	}
	return r.Payload, s.Payload, nil
}

// sendSeed sends c, the relay viewer's replay (its first chunk), as the
// channel's seed, and in protocol version 2 or later its screen (none if
// its redraw is over maxSeedScreen); it reports whether c was that replay.
func sendSeed(ch gossh.Channel, c sol.Chunk, proto int) (bool, error) {
	if !c.Replay {
		return false, nil
	}
	_, err := ch.SendRequest(seedRequest, false, c.Data)
	if err == nil && proto >= 2 {
		scr := c.Screen
		if len(scr) > maxSeedScreen {
			scr = nil
		}
		_, err = ch.SendRequest(screenRequest, false, scr)
	}
	return true, err
}

// OpenOwnConsole is sol.OwnConsoler's: the node's console only as its
// holder, never a relay (a link held for capture); a lease held by another
// replica is sol.ErrHeldElsewhere: that replica records the node.
func (b *bmc) OpenOwnConsole(ctx context.Context) (sol.Console, error) {
	return b.open(ctx, true)
}

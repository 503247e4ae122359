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

// screenRequest follows the seed, before any console byte, when the
// relaying replica asks for it: the holder's screen where the seed ends,
// as a redraw (sol.Chunk.Screen; empty if the holder has none). The
// relaying replica's screen starts from it (sol.ScreenSeeded), so it
// shows what the holder's does, which the seed's bytes alone may not draw.
//
// It is asked for in the reply to the seed, which the holder sends wanting
// one: a relaying replica that knows screenRequest answers true and waits
// for it; one from before it answers false (as it answers every request it
// does not know), and gets none. A holder from before it sends the seed
// wanting no reply, and the relaying replica then waits for no screen. So
// replicas of either version relay to each other while they are upgraded
// one at a time.
const screenRequest = "obmd-screen"

// Seed is sol.Seeded's: the holder's replay as the relay began.
func (r *relayConsole) Seed() []byte { return r.seed }

// ScreenSeed is sol.ScreenSeeded's: the holder's screen as the relay
// began (nil from a holder that sent none).
func (r *relayConsole) ScreenSeed() []byte { return r.screen }

// awaitSeed reads the holder's seed from a console channel's requests,
// then the holder's screen if the holder offers it, within DialTimeout.
func (c *Cluster) awaitSeed(ctx context.Context, reqs <-chan *gossh.Request) (seed, screen []byte, err error) {
	t := time.NewTimer(c.cfg.DialTimeout)
	defer t.Stop()
	next := func(what string) (*gossh.Request, error) {
		select {
		case r, ok := <-reqs:
			if !ok {
				return nil, errors.New("the holder closed the console before its " + what)
			}
			return r, nil
		case <-t.C:
			return nil, errors.New("the holder sent no " + what + " in time")
		case <-ctx.Done():
			return nil, context.Cause(ctx)
		}
	}
	r, err := next("replay")
	if err != nil {
		return nil, nil, err
	}
	if r.Type != seedRequest {
		if r.WantReply {
			r.Reply(false, nil)
		}
		return nil, nil, errors.New("the holder sent no replay first")
	}
	if !r.WantReply { // a holder from before screenRequest
		return r.Payload, nil, nil
	}
	if err := r.Reply(true, nil); err != nil {
		return nil, nil, err
	}
	s, err := next("screen")
	if err != nil {
		return nil, nil, err
	}
	if s.WantReply {
		s.Reply(false, nil)
	}
	if s.Type != screenRequest {
		return nil, nil, errors.New("the holder sent no screen after its replay")
	}
	return r.Payload, s.Payload, nil
}

// sendSeed sends c, the relay viewer's replay (its first chunk), as the
// channel's seed, and its screen if the relaying replica asks for it
// (screenRequest); it reports whether c was that replay.
func sendSeed(ch gossh.Channel, c sol.Chunk) (bool, error) {
	if !c.Replay {
		return false, nil
	}
	wants, err := ch.SendRequest(seedRequest, true, c.Data)
	if err == nil && wants {
		_, err = ch.SendRequest(screenRequest, false, c.Screen)
	}
	return true, err
}

// OpenOwnConsole is sol.OwnConsoler's: the node's console only as its
// holder, never a relay (a link held for capture); a lease held by another
// replica is sol.ErrHeldElsewhere: that replica records the node.
func (b *bmc) OpenOwnConsole(ctx context.Context) (sol.Console, error) {
	return b.open(ctx, true)
}

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

// Seed is sol.Seeded's: the holder's replay as the relay began.
func (r *relayConsole) Seed() []byte { return r.seed }

// awaitSeed reads the holder's seed from a console channel's requests,
// within DialTimeout.
func (c *Cluster) awaitSeed(ctx context.Context, reqs <-chan *gossh.Request) ([]byte, error) {
	t := time.NewTimer(c.cfg.DialTimeout)
	defer t.Stop()
	select {
	case r, ok := <-reqs:
		if !ok {
			return nil, errors.New("the holder closed the console before its replay")
		}
		if r.WantReply {
			r.Reply(false, nil)
		}
		if r.Type != seedRequest {
			return nil, errors.New("the holder sent no replay first")
		}
		return r.Payload, nil
	case <-t.C:
		return nil, errors.New("the holder sent no replay in time")
	case <-ctx.Done():
		return nil, context.Cause(ctx)
	}
}

// sendSeed sends c, the relay viewer's replay (its first chunk), as the
// channel's seed; it reports whether c was that replay.
func sendSeed(ch gossh.Channel, c sol.Chunk) (bool, error) {
	if !c.Replay {
		return false, nil
	}
	_, err := ch.SendRequest(seedRequest, false, c.Data)
	return true, err
}

// OpenOwnConsole is sol.OwnConsoler's: the node's console only as its
// holder, never a relay (a link held for capture); a lease held by another
// replica is sol.ErrHeldElsewhere: that replica records the node.
func (b *bmc) OpenOwnConsole(ctx context.Context) (sol.Console, error) {
	return b.open(ctx, true)
}

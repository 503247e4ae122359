package bastion_test

import (
	"context"
	"testing"
	"time"

	gossh "golang.org/x/crypto/ssh"

	"github.com/obmd/obmd/bastion/access"
	"github.com/obmd/obmd/bastion/sessions"
	"github.com/obmd/obmd/db/dbtest"
	"github.com/obmd/obmd/keys"
)

// TestCutConnHeldByIdleChannel, on SQLite and MariaDB: a connection that
// holds a session channel on which it never asks for a shell or a command
// (so no session is registered, and no cut ends the channel) is closed
// all the same once its credential ends, within a bound: an open channel
// does not keep a revoked connection, or its place under the caps, alive.
func TestCutConnHeldByIdleChannel(t *testing.T) {
	for _, eng := range dbtest.Engines() {
		t.Run(eng.Name, func(t *testing.T) {
			ctx := context.Background()
			st, log := raceDB(t, eng)
			if _, err := st.SetToken(ctx, "n1", keys.HashToken("token-0")); err != nil {
				t.Fatal(err)
			}
			reg := sessions.New(sessions.Config{CutWait: 5 * time.Second})
			rev := access.NewRevoker(access.RevokerConfig{}, noConsoles{}, reg, st, log)
			addr := serveBastion(t, newGated(&raceStore{Store: st}), &ranRunner{}, rev, log)
			c, err := dialToken(addr, "n1", "token-0")
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			ch, reqs, err := c.OpenChannel("session", nil)
			if err != nil {
				t.Fatal(err)
			}
			defer ch.Close()
			go gossh.DiscardRequests(reqs)
			err = rev.Change(ctx, access.Change{Node: "n1", Why: "token rotated", Do: func(ctx context.Context) (int64, error) {
				return st.SetToken(ctx, "n1", keys.HashToken("token-1"))
			}})
			if err != nil {
				t.Fatal(err)
			}
			closed := make(chan struct{})
			go func() { c.Wait(); close(closed) }() // ends with the connection
			select {
			case <-closed:
			case <-time.After(15 * time.Second):
				t.Error("a rotated token's connection holding an idle session channel is still open")
			}
		})
	}
}

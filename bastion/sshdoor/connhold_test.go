package sshdoor_test

import (
	"context"
	"errors"
	"io"
	"testing"
	"time"

	gossh "golang.org/x/crypto/ssh"

	"github.com/obmd/obmd/commands"
	"github.com/obmd/obmd/db"
	"github.com/obmd/obmd/db/dbtest"
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
			st, log := tokenDB(t, eng)
			rev := newRevoker(st, 5*time.Second, log)
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
			if _, err := rotateVia(ctx, rev, st, "n1", "token-1"); err != nil {
				t.Fatal(err)
			}
			if !closedWithin(c, 15*time.Second) {
				t.Error("a rotated token's connection holding an idle session channel is still open")
			}
		})
	}
}

// stuckAudit is a front door's store whose conn.close rows wait until
// their context ends: the database, or its audit queue, not answering.
type stuckAudit struct{ gated }

func (s stuckAudit) Audit(ctx context.Context, e db.AuditEvent) error {
	if e.Action == "conn.close" {
		<-ctx.Done()
		return ctx.Err()
	}
	return s.gated.Audit(ctx, e)
}

// blockRunner runs every command until its session ends, telling started.
type blockRunner struct{ started chan struct{} }

func (r blockRunner) Run(ctx context.Context, _ commands.Request, _ commands.Command, _, _ io.Writer) int {
	r.started <- struct{}{}
	<-ctx.Done()
	return commands.ExitFailed
}

// TestCutNotHeldByConnAudit: closing a node's idle connections at a cut
// does not wait for their audit rows: with the database not answering
// them, the node's running session is still cut at once, not after a
// wait per idle connection (the cut tells the connections first).
func TestCutNotHeldByConnAudit(t *testing.T) {
	ctx := context.Background()
	st, log := tokenDB(t, dbtest.Engines()[0])
	rev := newRevoker(st, 5*time.Second, log)
	runner := blockRunner{started: make(chan struct{}, 1)}
	addr := serveBastion(t, stuckAudit{newGated(&raceStore{Store: st})}, runner, rev, log)
	for range 4 { // idle, as ssh -N
		c, err := dialToken(addr, "n1", "token-0")
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
	}
	_, ran := runStarted(t, addr, runner.started)
	changed := make(chan error, 1)
	go func() { // owned by the test, which waits for it
		_, err := rotateVia(ctx, rev, st, "n1", "token-1")
		changed <- err
	}()
	defer func() {
		if err := <-changed; err != nil {
			t.Errorf("rotate: %v", err)
		}
	}()
	select {
	case err := <-ran:
		var exit *gossh.ExitError
		if !errors.As(err, &exit) || exit.ExitStatus() != commands.ExitNotAllowed {
			t.Errorf("the cut session: %v, want exit %d", err, commands.ExitNotAllowed)
		}
	case <-time.After(10 * time.Second): // 4 idle connections' rows: 20s on the old code
		t.Error("the session is still running: the cut waits for the idle connections' audit rows")
	}
}

// runStarted logs in to n1 with token-0 and runs power-status there,
// returning once started tells the command began; the session's error
// comes on ran once it ends. The connection is closed when t ends.
func runStarted(t *testing.T, addr string, started <-chan struct{}) (c *gossh.Client, ran <-chan error) {
	t.Helper()
	c, err := dialToken(addr, "n1", "token-0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	done := make(chan error, 1)
	go func() { _, err := runLine(c, "power-status"); done <- err }() // ends with the session or c
	<-started
	return c, done
}

// closedWithin reports whether c's connection closes within d (the server
// closed it); c.Wait's goroutine ends with the connection, which the
// caller closes if not.
func closedWithin(c *gossh.Client, d time.Duration) bool {
	closed := make(chan struct{})
	go func() { c.Wait(); close(closed) }()
	select {
	case <-closed:
		return true
	case <-time.After(d):
		return false
	}
}

// stuckRunner runs every command until released, whatever its session
// does (a BMC call that hangs), telling started.
type stuckRunner struct{ started, release chan struct{} }

func (r stuckRunner) Run(context.Context, commands.Request, commands.Command, io.Writer, io.Writer) int {
	r.started <- struct{}{}
	<-r.release
	return 0
}

// TestCutConnHeldByStuckCommand: a cut session whose command does not
// return (its channel cannot end until it has) does not keep its revoked
// connection open: the connection is closed within the bound of a cut.
func TestCutConnHeldByStuckCommand(t *testing.T) {
	ctx := context.Background()
	st, log := tokenDB(t, dbtest.Engines()[0])
	rev := newRevoker(st, time.Second, log)
	runner := stuckRunner{started: make(chan struct{}, 1), release: make(chan struct{})}
	defer close(runner.release) // before the server's cleanup waits for the command
	addr := serveBastion(t, newGated(&raceStore{Store: st}), runner, rev, log)
	c, ran := runStarted(t, addr, runner.started)
	if _, err := rotateVia(ctx, rev, st, "n1", "token-1"); err != nil {
		t.Fatal(err)
	}
	if !closedWithin(c, 15*time.Second) {
		t.Error("a cut connection whose command hangs is still open")
	}
	<-ran
}

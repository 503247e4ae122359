package sshconsole_test

import (
	"context"
	"io"
	"testing"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/obmd/obmd/sol/soltest"
	"github.com/obmd/obmd/sol/soltest/sshbmc"
	"github.com/obmd/obmd/sol/sshconsole"
)

const wait = 15 * time.Second

// quiet is a logger for tests.
func quiet() logrus.FieldLogger {
	l := logrus.New()
	l.SetOutput(io.Discard)
	return l
}

// newClient is a client with a short keepalive over keys.
func newClient(t testing.TB, keys sshconsole.HostKeys, notify func(context.Context, sshconsole.HostKeyEvent)) *sshconsole.Client {
	t.Helper()
	c, err := sshconsole.NewClient(sshconsole.Config{Keepalive: 200 * time.Millisecond, KeepaliveCount: 3}, keys, notify, quiet())
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// target is node's target on b.
func target(t testing.TB, node string, b *sshbmc.BMC) sshconsole.Target {
	t.Helper()
	tg, err := sshconsole.TargetOf(node, b.Host, "ignored", "ignored", b.ConsoleInfo())
	if err != nil {
		t.Fatal(err)
	}
	return tg
}

func ctxWait(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	t.Cleanup(cancel)
	return ctx
}

func ctxFor(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// attached starts a BMC of o and opens node n1's console on it, its output
// collected.
func attached(t testing.TB, o sshbmc.Options) (*sshbmc.BMC, *sshconsole.Console, *soltest.Reader) {
	t.Helper()
	b := sshbmc.Start(t, o)
	con, err := newClient(t, sshbmc.NewKeys(), nil).Open(ctxWait(t), target(t, "n1", b))
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return b, con, soltest.Collect(t, con)
}

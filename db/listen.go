package db

import (
	"context"
	"math/rand/v2"
	"time"

	"github.com/jackc/pgx/v5"
)

// changesChannel is the PostgreSQL notification channel of access changes:
// recordChange notifies it in the change's transaction, so PostgreSQL
// delivers the notification when the change commits, and never for one
// rolled back.
const changesChannel = "obmd_access_changes"

// Reconnection of ListenChanges: the wait after a failure doubles from
// listenRetry up to listenRetryMax.
const (
	listenRetry    = 500 * time.Millisecond
	listenRetryMax = 30 * time.Second
)

// ListenChanges calls wake each time an access change commits, on any
// replica, until ctx ends; then it returns nil. On PostgreSQL it listens
// on a connection of its own (LISTEN/NOTIFY), and calls wake once more
// each time it has (re)connected, for what it may have missed meanwhile;
// on another engine it returns at once, having nothing to listen to.
//
// A wake is a hint, never the record: notifications are lost while the
// connection is down, and wake may come for a change already seen. The
// caller still polls ChangesSince, which is what finds every change.
func (s *Store) ListenChanges(ctx context.Context, wake func()) error {
	if s.pg == nil {
		return nil
	}
	wait := listenRetry
	for {
		err := s.listen(ctx, wake, func() { wait = listenRetry })
		if ctx.Err() != nil {
			return nil
		}
		s.log.WithError(redact(err, s.pg.Password)).WithField("retry_in", wait.String()).Warn("db_listen_failed")
		t := time.NewTimer(wait/2 + rand.N(wait/2)) // jittered: replicas do not reconnect in step
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
		wait = min(2*wait, listenRetryMax)
	}
}

// listen connects, listens on changesChannel and calls wake for each
// notification until the connection fails or ctx ends; listening says
// that it has begun to listen.
func (s *Store) listen(ctx context.Context, wake, listening func()) error {
	conn, err := pgx.ConnectConfig(ctx, s.pg.Copy())
	if err != nil {
		return err
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		defer cancel()
		_ = conn.Close(cctx) // its error says nothing the caller needs
	}()
	if _, err := conn.Exec(ctx, `LISTEN `+changesChannel); err != nil {
		return err
	}
	listening()
	wake() // for what happened while nobody listened
	for {
		if _, err := conn.WaitForNotification(ctx); err != nil {
			return err
		}
		wake()
	}
}

package access

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/obmd/obmd/bastion/access/sessions"
	"github.com/obmd/obmd/sol"
)

// CutGrace is how long a cut session may take to say its last words (the
// reason, an exit status) before its transport is told to unblock its
// client.
const CutGrace = 250 * time.Millisecond

// ErrUnverified is wrapped by Open's error, and by the Revoker's Current,
// when access cannot be verified now: the database did not answer, or a
// change of the node made here is still undecided. Not the client's fault;
// the detail is for the log. It is sol's, so that a console link that
// fails to open for it tells its viewers so (sol.TenantText).
var ErrUnverified = sol.ErrUnverified

// StaleError is Open's refusal of a session whose node's access changed
// between its login and its start: it must log in again. It is the
// *sessions.RevokedError it wraps (errors.As), with the same text.
type StaleError struct{ *sessions.RevokedError }

// Unwrap returns the revocation.
func (e *StaleError) Unwrap() error { return e.RevokedError }

// Session is a live session that Open admitted. Its context is cancelled,
// with a cause its user may read, when it is cut; End must be called once
// it has finished. Its watchdog (a goroutine started when its context
// ends, which End waits for) unblocks a client that keeps a cut session
// from finishing.
type Session struct {
	ctx  context.Context
	info sessions.Info
	end  func()

	finished chan struct{} // closed by Finish
	once     sync.Once
	watch    sync.WaitGroup
	// unwatch keeps the watchdog from starting; it reports whether it
	// did (context.AfterFunc's stop).
	unwatch func() bool
}

// Context is cancelled when the session is cut (cause: a
// *sessions.RevokedError or sol.ErrShutdown) or its parent ends.
func (s *Session) Context() context.Context { return s.ctx }

// Info is the session as the registry lists it (ID and Started filled in).
func (s *Session) Info() sessions.Info { return s.info }

// Finish tells the watchdog that the session has said its last words: its
// client need not be unblocked any more. End implies it.
func (s *Session) Finish() { s.once.Do(func() { close(s.finished) }) }

// End takes the session out of the registry (what a cut waits for) and
// waits for its watchdog. Call it once, when the session has finished.
func (s *Session) End() {
	s.Finish()
	if s.unwatch() {
		s.watch.Done() // it will not start
	}
	s.watch.Wait()
	s.end()
}

// Open is how every session starts, whatever its transport (an SSH console
// or command, a node-token HTTP request): it registers info in the
// registry, so that any access change from then on cuts it; admits it,
// which refuses it if a change came since its login (info.Epoch) and
// clears away older sessions and their console output, even a change made
// on another replica, before it starts (the Revoker's admit); and watches
// it: once cut, the session has CutGrace to finish (Session.Finish), then
// unblock is called, which must make the transport's blocked writes fail
// (a client that stops reading holds them by flow control, and would keep
// a revoked session alive). host is the client's address without port.
// A certificate session (info.Cert) must still have its login's read made
// again and its certificate checked again once Open returns (see cred.go);
// Open refuses it while a credential change made here that names its
// certificate has an unknown outcome.
//
// On success the session runs until End. Its errors:
//   - sessions.ErrTooMany (wrapped): a per-node or per-source limit; the
//     text is safe to show;
//   - sol.ErrShutdown: obmd is stopping;
//   - a *sessions.RevokedError: the session was cut while being admitted
//     (its cause), or, as a *StaleError, access changed since its login;
//     the text is for its user;
//   - ErrUnverified (wrapped, with the detail for the log): the database
//     did not answer, or a change made here is still undecided;
//   - context.Cause(ctx) if ctx ended first (the client left).
func (r *Revoker) Open(ctx context.Context, info sessions.Info, host string, unblock func()) (*Session, error) {
	sctx, info, end, err := r.reg.Start(ctx, info, host)
	if err != nil {
		return nil, err
	}
	s := &Session{ctx: sctx, info: info, end: end, finished: make(chan struct{})}
	s.watch.Add(1)
	s.unwatch = context.AfterFunc(sctx, func() { // owned by s: End waits for it, or stops it
		defer s.watch.Done()
		r.watchCut(s, unblock)
	})
	err = r.admit(sctx, info.Node, info.Epoch, info.Mark)
	if err == nil {
		err = r.certSettled(info.Cert)
	}
	if err == nil {
		return s, nil
	}
	s.End()
	var revoked *sessions.RevokedError
	switch cause := context.Cause(sctx); {
	case sctx.Err() != nil && IsCut(cause): // cut while being admitted
		return nil, cause
	case errors.As(err, &revoked):
		return nil, &StaleError{revoked}
	case ctx.Err() != nil:
		return nil, context.Cause(ctx)
	}
	return nil, fmt.Errorf("%w: %w", ErrUnverified, err)
}

// WatchConn has the registry tell an authenticated connection c of the
// first thing that ends it (sessions.Registry.Watch): an access change of
// its node above its epoch, a credential change that names its
// certificate (RevokeCred), its certificate's expiry, or a cut of every
// session. revoked is called once, with the cause its sessions are given,
// before any of them is cut, so that the front door can close the
// connection (at once if it holds none): nothing that ends a credential
// leaves a connection logged in with it open. forget (idempotent) forgets
// it when the connection closes.
func (r *Revoker) WatchConn(c sessions.Conn, revoked func(cause error)) (forget func()) {
	return r.reg.Watch(c, revoked)
}

// watchCut, once the context of s has ended, unblocks the client of s if
// it was cut and does not finish within CutGrace; it returns once s has
// finished, or after unblocking.
func (r *Revoker) watchCut(s *Session, unblock func()) {
	if !IsCut(context.Cause(s.ctx)) || unblock == nil {
		return
	}
	t := time.NewTimer(CutGrace)
	defer t.Stop()
	select {
	case <-s.finished:
	case <-t.C:
		r.log.WithField("node", safe(s.info.Node)).WithField("session", s.info.ID).WithField("kind", s.info.Kind).
			Warn("cut_session_stuck_closing_connection")
		unblock()
	}
}

// IsCut reports whether cause ended a session on purpose (an access
// change, an admin kick, a shutdown) rather than its client leaving.
func IsCut(cause error) bool {
	var r *sessions.RevokedError
	return errors.As(cause, &r) || errors.Is(cause, sol.ErrShutdown)
}

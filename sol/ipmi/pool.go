package ipmi

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bougou/go-ipmi/pkg/client"
)

// Sessions keeps the RMCP+ session of a finished power or boot-device call
// warm for a short while (Config.SessionLinger), so that the node's next
// power-status or boot-device call skips the session setup (Get Channel Authentication
// Capabilities, Open Session, RAKP 1 and 3, Set Session Privilege Level)
// and its Close Session: one round trip to the BMC instead of seven. What
// it keeps is a session, never a result: every call asks the BMC.
//
// At most one idle session per node and BMC (its address, user, password
// and pinned cipher suite: a changed registration never meets the old
// session). A session is used by one call at a time: a call takes it out
// and gives it back when it succeeded; concurrent calls on one node open
// sessions of their own, and only one of them is kept. A session older
// than maxSessionAge is not reused (go-ipmi's own keepalive, 30 s after the
// session opened, never runs beside a call), and it is closed (Close
// Session) when it lingered unused, at Close, or when one is kept already.
//
// The drivers built for each call (nodes.Resolver builds a BMC per call)
// share one Sessions; the daemon owns it and closes it at shutdown. Safe
// for concurrent use. The zero value is not usable: NewSessions.
type Sessions struct {
	mu     sync.Mutex
	idle   map[poolKey]*idleSession
	closed bool
	// owned counts the idle sessions in idle: whoever removes one (a call
	// taking it, its linger timer, Close) calls Done once. Close waits.
	owned sync.WaitGroup

	reused, reopened atomic.Int64
}

// poolKey names one node's BMC as its registration does.
type poolKey struct {
	label, addr string
	port        int
	user, pass  string
	cipher      int
}

// idleSession is a session waiting in the pool, and its linger timer.
type idleSession struct {
	s       *session
	timer   *time.Timer
	closeIn time.Duration // bound on its Close Session
}

// maxSessionAge bounds how long after it opened a session is reused: below
// go-ipmi's session keepalive (30 s) minus the longest call (CallTimeout,
// 10 s by default), and well below a BMC's session inactivity timeout
// (IPMI v2.0 section 6.12.15: 60 s by default).
const maxSessionAge = 15 * time.Second

// NewSessions returns an empty pool.
func NewSessions() *Sessions { return &Sessions{idle: map[poolKey]*idleSession{}} }

// SessionStats counts what the pool did, for tests and the bench.
type SessionStats struct {
	// Reused is how many calls ran on a session kept from an earlier call.
	Reused int64
	// Reopened is how many of those found the kept session dead (no
	// answer: the BMC restarted or dropped it) and ran on a new one.
	Reopened int64
	// Idle is how many sessions wait in the pool now.
	Idle int
}

// Stats returns the pool's counters.
func (p *Sessions) Stats() SessionStats {
	p.mu.Lock()
	n := len(p.idle)
	p.mu.Unlock()
	return SessionStats{Reused: p.reused.Load(), Reopened: p.reopened.Load(), Idle: n}
}

// take removes and returns k's idle session, or nil. A session too old to
// reuse is closed instead.
func (p *Sessions) take(k poolKey) *session {
	p.mu.Lock()
	e, ok := p.idle[k]
	if ok && e.timer.Stop() {
		delete(p.idle, k)
	} else {
		ok = false // none, or its timer fired and closes it
	}
	p.mu.Unlock()
	if !ok {
		return nil
	}
	defer p.owned.Done()
	if time.Since(e.s.opened) >= maxSessionAge {
		e.close()
		return nil
	}
	return e.s
}

// put keeps s as k's idle session for linger, or closes it when k has one
// already, the pool is closed, or s is too old to reuse.
func (p *Sessions) put(k poolKey, s *session, linger, closeIn time.Duration) {
	e := &idleSession{s: s, closeIn: closeIn}
	left := maxSessionAge - time.Since(s.opened)
	p.mu.Lock()
	if _, busy := p.idle[k]; busy || p.closed || left <= 0 {
		p.mu.Unlock()
		e.close()
		return
	}
	p.owned.Add(1)
	e.timer = time.AfterFunc(min(linger, left), func() { p.expire(k, e) })
	p.idle[k] = e
	p.mu.Unlock()
}

// expire closes e if it still waits in the pool (its timer's goroutine;
// Close waits for it through owned).
func (p *Sessions) expire(k poolKey, e *idleSession) {
	p.mu.Lock()
	mine := p.idle[k] == e
	if mine {
		delete(p.idle, k)
	}
	p.mu.Unlock()
	if mine {
		e.close()
		p.owned.Done()
	}
}

// Close closes every idle session (Close Session to each BMC, each bounded
// by its driver's AttemptTimeout) and keeps none from now on. It returns
// once they are closed. Idempotent; nothing on a nil pool.
func (p *Sessions) Close() {
	if p == nil {
		return
	}
	p.mu.Lock()
	p.closed = true
	var stopped []*idleSession
	for k, e := range p.idle {
		if e.timer.Stop() {
			delete(p.idle, k)
			stopped = append(stopped, e)
		} // else its timer fired: expire closes it
	}
	p.mu.Unlock()
	var wg sync.WaitGroup
	for _, e := range stopped {
		wg.Add(1)
		go func() { // owned by Close: waited for below
			defer wg.Done()
			e.close()
			p.owned.Done()
		}()
	}
	wg.Wait()
	p.owned.Wait()
}

// close ends the idle session politely within closeIn.
func (e *idleSession) close() {
	ctx, cancel := context.WithTimeout(context.Background(), e.closeIn)
	defer cancel()
	e.s.close(ctx)
}

// sessionUse says whether a call may run on a kept session.
type sessionUse int

const (
	// freshSession: power actions and console deactivation. They never run
	// on a kept session: a kept session that turned out dead would have
	// the action sent twice (on it, then on a new one).
	freshSession sessionUse = iota
	// keptSession: power status and boot device, which may be sent again.
	keptSession
)

// poolKey is b's key in its Sessions.
func (b *BMC) poolKey() poolKey {
	return poolKey{label: b.label, addr: b.addr, port: b.port, user: b.user, pass: b.pass, cipher: b.cipher}
}

// keep gives s to the pool for the node's next call, or closes it when
// nothing is kept.
func (b *BMC) keep(s *session) {
	if b.cfg.Sessions == nil || b.cfg.SessionLinger < 0 {
		b.closeSession(s)
		return
	}
	b.cfg.Sessions.put(b.poolKey(), s, b.cfg.SessionLinger, b.cfg.AttemptTimeout)
}

// closeSession ends s with Close Session bounded by AttemptTimeout, not by
// the call's context: a caller that gave up (its context expired or was
// cancelled) must not leave the session holding one of the BMC's few
// session slots until the BMC times it out.
func (b *BMC) closeSession(s *session) {
	ctx, cancel := context.WithTimeout(context.Background(), b.cfg.AttemptTimeout)
	defer cancel()
	s.close(ctx)
}

// onKept runs fn on the node's kept session, if there is one (done false
// when there is none, or it turned out dead: the caller opens a new one).
// On a kept session go-ipmi does not resend: a request the BMC leaves
// unanswered for AttemptTimeout, or answered with anything but an IPMI
// response, means the BMC restarted or dropped the session, and the call
// runs once more on a new session (which resends as usual). A completion
// code is the BMC's answer: the call fails with it, as on a new session.
func (b *BMC) onKept(ctx context.Context, fn func(context.Context, *client.Client) error) (done bool, err error) {
	if b.cfg.Sessions == nil || b.cfg.SessionLinger < 0 {
		return false, nil
	}
	s := b.cfg.Sessions.take(b.poolKey())
	if s == nil {
		return false, nil
	}
	s.c.WithRetry(0)
	err = fn(ctx, s.c)
	s.c.WithRetry(lanRetries)
	if err == nil {
		b.cfg.Sessions.reused.Add(1)
		b.keep(s)
		return true, nil
	}
	if _, isCC := completionCode(err); isCC || ctx.Err() != nil {
		b.cfg.Sessions.reused.Add(1)
		b.closeSession(s)
		return true, b.bmcError(ctx, s.d, true, "IPMI request to", err)
	}
	s.d.close() // dead: no Close Session
	b.cfg.Sessions.reopened.Add(1)
	b.log.WithError(err).Debug("ipmi_kept_session_dead")
	return false, nil
}

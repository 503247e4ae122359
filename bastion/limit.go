package bastion

import (
	"context"
	"sync"
	"time"

	"github.com/obmd/obmd/bastion/sessions"
)

// LimitConfig bounds guessing. A failure is a wrong node token (SSH
// password or keyboard-interactive, or the admin API's ?token= routes), a
// wrong admin credential (it counts against the source only), or an SSH
// connection that offered public keys and ended without authenticating:
// once per connection, however many keys it offered (OpenSSH offers every
// key it has; one it holds that is not registered is no guess).
type LimitConfig struct {
	// PerSource failures within Window lock the source address out of
	// every node for Lockout (default 5 in 1 min, locked 1 min).
	PerSource int `yaml:"per_source"`
	// PerNode failures within Window, from any sources, put the node under
	// attack for Lockout: while it is, a source that has failed on it even
	// once is refused, so a distributed guesser gets one try per address,
	// and addresses that never failed are not slowed (default 20).
	PerNode int           `yaml:"per_node"`
	Window  time.Duration `yaml:"window"`
	Lockout time.Duration `yaml:"lockout"`
}

func (c *LimitConfig) defaults() {
	if c.PerSource <= 0 {
		c.PerSource = 5
	}
	if c.PerNode <= 0 {
		c.PerNode = 20
	}
	if c.Window <= 0 {
		c.Window = time.Minute
	}
	if c.Lockout <= 0 {
		c.Lockout = time.Minute
	}
}

// maxTracked bounds the limiter's memory; past it, stale entries are swept
// (at most once a second) and new ones are not tracked.
const maxTracked = 100_000

// Limiter counts authentication failures in fixed windows and refuses the
// sources and nodes past LimitConfig. One Limiter serves the SSH front door
// and the admin API, so a source locked out on one is locked out on both.
// A source is the client's address without port; an IPv6 /64 counts as one
// (sessions.SourceKey). Safe for concurrent use.
type Limiter struct {
	cfg LimitConfig
	now func() time.Time

	// wait bounds how long a try may wait for the source's tries in flight
	// to settle (default 5 s).
	wait time.Duration

	mu        sync.Mutex
	settled   chan struct{} // closed and replaced by every end
	lastSweep time.Time
	src       map[string]*counter
	node      map[string]*counter
	pairs     map[[2]string]time.Time // (node, source) -> last failure
}

type counter struct {
	start   time.Time // window start
	n       int       // failures in the window
	pending int       // tries begun and not yet ended (sources only)
	locked  time.Time // locked until
	refused int       // tries refused during the current lockout
}

// NewLimiter returns a Limiter; unset fields of cfg take their defaults.
func NewLimiter(cfg LimitConfig, now func() time.Time) *Limiter {
	cfg.defaults()
	return &Limiter{cfg: cfg, now: now, wait: 5 * time.Second, settled: make(chan struct{}),
		src: map[string]*counter{}, node: map[string]*counter{}, pairs: map[[2]string]time.Time{}}
}

// Begin reports whether source may try a secret on node ("" for the admin
// credential, which belongs to no node), and if not, which
// limit refused it ("source" or "node") and whether this is the first
// refusal of that lockout. Callers audit that one and only count the rest:
// the failures that caused the lockout are audited already, so a flood
// from a locked-out source costs no database writes.
//
// An allowed try holds one of the source's PerSource tries until end
// reports how it went, so guesses sent in parallel from one address get no
// more tries between them than sequential ones would. A try beyond that
// budget waits (up to l.wait, or until ctx ends) for earlier ones to settle
// rather than being refused: correct logins settle in milliseconds and free
// their slot, guesses settle as failures and lock the source. So many
// parallel logins from one address (automation, a NAT) are delayed a
// little, never refused for being many. A try that gives up waiting is
// refused by "source", never as a first refusal (the tries it waited for
// are audited). Every allowed Begin must be followed by one End.
func (l *Limiter) Begin(ctx context.Context, source, node string) (ok bool, which string, first bool) {
	source = sessions.SourceKey(source)
	var timeout <-chan time.Time
	for {
		l.mu.Lock()
		ok, which, first, full := l.beginLocked(source, node)
		settled := l.settled
		l.mu.Unlock()
		if !full {
			return ok, which, first
		}
		if timeout == nil {
			t := time.NewTimer(l.wait)
			defer t.Stop()
			timeout = t.C
		}
		select {
		case <-settled:
		case <-timeout:
			return false, "source", false
		case <-ctx.Done():
			return false, "source", false
		}
	}
}

// beginLocked is one attempt of begin; full reports that the source's tries
// in flight use its whole budget (try again once one settles). l.mu held.
func (l *Limiter) beginLocked(source, node string) (ok bool, which string, first, full bool) {
	now := l.now()
	c := l.src[source]
	if c != nil && now.Before(c.locked) {
		c.refused++
		return false, "source", c.refused == 1, false
	}
	if nc := l.node[node]; nc != nil && now.Before(nc.locked) {
		if last, ok := l.pairs[[2]string{node, source}]; ok && now.Sub(last) < l.cfg.Window+l.cfg.Lockout {
			nc.refused++
			return false, "node", nc.refused == 1, false
		}
	}
	if c == nil {
		if l.full(now) {
			return true, "", false, false // a very wide attack: new sources are not tracked
		}
		c = &counter{start: now}
		l.src[source] = c
	}
	if now.Sub(c.start) >= l.cfg.Window {
		c.start, c.n = now, 0
	}
	// Failures already counted lock the source (above); tries in flight
	// count as failures to come.
	if c.pending > 0 && c.n+c.pending >= l.cfg.PerSource {
		return false, "", false, true
	}
	c.pending++
	return true, "", false, false
}

// End settles a try that Begin allowed; a failed one counts against the
// source and the node.
func (l *Limiter) End(source, node string, failed bool) {
	source = sessions.SourceKey(source)
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	if c := l.src[source]; c != nil && c.pending > 0 {
		c.pending--
	}
	close(l.settled) // wake tries waiting for a slot
	l.settled = make(chan struct{})
	if failed {
		l.countLocked(source, node, now)
	}
}

// Fail counts a failed login that held no try of Begin: an SSH connection
// that ended without authenticating after only offering keys.
func (l *Limiter) Fail(source, node string) {
	source = sessions.SourceKey(source)
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	l.countLocked(source, node, now)
}

// countLocked counts a failure against the source and the node (none for
// ""). l.mu held.
func (l *Limiter) countLocked(source, node string, now time.Time) {
	full := l.full(now)
	// At the cap (a very wide attack), only entries already tracked keep
	// counting, so memory stays bounded and tracked nodes still go under attack.
	if _, ok := l.src[source]; ok || !full {
		l.bump(l.src, source, l.cfg.PerSource, now)
	}
	if node == "" {
		return
	}
	if _, ok := l.node[node]; ok || !full {
		l.bump(l.node, node, l.cfg.PerNode, now)
	}
	if !full {
		l.pairs[[2]string{node, source}] = now
	}
}

// full reports whether the limiter tracks as much as it may, after
// sweeping stale entries (at most once a second). l.mu held.
func (l *Limiter) full(now time.Time) bool {
	if l.size() <= maxTracked {
		return false
	}
	if now.Sub(l.lastSweep) >= time.Second {
		l.sweep(now)
		l.lastSweep = now
	}
	return l.size() > maxTracked
}

func (l *Limiter) size() int { return len(l.src) + len(l.node) + len(l.pairs) }

func (l *Limiter) bump(m map[string]*counter, key string, limit int, now time.Time) {
	c := m[key]
	if c == nil {
		c = &counter{start: now}
		m[key] = c
	}
	if now.Sub(c.start) >= l.cfg.Window {
		c.start, c.n = now, 0
	}
	c.n++
	if c.n >= limit {
		if !now.Before(c.locked) { // a new lockout, not one extended by tries that were in flight
			c.refused = 0
		}
		c.locked = now.Add(l.cfg.Lockout)
	}
}

// sweep drops entries that can no longer matter.
func (l *Limiter) sweep(now time.Time) {
	horizon := l.cfg.Window + l.cfg.Lockout
	for _, m := range []map[string]*counter{l.src, l.node} {
		for k, c := range m {
			if now.Sub(c.start) > horizon && now.After(c.locked) && c.pending == 0 {
				delete(m, k)
			}
		}
	}
	for k, t := range l.pairs {
		if now.Sub(t) > horizon {
			delete(l.pairs, k)
		}
	}
}

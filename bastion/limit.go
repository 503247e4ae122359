package bastion

import (
	"sync"
	"time"
)

// LimitConfig bounds guessing of node tokens. Only password and
// keyboard-interactive failures count: a public key that is not registered
// cannot be guessed into being, and OpenSSH offers every key it has.
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

// limiter counts authentication failures in fixed windows. Safe for
// concurrent use.
type limiter struct {
	cfg LimitConfig
	now func() time.Time

	mu        sync.Mutex
	lastSweep time.Time
	src       map[string]*counter
	node      map[string]*counter
	pairs     map[[2]string]time.Time // (node, source) -> last failure
}

type counter struct {
	start  time.Time // window start
	n      int
	locked time.Time // locked until
}

func newLimiter(cfg LimitConfig, now func() time.Time) *limiter {
	cfg.defaults()
	return &limiter{cfg: cfg, now: now, src: map[string]*counter{}, node: map[string]*counter{}, pairs: map[[2]string]time.Time{}}
}

// allow reports whether source may try a secret on node now, and if not,
// which limit refused it ("source" or "node").
func (l *limiter) allow(source, node string) (ok bool, which string) {
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	if c := l.src[source]; c != nil && now.Before(c.locked) {
		return false, "source"
	}
	if c := l.node[node]; c != nil && now.Before(c.locked) {
		if last, ok := l.pairs[[2]string{node, source}]; ok && now.Sub(last) < l.cfg.Window+l.cfg.Lockout {
			return false, "node"
		}
	}
	return true, ""
}

// fail records a failed attempt of source on node.
func (l *limiter) fail(source, node string) {
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	full := len(l.src)+len(l.node)+len(l.pairs) > maxTracked
	if full && now.Sub(l.lastSweep) >= time.Second {
		l.sweep(now)
		l.lastSweep = now
		full = len(l.src)+len(l.node)+len(l.pairs) > maxTracked
	}
	// At the cap (a very wide attack), only entries already tracked keep
	// counting, so memory stays bounded and tracked nodes still go under attack.
	if _, ok := l.src[source]; ok || !full {
		l.bump(l.src, source, l.cfg.PerSource, now)
	}
	if _, ok := l.node[node]; ok || !full {
		l.bump(l.node, node, l.cfg.PerNode, now)
	}
	if !full {
		l.pairs[[2]string{node, source}] = now
	}
}

func (l *limiter) bump(m map[string]*counter, key string, limit int, now time.Time) {
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
		c.locked = now.Add(l.cfg.Lockout)
	}
}

// sweep drops entries that can no longer matter.
func (l *limiter) sweep(now time.Time) {
	horizon := l.cfg.Window + l.cfg.Lockout
	for _, m := range []map[string]*counter{l.src, l.node} {
		for k, c := range m {
			if now.Sub(c.start) > horizon && now.After(c.locked) {
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

// Package authlimit owns the guessing limits: failed secrets counted per
// source address and per node, and the lockouts past them.
//
// It counts failed secrets (node tokens over SSH and through the admin API,
// wrong admin credentials, SSH connections that offered keys and never
// logged in) per source address and per node, and refuses the sources and
// nodes past its Config. One Limiter serves both doors, so a source locked
// out on one is locked out on both; a correct admin credential never reaches
// it (the admin API checks that first). Lockouts and Unlock let the operator
// see and lift lockouts (the admin API's /v1/lockouts). Run, owned by the
// daemon's run group, sweeps expired entries.
package authlimit

import (
	"context"
	"errors"
	"hash/maphash"
	"sync"
	"time"

	"github.com/obmd/obmd/bastion/access/sessions"
	"github.com/obmd/obmd/db"
)

// Config bounds guessing (the YAML section auth_limits). A failure is a wrong node token (SSH
// password or keyboard-interactive, or the admin API's ?token= routes, on a
// node that exists or not), a wrong admin credential (it counts against the
// source only), or an SSH connection that offered public keys and ended
// without authenticating: once per connection, however many keys it
// offered (OpenSSH offers every key it has; one it holds that is not
// registered is no guess).
type Config struct {
	// PerSource failures within Window lock the source address out of
	// every node for Lockout (default 5 in 1 min, locked 1 min). A correct
	// admin credential is never refused by it (the admin API checks it
	// first); a correct node token from a locked-out source is.
	PerSource int `yaml:"per_source"`
	// PerNode failures within Window, from any sources, put the node under
	// attack for Lockout: while it is, a source that has failed on it even
	// once is refused, so a distributed guesser gets one try per address,
	// and addresses that never failed are not slowed (default 20). Every
	// name that is no node counts as one node ("unknown"), so names cost
	// no memory.
	PerNode int           `yaml:"per_node"`
	Window  time.Duration `yaml:"window"`
	Lockout time.Duration `yaml:"lockout"`
}

// WithDefaults returns c with its unset fields at their defaults, or an
// error for a negative one (there is no "none": guessing is always bounded).
func (c Config) WithDefaults() (Config, error) {
	if c.PerSource < 0 || c.PerNode < 0 || c.Window < 0 || c.Lockout < 0 {
		return c, errors.New("per_source, per_node, window and lockout must not be negative")
	}
	c.defaults()
	return c, nil
}

func (c *Config) defaults() {
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

// maxTracked bounds the limiter's memory between sweeps; past it, stale
// entries are swept at once (at most once a second) and new ones are not
// tracked.
const maxTracked = 100_000

// unknownNode is the key under which every name that is no node counts.
const unknownNode uint64 = 0

// Limiter counts authentication failures in fixed windows and refuses the
// sources and nodes past Config. One Limiter serves the SSH front door
// and the admin API, so a source locked out on one is locked out on both.
// A source is the client's address without port (behind a balancer, the
// real client's: bastion/internal/realip); an IPv6 /64 counts as one
// (sessions.SourceKey). Safe for concurrent use.
//
// A try is Begin (the source's budget), the caller's lookup of the node,
// Judge (the node's state: only then is it known whether the node exists,
// and the lookup is one the caller makes anyway), the secret's check, End.
//
// Memory: one entry per source that failed, per node that exists and
// failed, and per (node, source) pair that failed, each of a bounded size
// (a node is keyed by a hash of its name and keeps its name, at most a
// label's length, for Lockouts; names that are no node share one entry
// and keep none); Run sweeps entries that can no longer matter, and at most
// maxTracked are held between sweeps.
type Limiter struct {
	cfg  Config
	now  func() time.Time
	seed maphash.Seed

	// wait bounds how long a try may wait without any of the source's
	// tries in flight settling (default 5 s).
	wait time.Duration
	// sweepEvery is Run's period (default a quarter of Window + Lockout,
	// at least 1 s).
	sweepEvery time.Duration

	mu        sync.Mutex
	lastSweep time.Time
	src       map[string]*counter
	node      map[uint64]*counter
	pairs     map[pair]time.Time // last failure of source on node
}

type pair struct {
	node uint64
	src  string
}

type counter struct {
	// name is a node's label ("" for a source, and for the entry of the
	// names that are no node), for Lockouts.
	name    string
	start   time.Time // window start
	n       int       // failures in the window
	pending int       // tries begun and not yet ended (sources only)
	locked  time.Time // locked until
	refused int       // tries refused during the current lockout
	// settled is made by a try waiting for one of the source's tries in
	// flight to settle, and closed by the next End of the source (sources
	// only): a try wakes only the waiters of its own address.
	settled chan struct{}
}

// New returns a Limiter; unset fields of cfg take their defaults.
// It starts nothing: Run sweeps it.
func New(cfg Config, now func() time.Time) *Limiter {
	cfg.defaults()
	every := (cfg.Window + cfg.Lockout) / 4
	if every < time.Second {
		every = time.Second
	}
	return &Limiter{cfg: cfg, now: now, seed: maphash.MakeSeed(), wait: 5 * time.Second, sweepEvery: every,
		src: map[string]*counter{}, node: map[uint64]*counter{}, pairs: map[pair]time.Time{}}
}

// Run sweeps expired entries periodically until ctx ends; its caller owns
// it (the daemon's run group). It returns nil.
func (l *Limiter) Run(ctx context.Context) error {
	t := time.NewTicker(l.sweepEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		l.mu.Lock()
		now := l.now()
		l.sweep(now)
		l.lastSweep = now
		l.mu.Unlock()
	}
}

// Tracked is the number of entries held (for metrics and tests).
func (l *Limiter) Tracked() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.size()
}

// nodeKey is node's key: a hash of its name if it exists, else
// unknownNode. Names longer than a label can be are never nodes.
func (l *Limiter) nodeKey(node string, exists bool) uint64 {
	if !exists || len(node) > db.MaxLabelLen {
		return unknownNode
	}
	if k := maphash.String(l.seed, node); k != unknownNode {
		return k
	}
	return unknownNode + 1
}

// sourceKey bounds the key of a source (SourceKey of an address is short;
// anything else is cut).
func sourceKey(source string) string {
	source = sessions.SourceKey(source)
	if len(source) > 64 {
		source = source[:64]
	}
	return source
}

// Begin reports whether source may try a secret, and if not, whether this
// is the first refusal of the source's lockout. Callers audit that one and
// only count the rest: the failures that caused the lockout are audited
// already, so a flood from a locked-out source costs no database writes.
//
// An allowed try holds one of the source's PerSource tries until End
// reports how it went, so guesses sent in parallel from one address get no
// more tries between them than sequential ones would. A try beyond that
// budget waits for earlier ones to settle rather than being refused:
// correct logins settle and free their slot, guesses settle as failures and
// lock the source. So many parallel logins from one address (automation, a
// NAT, a cloud controller's calls for every node) are delayed, never
// refused for being many, however long the queue takes on a loaded
// machine: the bound, l.wait, is on a wait during which none of the
// source's tries settles (a lookup that hangs), not on the whole wait; ctx
// (the connection's) bounds that. A try that gives up waiting is refused,
// never as a first refusal (the tries it waited for are audited). Every
// allowed Begin must be followed by one End.
func (l *Limiter) Begin(ctx context.Context, source string) (ok, first bool) {
	source = sourceKey(source)
	for {
		l.mu.Lock()
		ok, first, settled := l.beginLocked(source)
		l.mu.Unlock()
		if settled == nil {
			return ok, first
		}
		if !l.awaitSettled(ctx, settled) {
			return false, false
		}
	}
}

// awaitSettled waits until settled is closed (one of the source's tries
// settled: look again), and reports false if l.wait passes first or ctx
// ends.
func (l *Limiter) awaitSettled(ctx context.Context, settled <-chan struct{}) bool {
	t := time.NewTimer(l.wait)
	defer t.Stop()
	select {
	case <-settled:
		return true
	case <-t.C:
	case <-ctx.Done():
	}
	return false
}

// beginLocked is one attempt of Begin; when the source's tries in flight
// use its whole budget it returns a channel closed once one settles (try
// again then). l.mu held.
func (l *Limiter) beginLocked(source string) (ok, first bool, settled <-chan struct{}) {
	now := l.now()
	c := l.src[source]
	if c != nil && now.Before(c.locked) {
		c.refused++
		return false, c.refused == 1, nil
	}
	if c == nil {
		if l.full(now) {
			return true, false, nil // a very wide attack: new sources are not tracked
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
		if c.settled == nil {
			c.settled = make(chan struct{})
		}
		return false, false, c.settled
	}
	c.pending++
	return true, false, nil
}

// Judge reports whether a try that Begin allowed may go on to check its
// secret on node, now that the caller's lookup has told whether the node
// exists: not if the node (or, for a name that is no node, the one entry
// of all such names) is under attack and source has failed on it; and if
// not, whether this is the first refusal of the node's lockout (audit it,
// as for Begin). A refused try still ends with End.
func (l *Limiter) Judge(source, node string, exists bool) (ok, first bool) {
	source, k := sourceKey(source), l.nodeKey(node, exists)
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	nc := l.node[k]
	if nc == nil || !now.Before(nc.locked) {
		return true, false
	}
	if last, ok := l.pairs[pair{k, source}]; ok && now.Sub(last) < l.cfg.Window+l.cfg.Lockout {
		nc.refused++
		return false, nc.refused == 1
	}
	return true, false
}

// End settles a try that Begin allowed; a failed one counts against the
// source and, unless node is "" (the admin credential, which belongs to no
// node), against the node (exists as the caller's lookup said).
func (l *Limiter) End(source, node string, exists, failed bool) {
	source, k := sourceKey(source), l.nodeKey(node, exists)
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	if c := l.src[source]; c != nil && c.pending > 0 {
		c.pending--
		if c.settled != nil { // wake the source's tries waiting for a slot
			close(c.settled)
			c.settled = nil
		}
	}
	if failed {
		l.countLocked(source, k, node, now)
	}
}

// Fail counts a failed login that held no try of Begin: an SSH connection
// that ended without authenticating after only offering keys.
func (l *Limiter) Fail(source, node string, exists bool) {
	source, k := sourceKey(source), l.nodeKey(node, exists)
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	l.countLocked(source, k, node, now)
}

// countLocked counts a failure against the source and, unless label is ""
// (the admin credential), the node (key node). l.mu held.
func (l *Limiter) countLocked(source string, node uint64, label string, now time.Time) {
	full := l.full(now)
	// At the cap (a very wide attack), only entries already tracked keep
	// counting, so memory stays bounded and tracked nodes still go under attack.
	if _, ok := l.src[source]; ok || !full {
		bump(l, l.src[source], source, "", l.src, l.cfg.PerSource, now)
	}
	if label == "" {
		return
	}
	if node == unknownNode {
		label = ""
	}
	if _, ok := l.node[node]; ok || !full {
		bump(l, l.node[node], node, label, l.node, l.cfg.PerNode, now)
	}
	if !full {
		l.pairs[pair{node, source}] = now
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

// bump counts one failure on c (nil: a new entry of m under key, named
// name) and locks it at limit.
func bump[K comparable](l *Limiter, c *counter, key K, name string, m map[K]*counter, limit int, now time.Time) {
	if c == nil {
		c = &counter{name: name, start: now}
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

// sweep drops entries that can no longer matter. l.mu held.
func (l *Limiter) sweep(now time.Time) {
	horizon := l.cfg.Window + l.cfg.Lockout
	stale := func(c *counter) bool { return now.Sub(c.start) > horizon && now.After(c.locked) && c.pending == 0 }
	for k, c := range l.src {
		if stale(c) {
			delete(l.src, k)
		}
	}
	for k, c := range l.node {
		if stale(c) {
			delete(l.node, k)
		}
	}
	for k, t := range l.pairs {
		if now.Sub(t) > horizon {
			delete(l.pairs, k)
		}
	}
}

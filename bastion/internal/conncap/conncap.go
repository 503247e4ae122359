// Package conncap bounds the connections a listener holds, so that clients
// without credentials cannot exhaust obmd's file descriptors.
//
// The caps never keep out a client that has credentials.
//
// A connection is a stranger until its server vouches for it, at one of two
// levels. Trust is for a credential that must never be kept out (the admin
// API's admin credential; the peer server's authenticated replica): such a
// connection is never closed to make room. TrustTenant is for a tenant's
// credential (the admin API's node token, once the request has been read
// whole and its session has started): such a connection leaves the
// stranger caps, but it may be closed to make room at the overall cap, and
// a source holds at most MaxTenantsPerSource of them; a tenant must not
// hold the port against the rotation that would cut it.
//
// Strangers are capped globally and per source address; every connection
// is capped too (the file descriptors the listener may use). A cap never
// refuses a new connection while a stranger or a tenant connection holds a
// slot: the oldest stranger (of the same source, for the per-source cap) is
// closed to make room, then, at the overall cap, a stranger or a tenant
// connection (of the source holding the most; for tenant connections, its
// oldest idle one, else its oldest). Only when every slot is held by trusted
// connections is the new one refused.
//
// The connection closed for the global caps is taken among the sources that
// have never had a connection trusted (of the last MaxFriends that have, the
// "friends") while any holds one: at the overall cap their strangers, then
// their tenant connections, then the friends' strangers, then the friends'
// tenant connections. A flood without credentials, or of a tenant's
// connections, therefore pushes out its own connections: a client that has
// authenticated before (HIL) keeps its new connection while it
// authenticates again, and its tenant connections (console streams),
// whatever the flood; a
// first-time client holding one connection is at risk only from a flood
// spread over as many addresses as the stranger cap has slots, and then only
// if it takes longer to authenticate than that flood takes to open as many
// connections.
package conncap

import (
	"container/list"
	"context"
	"errors"
	"net"
	"sync"
	"time"

	"github.com/sirupsen/logrus"
)

// Config sets a Listener's caps.
type Config struct {
	// Max bounds every open connection. Required (> 0).
	Max int
	// MaxStrangers bounds the connections not trusted yet (default and at
	// most Max).
	MaxStrangers int
	// MaxStrangersPerSource bounds those from one source (default and at
	// most MaxStrangers).
	MaxStrangersPerSource int
	// MaxTenantsPerSource bounds the connections of one source trusted with
	// TrustTenant (default and at most Max); over it, the source's oldest
	// idle one, else its oldest, is closed.
	MaxTenantsPerSource int
	// Source maps a remote address to the key the per-source cap counts
	// (default: the IP address).
	Source func(net.Addr) string
	// MaxFriends is how many sources that have had a connection trusted
	// (Trust) are remembered, most recent first (default 1024).
	MaxFriends int
	// Name names the listener in logs ("admin", "peer").
	Name string
	// LogEvery is the least time between two log lines about closed or
	// refused connections (default 10 s): a flood writes a few lines, not
	// one per connection.
	LogEvery time.Duration
}

// Stats counts what the caps have done since the listener was created.
type Stats struct {
	Open, Strangers, Tenants int    // open connections, of which strangers and tenant connections
	Evicted                  uint64 // strangers closed to make room
	EvictedTenants           uint64 // tenant connections closed to make room
	Refused                  uint64 // new connections closed: every slot trusted
}

// Listener is a net.Listener whose connections are counted and capped.
// Accept returns *Conn.
type Listener struct {
	net.Listener
	cfg Config
	log logrus.FieldLogger

	mu        sync.Mutex
	open      int
	strangers list.List          // of *Conn, oldest first
	tenants   list.List          // of *Conn, oldest first
	trusted   list.List          // of *Conn, oldest first
	sources   map[string]*source // sources with strangers or tenant connections
	// Strangers and tenant connections by source, of the sources that are
	// not friends and of the friends.
	others, friendly       Tally[*source]
	tenOthers, tenFriendly Tally[*source]
	friends                friends
	stats                  Stats
	logged                 Stats // stats at the last log line
	lastLog                time.Time
}

// New wraps l. It starts nothing.
func New(l net.Listener, cfg Config, log logrus.FieldLogger) (*Listener, error) {
	if l == nil || log == nil {
		return nil, errors.New("conncap: missing listener or logger")
	}
	if cfg.Max <= 0 {
		return nil, errors.New("conncap: Max must be positive")
	}
	if cfg.MaxStrangers <= 0 || cfg.MaxStrangers > cfg.Max {
		cfg.MaxStrangers = cfg.Max
	}
	if cfg.MaxStrangersPerSource <= 0 || cfg.MaxStrangersPerSource > cfg.MaxStrangers {
		cfg.MaxStrangersPerSource = cfg.MaxStrangers
	}
	if cfg.MaxTenantsPerSource <= 0 || cfg.MaxTenantsPerSource > cfg.Max {
		cfg.MaxTenantsPerSource = cfg.Max
	}
	if cfg.Source == nil {
		cfg.Source = hostOf
	}
	if cfg.MaxFriends <= 0 {
		cfg.MaxFriends = 1024
	}
	if cfg.LogEvery <= 0 {
		cfg.LogEvery = 10 * time.Second
	}
	return &Listener{Listener: l, cfg: cfg, log: log, sources: map[string]*source{},
		friends: newFriends(cfg.MaxFriends)}, nil
}

func hostOf(a net.Addr) string {
	if t, ok := a.(*net.TCPAddr); ok {
		return t.IP.String()
	}
	host, _, err := net.SplitHostPort(a.String())
	if err != nil {
		return a.String()
	}
	return host
}

// Accept waits for a connection the caps admit, making room as the package
// comment says. Errors of the wrapped listener are returned as they are, so
// that servers retry the temporary ones (EMFILE) as usual.
func (l *Listener) Accept() (net.Conn, error) {
	for {
		nc, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if c := l.admit(nc); c != nil {
			return c, nil
		}
	}
}

// Stats returns the current counts.
func (l *Listener) Stats() Stats {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.stats
	s.Open, s.Strangers, s.Tenants = l.open, l.strangers.Len(), l.tenants.Len()
	return s
}

// admit makes room for nc and returns it as a stranger, or closes it and
// returns nil when no room can be made.
func (l *Listener) admit(nc net.Conn) *Conn {
	c := &Conn{Conn: nc, l: l, src: l.cfg.Source(nc.RemoteAddr())}
	var victims []*Conn
	l.mu.Lock()
	if s := l.sources[c.src]; s != nil && s.strangers.Len() >= l.cfg.MaxStrangersPerSource {
		victims = append(victims, l.evictLocked(s.strangers.Front().Value.(*Conn)))
	}
	if l.strangers.Len() >= l.cfg.MaxStrangers {
		victims = append(victims, l.evictLocked(l.heaviestLocked()))
	}
	refused := false
	if l.open >= l.cfg.Max {
		if v := l.victimLocked(); v != nil {
			victims = append(victims, l.evictLocked(v))
		} else {
			refused = true
			l.stats.Refused++
		}
	}
	if !refused {
		l.open++
		c.all = l.strangers.PushBack(c)
		l.addToSourceLocked(c, l.strangerKind())
	}
	logNow := l.logDueLocked()
	l.mu.Unlock()
	for _, v := range victims {
		v.Conn.Close() // its server's Close finds it released already
	}
	if refused {
		nc.Close()
	}
	if logNow != nil {
		l.log.WithFields(logrus.Fields{"listener": l.cfg.Name, "evicted": logNow.Evicted, "evicted_tenants": logNow.EvictedTenants,
			"refused": logNow.Refused, "open": logNow.Open, "strangers": logNow.Strangers, "max": l.cfg.Max,
			"max_strangers": l.cfg.MaxStrangers, "max_strangers_per_source": l.cfg.MaxStrangersPerSource}).Warn("conns_capped")
	}
	if refused {
		return nil
	}
	return c
}

// victimLocked picks the connection to close at the overall cap
// (overallVictimLocked), or none: trusted connections are never closed to
// make room.
func (l *Listener) victimLocked() *Conn { return l.overallVictimLocked() }

// evictLocked releases c's slot and counts it; the caller closes its
// socket once l.mu is released.
func (l *Listener) evictLocked(c *Conn) *Conn {
	if c.level == levelTenant {
		l.stats.EvictedTenants++
	} else {
		l.stats.Evicted++
	}
	l.releaseLocked(c)
	return c
}

// releaseLocked takes c out of the counts (once).
func (l *Listener) releaseLocked(c *Conn) {
	if c.released {
		return
	}
	c.released = true
	l.open--
	l.unlistLocked(c)
}

// unlistLocked takes c out of the list of its level (and its source's).
func (l *Listener) unlistLocked(c *Conn) {
	switch c.level {
	case levelTrusted:
		l.trusted.Remove(c.all)
	case levelTenant:
		l.tenants.Remove(c.all)
		l.dropFromSourceLocked(c, l.tenantKind())
	default:
		l.strangers.Remove(c.all)
		l.dropFromSourceLocked(c, l.strangerKind())
	}
}

// logDueLocked returns what to log about evictions and refusals since the
// last line, if there are any and LogEvery has passed.
func (l *Listener) logDueLocked() *Stats {
	s := l.stats
	if s.Evicted == l.logged.Evicted && s.EvictedTenants == l.logged.EvictedTenants && s.Refused == l.logged.Refused {
		return nil
	}
	now := time.Now()
	if now.Sub(l.lastLog) < l.cfg.LogEvery {
		return nil
	}
	d := Stats{Open: l.open, Strangers: l.strangers.Len(), Tenants: l.tenants.Len(), Evicted: s.Evicted - l.logged.Evicted,
		EvictedTenants: s.EvictedTenants - l.logged.EvictedTenants, Refused: s.Refused - l.logged.Refused}
	l.logged, l.lastLog = s, now
	return &d
}

// Conn is a connection of a Listener. Close gives its slot back.
type Conn struct {
	net.Conn
	l   *Listener
	src string

	// Under l.mu.
	level          int // levelStranger, levelTenant or levelTrusted
	idle, released bool
	all            *list.Element // in l.strangers, l.tenants or l.trusted
	mine           *list.Element // in its source's strangers or tenants (not trusted)
}

// Levels of trust of a connection.
const (
	levelStranger = iota
	levelTenant
	levelTrusted
)

// Trust marks c as a connection whose client holds a credential that must
// never be kept out (the admin credential, a replica's key): the caps stop
// counting it, it is never closed to make room, and its source becomes a
// friend.
func (c *Conn) Trust() {
	l := c.l
	l.mu.Lock()
	defer l.mu.Unlock()
	if c.level == levelTrusted || c.released {
		return
	}
	l.unlistLocked(c)
	c.level = levelTrusted
	c.all = l.trusted.PushBack(c)
	l.befriendLocked(c.src)
}

// TrustTenant marks c, a stranger, as a connection of a tenant's: the
// stranger caps stop counting it, but it may still be closed to make room
// at the overall cap, and at MaxTenantsPerSource its source's oldest idle
// (else oldest) tenant connection is closed for it.
func (c *Conn) TrustTenant() {
	l := c.l
	l.mu.Lock()
	if c.level != levelStranger || c.released {
		l.mu.Unlock()
		return
	}
	var victim *Conn
	if s := l.sources[c.src]; s != nil && s.tenants.Len() >= l.cfg.MaxTenantsPerSource {
		victim = l.evictLocked(oldestIdle(&s.tenants))
	}
	l.unlistLocked(c)
	c.level = levelTenant
	c.all = l.tenants.PushBack(c)
	l.addToSourceLocked(c, l.tenantKind())
	l.mu.Unlock()
	if victim != nil {
		victim.Conn.Close()
	}
}

// SetIdle records whether c is between requests (HTTP keep-alive): an idle
// tenant connection is the first of its source closed to make room, as a
// client reconnects for its next request.
func (c *Conn) SetIdle(idle bool) {
	c.l.mu.Lock()
	c.idle = idle
	c.l.mu.Unlock()
}

// Close closes the connection and gives its slot back.
func (c *Conn) Close() error {
	err := c.Conn.Close()
	c.l.mu.Lock()
	c.l.releaseLocked(c)
	c.l.mu.Unlock()
	return err
}

// CloseWrite shuts the sending side down when the connection can (TCP):
// net/http does so before closing a connection whose request it refused,
// so that the client reads the answer.
func (c *Conn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// Of returns the *Conn under c, looking through wrappers that expose
// their connection as NetConn (crypto/tls).
func Of(c net.Conn) (*Conn, bool) {
	for c != nil {
		switch x := c.(type) {
		case *Conn:
			return x, true
		case interface{ NetConn() net.Conn }:
			c = x.NetConn()
		default:
			return nil, false
		}
	}
	return nil, false
}

type ctxKey struct{}

// NewContext returns ctx carrying c, for TrustContext (http.Server's
// ConnContext).
func NewContext(ctx context.Context, c *Conn) context.Context {
	return context.WithValue(ctx, ctxKey{}, c)
}

// TrustContext trusts the connection ctx carries (NewContext), if any.
func TrustContext(ctx context.Context) {
	if c, ok := ctx.Value(ctxKey{}).(*Conn); ok {
		c.Trust()
	}
}

// TrustTenantContext trusts the connection ctx carries (NewContext), if
// any, as a tenant's (TrustTenant).
func TrustTenantContext(ctx context.Context) {
	if c, ok := ctx.Value(ctxKey{}).(*Conn); ok {
		c.TrustTenant()
	}
}

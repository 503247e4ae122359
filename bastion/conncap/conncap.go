// Package conncap bounds the connections a listener holds, so that clients
// without credentials cannot exhaust obmd's file descriptors, and so that
// those caps never keep out a client that has one.
//
// A connection is a stranger until its server calls Trust (the admin API:
// once a request on it has presented a valid credential; the peer server:
// once the replica has authenticated). Strangers are capped globally and per
// source address; every connection is capped too (the file descriptors the
// listener may use). A cap never refuses a new connection while a stranger
// holds a slot: the oldest stranger (of the same source, for the per-source
// cap) is closed to make room, then, at the overall cap, the oldest trusted
// connection that is idle between requests. Only when every slot is held by
// a trusted connection busy with a request is the new one refused.
//
// The stranger closed for the global caps is the oldest of the source that
// holds the most strangers, among the sources that have never had a
// connection trusted (of the last MaxFriends that have, the "friends") if
// any hold one. A flood without credentials therefore pushes out its own
// connections: a client that has authenticated before (HIL) keeps its new
// connection while it authenticates again, whatever the flood; a first-time
// client holding one connection is at risk only from a flood spread over as
// many addresses as the stranger cap has slots, and then only if it takes
// longer to authenticate than that flood takes to open as many connections.
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
	// Source maps a remote address to the key the per-source cap counts
	// (default: the IP address).
	Source func(net.Addr) string
	// MaxFriends is how many sources that have had a connection trusted
	// are remembered, most recent first (default 1024).
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
	Open, Strangers int    // open connections, of which strangers
	Evicted         uint64 // strangers closed to make room
	EvictedIdle     uint64 // idle trusted connections closed to make room
	Refused         uint64 // new connections closed: every slot busy and trusted
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
	trusted   list.List          // of *Conn, oldest first
	sources   map[string]*source // sources with strangers
	others    tally              // of the sources that are not friends
	friendly  tally              // of the friends
	friends   friends
	stats     Stats
	logged    Stats // stats at the last log line
	lastLog   time.Time
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
	s.Open, s.Strangers = l.open, l.strangers.Len()
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
		l.addToSourceLocked(c)
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
		l.log.WithFields(logrus.Fields{"listener": l.cfg.Name, "evicted": logNow.Evicted, "evicted_idle": logNow.EvictedIdle,
			"refused": logNow.Refused, "open": logNow.Open, "strangers": logNow.Strangers, "max": l.cfg.Max,
			"max_strangers": l.cfg.MaxStrangers, "max_strangers_per_source": l.cfg.MaxStrangersPerSource}).Warn("conns_capped")
	}
	if refused {
		return nil
	}
	return c
}

// victimLocked picks the connection to close at the overall cap: a
// stranger (heaviestLocked), else the oldest idle trusted connection, else
// none.
func (l *Listener) victimLocked() *Conn {
	if l.strangers.Len() > 0 {
		return l.heaviestLocked()
	}
	for e := l.trusted.Front(); e != nil; e = e.Next() {
		if c := e.Value.(*Conn); c.idle {
			return c
		}
	}
	return nil
}

// evictLocked releases c's slot and counts it; the caller closes its
// socket once l.mu is released.
func (l *Listener) evictLocked(c *Conn) *Conn {
	if c.trusted {
		l.stats.EvictedIdle++
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
	if c.trusted {
		l.trusted.Remove(c.all)
		return
	}
	l.strangers.Remove(c.all)
	l.dropFromSourceLocked(c)
}

// logDueLocked returns what to log about evictions and refusals since the
// last line, if there are any and LogEvery has passed.
func (l *Listener) logDueLocked() *Stats {
	s := l.stats
	if s.Evicted == l.logged.Evicted && s.EvictedIdle == l.logged.EvictedIdle && s.Refused == l.logged.Refused {
		return nil
	}
	now := time.Now()
	if now.Sub(l.lastLog) < l.cfg.LogEvery {
		return nil
	}
	d := Stats{Open: l.open, Strangers: l.strangers.Len(), Evicted: s.Evicted - l.logged.Evicted,
		EvictedIdle: s.EvictedIdle - l.logged.EvictedIdle, Refused: s.Refused - l.logged.Refused}
	l.logged, l.lastLog = s, now
	return &d
}

// Conn is a connection of a Listener. Close gives its slot back.
type Conn struct {
	net.Conn
	l   *Listener
	src string

	// Under l.mu.
	trusted, idle, released bool
	all                     *list.Element // in l.strangers or l.trusted
	mine                    *list.Element // in its source's strangers (strangers only)
}

// Trust marks c as a connection whose client has authenticated: the
// stranger caps stop counting it, and it is closed to make room only while
// idle (SetIdle).
func (c *Conn) Trust() {
	l := c.l
	l.mu.Lock()
	defer l.mu.Unlock()
	if c.trusted || c.released {
		return
	}
	l.strangers.Remove(c.all)
	l.dropFromSourceLocked(c)
	c.trusted = true
	c.all = l.trusted.PushBack(c)
	l.befriendLocked(c.src)
}

// SetIdle records whether c is between requests (HTTP keep-alive): an idle
// trusted connection may be closed to make room at the overall cap, as a
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

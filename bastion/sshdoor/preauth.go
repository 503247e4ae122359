package sshdoor

import (
	"container/list"
	"errors"
	"io"
	"net"
	"sync"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/obmd/obmd/bastion/internal/conncap"
	"github.com/obmd/obmd/bastion/internal/proxyproto"
)

// PreauthStats counts what the front door did to connections before they
// authenticated (metrics).
type PreauthStats struct {
	Conns     int    // open connections, authenticated or not
	Open      int    // connections not authenticated yet
	Expired   uint64 // closed at the login grace time
	Displaced uint64 // closed to make room for a newer connection
	Refused   uint64 // refused: every connection authenticated, and the source (or all) at its cap
}

// admission bounds connections before they authenticate, as OpenSSH's
// LoginGraceTime and MaxStartups do: each has grace to authenticate, in
// whatever phase it stalls (version exchange, key exchange, auth), or a
// timer closes it; and at most maxPre are unauthenticated at once, maxPreSrc
// of them from one source, with maxConnsSrc connections of any kind per
// source and maxConns in all. A new connection that finds a cap full
// displaces an unauthenticated connection it competes with instead of being
// refused: for the per-source caps the source's oldest; for the global ones
// the oldest of the source holding the most unauthenticated connections, a
// lone connection of a source that holds one coming last (when every source
// holds one, the oldest). A flood that never authenticates, from however
// many sources, thus only displaces itself, and a client taking its time at
// the password prompt keeps its one connection while the flood churns.
// Among the candidates the one that has come least far goes first, oldest
// first within a stage: a connection that has sent nothing (silent), then
// one that has sent bytes but not finished its key exchange (speaking),
// then one that has sent an auth request (authenticating). A login from
// the very address of a flood of bare TCP connections thus keeps its place
// however long its key exchange takes on a loaded host, and one past its
// key exchange keeps it against a flood of stalled handshakes too; only a
// flood that completes key exchanges competes with it.
// A source whose connections are all authenticated and at maxConnsSrc is
// refused, and so is any connection when all maxConns are authenticated.
//
// A deadline on the socket would not do: gliderlabs/ssh v0.3.8 resets the
// connection's deadline on every Read and Write (see go-deps notes), so the
// bound is a timer (time.AfterFunc; its short-lived goroutine only closes
// the socket, and end stops it).
type admission struct {
	grace                                   time.Duration
	maxPre, maxPreSrc, maxConnSrc, maxConns int // 0: no limit

	mu     sync.Mutex
	closed bool
	pre    list.List             // unauthenticated tickets, oldest first
	preSrc map[string]*list.List // the same, per source
	heavy  conncap.Tally[string] // sources by their unauthenticated tickets
	conns  map[string]int        // open connections per source
	total  int                   // open connections
	stats  PreauthStats
}

// ticket is one connection's place in the admission.
type ticket struct {
	src     string
	close   func() error // closes the socket; the connection's owner then ends it
	timer   *time.Timer
	el, sel *list.Element // in pre and preSrc while unauthenticated
	counted bool          // holds a place in conns
	stage   stage         // how far the connection has come
}

// stage is how far an unauthenticated connection has come; a lower one is
// displaced first.
type stage uint8

const (
	silent         stage = iota // has sent nothing
	speaking                    // has sent bytes (its version line, its key exchange)
	authenticating              // has sent an auth request: its key exchange is done
)

func newAdmission(grace time.Duration, maxPre, maxPreSrc, maxConnSrc, maxConns int) *admission {
	return &admission{grace: grace, maxPre: maxPre, maxPreSrc: maxPreSrc, maxConnSrc: maxConnSrc, maxConns: maxConns,
		preSrc: map[string]*list.List{}, conns: map[string]int{}}
}

// admit gives a new connection from src a ticket, displacing older
// unauthenticated connections as the caps require (their sockets are
// closed), or refuses it (nil). closeConn closes its socket.
func (g *admission) admit(src string, closeConn func() error) *ticket {
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		return nil
	}
	var victims []*ticket
	displace := func(l *list.List) bool {
		if l == nil || l.Len() == 0 {
			return false
		}
		v := victimOf(l)
		g.dropLocked(v)
		g.stats.Displaced++
		victims = append(victims, v)
		return true
	}
	refuse := func() *ticket {
		g.stats.Refused++
		g.mu.Unlock()
		return nil
	}
	if g.maxConnSrc > 0 && g.conns[src] >= g.maxConnSrc && !displace(g.preSrc[src]) {
		return refuse()
	}
	if l := g.preSrc[src]; g.maxPreSrc > 0 && l != nil && l.Len() >= g.maxPreSrc {
		displace(l)
	}
	if g.maxPre > 0 && g.pre.Len() >= g.maxPre {
		displace(g.heaviestLocked())
	}
	if g.maxConns > 0 && g.total >= g.maxConns && !displace(g.heaviestLocked()) {
		return refuse()
	}
	t := &ticket{src: src, close: closeConn, counted: true}
	t.el = g.pre.PushBack(t)
	l := g.preSrc[src]
	if l == nil {
		l = list.New()
		g.preSrc[src] = l
	}
	t.sel = l.PushBack(t)
	g.heavy.Move(src, l.Len()-1, l.Len())
	g.conns[src]++
	g.total++
	t.timer = time.AfterFunc(g.grace, func() { g.expire(t) })
	g.mu.Unlock()
	for _, v := range victims {
		v.close()
	}
	return t
}

// victimOf is the ticket of l to displace: the oldest of those at the
// lowest stage. l is not empty; it is bounded by a cap, so the walk is
// short.
func victimOf(l *list.List) *ticket {
	v := l.Front().Value.(*ticket)
	for e := l.Front().Next(); e != nil && v.stage > silent; e = e.Next() {
		if t := e.Value.(*ticket); t.stage < v.stage {
			v = t
		}
	}
	return v
}

// advance notes that t's connection has come as far as st: it is then
// displaced after those at a lower stage.
func (g *admission) advance(t *ticket, st stage) {
	g.mu.Lock()
	t.stage = max(t.stage, st)
	g.mu.Unlock()
}

// heaviestLocked is the list to displace from for a global cap: the
// unauthenticated tickets of a source holding the most, or, when none
// holds more than one, all of them (the oldest goes). g.mu held.
func (g *admission) heaviestLocked() *list.List {
	if src, n := g.heavy.Top(); n > 1 {
		return g.preSrc[src]
	}
	return &g.pre
}

// dropLocked takes t out of the unauthenticated lists and gives back its
// place in conns at once (its socket is about to be closed). g.mu held.
func (g *admission) dropLocked(t *ticket) {
	g.unlistLocked(t)
	g.uncountLocked(t)
}

func (g *admission) unlistLocked(t *ticket) {
	if t.el == nil {
		return
	}
	g.pre.Remove(t.el)
	l := g.preSrc[t.src]
	l.Remove(t.sel)
	g.heavy.Move(t.src, l.Len()+1, l.Len())
	if l.Len() == 0 {
		delete(g.preSrc, t.src)
	}
	t.el, t.sel = nil, nil
}

func (g *admission) uncountLocked(t *ticket) {
	if !t.counted {
		return
	}
	t.counted = false
	g.total--
	if g.conns[t.src]--; g.conns[t.src] <= 0 {
		delete(g.conns, t.src)
	}
}

// expire closes t's connection if it has not authenticated.
func (g *admission) expire(t *ticket) {
	g.mu.Lock()
	if t.el == nil {
		g.mu.Unlock()
		return
	}
	g.dropLocked(t)
	g.stats.Expired++
	g.mu.Unlock()
	t.close()
}

// authenticated takes t out of the unauthenticated connections; false if
// it was closed first (it then fails on its own).
func (g *admission) authenticated(t *ticket) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if t.el == nil {
		return false
	}
	t.timer.Stop()
	g.unlistLocked(t)
	return true
}

// end forgets t: its connection has closed.
func (g *admission) end(t *ticket) {
	t.timer.Stop()
	g.mu.Lock()
	g.dropLocked(t)
	g.mu.Unlock()
}

// closeAll refuses new connections and closes every unauthenticated one
// (a shutdown: they belong to no session the registry could end).
func (g *admission) closeAll() {
	g.mu.Lock()
	g.closed = true
	var victims []*ticket
	for e := g.pre.Front(); e != nil; e = e.Next() {
		victims = append(victims, e.Value.(*ticket))
	}
	for _, v := range victims {
		g.dropLocked(v)
	}
	g.mu.Unlock()
	for _, v := range victims {
		v.close()
	}
}

func (g *admission) snapshot() PreauthStats {
	g.mu.Lock()
	defer g.mu.Unlock()
	st := g.stats
	st.Open, st.Conns = g.pre.Len(), g.total
	return st
}

// realClient returns conn as the client's: when conn comes from a listed
// balancer (Config.ProxyProtocolFrom), the PROXY protocol header it must
// send first says who the client is, and a connection without a valid one
// is refused (ok false; conn is left for the caller to close); from anyone
// else a header is not honoured (it is no SSH version line, and the
// handshake fails).
func (s *Server) realClient(conn net.Conn) (_ net.Conn, ok bool) {
	if !s.cfg.ProxyProtocolFrom.ContainsAddr(conn.RemoteAddr()) {
		return conn, true
	}
	pc, err := proxyproto.Accept(conn, s.cfg.ProxyHeaderTimeout)
	if err != nil {
		LogProxyRefused(s.log, conn.RemoteAddr(), err)
		return nil, false
	}
	return pc, true
}

// LogProxyRefused logs a connection from a balancer refused for its PROXY
// header (err): at debug level when the balancer sent nothing (a TCP
// health check: connect, close), else as a warning.
func LogProxyRefused(log logrus.FieldLogger, balancer net.Addr, err error) {
	l := log.WithError(err).WithField("balancer", balancer.String())
	if errors.Is(err, io.EOF) {
		l.Debug("proxy_header_missing")
	} else {
		l.Warn("proxy_header_refused")
	}
}

// PreauthStats reports the connections that have not authenticated.
func (s *Server) PreauthStats() PreauthStats { return s.admit.snapshot() }

// tooMany logs a connection the admission refused.
func (s *Server) tooMany(remote net.Addr) {
	s.log.WithFields(logrus.Fields{"remote": remote.String(), "limit": s.cfg.MaxConnsPerSource}).Warn("too_many_connections")
}

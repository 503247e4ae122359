package conncap

import (
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
)

// server accepts on a capped loopback listener and keeps every connection
// it gets, by the client's local port, so a test can trust or idle them.
type server struct {
	t  *testing.T
	l  *Listener
	mu sync.Mutex
	by map[int]*Conn // client port -> server side
	wg sync.WaitGroup
}

func newServer(t *testing.T, cfg Config) *server {
	t.Helper()
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	log := logrus.New()
	log.SetOutput(io.Discard)
	l, err := New(inner, cfg, log)
	if err != nil {
		t.Fatal(err)
	}
	s := &server{t: t, l: l, by: map[int]*Conn{}}
	s.wg.Add(1)
	go func() { // ends when the listener is closed
		defer s.wg.Done()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			cc := c.(*Conn)
			s.mu.Lock()
			s.by[cc.RemoteAddr().(*net.TCPAddr).Port] = cc
			s.mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		l.Close()
		s.wg.Wait()
		s.mu.Lock()
		defer s.mu.Unlock()
		for _, c := range s.by {
			c.Close()
		}
	})
	return s
}

// dial connects from 127.0.0.<from> and waits until the server holds the
// connection (or has closed it: refused).
func (s *server) dial(from byte) net.Conn {
	s.t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, from)}, Timeout: 5 * time.Second}
	c, err := d.Dial("tcp", s.l.Addr().String())
	if err != nil {
		s.t.Fatal(err)
	}
	s.t.Cleanup(func() { c.Close() })
	port := c.LocalAddr().(*net.TCPAddr).Port
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		s.mu.Lock()
		_, held := s.by[port]
		s.mu.Unlock()
		st := s.l.Stats()
		if held || st.Refused > 0 && closed(c, 0) {
			return c
		}
		time.Sleep(time.Millisecond)
	}
	s.t.Fatalf("connection from 127.0.0.%d neither held nor refused", from)
	return nil
}

// side returns the server side of client connection c.
func (s *server) side(c net.Conn) *Conn {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.by[c.LocalAddr().(*net.TCPAddr).Port]
}

// closed reports whether the server has closed c, waiting up to wait.
func closed(c net.Conn, wait time.Duration) bool {
	c.SetReadDeadline(time.Now().Add(max(wait, time.Millisecond)))
	_, err := c.Read(make([]byte, 1))
	return err != nil && !errors.Is(err, os.ErrDeadlineExceeded)
}

func wantOpen(t *testing.T, what string, c net.Conn) {
	t.Helper()
	if closed(c, 50*time.Millisecond) {
		t.Errorf("%s: closed, want open", what)
	}
}

func wantClosed(t *testing.T, what string, c net.Conn) {
	t.Helper()
	if !closed(c, 2*time.Second) {
		t.Errorf("%s: open, want closed", what)
	}
}

// TestPerSource: a source over its cap loses its own oldest connection,
// never another source's.
func TestPerSource(t *testing.T) {
	s := newServer(t, Config{Max: 100, MaxStrangers: 50, MaxStrangersPerSource: 2})
	other := s.dial(3)
	a1, a2 := s.dial(2), s.dial(2)
	a3 := s.dial(2)
	wantClosed(t, "oldest of 127.0.0.2", a1)
	wantOpen(t, "second of 127.0.0.2", a2)
	wantOpen(t, "newest of 127.0.0.2", a3)
	wantOpen(t, "127.0.0.3", other)
	if st := s.l.Stats(); st.Evicted != 1 || st.Open != 3 || st.Strangers != 3 {
		t.Errorf("got %+v, want 1 evicted, 3 open strangers", st)
	}
}

// TestStrangers: over the stranger cap, the oldest stranger of the source
// holding the most goes, whatever its age against others'; trusted
// connections do not count and stay.
func TestStrangers(t *testing.T) {
	s := newServer(t, Config{Max: 100, MaxStrangers: 4})
	trusted := s.dial(9)
	s.side(trusted).Trust()
	lone := s.dial(2) // the oldest stranger, alone on its source
	heavy := []net.Conn{s.dial(3), s.dial(3), s.dial(3)}
	wantOpen(t, "fourth stranger", heavy[2])
	next := s.dial(4)
	wantClosed(t, "oldest stranger of the heaviest source", heavy[0])
	wantOpen(t, "oldest stranger, alone on its source", lone)
	wantOpen(t, "newest stranger", next)
	// Sources now hold 1, 2 and 1: the one with two loses again.
	s.dial(5)
	wantClosed(t, "oldest stranger of the heaviest source", heavy[1])
	wantOpen(t, "lone stranger", lone)
	wantOpen(t, "trusted", trusted)
}

// TestOverallCap: at the overall cap a stranger goes first, then a tenant
// connection (of the source holding the most, its idle one first); trusted
// connections are never closed, idle or not, and when only they remain,
// the new connection is refused. (Before the two levels of trust, an idle
// trusted connection was closed too: a tenant's node token made its
// connection trusted, so a tenant could hold the port against the admin.)
func TestOverallCap(t *testing.T) {
	s := newServer(t, Config{Max: 3})
	idleAdmin := s.dial(2)
	s.side(idleAdmin).Trust()
	s.side(idleAdmin).SetIdle(true)
	tenantBusy, tenantIdle := s.dial(3), s.dial(3)
	s.side(tenantBusy).TrustTenant()
	s.side(tenantIdle).TrustTenant()
	s.side(tenantIdle).SetIdle(true)

	stranger := s.dial(4)
	wantClosed(t, "idle tenant connection at the overall cap", tenantIdle)
	wantOpen(t, "busy tenant connection", tenantBusy)
	stranger2 := s.dial(5)
	wantClosed(t, "stranger at the overall cap", stranger)
	wantOpen(t, "newer stranger", stranger2)
	s.side(stranger2).Trust()
	next := s.dial(6)
	wantClosed(t, "busy tenant connection, the last one", tenantBusy)
	s.side(next).Trust()

	refused := s.dial(7)
	wantClosed(t, "new connection with every slot trusted", refused)
	for _, c := range []net.Conn{idleAdmin, stranger2, next} {
		wantOpen(t, "trusted", c)
	}
	if st := s.l.Stats(); st.Refused != 1 || st.EvictedTenants != 2 || st.Evicted != 1 || st.Open != 3 {
		t.Errorf("got %+v, want 1 refused, 2 tenant connections and 1 stranger evicted, 3 open", st)
	}

	// A slot given back is taken again.
	s.side(next).Close()
	again := s.dial(8)
	wantOpen(t, "connection after a slot was given back", again)
}

// TestTenantsPerSource: a source over its cap of tenant connections loses
// its own oldest idle one, else its oldest; another source's stay.
func TestTenantsPerSource(t *testing.T) {
	s := newServer(t, Config{Max: 100, MaxTenantsPerSource: 2})
	other := s.dial(3)
	s.side(other).TrustTenant()
	a1, a2, a3 := s.dial(2), s.dial(2), s.dial(2)
	s.side(a1).TrustTenant()
	s.side(a2).TrustTenant()
	s.side(a2).SetIdle(true)
	s.side(a3).TrustTenant()
	wantClosed(t, "idle tenant connection of 127.0.0.2", a2)
	wantOpen(t, "busy tenant connection of 127.0.0.2", a1)
	a4 := s.dial(2)
	s.side(a4).TrustTenant()
	wantClosed(t, "oldest tenant connection of 127.0.0.2", a1)
	for _, c := range []net.Conn{a3, a4, other} {
		wantOpen(t, "tenant connection", c)
	}
	if st := s.l.Stats(); st.EvictedTenants != 2 || st.Tenants != 3 || st.Strangers != 0 {
		t.Errorf("got %+v, want 2 tenant connections evicted, 3 open", st)
	}
}

// TestOverallCapFriendsLast: at the overall cap, full of tenants'
// connections, a friend's new connection (HIL's, still a stranger while it
// sends the admin credential) outlasts newcomers: they push out tenant
// connections of the other sources first, then strangers of theirs, never
// the friend's stranger while those are there. (A tenant flooding with
// console streams otherwise pushed HIL's rotation out.)
func TestOverallCapFriendsLast(t *testing.T) {
	s := newServer(t, Config{Max: 3})
	before := s.dial(9)
	s.side(before).Trust()
	s.side(before).Close()
	var tenants []net.Conn
	for _, from := range []byte{3, 3, 4} {
		c := s.dial(from)
		s.side(c).TrustTenant()
		tenants = append(tenants, c)
	}
	hil := s.dial(9) // a stranger until its request is read
	wantClosed(t, "oldest tenant connection of the heaviest source", tenants[0])
	flood := s.dial(5)
	wantOpen(t, "the friend's stranger, with tenant connections of others to close", hil)
	s.side(flood).TrustTenant()
	s.dial(6) // two tenant connections of others and the friend's stranger: a tenant's goes
	s.dial(7) // now a stranger of another source goes first
	wantOpen(t, "the friend's stranger", hil)
	if st := s.l.Stats(); st.Open != 3 || st.Refused != 0 || st.EvictedTenants != 3 || st.Evicted != 1 {
		t.Errorf("got %+v, want 3 open, 3 tenant connections and 1 stranger evicted, none refused", st)
	}
}

// TestTenantFlood: tenant connections from many sources fill the overall
// cap; a friend's tenant connection (HIL's console stream: HIL's address
// has used the admin credential) and trusted connections stay, and every
// new connection gets a slot.
func TestTenantFlood(t *testing.T) {
	s := newServer(t, Config{Max: 20, MaxStrangers: 10})
	admin := s.dial(9)
	s.side(admin).Trust()
	stream := s.dial(9)
	s.side(stream).TrustTenant()
	for i := range 200 {
		c := s.dial(byte(10 + i%40))
		if sc := s.side(c); sc != nil {
			sc.TrustTenant()
		} else {
			t.Fatalf("connection %d refused with tenant connections to close", i)
		}
	}
	wantOpen(t, "friend's tenant connection", stream)
	wantOpen(t, "trusted connection", admin)
	if st := s.l.Stats(); st.Open != 20 || st.Refused != 0 {
		t.Errorf("got %+v, want 20 open, none refused", st)
	}
}

// TestTrustAfterEviction: trusting or closing a connection that was closed
// to make room changes no count.
func TestTrustAfterEviction(t *testing.T) {
	s := newServer(t, Config{Max: 10, MaxStrangers: 1})
	first := s.dial(2)
	side := s.side(first)
	s.dial(3)
	wantClosed(t, "evicted", first)
	side.Trust()
	side.Close()
	side.Close()
	if st := s.l.Stats(); st.Open != 1 || st.Strangers != 1 {
		t.Errorf("got %+v, want 1 open stranger", st)
	}
}

// TestFlood: many connections from several sources leave at most the
// caps open; a trusted connection survives the flood, and so does a
// newcomer still authenticating, as long as the flood comes from fewer
// sources than the stranger cap has slots.
func TestFlood(t *testing.T) {
	s := newServer(t, Config{Max: 40, MaxStrangers: 20, MaxStrangersPerSource: 8})
	keep := s.dial(200)
	s.side(keep).Trust()
	var flood []net.Conn
	var newcomer net.Conn
	for i := 0; i < 300; i++ {
		flood = append(flood, s.dial(byte(2+i%5)))
		if i == 100 {
			newcomer = s.dial(201)
		}
	}
	open := 0
	for _, c := range flood {
		if !closed(c, 20*time.Millisecond) {
			open++
		}
	}
	if open > 19 {
		t.Errorf("got %d flood connections open, want at most the stranger cap 20 less the newcomer", open)
	}
	wantOpen(t, "trusted connection", keep)
	wantOpen(t, "newcomer", newcomer)
	if st := s.l.Stats(); st.Strangers > 20 || st.Open > 21 {
		t.Errorf("got %+v, want at most 20 strangers", st)
	}
}

func TestConfig(t *testing.T) {
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer inner.Close()
	if _, err := New(inner, Config{}, logrus.New()); err == nil {
		t.Error("Max 0: got no error")
	}
	l, err := New(inner, Config{Max: 5, MaxStrangers: 50, MaxStrangersPerSource: 90}, logrus.New())
	if err != nil {
		t.Fatal(err)
	}
	if l.cfg.MaxStrangers != 5 || l.cfg.MaxStrangersPerSource != 5 {
		t.Errorf("got %+v, want the stranger caps at most Max", l.cfg)
	}
}

// TestFriends: a source that has had a connection trusted keeps its new
// connection, still a stranger, through a flood from more sources than the
// stranger cap has slots (every flood source then holds one stranger, as
// the newcomer does).
func TestFriends(t *testing.T) {
	s := newServer(t, Config{Max: 100, MaxStrangers: 8})
	before := s.dial(9)
	s.side(before).Trust()
	s.side(before).Close()
	var newcomer net.Conn
	for i := 0; i < 200; i++ {
		s.dial(byte(10 + i%40))
		if i == 20 {
			newcomer = s.dial(9)
		}
	}
	wantOpen(t, "newcomer from a friendly source", newcomer)
	if st := s.l.Stats(); st.Strangers != 8 {
		t.Errorf("got %+v, want 8 strangers", st)
	}
}

func TestFriendsBounded(t *testing.T) {
	f := newFriends(2)
	f.add("a")
	f.add("b")
	f.add("a") // most recent again
	if forgot, ok := f.add("c"); !ok || forgot != "b" {
		t.Errorf("got %q, %v; want b forgotten", forgot, ok)
	}
	if !f.has("a") || f.has("b") || !f.has("c") {
		t.Errorf("got a %v, b %v, c %v; want a and c", f.has("a"), f.has("b"), f.has("c"))
	}
}

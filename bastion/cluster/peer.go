package cluster

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"sync"
	"time"

	"github.com/sirupsen/logrus"
	gossh "golang.org/x/crypto/ssh"

	"github.com/obmd/obmd/bastion/internal/sshalgo"
	"github.com/obmd/obmd/db"
	"github.com/obmd/obmd/sol"
	text "github.com/obmd/obmd/sol/printable"
)

// ErrServerClosed is returned by PeerServer.Serve after Close.
var ErrServerClosed = errors.New("cluster: peer server closed")

// Hub is the console hub the peer server attaches relay viewers to
// (sol.Manager).
type Hub interface {
	Attach(ctx context.Context, label string, o sol.AttachOptions) (*sol.Viewer, error)
}

// handshakeTimeout bounds a peer connection that has not authenticated.
const handshakeTimeout = 10 * time.Second

// PeerServer serves this replica's consoles to other replicas: for a node
// whose SOL lease this replica holds, it attaches a relay viewer to the hub
// (live output, no replay) and carries its output, and the relaying
// replica's viewers' input, breaks and write roles, over the peer
// connection. Only a client that proves the shared host key gets
// in.
type PeerServer struct {
	c        *Cluster
	hub      Hub
	sessions Sessions // this replica's, listed and kicked for the others (sessions.go)
	log      logrus.FieldLogger
	cfg      *gossh.ServerConfig

	wg sync.WaitGroup // connection handlers and everything they start

	done chan struct{} // closed by Close

	mu     sync.Mutex
	closed bool
	ls     map[net.Listener]struct{}
	conns  map[net.Conn]struct{}
}

// NewPeerServer returns the peer server of c's replica over hub, serving
// reg's sessions to the other replicas (sessions.go). It starts
// nothing.
func NewPeerServer(c *Cluster, hub Hub, reg Sessions, log logrus.FieldLogger) (*PeerServer, error) {
	if c == nil || hub == nil || reg == nil || log == nil {
		return nil, errors.New("cluster: peer server: missing dependency")
	}
	want := c.hostKey.PublicKey().Marshal()
	cfg := &gossh.ServerConfig{
		ServerVersion: identFor(c.proto),
		MaxAuthTries:  2,
		PublicKeyCallback: func(meta gossh.ConnMetadata, key gossh.PublicKey) (*gossh.Permissions, error) {
			if meta.User() == peerUser && subtle.ConstantTimeCompare(key.Marshal(), want) == 1 {
				return &gossh.Permissions{}, nil
			}
			return nil, errors.New("not an obmd replica of this cluster")
		},
	}
	// Replicas are all obmd: the peer channel never needs the legacy set.
	sshalgo.Modern().Server(cfg)
	hostKey, err := sshalgo.Modern().HostKey(c.hostKey)
	if err != nil {
		return nil, fmt.Errorf("cluster: peer server: %w", err)
	}
	cfg.AddHostKey(hostKey)
	return &PeerServer{c: c, hub: hub, sessions: reg, log: log, cfg: cfg, done: make(chan struct{}),
		ls: map[net.Listener]struct{}{}, conns: map[net.Conn]struct{}{}}, nil
}

// Serve accepts peer connections on l until Close, then returns
// ErrServerClosed.
func (s *PeerServer) Serve(l net.Listener) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		l.Close()
		return ErrServerClosed
	}
	s.ls[l] = struct{}{}
	s.mu.Unlock()
	var delay time.Duration // the wait after a temporary accept error
	for {
		conn, err := l.Accept()
		if err != nil {
			s.mu.Lock()
			closed := s.closed
			s.mu.Unlock()
			if closed {
				return ErrServerClosed
			}
			if !temporary(err) {
				return fmt.Errorf("accept peer: %w", err)
			}
			// Out of file descriptors (EMFILE, ENFILE), a connection
			// aborted before it was accepted: wait and retry, as net/http
			// does, rather than stop serving peers for good.
			delay = min(max(2*delay, 5*time.Millisecond), time.Second)
			s.log.WithError(err).WithField("retry_in", delay.String()).Warn("peer_accept_failed")
			if !s.sleep(delay) {
				return ErrServerClosed
			}
			continue
		}
		delay = 0
		if !s.track(conn) {
			conn.Close()
			return ErrServerClosed
		}
		s.wg.Add(1)
		go func() { // owned by s.wg
			defer s.wg.Done()
			defer s.untrack(conn)
			s.serveConn(conn)
		}()
	}
}

// temporary reports whether an accept error may go away by itself: a
// timeout, or an error that says it is temporary (EMFILE, ENFILE,
// ECONNABORTED, EINTR: syscall.Errno and net.OpError say so).
func temporary(err error) bool {
	var t interface{ Temporary() bool }
	var ne net.Error
	return errors.As(err, &t) && t.Temporary() || errors.As(err, &ne) && ne.Timeout()
}

// sleep waits d, or less if the server closes first; it reports whether
// the server is still open.
func (s *PeerServer) sleep(d time.Duration) bool {
	select {
	case <-time.After(d):
	case <-s.done:
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return !s.closed
}

func (s *PeerServer) track(conn net.Conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	s.conns[conn] = struct{}{}
	return true
}

func (s *PeerServer) untrack(conn net.Conn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.conns, conn)
	conn.Close()
}

// Close stops the listeners, closes every peer connection (their relay
// viewers detach) and waits for the server's goroutines.
func (s *PeerServer) Close() error {
	s.mu.Lock()
	if !s.closed {
		close(s.done)
	}
	s.closed = true
	for l := range s.ls {
		l.Close()
	}
	for c := range s.conns {
		c.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
	return nil
}

// trustable is a connection of a listener that caps unauthenticated
// connections (conncap.Conn): told that a replica has authenticated on it,
// the listener stops counting it as a stranger it may close to make room.
type trustable interface{ Trust() }

// serveConn authenticates one peer connection and serves its channels
// until it closes.
func (s *PeerServer) serveConn(conn net.Conn) {
	conn.SetDeadline(time.Now().Add(handshakeTimeout))
	sc, chans, reqs, err := gossh.NewServerConn(conn, s.cfg)
	if err != nil {
		s.log.WithError(err).WithField("remote", conn.RemoteAddr().String()).Info("peer_handshake_failed")
		return
	}
	conn.SetDeadline(time.Time{})
	if t, ok := conn.(trustable); ok {
		t.Trust()
	}
	log := s.log.WithField("remote", conn.RemoteAddr().String())
	proto, err := s.c.negotiate(sc.ClientVersion())
	if err != nil {
		log.WithError(err).Warn("peer_protocol_refused")
		sc.Close() // its requests and channels end with it
		return
	}
	log = log.WithField("protocol", proto)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { // ends when the connection closes
		defer wg.Done()
		for r := range reqs {
			var (
				ok    bool
				reply []byte
			)
			switch r.Type {
			case keepaliveRequest:
				ok = true
			case noticeRequest:
				ok = s.notice(r.Payload, log)
			case credNoticeRequest:
				ok = s.credNotice(r.Payload, log)
			case sessionsRequest:
				ok, reply = s.peerSessions(r.Payload, proto)
			case kickRequest:
				ok, reply = s.peerKick(r.Payload, log)
			}
			if r.WantReply {
				r.Reply(ok, reply)
			}
		}
	}()
	go func() { // ends at stop or when the connection fails
		defer wg.Done()
		keepalive(sc, s.c.cfg.Keepalive, stop)
	}()
	for nc := range chans {
		if nc.ChannelType() != consoleChannel {
			nc.Reject(gossh.UnknownChannelType, "unknown channel type")
			continue
		}
		wg.Add(1)
		go func() { // ends when the channel does
			defer wg.Done()
			s.relay(nc, proto, log)
		}()
	}
	close(stop)
	sc.Close()
	wg.Wait()
}

// relay serves one console channel, in peer protocol version proto: a
// relay viewer of the node on this replica's hub, whose output goes to the
// channel, and which carries the relaying replica's viewers (their roles,
// input and breaks: roles.go).
func (s *PeerServer) relay(nc gossh.NewChannel, proto int, log logrus.FieldLogger) {
	req, err := parseConsoleOpen(nc.ExtraData(), proto)
	if err != nil {
		nc.Reject(gossh.ConnectionFailed, "bad console request")
		return
	}
	from := printable(req.From)
	log = log.WithFields(logrus.Fields{"node": req.Label, "peer": from, "epoch": req.Epoch})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	v, err := s.attachRelay(ctx, req, from)
	if err != nil {
		msg := "cannot attach to the console"
		switch {
		case errors.Is(err, errNotHolder):
			msg = err.Error()
		case errors.Is(err, ErrStale):
			msg = staleMessage + ": " + err.Error()
		}
		nc.Reject(gossh.Prohibited, msg)
		log.WithError(err).Info("peer_relay_refused")
		return
	}
	defer v.Close()
	ch, reqs, err := nc.Accept()
	if err != nil {
		log.WithError(err).Info("peer_relay_accept_failed")
		return
	}
	log.Info("peer_relay_started")
	roles := &relayRoles{v: v, ch: ch, proto: proto}
	var wg sync.WaitGroup
	wg.Add(3)
	go func() { // ends with the viewer
		defer wg.Done()
		s.c.endWhenNotHolder(req.Label, v, log)
	}()
	go func() { // ends when the channel closes (no input comes as data)
		defer wg.Done()
		io.Copy(io.Discard, ch)
	}()
	go func() { // ends when the channel closes or the viewer ends
		defer wg.Done()
		defer v.Close()
		serveRelayRequests(ctx, v, roles, reqs, log)
	}()
	// The seed (the relay viewer's replay) goes first: roles that come
	// before it wait for it.
	seeded, rolesDue := false, false
	for c := range v.Output() { // closed once the viewer has ended
		seed, err := sendSeed(ch, c, proto)
		switch {
		case err != nil:
		case seed:
			seeded = true
			if rolesDue {
				err = roles.send()
			}
		case c.Roles && !seeded:
			rolesDue = true
		case c.Roles:
			err = roles.send()
		case c.For != 0:
			err = roles.tell(c.For, c.Notice)
		case len(c.Data) > 0:
			_, err = ch.Write(c.Data)
		}
		if err != nil {
			break
		}
	}
	v.Close()
	ch.Close() // ends the requests loop
	wg.Wait()
	log.WithError(v.Err()).Info("peer_relay_ended")
}

// ErrStale is wrapped by the error of Access.Serve for a relay whose
// epoch is behind the node's: the holder refuses it, and the relaying
// replica applies the change before it asks again.
var ErrStale = errors.New(staleMessage)

// errNotHolder refuses a relay of a node whose SOL link this replica does
// not hold.
var errNotHolder = errors.New("this replica does not hold the node's SOL link")

// attachRelay attaches the relay viewer of req, through Access.Serve: only
// if the relaying replica is at the node's current access epoch, and after
// this replica has applied it.
func (s *PeerServer) attachRelay(ctx context.Context, req consoleOpen, from string) (*sol.Viewer, error) {
	if req.Epoch == 0 || req.Epoch > math.MaxInt64 {
		return nil, fmt.Errorf("%w: no access epoch given", ErrStale)
	}
	var v *sol.Viewer
	err := s.c.access.Serve(ctx, req.Label, int64(req.Epoch), func() error {
		if !s.c.Holds(req.Label) && !(req.Take && s.c.reaches(ctx, req.Label)) {
			return errNotHolder
		}
		var err error
		// Its replay first (the seed): of the relaying replica's tenancy.
		v, err = s.hub.Attach(ctx, req.Label, sol.AttachOptions{Name: "peer " + from, Relay: true,
			Replay: true, Epoch: int64(req.Epoch)})
		return err
	})
	return v, err
}

// notice applies an access change another replica announced (a
// noticeRequest's payload) and reports whether it was well formed; it
// returns once the change is applied here.
func (s *PeerServer) notice(payload []byte, log logrus.FieldLogger) bool {
	var n accessNotice
	if err := gossh.Unmarshal(payload, &n); err != nil || n.Label == "" || n.Epoch == 0 || n.Epoch > math.MaxInt64 {
		log.Warn("peer_notice_malformed")
		return false
	}
	why := printable(n.Why)
	s.c.access.Apply(n.Label, int64(n.Epoch), why)
	log.WithFields(logrus.Fields{"node": printable(n.Label), "epoch": n.Epoch, "why": why}).Debug("peer_notice_applied")
	return true
}

// credNotice applies a credential change another replica announced (a
// credNoticeRequest's payload) and reports whether it was well formed; it
// returns once the change is applied here. A kind this replica does not
// know is applied too: it ends every certificate session from before it
// (db.CredChange.Affects fails closed).
func (s *PeerServer) credNotice(payload []byte, log logrus.FieldLogger) bool {
	var n credNotice
	if err := gossh.Unmarshal(payload, &n); err != nil || n.Epoch == 0 || n.Epoch > math.MaxInt64 {
		log.Warn("peer_notice_malformed")
		return false
	}
	why := printable(n.Why)
	c := db.CredChange{Kind: n.Kind, CA: n.CA, Serial: n.Serial, KeyID: n.KeyID}
	s.c.access.ApplyCred(int64(n.Epoch), c, why)
	log.WithFields(logrus.Fields{"kind": printable(n.Kind), "epoch": n.Epoch, "why": why}).Debug("peer_notice_applied")
	return true
}

// printable bounds and cleans a peer-supplied name for banners and logs.
func printable(s string) string {
	if s == "" {
		return "?"
	}
	return text.Clean(s, 64)
}

package cluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/sirupsen/logrus"
	gossh "golang.org/x/crypto/ssh"

	"github.com/obmd/obmd/bastion/internal/sshalgo"
	"github.com/obmd/obmd/db"
	"github.com/obmd/obmd/sol"
)

// The peer protocol: SSH between replicas, user peerUser, public-key auth
// with the shared host key (and the server proves the same key). One
// connection per relayed console, one channel of type consoleChannel whose
// extra data is a consoleOpen. Channel data is the console's output; the
// relaying replica's viewers' input, role changes and breaks are channel
// requests (roles.go); the global request
// keepaliveRequest probes a connection, and noticeRequest (an accessNotice,
// on a connection of its own) tells a replica of an access change, which it
// answers once applied; credNoticeRequest (a credNotice) of a credential
// change (a replica that does not know it refuses it, and is then waited
// for through its announcements).
const (
	peerUser          = "obmd-peer"
	consoleChannel    = "console@obmd"
	breakRequest      = "break@obmd"
	keepaliveRequest  = "keepalive@obmd"
	noticeRequest     = "access@obmd"
	credNoticeRequest = "credential@obmd"
)

// staleMessage begins the rejection of a consoleChannel whose epoch is not
// the node's current one: the relaying replica catches up (Access.Current)
// and asks again.
const staleMessage = "stale access epoch"

// consoleOpen is the extra data of a consoleChannel open.
type consoleOpen struct {
	Label string
	From  string // the replica ID of the relaying replica
	// Epoch is the node's access epoch the relaying replica has applied:
	// every viewer it serves the relay to authenticated at it or later.
	Epoch uint64
	// Take (protocol 2 on) asks a replica that does not hold the link to
	// open it, as a replica that reaches the node's zone, for one that
	// does not (zones.go).
	Take bool
}

// consoleOpenV1 is consoleOpen in protocol 1.
type consoleOpenV1 struct {
	Label string
	From  string
	Epoch uint64
}

func (m consoleOpen) v1() consoleOpenV1 {
	return consoleOpenV1{Label: m.Label, From: m.From, Epoch: m.Epoch}
}

func (o consoleOpenV1) v2() consoleOpen {
	return consoleOpen{Label: o.Label, From: o.From, Epoch: o.Epoch}
}

// marshalConsoleOpen encodes a consoleChannel's extra data in protocol
// version proto.
func marshalConsoleOpen(req consoleOpen, proto int) ([]byte, error) {
	if req.Take && proto < 2 {
		return nil, errors.New("it speaks peer protocol 1, which cannot ask it to open a link (upgrade it)")
	}
	return marshalIn[consoleOpenV1](req, proto), nil
}

// parseConsoleOpen reads a consoleChannel's extra data in protocol
// version proto.
func parseConsoleOpen(data []byte, proto int) (consoleOpen, error) {
	req, err := parseIn[consoleOpen, consoleOpenV1](data, proto)
	if err == nil && req.Label == "" {
		err = errors.New("no node label")
	}
	return req, err
}

// accessNotice is the payload of a noticeRequest.
type accessNotice struct {
	Label string
	Epoch uint64
	Why   string
}

// credNotice is the payload of a credNoticeRequest: db.CredChange with its
// epoch and reason.
type credNotice struct {
	Epoch  uint64
	Kind   string
	CA     string
	Serial uint64
	KeyID  string
	Why    string
}

// errStale is a relay the holder refused because this replica was behind
// the node's access epoch.
var errStale = errors.New("the holder refused the relay: " + staleMessage)

// peerClient is a connection to another replica's peer server, in the
// peer protocol version both speak.
type peerClient struct {
	*gossh.Client
	proto int
}

// dialPeer connects and logs in to the peer server at addr (replica
// owner's), within ctx and DialTimeout, and agrees on the protocol version
// (negotiate).
func (c *Cluster) dialPeer(ctx context.Context, addr, owner string) (*peerClient, error) {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.DialTimeout)
	defer cancel()
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("replica %s: %w", owner, err)
	}
	stop := context.AfterFunc(ctx, func() { conn.SetDeadline(time.Now()) }) // aborts a stuck handshake
	ccfg := &gossh.ClientConfig{
		User:            peerUser,
		Auth:            []gossh.AuthMethod{gossh.PublicKeys(c.hostKey)},
		HostKeyCallback: gossh.FixedHostKey(c.hostKey.PublicKey()),
		ClientVersion:   identFor(c.proto),
	}
	sshalgo.Modern().Client(ccfg, c.hostKey.PublicKey())
	cc, chans, reqs, err := gossh.NewClientConn(conn, addr, ccfg)
	if !stop() && err == nil {
		err = context.Cause(ctx) // the deadline hit just as the handshake ended
		cc.Close()
	}
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("replica %s: %w", owner, err)
	}
	conn.SetDeadline(time.Time{})
	proto, err := c.negotiate(cc.ServerVersion())
	if err != nil {
		cc.Close()
		return nil, fmt.Errorf("replica %s: %w", owner, err)
	}
	return &peerClient{gossh.NewClient(cc, chans, reqs), proto}, nil // its goroutines end when cc closes
}

// dialRelay connects to the holder's peer server and opens label's console
// there, for viewers at access epoch epoch; with take, holder is a replica
// that reaches the node's zone, asked to open the link (consoleOpen.Take).
func (c *Cluster) dialRelay(ctx context.Context, holder db.Lease, label string, epoch int64, take bool) (*relayConsole, error) {
	client, err := c.dialPeer(ctx, holder.Addr, holder.Owner)
	if err != nil {
		return nil, fmt.Errorf("relay to %w", err)
	}
	open, err := marshalConsoleOpen(consoleOpen{Label: label, From: c.cfg.ReplicaID, Epoch: uint64(epoch), Take: take}, client.proto)
	if err != nil {
		client.Close()
		return nil, fmt.Errorf("relay to replica %s: %w", holder.Owner, err)
	}
	type opened struct {
		ch   gossh.Channel
		reqs <-chan *gossh.Request
		err  error
	}
	done := make(chan opened, 1)
	go func() { // ends when the holder answers or the connection closes
		ch, reqs, err := client.OpenChannel(consoleChannel, open)
		done <- opened{ch, reqs, err}
	}()
	var o opened
	select {
	case o = <-done:
	case <-time.After(c.cfg.DialTimeout):
		client.Close()
		o = <-done
		o.err = errors.Join(o.err, errors.New("the holder did not answer"))
	case <-ctx.Done():
		client.Close()
		o = <-done
		o.err = errors.Join(o.err, context.Cause(ctx))
	}
	var oce *gossh.OpenChannelError
	if errors.As(o.err, &oce) && strings.HasPrefix(oce.Message, staleMessage) {
		o.err = errStale
	}
	if o.err != nil {
		if o.ch != nil {
			o.ch.Close()
		}
		client.Close()
		return nil, fmt.Errorf("relay to replica %s: %w", holder.Owner, o.err)
	}
	seed, screen, err := c.awaitSeed(ctx, o.reqs, client.proto)
	if err != nil {
		o.ch.Close()
		client.Close()
		return nil, fmt.Errorf("relay to replica %s: %w", holder.Owner, err)
	}
	r := &relayConsole{client: client, ch: o.ch, holder: holder.Owner, seed: seed, screen: screen, stop: make(chan struct{})}
	r.wg.Add(2)
	go func() { // ends when the channel closes
		defer r.wg.Done()
		r.holderRequests(o.reqs)
	}()
	go func() { // ends at Close or when the connection fails
		defer r.wg.Done()
		keepalive(client, c.cfg.Keepalive, r.stop)
	}()
	return r, nil
}

// relayConsole is a node's console served by the replica holding its SOL
// lease, which decides who writes (a sol.Arbiter: roles.go). Read fails when the holder goes away (or stops serving it), which
// makes this replica's hub reconnect through the cluster.
type relayConsole struct {
	client *peerClient
	ch     gossh.Channel
	holder string
	seed   []byte        // the holder's replay as the relay began (Seed)
	screen []byte        // the holder's screen there (ScreenSeed), if it sent it
	stop   chan struct{} // closed by Close: the keepalive stops
	wg     sync.WaitGroup
	once   sync.Once

	mu     sync.Mutex
	roles  func(sol.Roles)                 // set by Arbitrate
	notice func(viewer uint64, msg string) // set by Arbitrate
}

func (r *relayConsole) Read(p []byte) (int, error) {
	n, err := r.ch.Read(p)
	if err != nil {
		return n, fmt.Errorf("console relay from replica %s ended: %w", r.holder, err)
	}
	return n, nil
}

// Close ends the relay: the holder detaches its relay viewer.
func (r *relayConsole) Close() error {
	var err error
	r.once.Do(func() {
		close(r.stop)
		r.ch.Close()
		err = r.client.Close()
		r.wg.Wait()
	})
	if errors.Is(err, net.ErrClosed) {
		err = nil
	}
	return err
}

// requester is the side of an SSH connection that sends global requests.
type requester interface {
	SendRequest(name string, wantReply bool, payload []byte) (bool, []byte, error)
	Close() error
}

// keepalive probes conn every interval until stop is closed; a probe not
// answered within two intervals closes conn, so a peer that vanished
// without closing its connection is noticed within three intervals.
func keepalive(conn requester, every time.Duration, stop <-chan struct{}) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		late := time.AfterFunc(2*every, func() { conn.Close() })
		_, _, err := conn.SendRequest(keepaliveRequest, true, nil)
		late.Stop()
		if err != nil {
			return
		}
	}
}

// endWhenNotHolder ends relay viewer v of label once this replica no
// longer holds the node's link (checked every Renew), so the relaying
// replica looks for the holder again: a holder that lost its lease (it
// cannot reach the database) keeps its hub's viewers while it tries to
// reopen the link, and would keep the relays with them. It returns when v
// ends.
func (c *Cluster) endWhenNotHolder(label string, v *sol.Viewer, log logrus.FieldLogger) {
	t := time.NewTicker(c.cfg.Renew)
	defer t.Stop()
	for {
		select {
		case <-v.Done():
			return
		case <-t.C:
		}
		if !c.Holds(label) {
			log.Info("peer_relay_not_holder")
			v.Close()
			return
		}
	}
}

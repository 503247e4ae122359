package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/sirupsen/logrus"
	gossh "golang.org/x/crypto/ssh"

	"github.com/obmd/obmd/bastion/access/sessions"
)

// One session list across replicas. Each replica serves its own sessions
// to the others over the peer link: the global request sessionsRequest (a
// sessionsQuery) is answered with the sessions as JSON, kickRequest (a
// kickOrder) ends one and is answered with its node (refused by a replica
// that does not hold it). Like notices, each
// goes on a connection of its own.
const (
	sessionsRequest = "sessions@obmd"
	kickRequest     = "kick@obmd"
)

// maxSessionsReply bounds a sessionsRequest's answer, which must fit in
// one SSH packet (256 KiB): about a thousand sessions. A longer list is
// cut, and says so (sessionsReply.More).
const maxSessionsReply = 200 << 10

// kickWait bounds the wait for a kicked session to end on its replica
// (beyond the dial), above what a registry waits for it (its CutWait, 2 s
// by default).
const kickWait = 10 * time.Second

// Sessions is this replica's session registry as the peer server serves
// it to the others (sessions.Registry).
type Sessions interface {
	List(node string) []sessions.Info
	Kick(id string, cause error) bool
}

type sessionsQuery struct{ Node string }

type kickOrder struct{ ID, Why string }

type sessionsReply struct {
	Sessions []sessions.Info `json:"sessions"`
	More     bool            `json:"more,omitempty"`
}

// sessionsReplyV1 is a sessionsRequest's answer in protocol version 1:
// its sessions name no tenancy (epoch) and no work.
type sessionsReplyV1 struct {
	Sessions []sessionInfoV1 `json:"sessions"`
	More     bool            `json:"more,omitempty"`
}

// sessionInfoV1 is sessions.Info as protocol version 1 sends it.
type sessionInfoV1 struct {
	ID      string         `json:"id"`
	Node    string         `json:"node"`
	Kind    sessions.Kind  `json:"kind"`
	User    string         `json:"user"`
	Remote  string         `json:"remote"`
	Started time.Time      `json:"started"`
	Replica string         `json:"replica,omitempty"`
	Expires time.Time      `json:"expires,omitzero"`
	Cert    *sessions.Cert `json:"cert,omitempty"`
}

// ErrNoSession is returned by Kick for a session no live replica holds.
var ErrNoSession = errors.New("no such session")

// RemoteSessions lists the sessions of node ("": of every node) on every
// other live replica, each marked with its replica (Info.Replica), oldest
// first. Replicas that do not answer within ctx and DialTimeout are named
// in the error, along with the lists of those that did.
func (c *Cluster) RemoteSessions(ctx context.Context, node string) ([]sessions.Info, error) {
	query := gossh.Marshal(sessionsQuery{Node: node})
	var (
		mu  sync.Mutex
		out []sessions.Info
	)
	failed, err := c.eachOther(ctx, func(id, addr string) error {
		list, err := c.askSessions(ctx, id, addr, node, query)
		mu.Lock()
		defer mu.Unlock()
		out = append(out, list...)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("list the other replicas' sessions: %w", err)
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Started.Before(out[j].Started) })
	if len(failed) > 0 {
		return out, fmt.Errorf("no session list from replica %s", strings.Join(failed, ", "))
	}
	return out, nil
}

// eachOther runs f for every other live replica at once and returns, once
// all have returned, those whose f failed ("ID (error)", sorted); err if
// the replicas cannot be listed.
func (c *Cluster) eachOther(ctx context.Context, f func(id, addr string) error) (failed []string, err error) {
	others, err := c.otherReplicas(ctx, 0)
	if err != nil {
		return nil, err
	}
	return fanOut(others, f), nil
}

// askSessions asks replica id at addr for its sessions of node ("": of
// every node).
func (c *Cluster) askSessions(ctx context.Context, id, addr, node string, query []byte) ([]sessions.Info, error) {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.DialTimeout)
	defer cancel()
	reply, proto, err := c.askIn(ctx, id, addr, sessionsRequest, query)
	if err != nil {
		return nil, err
	}
	var r sessionsReply
	if proto < 2 {
		r, err = c.sessionsFromV1(ctx, reply, node)
	} else if err = json.Unmarshal(reply, &r); err != nil {
		err = fmt.Errorf("malformed session list: %w", err)
	}
	if err != nil {
		return nil, err
	}
	for i := range r.Sessions {
		r.Sessions[i].Replica = id // whatever it said: it is the one that answered
	}
	if r.More {
		err = fmt.Errorf("the list was cut at %d sessions", len(r.Sessions))
	}
	return r.Sessions, err
}

// sessionsFromV1 reads a session list in protocol version 1, whose
// sessions name no tenancy. A replica lists only the sessions it has not
// cut, and applies every access change before the change is acknowledged
// (Notify): so its sessions of a node are of the node's current tenancy,
// which they are given (that of node, as this replica has applied it;
// node "": none, as for an administrator's list).
func (c *Cluster) sessionsFromV1(ctx context.Context, reply []byte, node string) (sessionsReply, error) {
	var old sessionsReplyV1
	if err := json.Unmarshal(reply, &old); err != nil {
		return sessionsReply{}, fmt.Errorf("malformed session list: %w", err)
	}
	var epoch int64
	if node != "" && len(old.Sessions) > 0 {
		var err error
		if epoch, err = c.access.Current(ctx, node); err != nil {
			return sessionsReply{}, fmt.Errorf("the tenancy of %s: %w", node, err)
		}
	}
	r := sessionsReply{More: old.More, Sessions: make([]sessions.Info, 0, len(old.Sessions))}
	for _, s := range old.Sessions {
		r.Sessions = append(r.Sessions, sessions.Info{ID: s.ID, Node: s.Node, Kind: s.Kind, User: s.User,
			Remote: s.Remote, Started: s.Started, Replica: s.Replica, Expires: s.Expires, Cert: s.Cert, Epoch: epoch})
	}
	return r, nil
}

// Kick ends session id on whichever other live replica holds it (each is
// asked), with the cause `access to NODE was revoked (why)`, and returns
// its node once it has ended there. ErrNoSession: none holds it (an error
// instead if some could not be asked).
func (c *Cluster) Kick(ctx context.Context, id, why string) (string, error) {
	order := gossh.Marshal(kickOrder{ID: id, Why: why})
	var (
		mu   sync.Mutex
		node string
	)
	failed, err := c.eachOther(ctx, func(id, addr string) error {
		actx, cancel := context.WithTimeout(ctx, c.cfg.DialTimeout+kickWait)
		defer cancel()
		got, err := c.ask(actx, id, addr, kickRequest, order)
		if errors.Is(err, errRefused) {
			return nil // not there
		}
		if err == nil {
			mu.Lock()
			node = string(got)
			mu.Unlock()
		}
		return err
	})
	switch {
	case err != nil:
		return "", fmt.Errorf("kick session %s: %w", id, err)
	case node != "":
		return node, nil
	case len(failed) > 0:
		return "", fmt.Errorf("kick session %s: no answer from replica %s", id, strings.Join(failed, ", "))
	}
	return "", ErrNoSession
}

// ---- the peer server's side ----

// peerSessions answers a sessionsRequest with this replica's sessions, in
// protocol version proto.
func (s *PeerServer) peerSessions(payload []byte, proto int) (bool, []byte) {
	var q sessionsQuery
	if s.sessions == nil || gossh.Unmarshal(payload, &q) != nil {
		return false, nil
	}
	r := sessionsReply{Sessions: s.sessions.List(q.Node)}
	for {
		var form any = r
		if proto < 2 {
			form = replyV1(r)
		}
		out, err := json.Marshal(form)
		if err != nil {
			return false, nil
		}
		if len(out) <= maxSessionsReply || len(r.Sessions) == 0 {
			return true, out
		}
		r.Sessions, r.More = r.Sessions[:len(r.Sessions)*3/4], true
	}
}

// replyV1 is r in protocol version 1.
func replyV1(r sessionsReply) sessionsReplyV1 {
	old := sessionsReplyV1{More: r.More, Sessions: make([]sessionInfoV1, 0, len(r.Sessions))}
	for _, s := range r.Sessions {
		old.Sessions = append(old.Sessions, sessionInfoV1{ID: s.ID, Node: s.Node, Kind: s.Kind, User: s.User,
			Remote: s.Remote, Started: s.Started, Replica: s.Replica, Expires: s.Expires, Cert: s.Cert})
	}
	return old
}

// peerKick answers a kickRequest: the session ends with the reason given,
// and the answer (its node) comes once it has ended.
func (s *PeerServer) peerKick(payload []byte, log logrus.FieldLogger) (bool, []byte) {
	var k kickOrder
	if s.sessions == nil || gossh.Unmarshal(payload, &k) != nil {
		return false, nil
	}
	for _, si := range s.sessions.List("") {
		if si.ID == k.ID {
			ok := s.sessions.Kick(k.ID, &sessions.RevokedError{Node: si.Node, Why: printable(k.Why)})
			log.WithFields(logrus.Fields{"session": k.ID, "node": si.Node, "ok": ok}).Info("peer_kick")
			return ok, []byte(si.Node)
		}
	}
	return false, nil
}

package cluster

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/sirupsen/logrus"
	gossh "golang.org/x/crypto/ssh"

	"github.com/obmd/obmd/sol"
)

// The write role over a relay (sol's roles.go arbitrates it; this carries
// it). Everything the relaying replica sends goes as channel requests, in
// one ordered stream that the holder serves one at a time: roleRequest (a
// roleMsg: one of its viewers joined, left, took over or went read-only),
// inputRequest (an inputMsg: keys typed by one of its viewers) and
// breakRequest (a breakMsg, answered once sent). So a viewer's keys and
// breaks reach the holder in the order given and behind every role change
// the relaying replica told before them, and the holder checks each
// against its writer. The holder sends rolesRequest (a rolesMsg: who
// writes) after each roleRequest and whenever its writer changes, and
// tellRequest (a tellMsg) with a notice for one of the relaying replica's
// viewers (a borrowed write took its role, or gave it back). A roleRequest
// of sol.RoleReturn wants a reply: whether the borrowed write's input all
// went to the holder's link. Channel data is the console's output, holder
// to relaying replica only.
const (
	roleRequest  = "role@obmd"
	inputRequest = "input@obmd"
	rolesRequest = "roles@obmd"
	tellRequest  = "tell@obmd"
)

// roleMsg is a sol.RoleMsg; Session and Name are its viewer's sol.Who.
type roleMsg struct {
	Op      uint8
	Viewer  uint64
	Session string
	Name    string
	Want    bool
}

// roleMsgV1 and rolesMsgV1 are roleMsg and rolesMsg in protocol 1,
// without the session.
type roleMsgV1 struct {
	Op     uint8
	Viewer uint64
	Name   string
	Want   bool
}

type rolesMsgV1 struct {
	Writer uint64
	Name   string
	Seq    uint64
	Lender uint64
}

func (m roleMsg) v1() roleMsgV1 {
	return roleMsgV1{Op: m.Op, Viewer: m.Viewer, Name: m.Name, Want: m.Want}
}

func (o roleMsgV1) v2() roleMsg {
	return roleMsg{Op: o.Op, Viewer: o.Viewer, Name: o.Name, Want: o.Want}
}

func (m rolesMsg) v1() rolesMsgV1 {
	return rolesMsgV1{Writer: m.Writer, Name: m.Name, Seq: m.Seq, Lender: m.Lender}
}

func (o rolesMsgV1) v2() rolesMsg {
	return rolesMsg{Writer: o.Writer, Name: o.Name, Seq: o.Seq, Lender: o.Lender}
}

type inputMsg struct {
	Viewer uint64
	Data   []byte
}

type breakMsg struct {
	Viewer uint64
}

// rolesMsg is a sol.Roles; Session and Name are the writer's sol.Who.
type rolesMsg struct {
	Writer  uint64
	Session string
	Name    string
	Seq     uint64
	Lender  uint64
}

type tellMsg struct {
	Viewer uint64
	Text   string
}

var _ sol.Arbiter = (*relayConsole)(nil)

// ---- the relaying replica: relayConsole is a sol.Arbiter ----

// Arbitrate sets the functions the holder's answers and notices go to
// (sol.Arbiter). Those that come before it are dropped: the hub tells the
// holder of every viewer first, and follows the answers to that.
func (r *relayConsole) Arbitrate(roles func(sol.Roles), notice func(viewer uint64, msg string)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.roles, r.notice = roles, notice
}

// Tell tells the holder what one of this replica's viewers did; for a
// sol.RoleReturn it waits for the holder's answer (sol.ErrInputLost: the
// borrowed write's input did not all go to the holder's link).
func (r *relayConsole) Tell(m sol.RoleMsg) error {
	msg := roleMsg{Op: uint8(m.Op), Viewer: m.Viewer, Session: m.Who.Session, Name: m.Who.Name, Want: m.Want}
	wait := m.Op == sol.RoleReturn
	ok, err := r.ch.SendRequest(roleRequest, wait, marshalIn[roleMsgV1](msg, r.client.proto))
	if err != nil {
		return fmt.Errorf("console relay to replica %s: %w", r.holder, err)
	}
	if wait && !ok {
		return fmt.Errorf("replica %s: %w", r.holder, sol.ErrInputLost)
	}
	return nil
}

// WriteAs sends viewer's keys to the holder, which drops them unless
// viewer writes.
func (r *relayConsole) WriteAs(viewer uint64, p []byte) (int, error) {
	if _, err := r.ch.SendRequest(inputRequest, false, gossh.Marshal(inputMsg{Viewer: viewer, Data: p})); err != nil {
		return 0, fmt.Errorf("console relay to replica %s: %w", r.holder, err)
	}
	return len(p), nil
}

// BreakAs asks the holder to send a serial break for viewer.
func (r *relayConsole) BreakAs(ctx context.Context, viewer uint64) error {
	reply := make(chan error, 1)
	r.wg.Add(1)
	go func() { // ends when the holder answers or the channel closes
		defer r.wg.Done()
		ok, err := r.ch.SendRequest(breakRequest, true, gossh.Marshal(breakMsg{Viewer: viewer}))
		if err == nil && !ok {
			err = errors.New("break refused by the holder")
		}
		reply <- err
	}()
	select {
	case err := <-reply:
		return err
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// errNoViewer: input or a break on a relay without a viewer's name (the
// hub sends them with WriteAs and BreakAs).
var errNoViewer = errors.New("console relay: input needs a viewer")

func (r *relayConsole) Write([]byte) (int, error)       { return 0, errNoViewer }
func (r *relayConsole) Break(ctx context.Context) error { return errNoViewer }

// holderRequests serves the holder's requests: its answers go to the
// function given to Arbitrate. It returns when the channel closes.
func (r *relayConsole) holderRequests(reqs <-chan *gossh.Request) {
	for req := range reqs {
		r.mu.Lock()
		roles, notice := r.roles, r.notice
		r.mu.Unlock()
		var tm tellMsg
		switch {
		case req.Type == rolesRequest && roles != nil:
			if m, err := parseIn[rolesMsg, rolesMsgV1](req.Payload, r.client.proto); err == nil {
				roles(sol.Roles{Writer: m.Writer, Who: sol.Who{Session: m.Session, Name: m.Name}, Seq: m.Seq, Lender: m.Lender})
			}
		case req.Type == tellRequest && gossh.Unmarshal(req.Payload, &tm) == nil && notice != nil:
			notice(tm.Viewer, printable(tm.Text))
		}
		if req.WantReply {
			req.Reply(false, nil)
		}
	}
}

// joined is the sol.Who of the viewer a relaying replica's roleMsg names,
// made printable: a name it lacks reads "?", a session it lacks stays
// none.
func joined(m roleMsg) sol.Who {
	w := sol.Who{Name: printable(m.Name)}
	if m.Session != "" {
		w.Session = printable(m.Session)
	}
	return w
}

// ---- the holder: a relay viewer's requests ----

// relayRoles sends relay viewer v's Roles to the relaying replica, in
// peer protocol version proto; mu keeps them in the order they were read.
type relayRoles struct {
	v     *sol.Viewer
	ch    gossh.Channel
	proto int
	mu    sync.Mutex
}

func (s *relayRoles) send() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.v.Roles()
	_, err := s.ch.SendRequest(rolesRequest, false, marshalIn[rolesMsgV1](rolesMsg{Writer: r.Writer,
		Session: r.Who.Session, Name: r.Who.Name, Seq: r.Seq, Lender: r.Lender}, s.proto))
	return err
}

// tell sends a notice for the relaying replica's viewer (Chunk.For), in
// order with the roles.
func (s *relayRoles) tell(viewer uint64, text string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, err := s.ch.SendRequest(tellRequest, false, gossh.Marshal(tellMsg{Viewer: viewer, Text: text}))
	return err
}

// serveRelayRequests serves the relaying replica's requests for relay
// viewer v, one at a time, until the channel closes or v ends. A
// non-writer's keys are dropped (the relaying replica learns from the
// roles it is sent that its viewer does not write).
func serveRelayRequests(ctx context.Context, v *sol.Viewer, roles *relayRoles, reqs <-chan *gossh.Request, log logrus.FieldLogger) {
	for req := range reqs {
		ok, err := relayRequest(ctx, v, roles, req)
		if err != nil {
			log.WithError(err).WithField("request", req.Type).Info("peer_relay_request_failed")
		}
		if req.WantReply {
			req.Reply(ok, nil)
		}
		if v.Err() != nil {
			return
		}
	}
}

func relayRequest(ctx context.Context, v *sol.Viewer, roles *relayRoles, req *gossh.Request) (bool, error) {
	switch req.Type {
	case roleRequest:
		m, err := parseIn[roleMsg, roleMsgV1](req.Payload, roles.proto)
		if err != nil {
			return false, fmt.Errorf("malformed: %w", err)
		}
		err = v.Arbitrate(sol.RoleMsg{Op: sol.RoleOp(m.Op), Viewer: m.Viewer, Who: joined(m), Want: m.Want})
		if serr := roles.send(); serr != nil {
			return false, serr
		}
		return err == nil, err
	case inputRequest:
		var m inputMsg
		if err := gossh.Unmarshal(req.Payload, &m); err != nil {
			return false, fmt.Errorf("malformed: %w", err)
		}
		if _, err := v.WriteAs(m.Viewer, m.Data); err != nil && !errors.Is(err, sol.ErrReadOnly) {
			return false, err
		}
		return true, nil
	case breakRequest:
		var m breakMsg
		if err := gossh.Unmarshal(req.Payload, &m); err != nil {
			return false, fmt.Errorf("malformed: %w", err)
		}
		err := v.BreakAs(ctx, m.Viewer)
		return err == nil, err
	}
	return false, nil
}

package cluster

import (
	"bytes"
	"errors"
	"fmt"
	"strconv"

	gossh "golang.org/x/crypto/ssh"
)

// The peer protocol's versions. Replicas of different releases serve one
// cluster while it is upgraded one replica at a time, so each peer
// connection speaks the highest version both ends know: each end names
// the highest it speaks in its SSH identification string (identFor), and
// both use the lower of the two (negotiate). Every message type, and the
// form of its payload, belongs to the versions that send it (messages,
// protocol_test.go's golden list): a change of either is a new version.
//
//   - 1 (v0.9.0, "SSH-2.0-obmd-peer"): relays (console@obmd with the
//     holder's replay first, obmd-seed; input, roles and breaks as channel
//     requests), access and credential notices, session lists and kicks.
//   - 2: the holder's screen follows its replay (obmd-screen); session
//     lists carry each session's tenancy (epoch) and work; a relay may ask
//     a replica of the node's zone to open the link (consoleOpen.Take);
//     role messages name each viewer's session (roleMsg, rolesMsg).
const (
	// ProtocolVersion is the highest peer protocol this release speaks.
	ProtocolVersion = 2
	// MinProtocolVersion is the lowest it still speaks: a replica of the
	// previous release (one release of skew, docs/replicas.md).
	MinProtocolVersion = 1
)

// identBase is the peer protocol's SSH identification string, as protocol
// 1 sent it; later versions append " vN".
const identBase = "SSH-2.0-obmd-peer"

// identFor is the identification string of a replica that speaks up to
// version v.
func identFor(v int) string {
	if v <= 1 {
		return identBase
	}
	return identBase + " v" + strconv.Itoa(v)
}

// errIdent is a peer whose identification string is not the peer
// protocol's.
var errIdent = errors.New("not an obmd peer identification")

// identVersion is the highest version a peer's identification string
// names.
func identVersion(ident []byte) (int, error) {
	rest, ok := bytes.CutPrefix(ident, []byte(identBase))
	if !ok {
		return 0, fmt.Errorf("%w: %q", errIdent, printable(string(ident)))
	}
	if len(rest) == 0 {
		return 1, nil
	}
	num, ok := bytes.CutPrefix(rest, []byte(" v"))
	v, err := strconv.Atoi(string(num))
	if !ok || err != nil || v < 2 {
		return 0, fmt.Errorf("%w: %q", errIdent, printable(string(ident)))
	}
	return v, nil
}

// negotiate is the version this replica speaks with a peer whose
// identification string is ident: the lower of the two highest, if this
// replica still speaks it.
func (c *Cluster) negotiate(ident []byte) (int, error) {
	theirs, err := identVersion(ident)
	if err != nil {
		return 0, err
	}
	v := min(theirs, c.proto)
	if v < MinProtocolVersion {
		return 0, fmt.Errorf("the peer speaks protocol %d at most, this replica %d at least (upgrade one release at a time)",
			theirs, MinProtocolVersion)
	}
	return v, nil
}

// message is one message type of the peer protocol in the versions that
// send it, since to until (0: still sent).
type message struct {
	name string // the channel or request type
	kind string // "channel", "channel request" or "global request"
	dir  string // who sends it to whom
	// payload and reply are values of the types they are encoded from:
	// ssh.Marshal'd structs, raw bytes ([]byte), or JSON (jsonOf); nil
	// for none.
	payload, reply any
	since, until   int
}

// jsonOf marks a payload or reply encoded as JSON.
type jsonOf struct{ v any }

// rawBytes is a payload of raw bytes.
type rawBytes struct{}

// The directions of messages.
const (
	toHolder    = "relaying replica -> holder"
	fromHolder  = "holder -> relaying replica"
	anyReplica  = "any replica -> any replica"
	replyIsNode = "the session's node (raw bytes)"
)

// messages is every message type of the peer protocol, with the forms of
// its payload version by version. protocol_test.go lists them per version
// and checks the list against its golden file: a form changed in a
// version that has shipped fails it.
var messages = []message{
	{name: consoleChannel, kind: "channel", dir: toHolder, payload: consoleOpenV1{}, since: 1, until: 2},
	{name: consoleChannel, kind: "channel", dir: toHolder, payload: consoleOpen{}, since: 2},
	{name: seedRequest, kind: "channel request", dir: fromHolder, payload: rawBytes{}, since: 1},
	{name: screenRequest, kind: "channel request", dir: fromHolder, payload: rawBytes{}, since: 2},
	{name: roleRequest, kind: "channel request", dir: toHolder, payload: roleMsgV1{}, reply: "ok (sol.RoleReturn only)", since: 1, until: 2},
	{name: roleRequest, kind: "channel request", dir: toHolder, payload: roleMsg{}, reply: "ok (sol.RoleReturn only)", since: 2},
	{name: inputRequest, kind: "channel request", dir: toHolder, payload: inputMsg{}, since: 1},
	{name: breakRequest, kind: "channel request", dir: toHolder, payload: breakMsg{}, reply: "ok", since: 1},
	{name: rolesRequest, kind: "channel request", dir: fromHolder, payload: rolesMsgV1{}, since: 1, until: 2},
	{name: rolesRequest, kind: "channel request", dir: fromHolder, payload: rolesMsg{}, since: 2},
	{name: tellRequest, kind: "channel request", dir: fromHolder, payload: tellMsg{}, since: 1},
	{name: keepaliveRequest, kind: "global request", dir: anyReplica, reply: "ok", since: 1},
	{name: noticeRequest, kind: "global request", dir: anyReplica, payload: accessNotice{}, reply: "ok", since: 1},
	{name: credNoticeRequest, kind: "global request", dir: anyReplica, payload: credNotice{}, reply: "ok", since: 1},
	{name: sessionsRequest, kind: "global request", dir: anyReplica, payload: sessionsQuery{},
		reply: jsonOf{sessionsReplyV1{}}, since: 1, until: 2},
	{name: sessionsRequest, kind: "global request", dir: anyReplica, payload: sessionsQuery{},
		reply: jsonOf{sessionsReply{}}, since: 2},
	{name: kickRequest, kind: "global request", dir: anyReplica, payload: kickOrder{}, reply: replyIsNode, since: 1},
}

// A payload whose form changed in protocol 2 (roleMsg, rolesMsg,
// consoleOpen) has a type for its form in protocol 1 (roleMsgV1, ...),
// both registered in messages; v1 and v2 convert between them.
type (
	toV1[V1 any] interface{ v1() V1 }
	toV2[M any]  interface{ v2() M }
)

// marshalIn encodes m in protocol version proto: as m.v1() in protocol 1.
func marshalIn[V1 any, M toV1[V1]](m M, proto int) []byte {
	if proto < 2 {
		return gossh.Marshal(m.v1())
	}
	return gossh.Marshal(m)
}

// parseIn decodes a payload of type M sent in protocol version proto: as
// a V1 in protocol 1.
func parseIn[M any, V1 toV2[M]](b []byte, proto int) (M, error) {
	var m M
	if proto < 2 {
		var old V1
		if err := gossh.Unmarshal(b, &old); err != nil {
			return m, err
		}
		return old.v2(), nil
	}
	err := gossh.Unmarshal(b, &m)
	return m, err
}

package webdoor

import (
	"bytes"
	"encoding/json"
	"errors"
)

// The WebSocket protocol (docs/tenant.md describes it for users).
//
// The browser's first message is text, sent within Config.PreAuthTimeout:
// {"token":"..."} or {"ticket":"..."}, and "read_only":true for a session
// that never writes. The server answers helloMsg, or errorMsg and closes.
// Then binary messages are console bytes: from the server the node's
// output (the replay of the tenancy's history first), from the browser
// keystrokes. Text messages are JSON control messages: from the browser
// controlMsg (resize, take, release, break); from the server roleMsg (the
// session's role changed), noticeMsg (one of obmd's one-line messages, as
// the SSH door prints them on stderr) and, once a cut ends the session,
// closedMsg just before the socket closes.

// Server message types.
const (
	typeHello  = "hello"
	typeError  = "error"
	typeRole   = "role"
	typeNotice = "notice"
	typeClosed = "closed"
)

// Roles as the protocol names them.
const (
	roleWriter = "writer"
	roleReader = "reader"
)

// credential is the first message.
type credential struct {
	Token    string
	Ticket   string
	ReadOnly bool
}

// errBadFirst is the answer to a first message that is not a credential.
var errBadFirst = errors.New(`the first message must be {"token":"..."} or {"ticket":"..."}`)

// parseCredential reads the first message strictly: an object with exactly
// one of "token" and "ticket", a non-empty string, and optionally
// "read_only", a boolean; no other key, no key twice and none in another
// case (encoding/json would match "TOKEN" and keep the last duplicate).
func parseCredential(data []byte) (credential, error) {
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(data, &raw); err != nil {
		return credential{}, errBadFirst
	}
	var c credential
	for k, v := range raw {
		var err error
		switch k {
		case "token":
			err = json.Unmarshal(v, &c.Token)
		case "ticket":
			err = json.Unmarshal(v, &c.Ticket)
		case "read_only":
			err = json.Unmarshal(v, &c.ReadOnly)
		default:
			err = errBadFirst
		}
		if err != nil {
			return credential{}, errBadFirst
		}
	}
	if (c.Token == "") == (c.Ticket == "") || len(raw) != countKeys(data) {
		return credential{}, errBadFirst
	}
	return c, nil
}

// countKeys counts the top-level keys of a JSON object, duplicates
// included (a map holds each once); -1 if data is not one.
func countKeys(data []byte) int {
	dec := json.NewDecoder(bytes.NewReader(data))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return -1
	}
	n := 0
	for dec.More() {
		if _, err := dec.Token(); err != nil { // the key
			return -1
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return -1
		}
		n++
	}
	return n
}

// controlMsg is a text message from the browser after login.
type controlMsg struct {
	Type string `json:"type"` // "resize", "take", "release", "break"
	Cols int    `json:"cols,omitempty"`
	Rows int    `json:"rows,omitempty"`
}

// helloMsg answers a good credential.
type helloMsg struct {
	Type     string   `json:"type"`
	Node     string   `json:"node"`
	Role     string   `json:"role"`
	Session  string   `json:"session"`
	ReadOnly bool     `json:"read_only"`
	Viewers  []string `json:"viewers"` // the node's other viewers, by session ("#12", "#12 (writing)")
}

// errorMsg refuses a socket before its session starts; it then closes.
type errorMsg struct {
	Type  string `json:"type"`
	Error string `json:"error"`
}

// roleMsg tells the session's role: after take and release, and when
// another session took over.
type roleMsg struct {
	Type string `json:"type"`
	Role string `json:"role"`
}

// noticeMsg is one of obmd's messages ("break sent", "console link lost,
// reconnecting").
type noticeMsg struct {
	Type string `json:"type"`
	Text string `json:"text"`
}

// closedMsg is the last message of a session that was cut: Reason is the
// SSH door's (the access change: "token rotated", "kicked by admin"),
// Text the sentence it prints ("access to n1 was revoked (token
// rotated)").
type closedMsg struct {
	Type   string `json:"type"`
	Reason string `json:"reason"`
	Text   string `json:"text"`
}

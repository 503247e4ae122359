// Package api holds the admin HTTP API's request and response bodies, shared by the server and obmctl.
//
// The server (bastion/admin) encodes these types and obmctl decodes them,
// so the two cannot drift apart. The package imports only the standard
// library: obmctl links nothing else of the server. docs/admin-api.md
// documents the routes each type belongs to.
package api

import (
	"bytes"
	"encoding/json"
	"time"
)

// Error is the body of every error answer: {"error": "..."}.
type Error struct {
	Error string `json:"error"`
}

// Node is a node as GET /v1/nodes and GET /v1/nodes/{label} show it: its
// label and type, its BMC info as its type shows it (BMC, whose fields
// join the node's in one JSON object; never the password), and its dates.
type Node struct {
	Label string `json:"label"`
	Type  string `json:"type"`
	// Capture is the node's own capture setting ("": the default).
	Capture string `json:"capture,omitempty"`
	// ScreenSize is the size of the node's screen, COLSxROWS ("": the
	// default 80x25).
	ScreenSize string `json:"screen_size,omitempty"`
	// Zone is the BMC network the node's BMC is on ("": any replica
	// reaches it).
	Zone      string    `json:"zone,omitempty"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
	// InfoError says the stored info cannot be read (a changed sealing key).
	InfoError string `json:"info_error,omitempty"`
	// CipherInUse is the IPMI cipher suite this replica last negotiated
	// with the node's BMC (an IPMI node that pins none, or a Redfish
	// node's console); absent until a session has.
	CipherInUse *int `json:"cipher_in_use,omitempty"`
	// ConsoleInUse is the console transport ("sol" or "ssh") this replica
	// last opened the node's console over, for a node whose console is
	// "ssh" or "auto"; absent until a console has opened.
	ConsoleInUse string `json:"console_in_use,omitempty"`
	// SSHHostKeyPinned is the BMC's SSH host key pinned on first contact
	// (GET /v1/nodes/{label} only; absent when none is).
	SSHHostKeyPinned *HostKey `json:"ssh_host_key_pinned,omitempty"`
	// The detail, for GET /v1/nodes/{label} only (and Principals after a
	// PUT that set them).
	HasToken   *bool     `json:"has_token,omitempty"`
	Keys       *int      `json:"keys,omitempty"`
	Sessions   *int      `json:"sessions,omitempty"`
	Principals *[]string `json:"principals,omitempty"`

	// BMC is the node's BMC info; its fields are the node object's own.
	BMC `json:"-"`
}

// nodeFields is Node without its JSON methods.
type nodeFields Node

// MarshalJSON is the node's fields and its BMC's, in one object.
func (n Node) MarshalJSON() ([]byte, error) {
	base, err := json.Marshal(nodeFields(n))
	if err != nil {
		return nil, err
	}
	extra, err := json.Marshal(n.BMC)
	if err != nil {
		return nil, err
	}
	extra = bytes.TrimSpace(extra)
	if len(extra) <= 2 { // "{}"
		return base, nil
	}
	return append(append(base[:len(base)-1], ','), extra[1:]...), nil
}

// UnmarshalJSON reads the node's fields and its BMC's from one object.
func (n *Node) UnmarshalJSON(data []byte) error {
	if err := json.Unmarshal(data, (*nodeFields)(n)); err != nil {
		return err
	}
	return json.Unmarshal(data, &n.BMC)
}

// BMC is a node's BMC info as the API shows it, by type: never the
// password (it has no field for one). The IPMI types and the simulator
// fill Addr, Port, User, Cipher and Interface (Port is the effective port:
// 623 unless set; none without credentials); Redfish fills Addr, User,
// System, Insecure and SOL. A new node type adds the fields it shows here.
type BMC struct {
	Addr      string `json:"addr,omitempty"`
	Port      int    `json:"port,omitempty"`
	User      string `json:"user,omitempty"`
	Cipher    *int   `json:"cipher,omitempty"`
	Interface string `json:"interface,omitempty"`
	System    string `json:"system,omitempty"`
	Insecure  bool   `json:"insecure,omitempty"`
	// SOL is a Redfish node's console over IPMI SOL (nil: none).
	SOL *SOL `json:"sol,omitempty"`
	// Console is how the node's console is reached ("ssh", "auto"; absent:
	// the type's default) and the SSH fields as registered (absent: the
	// default), never ssh_pass; SSHHostKey is a key registered with the
	// node (the one pinned on first contact is SSHHostKeyPinned).
	Console    string `json:"console,omitempty"`
	SSHPort    int    `json:"ssh_port,omitempty"`
	SSHUser    string `json:"ssh_user,omitempty"`
	SSHCommand string `json:"ssh_command,omitempty"`
	SSHVendor  string `json:"ssh_vendor,omitempty"`
	SSHHostKey string `json:"ssh_host_key,omitempty"`
	// Redfish is an IPMI node's Redfish service, which its console "auto"
	// asks which console services are on; RedfishInsecure: its
	// certificate is not verified.
	Redfish         string `json:"redfish,omitempty"`
	RedfishInsecure bool   `json:"redfish_insecure,omitempty"`
}

// HostKey is a BMC's SSH host key pinned on first contact: the key (an
// authorized_keys line), its SHA256 fingerprint, the BMC address it was
// seen at and when.
type HostKey struct {
	Key         string    `json:"key"`
	Fingerprint string    `json:"fingerprint"`
	Addr        string    `json:"addr"`
	PinnedAt    time.Time `json:"pinned_at"`
}

// HostKeyReset is the answer of DELETE /v1/nodes/{label}/ssh-host-key:
// whether a pinned key was forgotten.
type HostKeyReset struct {
	Removed bool `json:"removed"`
}

// SOL is how a Redfish node's console is reached over IPMI: the RMCP+ port
// (0: 623) and the cipher suite it pins (nil: negotiated).
type SOL struct {
	Port   int  `json:"port,omitempty"`
	Cipher *int `json:"cipher,omitempty"`
}

// Nodes is GET /v1/nodes.
type Nodes struct {
	Nodes []Node `json:"nodes"`
}

// PutNode is the body of PUT /node/{label} and PUT /v1/nodes/{label}.
type PutNode struct {
	Type string `json:"type,omitempty"`
	// Info is the node type's registration info, the BMC password
	// included: its fields are the type's (docs/admin-api.md).
	Info json.RawMessage `json:"info,omitempty"`
	// Capture (/v1) sets the node's console capture: "always",
	// "attached", or "" (the default); absent: unchanged.
	Capture *string `json:"capture,omitempty"`
	// ScreenSize (/v1) sets the size of the node's screen: COLSxROWS up
	// to 200x100, or "" (the default 80x25); absent: unchanged.
	ScreenSize *string `json:"screen_size,omitempty"`
	// Principals (/v1) replaces the node's extra principals: a JSON list
	// of strings. Alone in the body, it changes nothing else.
	Principals json.RawMessage `json:"principals,omitempty"`
}

// Capture is the body of PUT /v1/nodes/{label}/capture.
type Capture struct {
	Capture *string `json:"capture"`
}

// ScreenSize is the body of PUT /v1/nodes/{label}/screen_size: COLSxROWS
// up to 200x100, or "" for the default 80x25.
type ScreenSize struct {
	ScreenSize *string `json:"screen_size"`
}

// Zone is the body of PUT /v1/nodes/{label}/zone: the BMC's zone, or ""
// for none.
type Zone struct {
	Zone *string `json:"zone"`
}

// Screen is GET /v1/nodes/{label}/screen's answer: what the node's console
// shows, as obmd's terminal emulator of it holds it. Lines are the rows
// (trailing spaces trimmed), Spans the runs of cells drawn with
// attributes; rows and columns count from 0.
type Screen struct {
	Cols      int          `json:"cols"`
	Rows      int          `json:"rows"`
	Cursor    ScreenCursor `json:"cursor"`
	AltScreen bool         `json:"alt_screen"`
	Lines     []string     `json:"lines"`
	Spans     []ScreenSpan `json:"spans"`
}

// ScreenCursor is where a screen's cursor is, and whether it is shown.
type ScreenCursor struct {
	Row     int  `json:"row"`
	Col     int  `json:"col"`
	Visible bool `json:"visible"`
}

// ScreenSpan is a run of Len cells of row Row from column Col drawn in
// one style other than the default: colours ("" the default, "0" to "255"
// indexed, "#rrggbb") and attributes.
type ScreenSpan struct {
	Row       int    `json:"row"`
	Col       int    `json:"col"`
	Len       int    `json:"len"`
	Fg        string `json:"fg,omitempty"`
	Bg        string `json:"bg,omitempty"`
	Bold      bool   `json:"bold,omitempty"`
	Dim       bool   `json:"dim,omitempty"`
	Italic    bool   `json:"italic,omitempty"`
	Underline bool   `json:"underline,omitempty"`
	Blink     bool   `json:"blink,omitempty"`
	Reverse   bool   `json:"reverse,omitempty"`
	Invisible bool   `json:"invisible,omitempty"`
	Strike    bool   `json:"strike,omitempty"`
}

// Token is the answer of a token rotation (POST .../token): the new token,
// shown this once.
type Token struct {
	Token string `json:"token"`
}

// WebTicket is the answer of POST /v1/nodes/{label}/web-tickets: a
// one-time ticket of the web console, the page's address carrying it in
// its fragment (#ticket=...), and when it expires (at most a minute on).
type WebTicket struct {
	Ticket    string    `json:"ticket"`
	URL       string    `json:"url"`
	ExpiresAt time.Time `json:"expires_at"`
}

// Key is a node key as GET /v1/nodes/{label}/keys shows it.
type Key struct {
	Fingerprint string    `json:"fingerprint"`
	Key         string    `json:"key"`
	Comment     string    `json:"comment"`
	CreatedAt   time.Time `json:"created_at"`
}

// Keys is GET /v1/nodes/{label}/keys.
type Keys struct {
	Keys []Key `json:"keys"`
}

// AddKey is the body of POST /v1/nodes/{label}/keys: one authorized_keys line.
type AddKey struct {
	Key string `json:"key"`
}

// KeyAdded is the answer of POST /v1/nodes/{label}/keys.
type KeyAdded struct {
	Fingerprint string `json:"fingerprint"`
}

// Removed is the answer of an idempotent removal (DELETE of a key, a CA):
// whether there was anything to remove.
type Removed struct {
	Removed bool `json:"removed"`
}

// CA is a trusted certificate authority as /v1/cas shows it.
type CA struct {
	Fingerprint string     `json:"fingerprint"`
	Name        string     `json:"name"`
	Key         string     `json:"key"`
	CreatedAt   *time.Time `json:"created_at,omitempty"`
}

// CAs is GET /v1/cas.
type CAs struct {
	CAs []CA `json:"cas"`
}

// AddCA is the body of POST /v1/cas.
type AddCA struct {
	Key  string `json:"key"`
	Name string `json:"name"`
}

// Revocation is a certificate revocation as /v1/cas/revoked shows it.
type Revocation struct {
	Kind      string     `json:"kind"` // "serial" or "key_id"
	CA        string     `json:"ca,omitempty"`
	Serial    *uint64    `json:"serial,omitempty"`
	KeyID     *string    `json:"key_id,omitempty"`
	ExpiresAt *time.Time `json:"expires_at,omitempty"`
	CreatedAt time.Time  `json:"created_at"`
}

// Revocations is GET /v1/cas/revoked.
type Revocations struct {
	Revoked []Revocation `json:"revoked"`
}

// Revoke is the body of POST /v1/cas/revoked: a serial or a key id. (DELETE
// /v1/cas/revoked/{kind}/{value}?ca= names one the same way.)
type Revoke struct {
	Serial *uint64 `json:"serial,omitempty"`
	KeyID  *string `json:"key_id,omitempty"`
	// CA is the CA's fingerprint or name; "" or absent: every CA.
	CA string `json:"ca,omitempty"`
	// Expires is when the certificates revoked expire anyway (an RFC 3339
	// string, or unix seconds as a number or a string; at most
	// 9999-12-31T23:59:59Z): the revocation is kept until then (and a
	// margin), then purged. Absent: kept for good.
	Expires json.RawMessage `json:"expires,omitempty"`
}

// AuditEvent is an audit event as GET /v1/audit shows it.
type AuditEvent struct {
	ID     int64     `json:"id"`
	At     time.Time `json:"at"`
	Node   string    `json:"node,omitempty"`
	Actor  string    `json:"actor"`
	Action string    `json:"action"`
	Source string    `json:"source,omitempty"`
	Result string    `json:"result"`
	Detail string    `json:"detail,omitempty"`
	// Count is how many events the row stands for: more than 1 for the
	// repeats of a read, a session's bounds, a console action or a
	// refusal, counted over audit.aggregate_window (At is the first
	// repeat's, Detail the latest's, Source the address without its port).
	Count int64 `json:"count"`
}

// AuditEvents is GET /v1/audit.
type AuditEvents struct {
	Events []AuditEvent `json:"events"`
}

// Session is a live session as GET /v1/sessions shows it.
type Session struct {
	ID   string `json:"id"`
	Node string `json:"node"`
	Kind string `json:"kind"` // "console", "exec", ...
	// User is the auth method and identity: "token", "key SHA256:...",
	// "cert hil:alice serial 42".
	User    string    `json:"user"`
	Remote  string    `json:"remote"` // the client's address
	Started time.Time `json:"started"`
	// Replica is the ID of the replica holding the session, in cluster mode.
	Replica string `json:"replica,omitempty"`
	// Expires is when the session ends by itself (a certificate's expiry).
	Expires time.Time `json:"expires,omitzero"`
	// Cert is the certificate the session logged in with, if any.
	Cert *Cert `json:"cert,omitempty"`
}

// Cert is the OpenSSH certificate a session logged in with.
type Cert struct {
	CA     string `json:"ca"`      // SHA256:... of the CA's key
	CAName string `json:"ca_name"` // the admin's name for the CA
	Serial uint64 `json:"serial"`
	KeyID  string `json:"key_id"` // exactly as signed
}

// Sessions is GET /v1/sessions.
type Sessions struct {
	Sessions []Session `json:"sessions"`
}

// Doctor is GET /v1/nodes/{label}/doctor: a node's diagnosis.
type Doctor struct {
	Node string `json:"node"`
	// OK: every step passed.
	OK bool `json:"ok"`
	// Failed names the step that failed (the last one), if any.
	Failed string  `json:"failed,omitempty"`
	Checks []Check `json:"checks"`
}

// Check is one step of a diagnosis, with the administrator's detail
// (Result, which may name the BMC's address) beside what a tenant is told
// (Tenant).
type Check struct {
	Name   string `json:"name"`
	OK     bool   `json:"ok"`
	Result string `json:"result"`
	Tenant string `json:"tenant"`
	Hint   string `json:"hint,omitempty"`
	// TenantHint is what `ssh ... doctor` says to do, when not Hint.
	TenantHint string `json:"tenant_hint,omitempty"`
}

// Tenancy is a stored tenancy as GET /v1/nodes/{label}/tenancies shows it.
type Tenancy struct {
	Epoch     int64      `json:"tenancy"`
	Current   bool       `json:"current"`
	StartedAt time.Time  `json:"started_at"`
	EndedAt   *time.Time `json:"ended_at,omitempty"`
	PurgeAt   *time.Time `json:"purge_at,omitempty"`
	Bytes     int64      `json:"bytes"`
}

// Tenancies is GET /v1/nodes/{label}/tenancies, oldest first.
type Tenancies struct {
	Node      string    `json:"node"`
	Tenancies []Tenancy `json:"tenancies"`
}

// PowerCycle is the body of obmd's POST /node/{label}/power_cycle: force is
// a hard reset, otherwise a power cycle.
type PowerCycle struct {
	Force bool `json:"force"`
}

// BootDevice is the body of obmd's PUT /node/{label}/boot_device.
type BootDevice struct {
	Bootdev string `json:"bootdev"`
}

// PowerStatus is the answer of obmd's GET /node/{label}/power_status.
type PowerStatus struct {
	PowerStatus string `json:"power_status"`
}

// Lockouts is GET /v1/lockouts: what this replica's guessing limits refuse
// now, and the limits.
type Lockouts struct {
	Limits LockoutLimits `json:"limits"`
	// Sources are the addresses locked out of every node.
	Sources []SourceLockout `json:"sources"`
	// Nodes are the nodes under attack, each refusing the addresses that
	// failed on it.
	Nodes []NodeLockout `json:"nodes"`
	// More: the lists were cut (at 1000 entries).
	More bool `json:"more,omitempty"`
}

// LockoutLimits are the guessing limits in effect (the auth_limits
// settings): PerSource failures within Window lock an address out for
// Lockout; PerNode failures on one node within Window put it under attack
// for Lockout. Durations are Go durations ("1m0s").
type LockoutLimits struct {
	PerSource int    `json:"per_source"`
	PerNode   int    `json:"per_node"`
	Window    string `json:"window"`
	Lockout   string `json:"lockout"`
}

// SourceLockout is an address locked out: an IPv4 address, or an IPv6 /64
// ("2001:db8::/64"), until Until. Failures is the failures that locked it,
// Refused the tries refused since.
type SourceLockout struct {
	Source   string    `json:"source"`
	Until    time.Time `json:"until"`
	Failures int       `json:"failures"`
	Refused  int       `json:"refused"`
}

// NodeLockout is a node under attack until Until: it refuses Sources, the
// addresses that failed on it. Unknown marks the one entry that every
// name that is no node shares (Node is then empty).
type NodeLockout struct {
	Node     string    `json:"node,omitempty"`
	Unknown  bool      `json:"unknown,omitempty"`
	Until    time.Time `json:"until"`
	Failures int       `json:"failures"`
	Refused  int       `json:"refused"`
	Sources  []string  `json:"sources"`
}

// Unlocked is the answer of DELETE /v1/lockouts/{addr}: the address as the
// limits count it (an IPv6 address as its /64), and whether anything
// refused it.
type Unlocked struct {
	Source    string `json:"source"`
	WasLocked bool   `json:"was_locked"`
}

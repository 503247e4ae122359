package admin

import (
	"bytes"
	"encoding/json"
	"errors"
	"time"

	"github.com/obmd/obmd/bastion/nodes"
	"github.com/obmd/obmd/db"
)

// Types is the table of node types (nodes.Table, built by the wiring from
// the drivers): a registration's info is decoded and checked by its type,
// stored sealed, and compared with the stored one through it. The API knows
// no type itself.
type Types interface {
	// Parse decodes and checks a registration; every error is the
	// client's (400) and safe to show.
	Parse(typ string, strict bool, decode func(any) error) (nodes.Info, error)
	Seal(label string, info nodes.Info) ([]byte, error)
	Open(n db.Node) (nodes.Info, error)
	// Forget drops what a type keeps of a deleted node.
	Forget(label string)
}

// nodeBody is the body of PUT /node/{label} and PUT /v1/nodes/{label}.
type nodeBody struct {
	Type string          `json:"type"`
	Info json.RawMessage `json:"info"`
	// Capture is read by nodeCapture.
	Capture *string `json:"capture,omitempty"`
}

// nodeCapture is a registration body's capture: nil when it sets none
// (the node keeps its own, or the default), else "always", "attached" or
// "" (back to the daemon's default). A bad value is the client's error.
func nodeCapture(data []byte) (*string, error) {
	var b struct {
		Capture *string `json:"capture"`
	}
	if err := json.Unmarshal(data, &b); err != nil || b.Capture == nil {
		return nil, nil // decodeNodeBody answers for the body
	}
	switch *b.Capture {
	case "", db.CaptureAlways, db.CaptureAttached:
		return b.Capture, nil
	}
	return nil, badBody("field \"capture\" must be %q, %q or \"\" (the default)", db.CaptureAlways, db.CaptureAttached)
}

// decodeNodeBody parses and validates a node registration body into the
// node's checked, canonical BMC info (Types.Parse). strict (the /v1 API)
// refuses unknown fields and fields that do not apply to the type;
// otherwise (the obmd route) both are ignored, as obmd did. Error texts
// never echo the password.
func (a *API) decodeNodeBody(data []byte, strict bool) (nodes.Info, error) {
	var b nodeBody
	if err := decode(data, &b, strict, "body"); err != nil {
		return nodes.Info{}, err
	}
	info, err := a.types.Parse(b.Type, strict, func(v any) error {
		if len(b.Info) == 0 || string(b.Info) == "null" {
			return badBody("field \"info\" is required")
		}
		return decode(b.Info, v, strict, "info")
	})
	var eb *errBody
	if err != nil && !errors.As(err, &eb) {
		err = badBody("%s", err.Error())
	}
	return info, err
}

// sameNode reports whether the stored node n is the registration info.
// Stored info that cannot be opened is never the same.
func (a *API) sameNode(n db.Node, info nodes.Info) (bool, error) {
	if n.Type != string(info.Type()) {
		return false, nil
	}
	stored, err := a.types.Open(n)
	if err != nil {
		return false, err
	}
	return stored.Equal(info), nil
}

// nodeView is a node as the /v1 API shows it: its label and type, its
// type's view of its BMC info (never the password), and its dates.
type nodeView struct {
	Label string `json:"label"`
	Type  string `json:"type"`
	// Capture is the node's own capture setting ("" : the default).
	Capture   string    `json:"capture,omitempty"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
	// InfoError says the stored info cannot be read (a changed sealing key).
	InfoError string `json:"info_error,omitempty"`
	// CipherInUse is the IPMI cipher suite this replica last negotiated
	// with the node's BMC (an IPMI node that pins none, or a Redfish
	// node's console); absent until a session has.
	CipherInUse *int `json:"cipher_in_use,omitempty"`
	// Detail, for GET /v1/nodes/{label} only.
	HasToken *bool `json:"has_token,omitempty"`
	Keys     *int  `json:"keys,omitempty"`
	Sessions *int  `json:"sessions,omitempty"`

	info any // nodes.Info.View, whose fields join these
}

// MarshalJSON is the node's fields and its info view's, in one object.
func (v nodeView) MarshalJSON() ([]byte, error) {
	type plain nodeView // without this method
	base, err := json.Marshal(plain(v))
	if err != nil || v.info == nil {
		return base, err
	}
	extra, err := json.Marshal(v.info)
	if err != nil {
		return nil, err
	}
	extra = bytes.TrimSpace(extra)
	if len(extra) <= 2 { // "{}"
		return base, nil
	}
	return append(append(base[:len(base)-1], ','), extra[1:]...), nil
}

func (a *API) view(n db.Node) nodeView {
	v := nodeView{Label: n.Label, Type: n.Type, Capture: n.Capture, CreatedAt: n.CreatedAt.UTC(), UpdatedAt: n.UpdatedAt.UTC()}
	if a.cfg.CipherInUse != nil {
		if suite, ok := a.cfg.CipherInUse(n.Label); ok {
			v.CipherInUse = &suite
		}
	}
	info, err := a.types.Open(n)
	if err != nil {
		a.log.WithError(err).WithField("node", n.Label).Warn("node_info_unreadable")
		v.InfoError = "stored BMC info cannot be unsealed (was the sealing key changed?)"
		return v
	}
	v.info = info.View()
	return v
}

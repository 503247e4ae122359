package admin

import (
	"encoding/json"
	"errors"

	"github.com/obmd/obmd/bastion/admin/api"
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

// nodeSettings are the settings a registration body sets beside the BMC
// info (nil: unchanged), checked.
type nodeSettings struct {
	capture    *string
	screenSize *string
}

// decodeSettings reads a registration body's settings; the rest of the
// body is decodeNodeBody's to judge.
func decodeSettings(data []byte) (nodeSettings, error) {
	var s nodeSettings
	var err error
	if s.capture, err = nodeCapture(data); err != nil {
		return s, err
	}
	var b struct {
		ScreenSize *string `json:"screen_size"`
	}
	if json.Unmarshal(data, &b) != nil || b.ScreenSize == nil {
		return s, nil
	}
	if screenSizeBad(*b.ScreenSize) {
		return s, screenSizeError()
	}
	s.screenSize = b.ScreenSize
	return s, nil
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
	// Principals (/v1 only) are read by decodePrincipals, the capture by
	// nodeCapture.
	var b api.PutNode
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

// view is n as the /v1 API shows it (api.Node).
func (a *API) view(n db.Node) api.Node {
	v := api.Node{Label: n.Label, Type: n.Type, Capture: n.Capture, ScreenSize: n.ScreenSize, Zone: n.Zone,
		CreatedAt: n.CreatedAt.UTC(), UpdatedAt: n.UpdatedAt.UTC()}
	if a.cfg.CipherInUse != nil {
		if suite, ok := a.cfg.CipherInUse(n.Label); ok {
			v.CipherInUse = &suite
		}
	}
	if a.cfg.ConsoleInUse != nil {
		v.ConsoleInUse, _ = a.cfg.ConsoleInUse(n.Label)
	}
	info, err := a.types.Open(n)
	if err != nil {
		a.log.WithError(err).WithField("node", n.Label).Warn("node_info_unreadable")
		v.InfoError = "stored BMC info cannot be unsealed (was the sealing key changed?)"
		return v
	}
	v.BMC = info.View()
	return v
}

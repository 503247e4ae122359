package sol

// Who is how a viewer is known beyond its hub, wherever in the cluster it
// is: by its session, to obmd's session registry (so that `sessions` marks
// the session that writes), and by its name, to other viewers (banners,
// takeover notices). A relay carries both (RoleMsg, Roles); neither is
// ever read back out of the other.
type Who struct {
	// Session is the viewer's session ID in obmd's session registry
	// (AttachOptions.Session: "12", unique across the cluster); "" for a
	// viewer that is no session of obmd's registry (a relay, a test's).
	Session string `json:"session,omitempty"`
	// Name is what other viewers are told of it: AttachOptions.Name, by
	// default "#" and the session ID, as `sessions` lists it. Never an
	// address or a credential.
	Name string `json:"name"`
}

// nameOf is the Name of a viewer attached with o.
func nameOf(o AttachOptions) string {
	if o.Name == "" && o.Session != "" {
		return "#" + o.Session
	}
	return o.Name
}

// clip bounds both parts of w (a relayed one) to maxNameLen bytes.
func (w Who) clip() Who {
	return Who{Session: clip(w.Session, maxNameLen), Name: clip(w.Name, maxNameLen)}
}

// Who is how v is known beyond its hub.
func (v *Viewer) Who() Who { return Who{Session: v.session, Name: v.name} }

// Who is how the viewer vi describes is known beyond its hub.
func (vi ViewerInfo) Who() Who { return Who{Session: vi.Session, Name: vi.Name} }

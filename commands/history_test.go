package commands

import (
	"context"
	"sync"
	"testing"

	"github.com/obmd/obmd/sol/history"
)

// markRecorder records the markers a Runner makes (Read and Follow are not
// called by power operations).
type markRecorder struct {
	History
	mu    sync.Mutex
	marks []string
}

func (h *markRecorder) Mark(_ string, _ int64, m history.Marker) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.marks = append(h.marks, m.Text)
}

// TestMarkerActor: a power or boot-device marker names who ran it by the
// credential: the node's token, a key by its fingerprint, a certificate
// by its CA, key id and serial (never as the token), the HTTP API.
func TestMarkerActor(t *testing.T) {
	h := &markRecorder{}
	env := newEnv(t, Config{History: h})
	for _, tt := range []struct {
		actor, user string
		want        string
	}{
		{"ssh:password", "token", "by ssh:token"},
		{"ssh:publickey", "key SHA256:abc", "by ssh:key SHA256:abc"},
		{"ssh:cert hil:alice serial 42", "cert hil:alice serial 42", "by ssh:cert hil:alice serial 42"},
		{"ssh:cert hil:\"bob smith\" serial 7", "cert hil:\"bob smith\" serial 7", "by ssh:cert hil:\"bob smith\" serial 7"},
		{"http:token", "token", "by http"},
	} {
		h.marks = nil
		r := Request{Node: "node-17", Actor: tt.actor, User: tt.user, Epoch: 3}
		for _, cmd := range []Command{{Name: CmdPowerCycle}, {Name: CmdBootdev, Device: "pxe"}} {
			if _, err := env.r.Do(context.Background(), r, cmd); err != nil {
				t.Fatalf("%s by %s: %v", cmd.Name, tt.user, err)
			}
		}
		want := []string{"power-cycle " + tt.want, "boot device pxe " + tt.want}
		if len(h.marks) != 2 || h.marks[0] != want[0] || h.marks[1] != want[1] {
			t.Errorf("%s: got markers %q, want %q", tt.user, h.marks, want)
		}
	}
}

package daemon

import (
	"context"
	"io"
	"path/filepath"
	"testing"

	"github.com/sirupsen/logrus"

	"github.com/obmd/obmd/bastion/nodes"
	"github.com/obmd/obmd/db"
	"github.com/obmd/obmd/sol"
)

// The capture poll reads the nodes it holds and no other (issue 18: it
// read the whole fleet every epoch_poll, 17 ms a poll on SQLite at 10,000
// sim nodes none of which it held): under each default, the candidates the
// database returns are exactly the nodes captureOf makes always, so a
// fleet's idle cost grows with the nodes captured, not the nodes
// registered.
func TestCapturePollReadsOnlyCaptured(t *testing.T) {
	ctx := context.Background()
	quiet := logrus.New()
	quiet.SetOutput(io.Discard)
	st, err := db.Open(ctx, filepath.Join(t.TempDir(), "obmd.db"), quiet)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if err := st.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	var all []db.NodeCapture
	for _, typ := range []nodes.Type{TypeIPMI, TypeIPMITool, TypeRedfish, TypeSim, TypeMock} {
		for _, capture := range []string{"", db.CaptureAlways, db.CaptureAttached} {
			n := db.NodeCapture{Label: string(typ) + "-" + capture, Type: string(typ), Capture: capture}
			if _, err := st.CreateNode(ctx, db.Node{Label: n.Label, Type: n.Type, Capture: n.Capture}); err != nil {
				t.Fatal(err)
			}
			all = append(all, n)
		}
	}
	for _, def := range []string{"", sol.CaptureAlways, sol.CaptureAttached} {
		want := wantedCaptures(all, def)
		got, err := st.Captures(ctx, captureCandidates(def))
		if err != nil {
			t.Fatal(err)
		}
		seen := map[string]bool{}
		for _, c := range got {
			seen[c.Label] = true
			if !want[c.Label] {
				t.Errorf("default %q: the poll read %s (%s, capture %q), which it does not hold", def, c.Label, c.Type, c.Capture)
			}
		}
		for label := range want {
			if !seen[label] {
				t.Errorf("default %q: the poll missed %s, which is captured always", def, label)
			}
		}
		if len(got) != len(want) {
			t.Errorf("default %q: read %d rows for %d captured nodes of %d", def, len(got), len(want), len(all))
		}
	}
}

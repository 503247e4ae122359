package db

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/obmd/obmd/sol/screen"
)

// TestCapture runs the capture cases on every engine (see TestStore).
func TestCapture(t *testing.T) {
	runCases(t, []storeCase{
		{"set_is_no_access_change", testCaptureNoChange},
		{"listed_without_info", testCaptureList},
		{"live_leases_listed", testLeasesListed},
	})
}

// A node's capture is stored and read back, changes no epoch (no
// tenancy ends), and bad values change nothing.
func testCaptureNoChange(t *testing.T, s *Store, _ testEnv) {
	ctx := context.Background()
	n, err := s.CreateNode(ctx, Node{Label: "n1", Type: "ipmi", Capture: CaptureAlways})
	if err != nil {
		t.Fatal(err)
	}
	if got, err := s.Node(ctx, "n1"); err != nil || got.Capture != CaptureAlways {
		t.Fatalf("stored capture: got %q (%v), want %q", got.Capture, err, CaptureAlways)
	}
	latest, err := s.LatestChange(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []string{CaptureAttached, "", CaptureAlways} {
		got, err := s.SetCapture(ctx, "n1", c)
		if err != nil || got.Capture != c || got.Epoch != n.Epoch {
			t.Fatalf("set capture %q: got %q epoch %d (%v), want %q epoch %d", c, got.Capture, got.Epoch, err, c, n.Epoch)
		}
	}
	if after, err := s.LatestChange(ctx); err != nil || after != latest {
		t.Errorf("latest access change after setting capture: got %d (%v), want %d", after, err, latest)
	}
	if _, err := s.SetCapture(ctx, "n1", "sometimes"); err == nil {
		t.Error("set capture \"sometimes\": got nil, want an error")
	}
	if got, _ := s.Node(ctx, "n1"); got.Capture != CaptureAlways {
		t.Errorf("after a refused setting: got %q, want %q", got.Capture, CaptureAlways)
	}
	if _, err := s.SetCapture(ctx, "nope", CaptureAlways); !errors.Is(err, ErrNotFound) {
		t.Errorf("set capture of an unknown node: got %v, want ErrNotFound", err)
	}
	if _, err := s.CreateNode(ctx, Node{Label: "n2", Type: "ipmi", Capture: "never"}); err == nil {
		t.Error("create with capture \"never\": got nil, want an error")
	}
	// A change of the node's info keeps its capture.
	u, err := s.UpdateNodeInfo(ctx, "n1", "ipmitool", []byte("x"))
	if err != nil || u.Capture != CaptureAlways {
		t.Errorf("after an info change: got %q (%v), want %q", u.Capture, err, CaptureAlways)
	}
}

// Captures lists the candidates only, in label order, with their type and
// setting: a node set to attached, or unset and of a type the candidates
// leave out, is not read at all.
func testCaptureList(t *testing.T, s *Store, _ testEnv) {
	ctx := context.Background()
	for _, n := range []Node{{Label: "b", Type: "sim"}, {Label: "a", Type: "ipmi", Capture: CaptureAttached},
		{Label: "c", Type: "mock", Capture: CaptureAlways}, {Label: "d", Type: "ipmi"}, {Label: "e", Type: "ipmitool"}} {
		n.InfoSealed = []byte("sealed")
		if _, err := s.CreateNode(ctx, n); err != nil {
			t.Fatal(err)
		}
	}
	b, c := NodeCapture{"b", "sim", "", ""}, NodeCapture{"c", "mock", CaptureAlways, ""}
	d, e := NodeCapture{"d", "ipmi", "", ""}, NodeCapture{"e", "ipmitool", "", ""}
	for _, tc := range []struct {
		name string
		cand CaptureCandidates
		want []NodeCapture
	}{
		{"set to always only", CaptureCandidates{}, []NodeCapture{c}},
		{"and every unset one", CaptureCandidates{Unset: true}, []NodeCapture{b, c, d, e}},
		{"and unset ipmi", CaptureCandidates{UnsetTypes: []string{"ipmi"}}, []NodeCapture{c, d}},
		{"and unset ipmi, ipmitool", CaptureCandidates{UnsetTypes: []string{"ipmi", "ipmitool"}}, []NodeCapture{c, d, e}},
	} {
		got, err := s.Captures(ctx, tc.cand)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("%s: got %+v, want %+v", tc.name, got, tc.want)
		}
	}
}

// Leases lists the live leases of one kind only.
func testLeasesListed(t *testing.T, s *Store, _ testEnv) {
	ctx := context.Background()
	const ttl = time.Minute
	for i, l := range []Lease{lease("n2", LeaseSOL, "b", 1), lease("n1", LeaseSOL, "a", 2), lease("n1", LeasePower, "a", 3),
		lease("n3", LeaseSOL, "c", 4)} {
		if _, err := s.AcquireLease(ctx, l, ttl); err != nil {
			t.Fatalf("lease %d: %v", i, err)
		}
	}
	// n3's goes past its expiry.
	if _, err := s.w.ExecContext(ctx, `UPDATE node_leases SET expires_at = expires_at - ? WHERE node = 'n3'`,
		(2 * ttl).Milliseconds()); err != nil {
		t.Fatal(err)
	}
	got, err := s.Leases(ctx, LeaseSOL)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].Node != "n1" || got[0].Owner != "a" || got[1].Node != "n2" || got[1].Owner != "b" ||
		got[0].Addr != "a:7000" || !got[0].ExpiresAt.After(time.Now()) {
		t.Errorf("got %+v, want n1 by a and n2 by b, live", got)
	}
}

func TestScreenSize(t *testing.T) {
	runCases(t, []storeCase{{"set_is_no_access_change", testScreenSizeNoChange}})
}

// A node's screen size is stored and read back, changes no epoch, and a
// bad size changes nothing.
func testScreenSizeNoChange(t *testing.T, s *Store, _ testEnv) {
	ctx := context.Background()
	n, err := s.CreateNode(ctx, Node{Label: "n1", Type: "ipmi"})
	if err != nil {
		t.Fatal(err)
	}
	if n.ScreenSize != "" {
		t.Fatalf("a new node's screen size: %q, want the default", n.ScreenSize)
	}
	for _, size := range []string{"132x43", "200x100", ""} {
		got, err := s.SetScreenSize(ctx, "n1", size)
		if err != nil || got.ScreenSize != size || got.Epoch != n.Epoch {
			t.Fatalf("set %q: got %q epoch %d (%v), want epoch %d", size, got.ScreenSize, got.Epoch, err, n.Epoch)
		}
		if read, err := s.Node(ctx, "n1"); err != nil || read.ScreenSize != size {
			t.Fatalf("read back %q: got %q (%v)", size, read.ScreenSize, err)
		}
	}
	for _, bad := range []string{"201x25", "80x101", "80", "wide"} {
		if _, err := s.SetScreenSize(ctx, "n1", bad); !errors.Is(err, screen.ErrBadSize) {
			t.Errorf("set %q: got %v, want screen.ErrBadSize", bad, err)
		}
	}
	if _, err := s.CreateNode(ctx, Node{Label: "n2", Type: "ipmi", ScreenSize: "300x300"}); !errors.Is(err, screen.ErrBadSize) {
		t.Errorf("create with 300x300: got %v, want screen.ErrBadSize", err)
	}
	if got, _ := s.Node(ctx, "n1"); got.ScreenSize != "" {
		t.Errorf("after refused sizes: %q, want the default", got.ScreenSize)
	}
	if _, err := s.SetScreenSize(ctx, "nope", "80x25"); !errors.Is(err, ErrNotFound) {
		t.Errorf("an unknown node: got %v, want ErrNotFound", err)
	}
}

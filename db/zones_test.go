package db

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestZones(t *testing.T) {
	runCases(t, []storeCase{
		{"node_zone", testNodeZone},
		{"replica_zones", testReplicaZones},
	})
}

// A node's zone is stored, read back (Node, NodeZone, Captures, Zones),
// moves no epoch, and a bad one changes nothing.
func testNodeZone(t *testing.T, s *Store, _ testEnv) {
	ctx := context.Background()
	n, err := s.CreateNode(ctx, Node{Label: "n1", Type: "ipmi", Capture: CaptureAlways, Zone: "rack-1"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.CreateNode(ctx, Node{Label: "n2", Type: "ipmi", Capture: CaptureAlways}); err != nil {
		t.Fatal(err)
	}
	if z, err := s.NodeZone(ctx, "n1"); err != nil || z != "rack-1" {
		t.Fatalf("NodeZone: %q, %v", z, err)
	}
	got, err := s.SetZone(ctx, "n1", "pod.b_2")
	if err != nil || got.Zone != "pod.b_2" || got.Epoch != n.Epoch {
		t.Fatalf("SetZone: got %q epoch %d (%v), want epoch %d", got.Zone, got.Epoch, err, n.Epoch)
	}
	if read, err := s.Node(ctx, "n1"); err != nil || read.Zone != "pod.b_2" {
		t.Fatalf("read back: %q (%v)", read.Zone, err)
	}
	caps, err := s.Captures(ctx, CaptureCandidates{})
	if err != nil || len(caps) != 2 || caps[0].Zone != "pod.b_2" || caps[1].Zone != "" {
		t.Fatalf("Captures: %+v, %v", caps, err)
	}
	if zs, err := s.Zones(ctx); err != nil || !slices.Equal(zs, []string{"pod.b_2"}) {
		t.Fatalf("Zones: %v, %v", zs, err)
	}
	for _, bad := range []string{"Rack1", "-a", "a b", "a,b", strings.Repeat("z", 65), "é"} {
		if _, err := s.SetZone(ctx, "n1", bad); !errors.Is(err, ErrBadZone) {
			t.Errorf("set %q: got %v, want ErrBadZone", bad, err)
		}
		if _, err := s.CreateNode(ctx, Node{Label: "n3", Type: "ipmi", Zone: bad}); !errors.Is(err, ErrBadZone) {
			t.Errorf("create in %q: got %v, want ErrBadZone", bad, err)
		}
	}
	if z, _ := s.NodeZone(ctx, "n1"); z != "pod.b_2" {
		t.Errorf("after refused zones: %q", z)
	}
	if _, err := s.SetZone(ctx, "nope", "a"); !errors.Is(err, ErrNotFound) {
		t.Errorf("an unknown node: got %v, want ErrNotFound", err)
	}
	if _, err := s.SetZone(ctx, "n1", ""); err != nil {
		t.Fatal(err)
	}
	if zs, err := s.Zones(ctx); err != nil || len(zs) != 0 {
		t.Errorf("Zones with none set: %v, %v", zs, err)
	}
}

// A replica's zones go with its announcement; Announce declares none; bad
// zones are refused.
func testReplicaZones(t *testing.T, s *Store, _ testEnv) {
	ctx := context.Background()
	if err := s.AnnounceIn(ctx, "r1", "127.0.0.1:1", []string{"a", "b"}, 1, time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := s.Announce(ctx, "r2", "127.0.0.1:2", 1, time.Minute); err != nil {
		t.Fatal(err)
	}
	reps, err := s.Replicas(ctx)
	if err != nil || len(reps) != 2 || !slices.Equal(reps[0].Zones, []string{"a", "b"}) || reps[1].Zones != nil {
		t.Fatalf("Replicas: %+v, %v", reps, err)
	}
	if err := s.AnnounceIn(ctx, "r1", "127.0.0.1:1", []string{"c"}, 2, time.Minute); err != nil {
		t.Fatal(err)
	}
	if reps, _ := s.Replicas(ctx); !slices.Equal(reps[0].Zones, []string{"c"}) {
		t.Errorf("re-announced: %+v", reps[0])
	}
	for _, bad := range [][]string{{""}, {"a", "a"}, {"A"}, make([]string, 31)} {
		if err := s.AnnounceIn(ctx, "r3", "127.0.0.1:3", bad, 1, time.Minute); err == nil {
			t.Errorf("zones %q: taken", bad)
		}
	}
	for _, c := range []struct {
		zones []string
		z     string
		want  bool
	}{{nil, "a", true}, {[]string{"a"}, "", true}, {[]string{"a"}, "a", true}, {[]string{"a"}, "b", false}} {
		if got := Reaches(c.zones, c.z); got != c.want {
			t.Errorf("Reaches(%q, %q) = %v", c.zones, c.z, got)
		}
	}
}

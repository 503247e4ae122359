package db

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/obmd/obmd/db/dbtest"
)

func testAudit(t *testing.T, s *Store, _ testEnv) {
	ctx := context.Background()
	t0 := time.Date(2031, 5, 6, 7, 8, 9, 123_000_000, time.UTC)
	events := []AuditEvent{
		{At: t0, Node: "n1", Actor: "ssh:password", Action: "auth", Source: "127.0.0.1:5555", Result: "denied", Detail: "wrong secret"},
		{At: t0.Add(time.Second), Node: "n2", Actor: "admin", Action: "token.rotate", Source: "127.0.0.1:1", Result: "ok"},
		{At: t0.Add(2 * time.Second), Node: "n1", Actor: "ssh:publickey", Action: "session.start", Source: "[::1]:2", Result: "ok"},
		{At: t0.Add(3 * time.Second), Node: "", Actor: "system", Action: "start", Result: "ok"},
		{At: t0.Add(3 * time.Second), Node: "n1", Actor: "http:token", Action: "power.on", Result: "busy"},
	}
	for _, e := range events {
		if err := s.Audit(ctx, e); err != nil {
			t.Fatalf("audit: %v", err)
		}
	}
	strip := func(es []AuditEvent) []AuditEvent {
		out := make([]AuditEvent, len(es))
		for i, e := range es {
			if e.ID != 0 && e.Count != 1 { // a row read back
				t.Errorf("event %d: count %d, want 1", e.ID, e.Count)
			}
			e.ID, e.Count = 0, 0
			out[i] = e
		}
		return out
	}
	tests := []struct {
		name string
		q    AuditQuery
		want []AuditEvent
	}{
		{"all", AuditQuery{}, events},
		{"node", AuditQuery{Node: "n1"}, []AuditEvent{events[0], events[2], events[4]}},
		{"since", AuditQuery{Since: t0.Add(2 * time.Second)}, events[2:]},
		{"node and since", AuditQuery{Node: "n1", Since: t0.Add(time.Millisecond)}, []AuditEvent{events[2], events[4]}},
		{"limit keeps the newest", AuditQuery{Limit: 2}, events[3:]},
		{"unknown node", AuditQuery{Node: "n9"}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := s.AuditEvents(ctx, tt.q)
			if err != nil {
				t.Fatalf("query: %v", err)
			}
			for i := 1; i < len(got); i++ {
				if got[i].ID <= got[i-1].ID {
					t.Errorf("ids not increasing: %d then %d", got[i-1].ID, got[i].ID)
				}
			}
			if g := strip(got); !slices.Equal(g, strip(tt.want)) {
				t.Errorf("got %+v, want %+v", g, tt.want)
			}
		})
	}

	// At defaults to now.
	if err := s.Audit(ctx, AuditEvent{Node: "n3", Actor: "admin", Action: "node.create", Result: "ok"}); err != nil {
		t.Fatal(err)
	}
	got, _ := s.AuditEvents(ctx, AuditQuery{Node: "n3"})
	if len(got) != 1 || got[0].At.IsZero() || got[0].At.Year() != 2030 {
		t.Errorf("event without At: got %+v, want At from the store's clock", got)
	}
}

func testAuditClips(t *testing.T, s *Store, _ testEnv) {
	ctx := context.Background()
	long := string(make([]byte, 500)) + "\xff\xfe" // NULs and invalid UTF-8, as an SSH user name may be
	user := "ü" + long
	if err := s.Audit(ctx, AuditEvent{Node: user, Actor: "ssh:password", Action: "auth", Source: long, Result: "denied", Detail: long + long}); err != nil {
		t.Fatalf("audit with network text: %v", err)
	}
	got, err := s.AuditEvents(ctx, AuditQuery{})
	if err != nil || len(got) != 1 {
		t.Fatalf("query: got %v, %v, want one event", got, err)
	}
	if n := got[0].Node; len(n) > auditNodeLen || n[:2] != "ü" {
		t.Errorf("clipped node: got %q (%d bytes), want a prefix of at most %d bytes", n, len(n), auditNodeLen)
	}
}

func testTimesRoundTrip(t *testing.T, s *Store, _ testEnv) {
	ctx := context.Background()
	loc := time.FixedZone("X", -7*3600)
	at := time.Date(2029, 12, 31, 23, 59, 59, 987_654_321, loc)
	if err := s.Audit(ctx, AuditEvent{At: at, Action: "x"}); err != nil {
		t.Fatal(err)
	}
	got, _ := s.AuditEvents(ctx, AuditQuery{})
	want := at.Truncate(time.Millisecond).UTC()
	if len(got) != 1 || got[0].At != want {
		t.Errorf("audit time: got %v, want %v", got, want)
	}
	n := mustCreate(t, s, "n1")
	back, _ := s.Node(ctx, "n1")
	if back.CreatedAt != n.CreatedAt || back.CreatedAt.Location() != time.UTC {
		t.Errorf("created at: got %v, want %v in UTC", back.CreatedAt, n.CreatedAt)
	}
}

// TestAuditIgnoresContext pins what Audit's doc promises: neither a
// cancelled context nor one past its deadline stops the record (a cut
// session's last action is still written); auditTimeout bounds it instead.
func TestAuditIgnoresContext(t *testing.T) {
	s := openTestStore(t, dbtest.SQLiteDSN(t))
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	expired, cancel2 := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel2()
	for i, ctx := range []context.Context{cancelled, expired} {
		if err := s.Audit(ctx, AuditEvent{Node: "n1", Actor: "test", Action: "late", Result: "ok", Detail: fmt.Sprint(i)}); err != nil {
			t.Errorf("audit %d with a dead context: got %v, want nil", i, err)
		}
	}
	got, err := s.AuditEvents(context.Background(), AuditQuery{Node: "n1"})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 {
		t.Errorf("events stored: got %d, want 2", len(got))
	}
}

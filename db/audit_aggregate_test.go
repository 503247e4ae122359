package db

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// TestAuditAggregation runs the aggregation cases on every engine.
func TestAuditAggregation(t *testing.T) {
	runCases(t, []storeCase{
		{"flood_is_a_row_a_window", testAggFlood},
		{"first_event_at_once", testAggFirstAtOnce},
		{"power_actions_a_row_each", testAggPowerActions},
		{"keys_bounded", testAggKeysBounded},
		{"close_writes_the_counts", testAggClose},
		{"sink_gets_every_row", testAuditSink},
	})
}

// openAggStore opens env's database WithAuditAggregation(window, keys),
// migrated, plus opts.
func openAggStore(t *testing.T, env testEnv, window time.Duration, keys int, opts ...Option) *Store {
	t.Helper()
	s := openUnmigrated(t, env.dsn, append([]Option{WithAuditAggregation(window, keys)}, opts...)...)
	if err := s.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	return s
}

// aggRows polls the audit of node until its rows count want events, and
// returns them.
func aggRows(t *testing.T, s *Store, node string, want int64) []AuditEvent {
	t.Helper()
	var got []AuditEvent
	var sum int64
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		var err error
		if got, err = s.AuditEvents(context.Background(), AuditQuery{Node: node}); err != nil {
			t.Fatal(err)
		}
		if sum = countOf(got); sum >= want {
			break
		}
	}
	if sum != want {
		t.Fatalf("audit of %s: rows count %d events, want %d: %+v", node, sum, want, got)
	}
	return got
}

func countOf(rows []AuditEvent) int64 {
	var n int64
	for _, r := range rows {
		n += r.Count
	}
	return n
}

// testAggFlood: one credential polling power status from one address over
// many connections (ports) for several windows writes its first event and
// then one row per window, whose counts add up to every event.
func testAggFlood(t *testing.T, _ *Store, env testEnv) {
	const window = 100 * time.Millisecond
	s := openAggStore(t, env, window, 16)
	ctx := context.Background()
	start := time.Now()
	var events int64
	for time.Since(start) < 5*window {
		e := AuditEvent{Node: "n1", Actor: "http:token", Action: "power.status", Result: "ok",
			Source: fmt.Sprintf("10.0.0.7:%d", 1024+events%8), Detail: fmt.Sprintf("on; took %dms", events%3)}
		if err := s.Audit(ctx, e); err != nil {
			t.Fatal(err)
		}
		events++
	}
	took := time.Since(start)
	rows := aggRows(t, s, "n1", events)
	// At most two rows per window: the first event of the key (again
	// after a window without one, as when a slow commit held the loop up),
	// and the count of its repeats.
	windows := int(took/window) + 2 // the first, partial, and the last, taken after the loop
	if len(rows) > 2*windows {
		t.Errorf("%d events over %v: got %d rows, want at most %d (two per %v)",
			events, took, len(rows), 2*windows, window)
	}
	if events < 100 {
		t.Fatalf("only %d events written in %v: the flood proves nothing", events, took)
	}
	if r := rows[0]; r.Count != 1 || r.Source != "10.0.0.7:1024" || r.Detail != "on; took 0ms" {
		t.Errorf("first row: got %+v, want the first event itself", r)
	}
	counted := 0
	for _, r := range rows[1:] {
		if r.Actor != "http:token" || r.Action != "power.status" || r.Result != "ok" {
			t.Errorf("row: got %+v, want power.status ok", r)
		}
		if r.Source == "10.0.0.7" {
			counted++
		} else if r.Count != 1 {
			t.Errorf("row: got %+v, want a first event (count 1) or a count from 10.0.0.7", r)
		}
	}
	if counted == 0 {
		t.Errorf("got %+v, want rows counting repeats", rows)
	}
}

// testAggFirstAtOnce: a key's first event is written as any event is
// (here within AuditWindow, not at the end of a minute-long window); a
// repeat waits for the window; an IPv6 source is keyed by its /64.
func testAggFirstAtOnce(t *testing.T, _ *Store, env testEnv) {
	s := openAggStore(t, env, time.Minute, 16)
	ctx := context.Background()
	e := AuditEvent{Node: "n1", Actor: "ssh:password", Action: "auth", Result: "denied", Source: "[2001:db8::1]:22", Detail: "bad token"}
	for _, src := range []string{"[2001:db8::1]:22", "[2001:db8::2]:23"} {
		e.Source = src
		if err := s.Audit(ctx, e); err != nil {
			t.Fatal(err)
		}
	}
	rows, err := s.AuditEvents(ctx, AuditQuery{Node: "n1"})
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 1 || rows[0].Source != "[2001:db8::1]:22" || rows[0].Count != 1 {
		t.Errorf("got %+v, want the first event only (the second, of the same /64, is counted)", rows)
	}
}

// testAggPowerActions: power actions that reached the BMC are a row each,
// whatever their number; their refusals (busy, refused) are counted.
func testAggPowerActions(t *testing.T, _ *Store, env testEnv) {
	s := openAggStore(t, env, time.Minute, 16)
	ctx := context.Background()
	for i := range 20 {
		for _, e := range []AuditEvent{
			{Node: "n1", Actor: "http:token", Action: "power.on", Result: "ok", Source: "10.0.0.7:1", Detail: "took 1ms"},
			{Node: "n1", Actor: "http:token", Action: "power.cycle", Result: "error", Source: "10.0.0.7:1", Detail: "BMC said no"},
			{Node: "n1", Actor: "admin", Action: "token.rotate", Result: "ok", Source: "10.0.0.8:1"},
			{Node: "n1", Actor: "http:token", Action: "power.on", Result: "busy", Source: "10.0.0.7:1", Detail: "busy"},
			{Node: "n1", Actor: "http:token", Action: "bootdev", Result: "refused", Source: "10.0.0.7:1", Detail: fmt.Sprint(i)},
		} {
			if err := s.Audit(ctx, e); err != nil {
				t.Fatal(err)
			}
		}
	}
	s.writeAggregated(s.agg.take()) // end the window now
	rows := aggRows(t, s, "n1", 100)
	byResult := map[string]int{}
	for _, r := range rows {
		byResult[r.Action+" "+r.Result]++
		if (r.Result == "ok" || r.Result == "error") && r.Count != 1 {
			t.Errorf("row %+v: count %d, want 1", r, r.Count)
		}
	}
	for _, k := range []string{"power.on ok", "power.cycle error", "token.rotate ok"} {
		if byResult[k] != 20 {
			t.Errorf("%s: got %d rows, want 20 (one each)", k, byResult[k])
		}
	}
	for _, k := range []string{"power.on busy", "bootdev refused"} {
		if byResult[k] != 2 {
			t.Errorf("%s: got %d rows, want the first and a count", k, byResult[k])
		}
	}
}

// testAggKeysBounded: clients with ever new addresses (or names) fill the
// keys, refusals half of them at most; past them, events are counted by
// action and result only, and nothing of them is lost.
func testAggKeysBounded(t *testing.T, _ *Store, env testEnv) {
	const keys = 8
	s := openAggStore(t, env, time.Minute, keys)
	ctx := context.Background()
	const events = 500
	flood := func(node, action, result string) {
		for i := range events {
			e := AuditEvent{Node: node, Actor: "ssh:password", Action: action, Result: result,
				Source: fmt.Sprintf("10.%d.%d.%d:22", i>>16, (i>>8)&255, i&255), Detail: "unknown node"}
			if err := s.Audit(ctx, e); err != nil {
				t.Fatal(err)
			}
		}
	}
	flood("n1", "auth", "denied") // no credentials: refusals
	flood("n2", "auth", "ok")     // a tenant's logins
	a := s.agg
	a.mu.Lock()
	held, refusals, over := len(a.keys), a.refusals, len(a.over)
	a.mu.Unlock()
	if held != keys || refusals != keys/2 || over != 2 {
		t.Errorf("keys held: got %d (%d refusals) and %d overflow, want %d (%d refusals) and 2", held, refusals, over, keys, keys/2)
	}
	s.writeAggregated(a.take()) // end the window now
	rows, err := s.AuditEvents(ctx, AuditQuery{})
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != keys+2 || countOf(rows) != 2*events {
		t.Fatalf("got %d rows counting %d, want %d firsts and two overflow rows counting %d", len(rows), countOf(rows), keys, 2*events)
	}
	overflow := map[string]int64{}
	for _, r := range rows {
		switch {
		case r.Actor != OverflowActor && r.Count == 1:
		case r.Node != "" || r.Source != OverflowSource:
			t.Errorf("overflow row: got %+v, want no node, actor %s, source %s", r, OverflowActor, OverflowSource)
		default:
			overflow[r.Action+" "+r.Result] = r.Count
		}
	}
	if want := map[string]int64{"auth denied": events - keys/2, "auth ok": events - keys/2}; fmt.Sprint(overflow) != fmt.Sprint(want) {
		t.Errorf("overflow counts: got %v, want %v", overflow, want)
	}
	a.mu.Lock()
	held, refusals = len(a.keys), a.refusals
	a.mu.Unlock()
	if held != 0 || refusals != 0 {
		t.Errorf("after a window without repeats: got %d keys (%d refusals), want none", held, refusals)
	}
}

// TestDetailKind: repeats that differ in their numbers only are one kind.
func TestDetailKind(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{"on; took 3ms", "on; took #"},
		{"on; took 0s", "on; took #"},
		{"exec exit 0 after 1m2.5s", "exec exit # after #"},
		{"12 bytes (forced)", "# bytes (forced)"},
		{"wrong token", "wrong token"},
		{"rate limited (source)", "rate limited (source)"},
		{"3 key(s) offered, 1 registered but not signed with", "# key(s) offered, # registered but not signed with"},
		{"", ""},
	} {
		if got := detailKind(tt.in); got != tt.want {
			t.Errorf("detailKind(%q): got %q, want %q", tt.in, got, tt.want)
		}
	}
}

// testAggClose: Close writes what was counted.
func testAggClose(t *testing.T, _ *Store, env testEnv) {
	s := openAggStore(t, env, time.Minute, 16)
	ctx := context.Background()
	for range 5 {
		if err := s.Audit(ctx, AuditEvent{Node: "n1", Actor: "ssh:password", Action: "session.start", Result: "ok", Source: "10.0.0.1:5"}); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	again := openUnmigrated(t, env.dsn)
	rows, err := again.AuditEvents(ctx, AuditQuery{Node: "n1"})
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 2 || countOf(rows) != 5 {
		t.Errorf("after Close: got %+v, want the first and a row counting 4", rows)
	}
	// A closed store writes each event (the cleanup closes s again: a no-op).
}

// sinkRecorder is an AuditSink that keeps what it is given.
type sinkRecorder struct {
	rows chan []AuditEvent
}

func (r *sinkRecorder) Export(rows []AuditEvent) { r.rows <- rows }

// testAuditSink: every committed row, aggregated or not, goes to the sink
// too, with the fields it was stored with.
func testAuditSink(t *testing.T, _ *Store, env testEnv) {
	sink := &sinkRecorder{rows: make(chan []AuditEvent, 100)}
	s := openAggStore(t, env, 50*time.Millisecond, 16, WithAuditSink(sink))
	ctx := context.Background()
	for range 3 {
		for _, e := range []AuditEvent{
			{Node: "n1", Actor: "admin", Action: "token.rotate", Result: "ok", Source: "10.0.0.8:1", Detail: "rotated"},
			{Node: "n1", Actor: "http:token", Action: "power.status", Result: "ok", Source: "10.0.0.7:1", Detail: "on"},
		} {
			if err := s.Audit(ctx, e); err != nil {
				t.Fatal(err)
			}
		}
	}
	stored := aggRows(t, s, "n1", 6)
	var exported []AuditEvent
	for deadline := time.After(10 * time.Second); len(exported) < len(stored); {
		select {
		case rows := <-sink.rows:
			exported = append(exported, rows...)
		case <-deadline:
			t.Fatalf("exported %d rows, want %d", len(exported), len(stored))
		}
	}
	key := func(e AuditEvent) string {
		return fmt.Sprintf("%d %s %s %s %s %s %s %d", e.At.UnixMilli(), e.Node, e.Actor, e.Action, e.Source, e.Result, e.Detail, e.Count)
	}
	seen := map[string]int{}
	for _, e := range exported {
		seen[key(e)]++
	}
	for _, e := range stored {
		if seen[key(e)]--; seen[key(e)] < 0 {
			t.Errorf("stored row %+v was not exported (exported %+v)", e, exported)
		}
	}
}

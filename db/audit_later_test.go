package db

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"
	"unsafe"

	logtest "github.com/sirupsen/logrus/hooks/test"

	"github.com/obmd/obmd/db/dbtest"
)

// openWindowStore opens and migrates dsn with a deferred-audit window of w;
// the caller closes it.
func openWindowStore(t *testing.T, dsn string, w time.Duration) *Store {
	t.Helper()
	log, _ := logtest.NewNullLogger()
	s, err := Open(context.Background(), dsn, log, WithAuditWindow(w))
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	if err := s.Migrate(context.Background()); err != nil {
		s.Close()
		t.Fatalf("migrate: %v", err)
	}
	return s
}

// storedAudit counts the committed audit rows of action, read straight
// from the database (not through AuditEvents, which commits the queue).
func storedAudit(t *testing.T, s *Store, action string) int {
	t.Helper()
	var n int
	if err := s.r.QueryRowContext(context.Background(),
		`SELECT COUNT(*) FROM audit_events WHERE action = ?`, action).Scan(&n); err != nil {
		t.Fatalf("count audit rows: %v", err)
	}
	return n
}

func auditOK(t *testing.T, s *Store, action string) {
	t.Helper()
	if err := s.Audit(context.Background(), AuditEvent{Node: "n1", Actor: "test", Action: action, Result: "ok"}); err != nil {
		t.Fatalf("audit %s: %v", action, err)
	}
}

// queueStatus puts n power.status events straight into s's deferred
// queue (without signalling its goroutine) and returns the event.
func queueStatus(s *Store, n int) AuditEvent {
	ev := AuditEvent{Node: "n1", Actor: "test", Action: "power.status", Result: "ok", At: time.Now()}
	s.audit.mu.Lock()
	for range n {
		s.audit.later.events = append(s.audit.later.events, ev)
	}
	s.audit.mu.Unlock()
	return ev
}

// TestAuditDeferredCommit: what Audit promises about deferred events. With
// a window far longer than the test, a read's row is not committed when
// Audit returns; a power action's is, and carries the reads queued before
// it; AuditEvents sees queued rows; Close commits the rest, so a fresh
// store finds them all.
func TestAuditDeferredCommit(t *testing.T) {
	for _, e := range dbtest.Engines() {
		t.Run(e.Name, func(t *testing.T) {
			dsn := e.DSN(t)
			s := openWindowStore(t, dsn, time.Hour)
			auditOK(t, s, "session.start")
			auditOK(t, s, "power.status")
			if n := storedAudit(t, s, "power.status"); n != 0 {
				t.Fatalf("power.status committed before the window ended (%d rows): not deferred", n)
			}
			auditOK(t, s, "power.on")
			if n := storedAudit(t, s, "power.on"); n != 1 {
				t.Fatalf("power.on rows after Audit returned: got %d, want 1", n)
			}
			if n := storedAudit(t, s, "power.status"); n != 1 {
				t.Fatalf("a read queued before a power action is not committed with it: %d rows", n)
			}
			auditOK(t, s, "session.end")
			got, err := s.AuditEvents(context.Background(), AuditQuery{Node: "n1"})
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != 4 || got[3].Action != "session.end" {
				t.Fatalf("AuditEvents does not see the queued row: %+v", got)
			}
			auditOK(t, s, "auth")
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			s2 := openWindowStore(t, dsn, time.Hour)
			defer s2.Close()
			if n := storedAudit(t, s2, "auth"); n != 1 {
				t.Fatalf("Close did not commit the queued auth row: %d rows", n)
			}
		})
	}
}

// TestAuditDeferredWindow: with the default window a deferred row reaches
// the database by itself (no further Audit, read or Close).
func TestAuditDeferredWindow(t *testing.T) {
	for _, e := range dbtest.Engines() {
		t.Run(e.Name, func(t *testing.T) {
			s := openTestStore(t, e.DSN(t))
			auditOK(t, s, "auth")
			deadline := time.Now().Add(10 * time.Second) // generous: a shared machine
			for storedAudit(t, s, "auth") == 0 {
				if time.Now().After(deadline) {
					t.Fatal("a deferred row was not committed within 10 s")
				}
				time.Sleep(10 * time.Millisecond)
			}
		})
	}
}

// TestAuditDeferredBounded: the deferred queue holds at most auditLaterMax
// events; with it full, the next one is committed (with the queue) before
// Audit returns.
func TestAuditDeferredBounded(t *testing.T) {
	s := openWindowStore(t, dbtest.SQLiteDSN(t), time.Hour)
	defer s.Close()
	ev := queueStatus(s, auditLaterMax)
	if s.deferAudit(ev) {
		t.Fatal("a full queue took one more event")
	}
	auditOK(t, s, "power.status")
	if n := storedAudit(t, s, "power.status"); n != auditLaterMax+1 {
		t.Fatalf("rows after Audit on a full queue: got %d, want %d", n, auditLaterMax+1)
	}
}

// TestDeferredAuditOnlyReads: power actions, access changes and every
// action not listed stay committed before Audit returns.
func TestDeferredAuditOnlyReads(t *testing.T) {
	for _, a := range []string{"power.on", "power.off", "power.soft-off", "power.cycle", "power.reset", "bootdev",
		"node.create", "node.delete", "token.rotate", "token.revoke", "key.add", "key.remove", "sol.enable",
		"session.kick", "console.break", "admin.auth", ""} {
		if DeferredAudit(a) {
			t.Errorf("%q is deferred; it must be committed before Audit returns", a)
		}
	}
	for _, a := range []string{"auth", "session.start", "session.end", "power.status"} {
		if !DeferredAudit(a) {
			t.Errorf("%q is not deferred", a)
		}
	}
}

// TestAuditDeferredQueueBounded: an unauthenticated client picks the node
// and user it logs in with; a flood of huge names must not fill the
// deferred queue with them. Each queued event holds at most its columns'
// sizes, in strings of its own (not slices of the caller's).
func TestAuditDeferredQueueBounded(t *testing.T) {
	s := openWindowStore(t, dbtest.SQLiteDSN(t), time.Hour)
	defer s.Close()
	huge := strings.Repeat("x", 256<<10)
	if err := s.Audit(context.Background(), AuditEvent{Node: huge, Actor: huge, Action: "auth", Source: huge, Result: huge, Detail: huge}); err != nil {
		t.Fatalf("audit: %v", err)
	}
	s.audit.mu.Lock()
	queued := append([]AuditEvent(nil), s.audit.later.events...)
	s.audit.mu.Unlock()
	if len(queued) != 1 {
		t.Fatalf("queued %d events, want 1", len(queued))
	}
	q := queued[0]
	size := len(q.Node) + len(q.Actor) + len(q.Action) + len(q.Source) + len(q.Result) + len(q.Detail)
	if max := auditNodeLen + auditActorLen + auditActionLen + auditSourceLen + auditResultLen + auditDetailLen; size > max {
		t.Fatalf("queued event holds %d bytes, want at most %d", size, max)
	}
	if unsafe.StringData(q.Node) == unsafe.StringData(huge) {
		t.Fatal("queued node shares the caller's string")
	}
}

// TestAuditDeferredFullAtOnce: a full batch is committed at once even when
// its signal is the one that wakes the goroutine (as after a commit during
// which both the first event's and the full queue's signals were sent).
func TestAuditDeferredFullAtOnce(t *testing.T) {
	s := openWindowStore(t, dbtest.SQLiteDSN(t), time.Hour)
	defer s.Close()
	queueStatus(s, auditBatchMax)
	signal(s.audit.later.full)
	deadline := time.Now().Add(10 * time.Second) // generous: a shared machine; the window is an hour
	for storedAudit(t, s, "power.status") != auditBatchMax {
		if time.Now().After(deadline) {
			t.Fatal("a full deferred batch waited for the window")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestAuditDeferredSurvivesFailedCommit: deferred events whose commit
// fails (here the audit table is renamed away for a while, as a database
// refusing writes would) go back to the queue and are committed once the
// database takes writes again, in order, none lost and none twice.
func TestAuditDeferredSurvivesFailedCommit(t *testing.T) {
	for _, e := range dbtest.Engines() {
		t.Run(e.Name, func(t *testing.T) {
			s := openWindowStore(t, e.DSN(t), 20*time.Millisecond)
			defer s.Close()
			ctx := context.Background()
			rename := func(from, to string) {
				t.Helper()
				q := `ALTER TABLE ` + from + ` RENAME TO ` + to
				if s.Dialect() == DialectMySQL {
					q = `RENAME TABLE ` + from + ` TO ` + to
				}
				if _, err := s.w.ExecContext(ctx, q); err != nil {
					t.Fatalf("rename %s: %v", from, err)
				}
			}
			rename("audit_events", "audit_events_away")
			for i := range 3 {
				if err := s.Audit(ctx, AuditEvent{Node: "n1", Actor: "test", Action: "auth", Result: "ok", Detail: fmt.Sprint(i)}); err != nil {
					t.Fatalf("audit: %v", err)
				}
			}
			time.Sleep(300 * time.Millisecond) // many windows: commits fail meanwhile
			rename("audit_events_away", "audit_events")
			deadline := time.Now().Add(10 * time.Second)
			for storedAudit(t, s, "auth") < 3 {
				if time.Now().After(deadline) {
					t.Fatalf("deferred events after a failed commit: %d of 3 stored", storedAudit(t, s, "auth"))
				}
				time.Sleep(20 * time.Millisecond)
			}
			got, err := s.AuditEvents(ctx, AuditQuery{Node: "n1"})
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != 3 || got[0].Detail != "0" || got[1].Detail != "1" || got[2].Detail != "2" {
				t.Errorf("stored %+v, want the three events once, in order", got)
			}
		})
	}
}

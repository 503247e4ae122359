package db

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/obmd/obmd/keys"
)

// TestAuditPurge runs the retention cases on every engine.
func TestAuditPurge(t *testing.T) {
	runCases(t, []storeCase{
		{"audit_in_batches", testPurgeAuditBatches},
		{"audit_by_replicas_at_once", testPurgeAuditConcurrent},
		{"changes_nobody_needs", testPurgeChanges},
		{"writers_not_held", testPurgeHoldsNoWriter},
		{"run_purge", testRunPurge},
	})
}

// fillAudit writes n audit rows at, in transactions of a few thousand.
func fillAudit(t *testing.T, s *Store, n int, at time.Time) {
	t.Helper()
	for done := 0; done < n; {
		batch := make([]AuditEvent, min(4096, n-done))
		for i := range batch {
			batch[i] = AuditEvent{At: at.Add(time.Duration(done+i) * time.Millisecond), Node: "old", Actor: "http:token",
				Action: "power.status", Source: "10.0.0.7:1", Result: "ok", Detail: "on", Count: 1}
		}
		if err := s.insertAudit(context.Background(), batch); err != nil {
			t.Fatal(err)
		}
		done += len(batch)
	}
}

func auditCount(t *testing.T, s *Store, where string) int {
	t.Helper()
	var n int
	if err := s.r.QueryRowContext(context.Background(), `SELECT COUNT(*) FROM audit_events WHERE `+where).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// testPurgeAuditBatches: PurgeAudit deletes the oldest rows from before
// its time, PurgeBatch at most per call, and nothing newer.
func testPurgeAuditBatches(t *testing.T, s *Store, _ testEnv) {
	ctx := context.Background()
	now := s.now()
	fillAudit(t, s, 2*PurgeBatch+200, now.Add(-48*time.Hour))
	fillAudit(t, s, 10, now.Add(-time.Hour))
	var got []int
	for {
		n, err := s.PurgeAudit(ctx, now.Add(-24*time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, n)
		if n == 0 {
			break
		}
	}
	if fmt.Sprint(got) != fmt.Sprint([]int{PurgeBatch, PurgeBatch, 200, 0}) {
		t.Errorf("rows per call: got %v, want %d, %d, 200, 0", got, PurgeBatch, PurgeBatch)
	}
	if left := auditCount(t, s, "1 = 1"); left != 10 {
		t.Errorf("rows left: got %d, want the 10 newer ones", left)
	}
}

// testPurgeAuditConcurrent: replicas (one per server on Galera) purging at
// once delete every old row once between them, without an error.
func testPurgeAuditConcurrent(t *testing.T, s *Store, env testEnv) {
	ctx := context.Background()
	now := s.now()
	const rows = 6 * PurgeBatch
	fillAudit(t, s, rows, now.Add(-48*time.Hour))
	stores := []*Store{s}
	if s.Dialect() != DialectSQLite { // replicas are stores of their own
		for i := 1; i < 3; i++ {
			stores = append(stores, openUnmigrated(t, env.at(i)))
		}
	} else { // one process per SQLite file: replicas are goroutines
		stores = append(stores, s, s)
	}
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		deleted int
	)
	for _, st := range stores {
		wg.Go(func() {
			for {
				n, err := st.PurgeAudit(ctx, now.Add(-24*time.Hour))
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				deleted += n
				mu.Unlock()
				if n == 0 {
					return
				}
			}
		})
	}
	wg.Wait()
	if left := auditCount(t, s, "1 = 1"); left != 0 || deleted != rows {
		t.Errorf("got %d rows left, %d deleted, want none left and each of %d deleted once", left, deleted, rows)
	}
}

// testPurgeChanges: an old access change goes unless it set a node's
// current epoch (the start of its tenancy) or a live replica has not
// applied it; credential changes go with theirs.
func testPurgeChanges(t *testing.T, s *Store, _ testEnv) {
	ctx := context.Background()
	mustCreate(t, s, "n1") // epoch 1
	mustCreate(t, s, "n2") // 2
	for range 3 {          // 3, 4, 5
		if _, err := s.SetToken(ctx, "n1", keys.HashToken("t")); err != nil {
			t.Fatal(err)
		}
	}
	cred, err := s.Revoke(ctx, Revocation{Kind: CredSerial, Serial: 7}) // 6
	if err != nil {
		t.Fatal(err)
	}
	mustCreate(t, s, "gone")                             // 7
	if _, err := s.DeleteNode(ctx, "gone"); err != nil { // 8
		t.Fatal(err)
	}
	if _, err := s.SetToken(ctx, "n1", keys.HashToken("u")); err != nil { // 9: n1's current
		t.Fatal(err)
	}
	if _, err := s.w.ExecContext(ctx, `UPDATE access_changes SET at = at - ?`, (48 * time.Hour).Milliseconds()); err != nil {
		t.Fatal(err)
	}
	before := s.now().Add(-24 * time.Hour)
	tenancy, err := s.CertAccess(ctx, "n1", "SHA256:x", 1, "k")
	if err != nil || tenancy.TenancyStart.IsZero() {
		t.Fatalf("n1's tenancy: got %+v, %v", tenancy, err)
	}

	// A live replica that has applied up to epoch 5 holds 6 and on.
	if err := s.Announce(ctx, "r1", "127.0.0.1:1", 5, time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := s.Announce(ctx, "r2", "127.0.0.1:2", 8, time.Minute); err != nil {
		t.Fatal(err)
	}
	purgeAllChanges(t, s, before)
	if got := epochsLeft(t, s); fmt.Sprint(got) != "[2 6 7 8 9]" {
		t.Errorf("with a replica at epoch 5: got epochs %v left, want [2 6 7 8 9] (n2's current, then not applied by r1)", got)
	}
	if err := s.Announce(ctx, "r1", "127.0.0.1:1", 9, time.Minute); err != nil {
		t.Fatal(err)
	}
	purgeAllChanges(t, s, before)
	if got := epochsLeft(t, s); fmt.Sprint(got) != "[2 9]" {
		t.Errorf("every replica at epoch 8 or more: got epochs %v left, want [2 9] (n2's and n1's current)", got)
	}
	var creds int
	if err := s.r.QueryRowContext(ctx, `SELECT COUNT(*) FROM credential_changes WHERE epoch = ?`, cred).Scan(&creds); err != nil || creds != 0 {
		t.Errorf("credential change %d: got %d rows (%v), want it purged with its change", cred, creds, err)
	}
	after, err := s.CertAccess(ctx, "n1", "SHA256:x", 1, "k")
	if err != nil || !after.TenancyStart.Equal(tenancy.TenancyStart) {
		t.Errorf("n1's tenancy after the purge: got %v (%v), want %v", after.TenancyStart, err, tenancy.TenancyStart)
	}
	// The changes are still seen in order, from any cursor past the purge.
	if c, err := s.ChangesSince(ctx, 8, 0); err != nil || len(c) != 1 || c[0].Epoch != 9 {
		t.Errorf("changes since 8: got %+v, %v", c, err)
	}
	// A new change makes n2's old one go; nothing newer than the
	// retention goes, whoever applied it.
	if _, err := s.SetToken(ctx, "n2", keys.HashToken("v")); err != nil { // 10
		t.Fatal(err)
	}
	if err := s.Withdraw(ctx, "r1"); err != nil {
		t.Fatal(err)
	}
	if err := s.Withdraw(ctx, "r2"); err != nil {
		t.Fatal(err)
	}
	purgeAllChanges(t, s, before)
	if got := epochsLeft(t, s); fmt.Sprint(got) != "[9 10]" {
		t.Errorf("after n2's change, no replica announced: got epochs %v left, want [9 10] (the nodes' current)", got)
	}
}

// purgeAllChanges runs PurgeChanges until it deletes nothing.
func purgeAllChanges(t *testing.T, s *Store, before time.Time) {
	t.Helper()
	for {
		n, err := s.PurgeChanges(context.Background(), before)
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			return
		}
	}
}

func epochsLeft(t *testing.T, s *Store) []int64 {
	t.Helper()
	rows, err := s.r.QueryContext(context.Background(), `SELECT epoch FROM access_changes ORDER BY epoch`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []int64
	for rows.Next() {
		var e int64
		if err := rows.Scan(&e); err != nil {
			t.Fatal(err)
		}
		out = append(out, e)
	}
	return out
}

// testPurgeHoldsNoWriter: while a purge deletes a large backlog, audit
// writes that are committed before they return (power actions) and
// access changes (cuts) go on, each within a generous bound: a purge
// statement deletes PurgeBatch rows, then gives way. A single DELETE of
// the backlog would hold SQLite's writer for all of it.
func testPurgeHoldsNoWriter(t *testing.T, s *Store, _ testEnv) {
	ctx := context.Background()
	now := s.now()
	const backlog = 40 * PurgeBatch
	fillAudit(t, s, backlog, now.Add(-48*time.Hour))
	mustCreate(t, s, "n1")

	purged := make(chan struct{})
	go func() { // waited for below
		defer close(purged)
		s.purgeAll(ctx, "audit_purged", func(ctx context.Context) (int, error) {
			return s.PurgeAudit(ctx, now.Add(-24*time.Hour))
		})
	}()
	const bound = 2 * time.Second
	var worst time.Duration
	writes := 0
	for done := false; !done; writes++ {
		select {
		case <-purged:
			done = true
		default:
		}
		start := time.Now()
		if err := s.Audit(ctx, AuditEvent{Node: "n1", Actor: "http:token", Action: "power.on", Result: "ok"}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.SetToken(ctx, "n1", keys.HashToken(fmt.Sprint(writes))); err != nil {
			t.Fatal(err)
		}
		worst = max(worst, time.Since(start))
	}
	if left := auditCount(t, s, "node = 'old'"); left != 0 {
		t.Errorf("backlog left: %d rows", left)
	}
	if worst > bound {
		t.Errorf("an audit write and a token rotation during the purge took up to %v, want at most %v", worst, bound)
	}
	t.Logf("%d writes and rotations during the purge of %d rows, the slowest %v", writes, backlog, worst)
}

// testRunPurge: RunPurge deletes what is past each retention at its
// first pass and stops with its context.
func testRunPurge(t *testing.T, s *Store, _ testEnv) {
	ctx, cancel := context.WithCancel(context.Background())
	now := s.now()
	fillAudit(t, s, PurgeBatch+5, now.Add(-3*time.Hour))
	fillAudit(t, s, 5, now.Add(-30*time.Minute))
	mustCreate(t, s, "n1")
	for range 2 {
		if _, err := s.SetToken(ctx, "n1", keys.HashToken("t")); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.w.ExecContext(ctx, `UPDATE access_changes SET at = at - ?`, (5 * time.Hour).Milliseconds()); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { // waited for below
		done <- s.RunPurge(ctx, AuditConfig{Retention: time.Hour, ChangesRetention: 4 * time.Hour, PurgeInterval: 10 * time.Millisecond})
	}()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if auditCount(t, s, "1 = 1") == 5 && fmt.Sprint(epochsLeft(t, s)) == "[3]" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after RunPurge: %d audit rows, epochs %v, want 5 and [3]", auditCount(t, s, "1 = 1"), epochsLeft(t, s))
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("RunPurge: got %v, want nil", err)
	}
}

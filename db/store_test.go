package db

import (
	"context"
	"errors"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/obmd/obmd/db/dbtest"
	"github.com/obmd/obmd/keys"
	logtest "github.com/sirupsen/logrus/hooks/test"
)

// storeCase is one test of the suite; it gets a migrated store of its own.
type storeCase struct {
	name string
	run  func(t *testing.T, s *Store, env testEnv)
}

// testEnv is where a case's store lives.
type testEnv struct {
	dsn string // the store's database
	// dsns reach the same database through each server: on Galera one per
	// node (dsns[0] == dsn), else just dsn.
	dsns []string
}

// at returns the DSN of the database through server i (modulo the number
// of servers): a case that opens more stores spreads them over the nodes.
func (e testEnv) at(i int) string { return e.dsns[i%len(e.dsns)] }

// testEngine is an engine a case runs on: env creates a fresh database.
type testEngine struct {
	name string
	env  func(t testing.TB) testEnv
}

// testEngines lists SQLite, MySQL, and a Galera cluster (started once for
// this test binary, by the first case that runs on it: see TestMain).
func testEngines() []testEngine {
	var out []testEngine
	for _, e := range dbtest.Engines() {
		out = append(out, testEngine{e.Name, func(t testing.TB) testEnv {
			dsn := e.DSN(t)
			return testEnv{dsn: dsn, dsns: []string{dsn}}
		}})
	}
	return append(out, testEngine{"galera", func(t testing.TB) testEnv {
		dsns := galeraCluster.Database(t)
		return testEnv{dsn: dsns[0], dsns: dsns}
	}})
}

// TestStore runs every case against SQLite, MariaDB/MySQL (when
// OBMD_TEST_MYSQL_DSN is set) and a Galera cluster, each case on a fresh
// database.
func TestStore(t *testing.T) {
	cases := []storeCase{
		{"nodes", testNodes},
		{"not_found_and_exists", testNotFoundAndExists},
		{"labels_byte_exact", testLabelsByteExact},
		{"tokens", testTokens},
		{"keys", testKeys},
		{"changes", testChanges},
		{"epochs_never_reused", testEpochsNeverReused},
		{"audit", testAudit},
		{"audit_clips_network_text", testAuditClips},
		{"times_round_trip", testTimesRoundTrip},
		{"migrate_idempotent", testMigrateIdempotent},
		{"concurrent_writers", testConcurrentWriters},
		{"no_plaintext_token", testNoPlaintextToken},
	}
	runCases(t, cases)
}

// runCases runs every case on every engine, each on a fresh database.
func runCases(t *testing.T, cases []storeCase) {
	for _, e := range testEngines() {
		t.Run(e.name, func(t *testing.T) {
			for _, c := range cases {
				t.Run(c.name, func(t *testing.T) {
					env := e.env(t)
					c.run(t, openTestStore(t, env.dsn), env)
				})
			}
		})
	}
}

// openTestStore opens and migrates dsn, with a clock that moves 1 ms per
// reading so creation order is time order.
func openTestStore(t testing.TB, dsn string) *Store {
	t.Helper()
	ctx := context.Background()
	log, _ := logtest.NewNullLogger()
	s, err := Open(ctx, dsn, log)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	if err := s.Migrate(ctx); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	var tick atomic.Int64
	base := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	s.now = func() time.Time { return base.Add(time.Duration(tick.Add(1)) * time.Millisecond) }
	return s
}

// openUnmigrated opens dsn with opts, without migrating it (and without
// the test clock of openTestStore).
func openUnmigrated(t *testing.T, dsn string, opts ...Option) *Store {
	t.Helper()
	log, _ := logtest.NewNullLogger()
	s, err := Open(context.Background(), dsn, log, opts...)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	return s
}

func mustCreate(t *testing.T, s *Store, label string) Node {
	t.Helper()
	n, err := s.CreateNode(context.Background(), Node{Label: label, Type: "mock", InfoSealed: []byte("sealed-" + label)})
	if err != nil {
		t.Fatalf("create %s: %v", label, err)
	}
	return n
}

func labels(ns []Node) []string {
	var out []string
	for _, n := range ns {
		out = append(out, n.Label)
	}
	return out
}

func testNodes(t *testing.T, s *Store, _ testEnv) {
	ctx := context.Background()
	b := mustCreate(t, s, "b")
	a := mustCreate(t, s, "a")
	mustCreate(t, s, "B")
	if a.Epoch <= b.Epoch || b.Epoch <= 0 {
		t.Errorf("epochs of b, a: got %d, %d, want positive and increasing", b.Epoch, a.Epoch)
	}
	if a.CreatedAt.IsZero() || !a.UpdatedAt.Equal(a.CreatedAt) {
		t.Errorf("timestamps of new node: got created %v updated %v", a.CreatedAt, a.UpdatedAt)
	}

	got, err := s.Node(ctx, "a")
	if err != nil {
		t.Fatalf("get a: %v", err)
	}
	if got.Label != a.Label || got.Type != a.Type || string(got.InfoSealed) != "sealed-a" ||
		got.Epoch != a.Epoch || !got.CreatedAt.Equal(a.CreatedAt) || !got.UpdatedAt.Equal(a.UpdatedAt) {
		t.Errorf("get a: got %+v, want %+v", got, a)
	}

	all, err := s.Nodes(ctx)
	if err != nil {
		t.Fatalf("list: %v", err)
	}
	if got, want := labels(all), []string{"B", "a", "b"}; !slices.Equal(got, want) {
		t.Errorf("list: got %v, want %v (byte order)", got, want)
	}

	up, err := s.UpdateNodeInfo(ctx, "a", "ipmi", []byte("sealed-2"))
	if err != nil {
		t.Fatalf("update a: %v", err)
	}
	if up.Type != "ipmi" || string(up.InfoSealed) != "sealed-2" {
		t.Errorf("update a: got type %q info %q, want ipmi sealed-2", up.Type, up.InfoSealed)
	}
	if up.Epoch <= a.Epoch {
		t.Errorf("epoch after update: got %d, want > %d", up.Epoch, a.Epoch)
	}
	if !up.CreatedAt.Equal(a.CreatedAt) || !up.UpdatedAt.After(a.UpdatedAt) {
		t.Errorf("update times: got created %v updated %v, want created %v and a later update", up.CreatedAt, up.UpdatedAt, a.CreatedAt)
	}
	if got, _ := s.Node(ctx, "a"); got.Epoch != up.Epoch || got.Type != "ipmi" {
		t.Errorf("get after update: got %+v, want %+v", got, up)
	}

	epoch, err := s.DeleteNode(ctx, "a")
	if err != nil {
		t.Fatalf("delete a: %v", err)
	}
	if epoch <= up.Epoch {
		t.Errorf("delete epoch: got %d, want > %d", epoch, up.Epoch)
	}
	if _, err := s.Node(ctx, "a"); !errors.Is(err, ErrNotFound) {
		t.Errorf("get deleted: got %v, want %v", err, ErrNotFound)
	}
	all, _ = s.Nodes(ctx)
	if got, want := labels(all), []string{"B", "b"}; !slices.Equal(got, want) {
		t.Errorf("list after delete: got %v, want %v", got, want)
	}
}

func testNotFoundAndExists(t *testing.T, s *Store, _ testEnv) {
	ctx := context.Background()
	mustCreate(t, s, "n1")
	if err := s.AddKey(ctx, Key{Node: "n1", Fingerprint: "SHA256:k1", Line: "ssh-ed25519 AAAA k1"}); err != nil {
		t.Fatalf("add key: %v", err)
	}
	h := keys.HashToken("x")
	tests := []struct {
		name string
		op   func() error
		want error
	}{
		{"create existing", func() error { _, err := s.CreateNode(ctx, Node{Label: "n1", Type: "mock"}); return err }, ErrExists},
		{"add existing key", func() error {
			return s.AddKey(ctx, Key{Node: "n1", Fingerprint: "SHA256:k1", Line: "ssh-ed25519 AAAA other"})
		}, ErrExists},
		{"get", func() error { _, err := s.Node(ctx, "nope"); return err }, ErrNotFound},
		{"update", func() error { _, err := s.UpdateNodeInfo(ctx, "nope", "mock", nil); return err }, ErrNotFound},
		{"delete", func() error { _, err := s.DeleteNode(ctx, "nope"); return err }, ErrNotFound},
		{"set token", func() error { _, err := s.SetToken(ctx, "nope", h); return err }, ErrNotFound},
		{"revoke token", func() error { _, err := s.RevokeToken(ctx, "nope"); return err }, ErrNotFound},
		{"access", func() error { _, err := s.Access(ctx, "nope"); return err }, ErrNotFound},
		{"epoch", func() error { _, err := s.Epoch(ctx, "nope"); return err }, ErrNotFound},
		{"add key", func() error { return s.AddKey(ctx, Key{Node: "nope", Fingerprint: "SHA256:k1"}) }, ErrNotFound},
		{"keys", func() error { _, err := s.Keys(ctx, "nope"); return err }, ErrNotFound},
		{"has key", func() error { _, _, err := s.HasKey(ctx, "nope", "SHA256:k1"); return err }, ErrNotFound},
		{"delete key of unknown node", func() error { _, err := s.DeleteKey(ctx, "nope", "SHA256:k1"); return err }, ErrNotFound},
		{"delete unknown key", func() error { _, err := s.DeleteKey(ctx, "n1", "SHA256:zz"); return err }, ErrNotFound},
	}
	before, _ := s.LatestChange(ctx)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.op(); !errors.Is(err, tt.want) {
				t.Errorf("got %v, want %v", err, tt.want)
			}
		})
	}
	// A failed change gives its epoch back.
	if after, _ := s.LatestChange(ctx); after != before {
		t.Errorf("latest change after failed operations: got %d, want %d", after, before)
	}
}

func testLabelsByteExact(t *testing.T, s *Store, _ testEnv) {
	ctx := context.Background()
	for _, l := range []string{"Node-1", "node-1", "nöde", "node", "node "} {
		mustCreate(t, s, l)
	}
	for _, l := range []string{"NODE-1", "node-1 ", "node\x00", "node  "} {
		if _, err := s.Node(ctx, l); !errors.Is(err, ErrNotFound) {
			t.Errorf("get %q: got %v, want %v", l, err, ErrNotFound)
		}
	}
	if err := s.AddKey(ctx, Key{Node: "node", Fingerprint: "SHA256:abc", Line: "l"}); err != nil {
		t.Fatalf("add key: %v", err)
	}
	if err := s.AddKey(ctx, Key{Node: "node", Fingerprint: "SHA256:ABC", Line: "l"}); err != nil {
		t.Errorf("add key differing in case: got %v, want nil", err)
	}
	if _, ok, _ := s.HasKey(ctx, "node", "sha256:abc"); ok {
		t.Errorf("has key in other case: got true, want false")
	}
	if _, err := s.CreateNode(ctx, Node{Label: string(make([]byte, MaxLabelLen+1)), Type: "mock"}); err == nil {
		t.Errorf("create with a too long label: got nil, want error")
	}
}

func testTokens(t *testing.T, s *Store, _ testEnv) {
	ctx := context.Background()
	n := mustCreate(t, s, "n1")
	a, err := s.Access(ctx, "n1")
	if err != nil {
		t.Fatalf("access: %v", err)
	}
	if a.HasToken || a.Epoch != n.Epoch {
		t.Errorf("access of new node: got %+v, want no token at epoch %d", a, n.Epoch)
	}

	last := n.Epoch
	var old keys.TokenHash
	for i, tok := range []string{"token-one", "token-two"} {
		h := keys.HashToken(tok)
		epoch, err := s.SetToken(ctx, "n1", h)
		if err != nil {
			t.Fatalf("set token %d: %v", i, err)
		}
		if epoch <= last {
			t.Errorf("set token %d: epoch got %d, want > %d", i, epoch, last)
		}
		last = epoch
		a, err := s.Access(ctx, "n1")
		if err != nil {
			t.Fatalf("access: %v", err)
		}
		if !a.HasToken || !a.Token.Equal(h) || a.Epoch != epoch {
			t.Errorf("access after set %d: got %+v, want token %s at epoch %d", i, a, h, epoch)
		}
		if i > 0 {
			if a.Token.Equal(old) {
				t.Errorf("rotation kept the old hash")
			}
			var count int
			if err := s.r.QueryRowContext(ctx, `SELECT COUNT(*) FROM node_tokens WHERE hash = ?`, old.String()).Scan(&count); err != nil {
				t.Fatalf("count old hash: %v", err)
			}
			if count != 0 {
				t.Errorf("rows with the old hash: got %d, want 0", count)
			}
		}
		old = h
	}

	for i := range 2 { // revoking twice is fine and moves the epoch twice
		epoch, err := s.RevokeToken(ctx, "n1")
		if err != nil {
			t.Fatalf("revoke %d: %v", i, err)
		}
		if epoch <= last {
			t.Errorf("revoke %d: epoch got %d, want > %d", i, epoch, last)
		}
		last = epoch
		a, _ := s.Access(ctx, "n1")
		if a.HasToken || a.Token != (keys.TokenHash{}) || a.Epoch != epoch {
			t.Errorf("access after revoke %d: got %+v, want no token at epoch %d", i, a, epoch)
		}
		if got, _ := s.Epoch(ctx, "n1"); got != epoch {
			t.Errorf("epoch: got %d, want %d", got, epoch)
		}
	}

	// The token goes with its node.
	if _, err := s.SetToken(ctx, "n1", keys.HashToken("t3")); err != nil {
		t.Fatalf("set token: %v", err)
	}
	if _, err := s.DeleteNode(ctx, "n1"); err != nil {
		t.Fatalf("delete: %v", err)
	}
	mustCreate(t, s, "n1")
	if a, _ := s.Access(ctx, "n1"); a.HasToken {
		t.Errorf("re-created node: got a token, want none")
	}
}

func testKeys(t *testing.T, s *Store, _ testEnv) {
	ctx := context.Background()
	n := mustCreate(t, s, "n1")
	mustCreate(t, s, "n2")
	got, err := s.Keys(ctx, "n1")
	if err != nil || len(got) != 0 {
		t.Fatalf("keys of keyless node: got %v, %v, want none", got, err)
	}
	want := []Key{
		{Node: "n1", Fingerprint: "SHA256:zzz", Line: "ssh-ed25519 AAAAzzz first", Comment: "first"},
		{Node: "n1", Fingerprint: "SHA256:aaa", Line: "ssh-ed25519 AAAAaaa", Comment: ""},
		{Node: "n1", Fingerprint: "SHA256:mmm", Line: "ssh-rsa AAAAmmm third", Comment: "third"},
	}
	for _, k := range want {
		if err := s.AddKey(ctx, k); err != nil {
			t.Fatalf("add %s: %v", k.Fingerprint, err)
		}
	}
	if err := s.AddKey(ctx, Key{Node: "n2", Fingerprint: "SHA256:aaa", Line: "x"}); err != nil {
		t.Errorf("same fingerprint on another node: got %v, want nil", err)
	}
	if e, _ := s.Epoch(ctx, "n1"); e != n.Epoch {
		t.Errorf("epoch after adding keys: got %d, want %d (adding access does not move it)", e, n.Epoch)
	}

	got, err = s.Keys(ctx, "n1")
	if err != nil {
		t.Fatalf("keys: %v", err)
	}
	if len(got) != len(want) {
		t.Fatalf("keys: got %d, want %d", len(got), len(want))
	}
	for i := range want {
		g, w := got[i], want[i]
		if g.Node != w.Node || g.Fingerprint != w.Fingerprint || g.Line != w.Line || g.Comment != w.Comment || g.CreatedAt.IsZero() {
			t.Errorf("key %d: got %+v, want %+v", i, g, w)
		}
	}

	epoch, ok, err := s.HasKey(ctx, "n1", "SHA256:aaa")
	if err != nil || !ok || epoch != n.Epoch {
		t.Errorf("has key: got %d, %v, %v, want %d, true, nil", epoch, ok, err, n.Epoch)
	}
	if _, ok, err := s.HasKey(ctx, "n1", "SHA256:nope"); err != nil || ok {
		t.Errorf("has unknown key: got %v, %v, want false, nil", ok, err)
	}

	del, err := s.DeleteKey(ctx, "n1", "SHA256:aaa")
	if err != nil {
		t.Fatalf("delete key: %v", err)
	}
	if del <= n.Epoch {
		t.Errorf("delete key epoch: got %d, want > %d", del, n.Epoch)
	}
	if epoch, ok, _ := s.HasKey(ctx, "n1", "SHA256:aaa"); ok || epoch != del {
		t.Errorf("has deleted key: got %d, %v, want %d, false", epoch, ok, del)
	}
	got, _ = s.Keys(ctx, "n1")
	var fps []string
	for _, k := range got {
		fps = append(fps, k.Fingerprint)
	}
	if want := []string{"SHA256:zzz", "SHA256:mmm"}; !slices.Equal(fps, want) {
		t.Errorf("keys after delete: got %v, want %v", fps, want)
	}

	// Keys go with their node.
	if _, err := s.DeleteNode(ctx, "n1"); err != nil {
		t.Fatalf("delete node: %v", err)
	}
	mustCreate(t, s, "n1")
	if got, _ := s.Keys(ctx, "n1"); len(got) != 0 {
		t.Errorf("keys of re-created node: got %v, want none", got)
	}
	if got, _ := s.Keys(ctx, "n2"); len(got) != 1 {
		t.Errorf("keys of the other node: got %d, want 1", len(got))
	}
}

func testChanges(t *testing.T, s *Store, _ testEnv) {
	ctx := context.Background()
	if got, err := s.LatestChange(ctx); err != nil || got != 0 {
		t.Fatalf("latest change of empty store: got %d, %v, want 0, nil", got, err)
	}
	if got, err := s.ChangesSince(ctx, 0, 0); err != nil || len(got) != 0 {
		t.Fatalf("changes of empty store: got %v, %v, want none", got, err)
	}
	var want []Change
	record := func(node, reason string, epoch int64, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("change of %s: %v", node, err)
		}
		want = append(want, Change{Epoch: epoch, Node: node, Reason: reason})
	}
	a := mustCreate(t, s, "a")
	record("a", ReasonNodeCreated, a.Epoch, nil)
	b := mustCreate(t, s, "b")
	record("b", ReasonNodeCreated, b.Epoch, nil)
	e, err := s.SetToken(ctx, "a", keys.HashToken("t"))
	record("a", ReasonTokenRotated, e, err)
	if err := s.AddKey(ctx, Key{Node: "b", Fingerprint: "SHA256:k", Line: "l"}); err != nil {
		t.Fatal(err)
	}
	e, err = s.DeleteKey(ctx, "b", "SHA256:k")
	record("b", ReasonKeyRemoved, e, err)
	u, err := s.UpdateNodeInfo(ctx, "b", "ipmi", []byte("x"))
	record("b", ReasonNodeChanged, u.Epoch, err)
	e, err = s.DeleteNode(ctx, "a")
	record("a", ReasonNodeDeleted, e, err)
	e, err = s.RevokeToken(ctx, "b")
	record("b", ReasonTokenRevoked, e, err)

	got, err := s.ChangesSince(ctx, 0, 0)
	if err != nil {
		t.Fatalf("changes: %v", err)
	}
	if !slices.Equal(got, want) {
		t.Errorf("changes since 0: got %v, want %v", got, want)
	}
	if latest, _ := s.LatestChange(ctx); latest != want[len(want)-1].Epoch {
		t.Errorf("latest change: got %d, want %d", latest, want[len(want)-1].Epoch)
	}
	got, _ = s.ChangesSince(ctx, want[2].Epoch, 2)
	if !slices.Equal(got, want[3:5]) {
		t.Errorf("changes since %d limit 2: got %v, want %v", want[2].Epoch, got, want[3:5])
	}
	// The deletion is visible as a change of a node that no longer exists.
	del := want[5]
	got, _ = s.ChangesSince(ctx, del.Epoch-1, 1)
	if len(got) != 1 || got[0] != del {
		t.Errorf("deletion change: got %v, want %v", got, del)
	}
	if _, err := s.Node(ctx, del.Node); !errors.Is(err, ErrNotFound) {
		t.Errorf("deleted node: got %v, want %v", err, ErrNotFound)
	}
	if got, _ := s.ChangesSince(ctx, want[len(want)-1].Epoch, 0); len(got) != 0 {
		t.Errorf("changes after the latest: got %v, want none", got)
	}
}

func testEpochsNeverReused(t *testing.T, s *Store, env testEnv) {
	ctx := context.Background()
	seen := map[int64]bool{}
	var last int64
	see := func(what string, e int64) {
		t.Helper()
		if seen[e] || e <= last {
			t.Errorf("%s: epoch %d reused or not increasing (last %d)", what, e, last)
		}
		seen[e], last = true, e
	}
	for i := range 3 {
		n := mustCreate(t, s, "n")
		see("create", n.Epoch)
		e, err := s.SetToken(ctx, "n", keys.HashToken("t"))
		if err != nil {
			t.Fatal(err)
		}
		see("set token", e)
		if e, err = s.DeleteNode(ctx, "n"); err != nil {
			t.Fatalf("delete %d: %v", i, err)
		}
		see("delete", e)
	}
	// A store reopened on the same database continues the sequence.
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s2 := openTestStore(t, env.at(1))
	n := mustCreate(t, s2, "n")
	see("create after reopen", n.Epoch)
}

func testMigrateIdempotent(t *testing.T, s *Store, _ testEnv) {
	ctx := context.Background()
	mustCreate(t, s, "n1")
	for i := range 2 {
		if err := s.Migrate(ctx); err != nil {
			t.Fatalf("migrate again (%d): %v", i, err)
		}
	}
	cur, latest, err := s.SchemaVersion(ctx)
	if err != nil || cur != latest || latest < 1 {
		t.Errorf("schema version: got %d, %d, %v, want equal and >= 1", cur, latest, err)
	}
	if _, err := s.Node(ctx, "n1"); err != nil {
		t.Errorf("node after migrating again: %v", err)
	}
}

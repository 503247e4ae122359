package nodes

import (
	"context"
	"errors"
	"io"
	"sync"
	"testing"

	"github.com/sirupsen/logrus"

	"github.com/obmd/obmd/bastion/access/sessions"
	"github.com/obmd/obmd/bastion/admin/api"
	"github.com/obmd/obmd/db"
	"github.com/obmd/obmd/keys"
	"github.com/obmd/obmd/sol"
	"github.com/obmd/obmd/sol/screen"
)

// fakeNodes is the database's nodes, counting reads.
type fakeNodes struct {
	mu    sync.Mutex
	nodes map[string]db.Node
	reads int
}

func (f *fakeNodes) Node(_ context.Context, label string) (db.Node, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reads++
	n, ok := f.nodes[label]
	if !ok {
		return db.Node{}, db.ErrNotFound
	}
	return n, nil
}

// urlNodes is a table of one node type, "own", whose drivers record in
// built the URL each was built with, and a database of no node yet.
func urlNodes(t *testing.T) (*Table, *fakeNodes, *[]string) {
	t.Helper()
	sealer, _ := keys.NewSealer(make([]byte, 32))
	built := new([]string)
	table, err := NewTable(sealer, Define("own", Kind[testInfo]{
		Check: func(testInfo) error { return nil },
		View:  func(i testInfo) api.BMC { return api.BMC{Addr: i.URL} },
		New: func(_ string, i testInfo, _ logrus.FieldLogger) (sol.BMC, error) {
			*built = append(*built, i.URL)
			return nil, nil
		},
	}))
	if err != nil {
		t.Fatal(err)
	}
	return table, &fakeNodes{nodes: map[string]db.Node{}}, built
}

// put registers node n1 of type own at epoch, its BMC at url.
func (f *fakeNodes) put(t *testing.T, table *Table, epoch int64, url string) {
	t.Helper()
	info, err := parse(table, "own", `{"url":"`+url+`"}`, true)
	if err != nil {
		t.Fatal(err)
	}
	sealed, err := table.Seal("n1", info)
	if err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	f.nodes["n1"] = db.Node{Label: "n1", Type: "own", InfoSealed: sealed, Epoch: epoch}
	f.mu.Unlock()
}

// TestResolverAt: a session's epoch is served from the info read at that
// epoch without reading the database again; another epoch, no epoch, and
// a node whose change the Revoker applied (Forget) are read anew, and the
// newer info is what is kept.
func TestResolverAt(t *testing.T) {
	table, store, built := urlNodes(t)
	put := func(epoch int64, url string) { store.put(t, table, epoch, url) }
	log := logrus.New()
	log.SetOutput(io.Discard)
	r, err := NewResolver(table, store, log)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	resolve := func(epoch int64) {
		t.Helper()
		if _, err := r.ResolveAt(ctx, "n1", epoch); err != nil {
			t.Fatalf("resolve at %d: %v", epoch, err)
		}
	}
	put(5, "https://a")
	resolve(5)
	resolve(5)
	resolve(5)
	if store.reads != 1 {
		t.Errorf("three resolves at epoch 5: %d reads, want 1", store.reads)
	}
	if _, err := r.Resolve(ctx, "n1"); err != nil || store.reads != 2 {
		t.Errorf("Resolve (no epoch): %v, %d reads, want a read (2)", err, store.reads)
	}
	put(6, "https://b") // a change of the info moves the epoch
	resolve(6)
	resolve(6)
	if store.reads != 3 {
		t.Errorf("after the change: %d reads, want 3", store.reads)
	}
	r.Forget("n1", 7)
	store.mu.Lock()
	delete(store.nodes, "n1")
	store.mu.Unlock()
	if _, err := r.ResolveAt(ctx, "n1", 6); !errors.Is(err, db.ErrNotFound) {
		t.Errorf("resolve at 6 after the node was deleted and forgotten: got %v, want db.ErrNotFound", err)
	}
	want := []string{"https://a", "https://a", "https://a", "https://a", "https://b", "https://b"}
	if len(*built) != len(want) {
		t.Fatalf("drivers built with %q, want %q", *built, want)
	}
	for i := range want {
		if (*built)[i] != want[i] {
			t.Errorf("drivers built with %q, want %q", *built, want)
			break
		}
	}
}

// TestResolverStaleSession: a session of a node's old epoch that is not
// cut yet (the change committed, not applied here) never gets a driver
// built from the node's new registration (another BMC address and
// password), whether the old info is kept or not: it is told its access
// changed, and the new info is still kept for the new epoch's sessions.
func TestResolverStaleSession(t *testing.T) {
	table, store, built := urlNodes(t)
	put := func(epoch int64, url string) { store.put(t, table, epoch, url) }
	r, err := NewResolver(table, store, logrus.New())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	put(5, "https://old-bmc")
	put(6, "https://new-bmc") // re-registered before the old session resolved anything
	var revoked *sessions.RevokedError
	if _, err := r.ResolveAt(ctx, "n1", 5); !errors.As(err, &revoked) {
		t.Errorf("resolve at 5 with the node at 6: got %v, want a *sessions.RevokedError", err)
	}
	if len(*built) != 0 {
		t.Errorf("a session of epoch 5 got drivers built with %q, want none", *built)
	}
	if _, err := r.ResolveAt(ctx, "n1", 6); err != nil || store.reads != 1 {
		t.Errorf("resolve at 6: %v after %d reads, want the info kept by the refused read (1)", err, store.reads)
	}
	if len(*built) != 1 || (*built)[0] != "https://new-bmc" {
		t.Errorf("drivers built with %q, want [https://new-bmc]", *built)
	}
}

// TestResolverBounded: at most MaxKept nodes' info is kept.
func TestResolverBounded(t *testing.T) {
	sealer, _ := keys.NewSealer(make([]byte, 32))
	table, _ := testTable(t, sealer)
	r, err := NewResolver(table, &fakeNodes{}, logrus.New())
	if err != nil {
		t.Fatal(err)
	}
	for i := range MaxKept + 10 {
		r.keep(string(rune('a'+i%26))+string(rune(i)), 1, Info{})
	}
	if n := len(r.kept); n != MaxKept {
		t.Errorf("kept %d nodes, want %d", n, MaxKept)
	}
}

// TestScreenSize: the resolver tells the hub a node's screen_size as the
// database holds it now (the zero Size for the default), and fails for a
// node it cannot read or a size it cannot parse.
func TestScreenSize(t *testing.T) {
	table, store, _ := urlNodes(t)
	r, err := NewResolver(table, store, logrus.New())
	if err != nil {
		t.Fatal(err)
	}
	store.nodes["n1"] = db.Node{Label: "n1", Type: "own"}
	store.nodes["n2"] = db.Node{Label: "n2", Type: "own", ScreenSize: "132x43"}
	store.nodes["n3"] = db.Node{Label: "n3", Type: "own", ScreenSize: "999x999"}
	for label, want := range map[string]screen.Size{"n1": {}, "n2": {Cols: 132, Rows: 43}} {
		if got, err := r.ScreenSize(context.Background(), label); err != nil || got != want {
			t.Errorf("%s: got %v (%v), want %v", label, got, err, want)
		}
	}
	if _, err := r.ScreenSize(context.Background(), "n3"); !errors.Is(err, screen.ErrBadSize) {
		t.Errorf("a stored size out of bounds: got %v, want screen.ErrBadSize", err)
	}
	if _, err := r.ScreenSize(context.Background(), "nope"); !errors.Is(err, db.ErrNotFound) {
		t.Errorf("an unknown node: got %v, want db.ErrNotFound", err)
	}
	var _ sol.ScreenSizer = r
}

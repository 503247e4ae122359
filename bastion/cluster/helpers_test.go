package cluster

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	gossh "golang.org/x/crypto/ssh"

	"github.com/obmd/obmd/bastion/access/sessions"
	"github.com/obmd/obmd/db"
	"github.com/obmd/obmd/db/dbtest"
	"github.com/obmd/obmd/sol"
	"github.com/obmd/obmd/sol/sim"
)

// wait bounds what must happen "soon".
const wait = 15 * time.Second

// Short lease timings, so takeovers take a fraction of a second.
const (
	testTTL   = 600 * time.Millisecond
	testRenew = 150 * time.Millisecond
)

func quietLog() logrus.FieldLogger {
	l := logrus.New()
	l.SetOutput(io.Discard)
	l.SetLevel(logrus.DebugLevel) // exercise the log calls
	return l
}

func newHostKey(t testing.TB) gossh.Signer {
	t.Helper()
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	s, err := gossh.NewSignerFromKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// openStore opens and migrates dsn, closed at cleanup.
func openStore(t testing.TB, dsn string) *db.Store {
	t.Helper()
	s, err := db.Open(context.Background(), dsn, quietLog())
	if err != nil {
		t.Fatalf("open store: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	if err := s.Migrate(context.Background()); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	return s
}

// killableStore fails every call once killed: a replica that died keeps
// no lease alive (and releases none). Renewals hang until revived, so the
// dead replica's renewer does not notice either and its console stays
// active on the BMC, as a killed process's payload does.
type killableStore struct {
	Store
	dead   atomic.Bool
	revive chan struct{} // closed by stop
}

var errKilled = errors.New("replica killed")

func (k *killableStore) AcquireLease(ctx context.Context, l db.Lease, ttl time.Duration) (db.Lease, error) {
	if k.dead.Load() {
		return db.Lease{}, errKilled
	}
	return k.Store.AcquireLease(ctx, l, ttl)
}

func (k *killableStore) RenewLease(ctx context.Context, node, kind, token string, ttl time.Duration) (time.Time, error) {
	if k.dead.Load() {
		<-k.revive
		return time.Time{}, errKilled
	}
	return k.Store.RenewLease(ctx, node, kind, token, ttl)
}

func (k *killableStore) ReleaseLease(ctx context.Context, node, kind, token string) error {
	if k.dead.Load() {
		return errKilled
	}
	return k.Store.ReleaseLease(ctx, node, kind, token)
}

// killableLab is the lab as one replica reaches it: once the replica is
// killed, its consoles' Close no longer reaches the BMC (a killed process
// closes nothing: its payload stays active, though this in-process
// replica's goroutines, its fence among them, still run).
type killableLab struct {
	sol.Resolver
	dead *atomic.Bool
}

func (k killableLab) Resolve(ctx context.Context, label string) (sol.BMC, error) {
	b, err := k.Resolver.Resolve(ctx, label)
	if err != nil {
		return nil, err
	}
	return killableBMC{b, k.dead}, nil
}

type killableBMC struct {
	sol.BMC
	dead *atomic.Bool
}

// Exclusive passes the simulator's mock mode through (sol.Exclusive).
func (b killableBMC) Exclusive() bool {
	x, ok := b.BMC.(sol.Exclusive)
	return ok && x.Exclusive()
}

func (b killableBMC) OpenConsole(ctx context.Context) (sol.Console, error) {
	c, err := b.BMC.OpenConsole(ctx)
	if err != nil {
		return nil, err
	}
	return killableConsole{c, b.dead}, nil
}

type killableConsole struct {
	sol.Console
	dead *atomic.Bool
}

func (c killableConsole) Close() error {
	if c.dead.Load() {
		return nil
	}
	return c.Console.Close()
}

// replica is one obmd replica's cluster part: a Cluster over the shared
// lab (one set of BMCs), its console hub, its peer server and its access
// state.
type replica struct {
	id    string
	c     *Cluster
	hub   *sol.Manager
	peer  *PeerServer
	reg   *sessions.Registry
	store *killableStore
	acc   *testAccess
	l     net.Listener
	done  chan error
	once  sync.Once
}

// startReplica starts a replica on store; its nodes' access epochs are
// those of epochs (shared by the replicas of a test, as the database is;
// nil: every node stays at epoch 1).
func startReplica(t testing.TB, id string, store Store, lab *sim.Lab, key gossh.Signer, epochs ...*sharedEpochs) *replica {
	t.Helper()
	return startReplicaSpeaking(t, ProtocolVersion, id, store, lab, key, epochs...)
}

// startReplicaSpeaking is startReplica, of a replica that speaks the peer
// protocol up to version proto (an older release's).
func startReplicaSpeaking(t testing.TB, proto int, id string, store Store, lab *sim.Lab, key gossh.Signer, epochs ...*sharedEpochs) *replica {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ks := &killableStore{Store: store, revive: make(chan struct{})}
	acc := &testAccess{db: &sharedEpochs{}, applied: map[string]int64{}}
	if len(epochs) > 0 {
		acc.db = epochs[0]
	}
	c, err := New(Config{ReplicaID: id, PeerAddr: l.Addr().String(),
		LeaseTTL: testTTL, Renew: testRenew, DialTimeout: 2 * time.Second, Keepalive: time.Second}, key, acc, ks,
		killableLab{lab, &ks.dead}, quietLog())
	if err != nil {
		t.Fatal(err)
	}
	c.proto = proto
	hub, err := sol.NewManager(sol.Config{Linger: 100 * time.Millisecond,
		Backoff: sol.Backoff{Min: 20 * time.Millisecond, Max: 100 * time.Millisecond}}, c, nil, quietLog())
	if err != nil {
		t.Fatal(err)
	}
	acc.hub = hub
	reg := sessions.New(sessions.Config{Replica: id, IDPrefix: id + "-"})
	peer, err := NewPeerServer(c, hub, reg, quietLog())
	if err != nil {
		t.Fatal(err)
	}
	r := &replica{id: id, c: c, hub: hub, peer: peer, reg: reg, store: ks, acc: acc, l: l, done: make(chan error, 1)}
	go func() { r.done <- peer.Serve(l) }() // waited for by stop
	t.Cleanup(func() { r.stop(t) })
	return r
}

// stop closes the hub (releasing leases) and the peer server.
func (r *replica) stop(t testing.TB) {
	r.once.Do(func() {
		close(r.store.revive)
		ctx, cancel := context.WithTimeout(context.Background(), wait)
		defer cancel()
		if err := r.hub.Close(ctx); err != nil {
			t.Errorf("%s: close hub: %v", r.id, err)
		}
		r.peer.Close()
		if err := <-r.done; !errors.Is(err, ErrServerClosed) {
			t.Errorf("%s: serve: got %v, want ErrServerClosed", r.id, err)
		}
	})
}

// kill makes the replica vanish as far as the others can tell: its peer
// server drops every connection and its leases are neither renewed nor
// released. Its hub and consoles stay as they were (a killed process
// leaves its SOL payload active on the BMC).
func (r *replica) kill(t testing.TB) {
	r.store.dead.Store(true)
	r.peer.Close()
	if err := <-r.done; !errors.Is(err, ErrServerClosed) {
		t.Errorf("%s: serve: got %v, want ErrServerClosed", r.id, err)
	}
	r.done <- ErrServerClosed // for stop
}

// recorder collects a viewer's output.
type recorder struct {
	mu      sync.Mutex
	data    bytes.Buffer
	notices []string
	done    chan struct{}
}

func record(v *sol.Viewer) *recorder {
	r := &recorder{done: make(chan struct{})}
	go func() { // ends when the viewer's output closes
		defer close(r.done)
		for c := range v.Output() {
			r.mu.Lock()
			r.data.Write(c.Data)
			if c.Notice != "" {
				r.notices = append(r.notices, c.Notice)
			}
			r.mu.Unlock()
		}
	}()
	return r
}

func (r *recorder) has(s string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return strings.Contains(r.data.String(), s)
}

func (r *recorder) hasNotice(s string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Contains(r.notices, s)
}

func (r *recorder) String() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.data.String()
}

func (r *recorder) Notices() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.notices...)
}

func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(wait)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// seeAll injects marker on b until every recorder has seen it (output
// sent before a relay is established is not replayed to it).
func seeAll(t testing.TB, b *sim.BMC, marker string, rs ...*recorder) {
	t.Helper()
	waitFor(t, "every viewer to see "+marker, func() bool {
		b.Inject([]byte(marker))
		time.Sleep(20 * time.Millisecond)
		for _, r := range rs {
			if !r.has(marker) {
				return false
			}
		}
		return true
	})
}

func attach(t testing.TB, r *replica, label, name string) *sol.Viewer {
	t.Helper()
	v, err := r.hub.Attach(context.Background(), label, sol.AttachOptions{Name: name})
	if err != nil {
		t.Fatalf("attach %s on %s: %v", name, r.id, err)
	}
	return v
}

// engines runs f on SQLite and (when configured) MariaDB.
func engines(t *testing.T, f func(t *testing.T, dsn string)) {
	for _, e := range dbtest.Engines() {
		t.Run(e.Name, func(t *testing.T) { f(t, e.DSN(t)) })
	}
}

// sharedEpochs is the nodes' access epochs as the database holds them,
// shared by a test's replicas; a node never set is at epoch 1.
type sharedEpochs struct {
	mu sync.Mutex
	e  map[string]int64
}

func (s *sharedEpochs) get(label string) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e := s.e[label]; e > 0 {
		return e
	}
	return 1
}

func (s *sharedEpochs) set(label string, epoch int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.e == nil {
		s.e = map[string]int64{}
	}
	s.e[label] = epoch
}

// testAccess is a replica's Access as access.Revoker keeps it, without
// sessions: applying an epoch wipes the node's console on this replica's
// hub. Every change it applied is recorded.
type testAccess struct {
	db  *sharedEpochs
	hub *sol.Manager // set once built

	mu      sync.Mutex // held while applying, as the Revoker's node lock
	applied map[string]int64
	notices []string // "label epoch why" of each Apply
}

// applyLocked wipes label's console unless epoch is applied. a.mu held.
func (a *testAccess) applyLocked(label string, epoch int64) bool {
	if epoch <= max(a.applied[label], 1) {
		return false
	}
	a.applied[label] = epoch
	a.hub.Cut(label, errors.New("access changed"))
	return true
}

func (a *testAccess) Current(_ context.Context, label string) (int64, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	cur := a.db.get(label)
	if a.applyLocked(label, cur) {
		return 0, errors.New("access changed")
	}
	return cur, nil
}

func (a *testAccess) Serve(_ context.Context, label string, epoch int64, attach func() error) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	cur := a.db.get(label)
	if epoch < cur {
		return fmt.Errorf("%w: at %d, want %d", ErrStale, epoch, cur)
	}
	a.applyLocked(label, cur)
	return attach()
}

func (a *testAccess) Apply(label string, epoch int64, why string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.notices = append(a.notices, fmt.Sprintf("%s %d %s", label, epoch, why))
	a.applyLocked(label, epoch)
}

func (a *testAccess) ApplyCred(epoch int64, c db.CredChange, why string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.notices = append(a.notices, fmt.Sprintf("cred %s %s %d %s %d %s", c.Kind, c.CA, c.Serial, c.KeyID, epoch, why))
}

func (a *testAccess) taken() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]string(nil), a.notices...)
}

// announce announces r in the database, so the others find it.
func announce(t testing.TB, r *replica) {
	t.Helper()
	if err := r.c.Announce(context.Background(), 0); err != nil {
		t.Fatalf("announce %s: %v", r.id, err)
	}
}

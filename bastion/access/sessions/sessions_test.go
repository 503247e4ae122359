package sessions

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/obmd/obmd/sol"
)

// live is a session a test runs: it ends (calls end) a little after its
// context is done, like a real session finishing its last writes.
type live struct {
	ctx   context.Context
	info  Info
	end   func()
	ended atomic.Bool
}

func start(t *testing.T, r *Registry, node, src string, epoch int64) *live {
	t.Helper()
	ctx, info, end, err := r.Start(context.Background(), Info{Node: node, Kind: KindConsole, Epoch: epoch}, src)
	if err != nil {
		t.Fatalf("start %s: %v", node, err)
	}
	l := &live{ctx: ctx, info: info, end: end}
	go func() { // ends with the session
		<-ctx.Done()
		time.Sleep(20 * time.Millisecond)
		l.ended.Store(true)
		end()
	}()
	return l
}

func TestStartAndList(t *testing.T) {
	r := New(Config{})
	var ids []string
	for i := 0; i < 12; i++ {
		l := start(t, r, fmt.Sprintf("n%d", i%2), "10.0.0.1", 1)
		ids = append(ids, l.info.ID)
		if l.info.Started.IsZero() {
			t.Errorf("session %s has no start time", l.info.ID)
		}
	}
	all := r.List("")
	if len(all) != 12 {
		t.Fatalf("List: got %d sessions, want 12", len(all))
	}
	for i, s := range all {
		if s.ID != ids[i] {
			t.Errorf("List[%d]: got ID %s, want %s (oldest first, numerically)", i, s.ID, ids[i])
		}
	}
	if got := len(r.List("n1")); got != 6 {
		t.Errorf("List(n1): got %d, want 6", got)
	}
	if got := r.Count()[KindConsole]; got != 12 {
		t.Errorf("Count: got %d consoles, want 12", got)
	}
}

func TestLimits(t *testing.T) {
	r := New(Config{MaxPerNode: 2, MaxPerSource: 3})
	a := start(t, r, "n1", "10.0.0.1", 1)
	start(t, r, "n1", "10.0.0.2", 1)
	tests := []struct {
		node, src string
		want      string // "" = allowed
	}{
		{"n1", "10.0.0.3", "too many sessions on node n1 (limit 2)"},
		{"n2", "10.0.0.1", ""},
		{"n3", "10.0.0.1", ""},
		{"n4", "10.0.0.1", "too many sessions from your address (limit 3)"},
		{"n4", "10.0.0.4", ""},
	}
	for _, tt := range tests {
		_, _, end, err := r.Start(context.Background(), Info{Node: tt.node, Kind: KindExec}, tt.src)
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("%s from %s: got %v, want allowed", tt.node, tt.src, err)
		case tt.want != "" && (!errors.Is(err, ErrTooMany) || !strings.Contains(err.Error(), tt.want)):
			t.Errorf("%s from %s: got %v, want %q", tt.node, tt.src, err, tt.want)
		}
		if err == nil {
			defer end()
		}
	}
	// Ending a session frees its places, once: end twice counts once, so
	// the node and the source are full again after one new session each.
	a.end()
	a.end()
	for _, tt := range []struct {
		node, src string
		want      string // "" = allowed
	}{
		{"n1", "10.0.0.1", ""},
		{"n1", "10.0.0.9", "too many sessions on node n1 (limit 2)"},
		{"n5", "10.0.0.1", "too many sessions from your address (limit 3)"},
	} {
		_, _, end, err := r.Start(context.Background(), Info{Node: tt.node, Kind: KindExec}, tt.src)
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("after end twice, %s from %s: got %v, want allowed", tt.node, tt.src, err)
		case tt.want != "" && (!errors.Is(err, ErrTooMany) || !strings.Contains(err.Error(), tt.want)):
			t.Errorf("after end twice, %s from %s: got %v, want %q (a place freed twice)", tt.node, tt.src, err, tt.want)
		}
		if err == nil {
			defer end()
		}
	}
}

// TestLimitsHTTPApart: an address's node-token HTTP sessions count against
// MaxPerSourceHTTP, its SSH sessions against MaxPerSource, apart; the node's
// limit counts both.
func TestLimitsHTTPApart(t *testing.T) {
	r := New(Config{MaxPerNode: 3, MaxPerSource: 1, MaxPerSourceHTTP: 2})
	for i, tt := range []struct {
		node string
		http bool
		want string // "" = allowed
	}{
		{"n1", false, ""},
		{"n1", true, ""},
		{"n2", true, ""},
		{"n3", true, "too many sessions from your address (limit 2)"},
		{"n3", false, "too many sessions from your address (limit 1)"},
		{"n1", false, "too many sessions from your address (limit 1)"},
	} {
		_, _, end, err := r.Start(context.Background(), Info{Node: tt.node, Kind: KindExec, HTTP: tt.http}, "10.0.0.1")
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("session %d (http %v): got %v, want allowed", i, tt.http, err)
		case tt.want != "" && (!errors.Is(err, ErrTooMany) || !strings.Contains(err.Error(), tt.want)):
			t.Errorf("session %d (http %v): got %v, want %q", i, tt.http, err, tt.want)
		}
		if err == nil {
			defer end()
		}
	}
	_, _, end, err := r.Start(context.Background(), Info{Node: "n1", Kind: KindExec, HTTP: true}, "10.0.0.2")
	if err != nil {
		t.Errorf("another address's HTTP session: %v", err)
	} else {
		defer end()
	}
	if _, _, _, err := r.Start(context.Background(), Info{Node: "n1", Kind: KindExec, HTTP: true}, "10.0.0.3"); err == nil ||
		!strings.Contains(err.Error(), "on node n1 (limit 3)") {
		t.Errorf("fourth session of n1: got %v, want the node's limit", err)
	}
}

func TestSourceKey(t *testing.T) {
	cases := []struct{ host, want string }{
		{"192.0.2.7", "192.0.2.7"},
		{"127.0.0.2", "127.0.0.2"},
		{"::ffff:192.0.2.7", "192.0.2.7"}, // IPv4-mapped, from a dual-stack listener
		{"2001:db8:1:2:3:4:5:6", "2001:db8:1:2::/64"},
		{"2001:db8:1:2:ffff::1", "2001:db8:1:2::/64"},
		{"2001:db8:1:3::1", "2001:db8:1:3::/64"},
		{"::1", "::/64"},
		{"not-an-ip", "not-an-ip"},
		{"", ""},
	}
	for _, c := range cases {
		if got := SourceKey(c.host); got != c.want {
			t.Errorf("SourceKey(%q): got %q, want %q", c.host, got, c.want)
		}
	}
}

// TestLimitsIPv6Prefix: addresses of one IPv6 /64 share the per-source
// session limit, as they share the guessing and connection limits.
func TestLimitsIPv6Prefix(t *testing.T) {
	r := New(Config{MaxPerSource: 2})
	start(t, r, "n1", "2001:db8::1", 1)
	start(t, r, "n2", "2001:db8::2", 1)
	if _, _, _, err := r.Start(context.Background(), Info{Node: "n3"}, "2001:db8::ffff"); !errors.Is(err, ErrTooMany) {
		t.Errorf("third address of the /64: got %v, want ErrTooMany", err)
	}
	_, _, end, err := r.Start(context.Background(), Info{Node: "n3"}, "2001:db8:0:1::1")
	if err != nil {
		t.Errorf("another /64: got %v, want allowed", err)
	} else {
		end()
	}
}

func TestCutByEpochWaits(t *testing.T) {
	r := New(Config{CutWait: 5 * time.Second})
	old1 := start(t, r, "n1", "a", 3)
	old2 := start(t, r, "n1", "b", 4)
	cur := start(t, r, "n1", "c", 5)
	other := start(t, r, "n2", "d", 1)
	cause := &RevokedError{Node: "n1", Why: "token rotated"}
	cut, late := r.Cut("n1", 5, cause)
	if cut != 2 || late != 0 {
		t.Fatalf("Cut: got cut %d late %d, want 2 and 0", cut, late)
	}
	for _, l := range []*live{old1, old2} {
		if !l.ended.Load() {
			t.Errorf("Cut returned before session %s ended", l.info.ID)
		}
		if got := context.Cause(l.ctx); got != cause {
			t.Errorf("session %s: got cause %v, want %v", l.info.ID, got, cause)
		}
	}
	for _, l := range []*live{cur, other} {
		if l.ctx.Err() != nil {
			t.Errorf("session %s (%s, epoch %d) was cut", l.info.ID, l.info.Node, l.info.Epoch)
		}
	}
	if got := cause.Error(); got != "access to n1 was revoked (token rotated)" {
		t.Errorf("reason: got %q", got)
	}
	// Epoch 0 cuts every session of the node.
	if cut, _ := r.Cut("n1", 0, cause); cut != 1 || !cur.ended.Load() {
		t.Errorf("Cut(0): got %d cut (ended %v), want the remaining one", cut, cur.ended.Load())
	}
	if got := r.List("n1"); len(got) != 0 {
		t.Errorf("after the cuts: got %v, want none", got)
	}
}

// TestCutBound: Cut waits for a session that ends when cut, and no longer
// than its bound for one that never does, which it counts late. The bound
// is far longer than the ending session takes to be scheduled on a loaded
// machine (it ends as its context does), so only the session that never
// ends is late.
func TestCutBound(t *testing.T) {
	const bound = time.Second
	r := New(Config{CutWait: bound})
	_, _, end, err := r.Start(context.Background(), Info{Node: "n1", Epoch: 1}, "a") // never ends by itself
	if err != nil {
		t.Fatal(err)
	}
	defer end()
	ctx, _, endB, err := r.Start(context.Background(), Info{Node: "n1", Epoch: 1}, "b")
	if err != nil {
		t.Fatal(err)
	}
	stop := context.AfterFunc(ctx, endB) // b ends as soon as it is cut
	defer stop()
	began := time.Now()
	cut, late := r.Cut("n1", 2, errors.New("x"))
	if cut != 2 || late != 1 {
		t.Errorf("got cut %d late %d, want 2 and 1", cut, late)
	}
	if took := time.Since(began); took > bound+5*time.Second {
		t.Errorf("Cut took %v: the bound (%v) did not hold", took, bound)
	}
}

// TestCutAll: every session of every node is cut with its node's cause,
// and the bound is waited once for all of them.
func TestCutAll(t *testing.T) {
	const bound = time.Second // far longer than the ending sessions take (start)
	r := New(Config{CutWait: bound})
	a := start(t, r, "n1", "a", 1)
	b := start(t, r, "n2", "b", 7)
	for _, node := range []string{"n1", "n2", "n3"} { // never end by themselves
		_, _, end, err := r.Start(context.Background(), Info{Node: node, Epoch: 1}, "c")
		if err != nil {
			t.Fatal(err)
		}
		defer end()
	}
	began := time.Now()
	cut, late := r.CutAll(func(node string) error { return &RevokedError{Node: node, Why: "db lost"} })
	took := time.Since(began)
	if want := map[string]int{"n1": 2, "n2": 2, "n3": 1}; fmt.Sprint(cut) != fmt.Sprint(want) || late != 3 {
		t.Errorf("CutAll: got cut %v late %d, want %v and 3", cut, late, want)
	}
	if took > 2*bound {
		t.Errorf("CutAll took %v: want the bound (%v) waited once, not once per node", took, bound)
	}
	for _, l := range []*live{a, b} {
		if got := context.Cause(l.ctx); got == nil || got.Error() != "access to "+l.info.Node+" was revoked (db lost)" {
			t.Errorf("session on %s: got cause %v, want its node's", l.info.Node, got)
		}
		if !l.ended.Load() {
			t.Errorf("session on %s: not ended when CutAll returned", l.info.Node)
		}
	}
}

func TestKickAndShutdown(t *testing.T) {
	r := New(Config{})
	a := start(t, r, "n1", "a", 1)
	b := start(t, r, "n1", "b", 1)
	if !r.Kick(a.info.ID, &RevokedError{Node: "n1", Why: "kicked by admin"}) || !a.ended.Load() {
		t.Errorf("Kick: want the session cut and ended")
	}
	if b.ctx.Err() != nil {
		t.Errorf("Kick cut another session")
	}
	if r.Kick("999", nil) {
		t.Errorf("Kick of an unknown ID: got true")
	}
	if cut, late := r.Shutdown(); cut != 1 || late != 0 || !errors.Is(context.Cause(b.ctx), sol.ErrShutdown) {
		t.Errorf("Shutdown: got cut %d late %d cause %v", cut, late, context.Cause(b.ctx))
	}
	if _, _, _, err := r.Start(context.Background(), Info{Node: "n1"}, "a"); !errors.Is(err, sol.ErrShutdown) {
		t.Errorf("Start after Shutdown: got %v, want ErrShutdown", err)
	}
}

// A cut racing new sessions: every session of an older epoch that was
// registered before the cut started is cut, and has ended, when Cut
// returns.
func TestCutRacingStart(t *testing.T) {
	r := New(Config{MaxPerNode: -1, MaxPerSource: -1, CutWait: 5 * time.Second}) // no limits: many sessions race
	var wg sync.WaitGroup
	stop := make(chan struct{})
	var mu sync.Mutex
	var started []startedSession // guarded by mu
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				ctx, info, end, err := r.Start(context.Background(), Info{Node: "n1", Epoch: 1}, "a")
				if err != nil {
					t.Error(err)
					return
				}
				go func() { <-ctx.Done(); end() }()
				mu.Lock()
				started = append(started, startedSession{ctx, info.ID})
				mu.Unlock()
			}
		}()
	}
	time.Sleep(10 * time.Millisecond)
	mu.Lock()
	before := started // every one of these was registered before the cut began
	mu.Unlock()
	cut, late := r.Cut("n1", 2, errors.New("rotated"))
	close(stop)
	wg.Wait()
	if len(before) == 0 {
		t.Fatal("no session started before the cut")
	}
	if cut < len(before) || late != 0 {
		t.Errorf("Cut: got cut %d late %d, want at least %d and 0", cut, late, len(before))
	}
	live := map[string]bool{}
	for _, s := range r.List("n1") {
		live[s.ID] = true
	}
	for _, s := range before {
		if s.ctx.Err() == nil || live[s.id] {
			t.Fatalf("session %s, registered before the cut: cancelled %v, still registered %v; want cut and ended when Cut returned",
				s.id, s.ctx.Err() != nil, live[s.id])
		}
	}
	if n := r.Unwinding(); n != 0 {
		t.Errorf("after the cut: got %d sessions unwinding, want every one cut ended", n)
	}
}

// startedSession is a session TestCutRacingStart started.
type startedSession struct {
	ctx context.Context
	id  string
}

// TestDefaults: zero limits take the documented defaults, negative ones
// mean none.
func TestDefaults(t *testing.T) {
	cfg := Config{MaxPerSourceHTTP: -1}
	cfg.setDefaults()
	want := Config{MaxPerNode: 64, MaxPerSource: 32, MaxPerSourceHTTP: 0, MaxAutomationPerNode: 8, MaxAutomationPerSource: 8,
		MaxBMCPerNode: 4, MaxBMCPerSource: 16, CutWait: 2 * time.Second}
	if cfg != want {
		t.Errorf("got %+v, want %+v", cfg, want)
	}
}

// TestInfoJSON: a session as replicas pass it to one another (and the
// admin API lists it) carries its tenancy (epoch), so that another
// replica shows a tenant its own tenancy's sessions only, and its work;
// never the credential key the caps count by, nor the login's mark.
func TestInfoJSON(t *testing.T) {
	b, err := json.Marshal(Info{ID: "1", Node: "n1", Epoch: 42, Work: WorkBMC, Credential: "key SHA256:k", Mark: 7, HTTP: true})
	if err != nil {
		t.Fatal(err)
	}
	var back Info
	if err := json.Unmarshal(b, &back); err != nil || back.Epoch != 42 || back.Work != WorkBMC {
		t.Errorf("round trip of %s: got %+v, %v; want epoch 42 and work bmc", b, back, err)
	}
	for _, secret := range []string{"SHA256:k", "mark", "http"} {
		if strings.Contains(strings.ToLower(string(b)), strings.ToLower(secret)) {
			t.Errorf("JSON %s holds %q", b, secret)
		}
	}
}

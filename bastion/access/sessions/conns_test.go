package sessions

import (
	"errors"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"
)

// watched records what the registry tells watched connections.
type watched struct {
	t     *testing.T
	r     *Registry
	mu    sync.Mutex
	calls []string          // names told since the last got
	why   map[string]string // the cause each was told
}

func newWatched(t *testing.T, r *Registry) *watched {
	return &watched{t: t, r: r, why: map[string]string{}}
}

// watch watches c as name; before, if set, must not be cut yet when it is told.
func (w *watched) watch(name string, c Conn, before *live) func() {
	return w.r.Watch(c, func(cause error) {
		if before != nil && before.ctx.Err() != nil {
			w.t.Errorf("%s: told after the session was cut, want before", name)
		}
		w.mu.Lock()
		w.calls = append(w.calls, name)
		w.why[name] = cause.Error()
		w.mu.Unlock()
	})
}

// got returns the names told since the last call, sorted.
func (w *watched) got() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	sort.Strings(w.calls)
	out := strings.Join(w.calls, " ")
	w.calls = nil
	return out
}

// TestWatch: a watched connection is told at a Cut of its node above its
// epoch, before the sessions are cut, and at a CutAll; once forgotten, or
// told, it is not told again; others stay.
func TestWatch(t *testing.T) {
	r := New(Config{CutWait: 5 * time.Second})
	w := newWatched(t, r)
	sess := start(t, r, "n1", "a", 3)
	w.watch("old", Conn{Node: "n1", Epoch: 3}, sess)
	w.watch("current", Conn{Node: "n1", Epoch: 5}, nil)
	w.watch("other", Conn{Node: "n2", Epoch: 1}, nil)
	forget := w.watch("gone", Conn{Node: "n1", Epoch: 3}, nil)
	forget()
	forget() // idempotent
	r.Cut("n1", 5, &RevokedError{Node: "n1", Why: "token rotated"})
	if !sess.ended.Load() {
		t.Error("the session was not cut")
	}
	if c := w.got(); c != "old" {
		t.Errorf("after the cut: called %q, want old only", c)
	}
	if got, want := w.why["old"], "access to n1 was revoked (token rotated)"; got != want {
		t.Errorf("cause: got %q, want %q", got, want)
	}
	r.Cut("n1", 5, &RevokedError{Node: "n1", Why: "again"})
	if c := w.got(); c != "" {
		t.Errorf("a second cut: called %q, want none", c)
	}
	r.CutAll(func(node string) error { return &RevokedError{Node: node, Why: "lost"} })
	if c := w.got(); c != "current other" {
		t.Errorf("after CutAll: called %q, want current and other", c)
	}
	if got, want := w.why["other"], "access to n2 was revoked (lost)"; got != want {
		t.Errorf("CutAll's cause: got %q, want %q", got, want)
	}
}

// TestWatchCerts: CutCerts tells the connections whose certificate it
// matches, before it cuts the sessions, with their node's cause, and
// leaves those of other certificates and of other credentials alone; a
// Cut of a node tells a certificate connection of it as any other.
func TestWatchCerts(t *testing.T) {
	r := New(Config{CutWait: 5 * time.Second})
	w := newWatched(t, r)
	ctx, _, end, err := r.Start(t.Context(), Info{Node: "n1", Kind: KindExec, Epoch: 1,
		Cert: &Cert{CA: "SHA256:ca", Serial: 7}}, "a")
	if err != nil {
		t.Fatal(err)
	}
	before := &live{ctx: ctx}
	go func() { <-ctx.Done(); end() }()
	w.watch("serial 7", Conn{Node: "n1", Epoch: 1, Cert: &Cert{CA: "SHA256:ca", Serial: 7}}, before)
	w.watch("serial 8", Conn{Node: "n2", Epoch: 1, Cert: &Cert{CA: "SHA256:ca", Serial: 8}}, nil)
	w.watch("token", Conn{Node: "n1", Epoch: 1}, nil)
	cut, _ := r.CutCerts(func(c Cert) bool { return c.Serial == 7 },
		func(node string) error { return &RevokedError{Node: node, Why: "certificate revoked"} })
	if c := w.got(); c != "serial 7" || cut["n1"] != 1 {
		t.Errorf("CutCerts(serial 7): told %q and cut %v, want serial 7 told and its session cut", c, cut)
	}
	if got, want := w.why["serial 7"], "access to n1 was revoked (certificate revoked)"; got != want {
		t.Errorf("cause: got %q, want %q", got, want)
	}
	r.Cut("n2", 2, &RevokedError{Node: "n2", Why: "token rotated"})
	if c := w.got(); c != "serial 8" {
		t.Errorf("a Cut of n2: told %q, want its certificate connection", c)
	}
	if c := w.got(); c != "" {
		t.Errorf("told %q, want nobody else", c)
	}
}

// TestWatchExpiry: a connection is told at its Expires, with an
// *ExpiredError, once; one forgotten before is not, and one without an
// expiry never is.
func TestWatchExpiry(t *testing.T) {
	r := New(Config{})
	w := newWatched(t, r)
	told := make(chan error, 1)
	at := time.Now().Add(100 * time.Millisecond)
	r.Watch(Conn{Node: "n1", Expires: at, Cert: &Cert{}}, func(cause error) { told <- cause })
	w.watch("forgotten", Conn{Node: "n1", Expires: at, Cert: &Cert{}}, nil)()
	w.watch("no expiry", Conn{Node: "n1", Cert: &Cert{}}, nil)
	select {
	case cause := <-told:
		var ee *ExpiredError
		if !errors.As(cause, &ee) || cause.Error() != "your certificate for n1 expired" {
			t.Errorf("cause: got %v, want an ExpiredError", cause)
		}
		if early := time.Until(at); early > 0 {
			t.Errorf("told %v before the expiry", early)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the connection was not told of its expiry")
	}
	time.Sleep(200 * time.Millisecond)
	if c := w.got(); c != "" {
		t.Errorf("told %q, want nobody else", c)
	}
	r.Cut("n1", 0, &RevokedError{Node: "n1", Why: "x"})
	if c := w.got(); c != "no expiry" || len(told) != 0 {
		t.Errorf("a Cut after the expiry: told %q (and the expired one %d times more), want no expiry only", c, len(told))
	}
}

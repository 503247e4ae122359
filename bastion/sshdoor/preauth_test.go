package sshdoor

import (
	"fmt"
	"testing"
	"time"
)

// preConns admits connections on an admission and records which were
// displaced (their close ran).
type preConns struct {
	g      *admission
	closed map[string]bool
}

func (p *preConns) open(t *testing.T, name, src string) *ticket {
	t.Helper()
	tk := p.g.admit(src, func() error { p.closed[name] = true; return nil })
	if tk == nil {
		t.Fatalf("%s from %s: refused", name, src)
	}
	return tk
}

// TestAdmissionHeaviestSource: at the global cap on unauthenticated
// connections the newcomer displaces the oldest connection of the source
// holding the most, never the lone connection of a source holding one
// while another holds more (a person at the password prompt, among a flood
// from many addresses); when every source holds one, the oldest goes.
func TestAdmissionHeaviestSource(t *testing.T) {
	p := &preConns{g: newAdmission(time.Minute, 6, 0, 0, 0), closed: map[string]bool{}}
	p.open(t, "human", "10.0.0.1")
	for _, n := range []string{"f1", "f2", "f3"} {
		p.open(t, n, "10.0.0.2")
	}
	p.open(t, "g1", "10.0.0.3")
	p.open(t, "g2", "10.0.0.3")
	p.open(t, "g3", "10.0.0.3") // 10.0.0.2 holds the most: its oldest goes
	if !p.closed["f1"] || len(p.closed) != 1 {
		t.Fatalf("displaced %v, want f1 only", p.closed)
	}
	for i := range 20 { // a flood churning the cap
		p.open(t, fmt.Sprintf("x%d", i), fmt.Sprintf("10.0.0.%d", 2+i%2))
	}
	if p.closed["human"] {
		t.Errorf("the lone connection was displaced while other sources held more: %v", p.closed)
	}
	if st := p.g.snapshot(); st.Open != 6 || st.Conns != 6 || st.Displaced != 21 {
		t.Errorf("got %+v, want 6 open, 21 displaced", st)
	}

	// Every source holds one: the oldest goes.
	p = &preConns{g: newAdmission(time.Minute, 3, 0, 0, 0), closed: map[string]bool{}}
	for i, n := range []string{"a", "b", "c", "d"} {
		p.open(t, n, fmt.Sprintf("10.0.0.%d", i))
	}
	if !p.closed["a"] || len(p.closed) != 1 {
		t.Errorf("displaced %v, want the oldest, a", p.closed)
	}
}

// TestAdmissionMaxConns: at the cap on all connections a newcomer
// displaces an unauthenticated one (of the source holding the most), and
// is refused only when every connection has authenticated.
func TestAdmissionMaxConns(t *testing.T) {
	p := &preConns{g: newAdmission(time.Minute, 0, 0, 0, 3), closed: map[string]bool{}}
	a := p.open(t, "a", "10.0.0.1")
	b := p.open(t, "b", "10.0.0.2")
	p.open(t, "c", "10.0.0.3")
	p.g.authenticated(a)
	p.g.authenticated(b)
	d := p.open(t, "d", "10.0.0.4")
	if !p.closed["c"] || len(p.closed) != 1 {
		t.Fatalf("displaced %v, want c", p.closed)
	}
	if st := p.g.snapshot(); st.Conns != 3 {
		t.Errorf("got %d connections, want 3", st.Conns)
	}
	// Once d has logged in too, every connection is authenticated: refused.
	p.g.authenticated(d)
	if tk := p.g.admit("10.0.0.5", func() error { return nil }); tk != nil {
		t.Errorf("a connection over the cap with every slot authenticated: admitted, want refused")
	}
	if st := p.g.snapshot(); st.Refused != 1 || st.Conns != 3 {
		t.Errorf("got %+v, want 1 refused, 3 connections", st)
	}
	p.g.end(a) // a slot given back is taken again
	p.open(t, "e", "10.0.0.6")
}

// TestAdmissionStages: a connection is displaced after every competitor
// that has come less far (silent, then speaking, then authenticating), for
// the per-source cap and for the global one, and the oldest goes within a
// stage: a login from the very address of a flood of bare connections keeps
// its place while the flood churns, whether it is still in its key exchange
// or at the prompt, and a login at the prompt keeps it against a flood of
// stalled handshakes.
func TestAdmissionStages(t *testing.T) {
	for _, login := range []stage{speaking, authenticating} {
		p := &preConns{g: newAdmission(time.Minute, 5, 3, 0, 0), closed: map[string]bool{}}
		p.open(t, "f0", "10.0.0.1")
		p.g.advance(p.open(t, "login", "10.0.0.1"), login)
		for i := range 30 { // the flood at the login's address and another
			p.open(t, fmt.Sprintf("f%d", i+1), fmt.Sprintf("10.0.0.%d", 1+i%2))
		}
		if p.closed["login"] {
			t.Fatalf("a login at stage %d was displaced by silent connections: %v", login, p.closed)
		}
		if st := p.g.snapshot(); st.Open != 5 {
			t.Errorf("open %d, want the cap of 5", st.Open)
		}
	}
	// A flood of stalled handshakes displaces its own, not the login at
	// the prompt.
	p := &preConns{g: newAdmission(time.Minute, 0, 3, 0, 0), closed: map[string]bool{}}
	p.g.advance(p.open(t, "login", "10.0.0.1"), authenticating)
	for i := range 10 {
		p.g.advance(p.open(t, fmt.Sprintf("h%d", i), "10.0.0.1"), speaking)
	}
	if p.closed["login"] || len(p.closed) != 8 {
		t.Errorf("displaced %v, want h0..h7 and not the login", p.closed)
	}
	// Every competitor at the same stage: the oldest goes.
	for _, st := range []stage{silent, speaking, authenticating} {
		q := &preConns{g: newAdmission(time.Minute, 0, 2, 0, 0), closed: map[string]bool{}}
		for _, n := range []string{"a", "b"} {
			q.g.advance(q.open(t, n, "10.0.0.1"), st)
		}
		q.open(t, "c", "10.0.0.1")
		if !q.closed["a"] || len(q.closed) != 1 {
			t.Errorf("stage %d: displaced %v, want the oldest, a", st, q.closed)
		}
	}
}

package sol_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/obmd/obmd/sol"
)

// TestCiphers: the memory is per node and per BMC, reports changes once,
// is safe for concurrent use, and a nil one remembers nothing.
func TestCiphers(t *testing.T) {
	c := sol.NewCiphers()
	if !c.Remember("n1", "10.0.0.5:623", 17) || c.Remember("n1", "10.0.0.5:623", 17) {
		t.Error("Remember: want true for a new choice, false for the same again")
	}
	if s, ok := c.Lookup("n1", "10.0.0.5:623"); !ok || s != 17 {
		t.Errorf("Lookup: got %d %v, want 17", s, ok)
	}
	if _, ok := c.Lookup("n1", "10.0.0.6:623"); ok {
		t.Error("Lookup for another BMC of the node: got a suite, want none")
	}
	if s, ok := c.Suite("n1"); !ok || s != 17 {
		t.Errorf("Suite: got %d %v, want 17", s, ok)
	}
	c.Forget("n1")
	if _, ok := c.Suite("n1"); ok {
		t.Error("Suite after Forget: got one, want none")
	}
	var wg sync.WaitGroup
	changed := make(chan bool, 16)
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			changed <- c.Remember("n2", "b:623", 3)
			c.Suite("n2")
		}()
	}
	wg.Wait()
	close(changed)
	n := 0
	for ch := range changed {
		if ch {
			n++
		}
	}
	if n != 1 {
		t.Errorf("concurrent Remember of one choice: %d reported a change, want 1", n)
	}
	var none *sol.Ciphers
	none.Remember("n1", "b", 3)
	if _, ok := none.Suite("n1"); ok {
		t.Error("a nil memory remembered")
	}
}

func refusal(f sol.Fault, suite int) error {
	return &sol.Error{Fault: f, Suites: []int{suite}, Err: fmt.Errorf("BMC 192.0.2.5:623 refused suite %d", suite)}
}

// TestNegotiate: the order of attempts and the error, for each situation a
// driver meets.
func TestNegotiate(t *testing.T) {
	n := sol.Negotiation{Label: "n1", BMC: "192.0.2.5:623", Pinned: -1}
	tests := []struct {
		name       string
		pinned     int
		remembered int // -1: none
		accept     map[int]error
		tries      []int
		suite      int
		fault      sol.Fault // of the error; -1: nil error
		after      int       // remembered afterwards; -1: none
	}{
		{"17 accepted", -1, -1, map[int]error{17: nil}, []int{17}, 17, -1, 17},
		{"falls back to 3", -1, -1, map[int]error{3: nil}, []int{17, 3}, 3, -1, 3},
		{"remembered first", -1, 3, map[int]error{3: nil}, []int{3}, 3, -1, 3},
		{"remembered refused: from the top", -1, 3, map[int]error{17: nil}, []int{3, 17}, 17, -1, 17},
		{"all refused", -1, -1, map[int]error{}, []int{17, 3}, -1, sol.FaultCipher, -1},
		{"credentials beat cipher", -1, -1, map[int]error{3: refusal(sol.FaultCredentials, 3)}, []int{17, 3}, -1, sol.FaultCredentials, -1},
		{"no answer ends it", -1, -1, map[int]error{17: refusal(sol.FaultNoAnswer, 17)}, []int{17}, 17, sol.FaultNoAnswer, -1},
		{"pinned", 3, -1, map[int]error{3: nil}, []int{3}, 3, -1, -1},
		{"pinned refused", 17, -1, map[int]error{}, []int{17}, 17, sol.FaultCipher, -1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			mem := sol.NewCiphers()
			if tt.remembered >= 0 {
				mem.Remember(n.Label, n.BMC, tt.remembered)
			}
			opts, err := sol.IPMIOptions{Ciphers: mem}.WithDefaults(func(int) bool { return true })
			if err != nil {
				t.Fatal(err)
			}
			nn := n
			nn.Pinned = tt.pinned
			var tries []int
			suite, _, err := opts.Negotiate(context.Background(), nn, func(_ context.Context, s int) error {
				tries = append(tries, s)
				if e, ok := tt.accept[s]; ok {
					return e
				}
				return refusal(sol.FaultCipher, s)
			})
			if !slices.Equal(tries, tt.tries) || suite != tt.suite {
				t.Errorf("tried %v and got suite %d, want %v and %d", tries, suite, tt.tries, tt.suite)
			}
			var e *sol.Error
			switch {
			case tt.fault < 0 && err != nil:
				t.Errorf("error: got %v, want nil", err)
			case tt.fault >= 0 && (!errors.As(err, &e) || e.Fault != tt.fault):
				t.Errorf("error: got %v, want fault %v", err, tt.fault)
			}
			if got, ok := mem.Suite(n.Label); (tt.after < 0) == ok || ok && got != tt.after {
				t.Errorf("remembered: got %d %v, want %d", got, ok, tt.after)
			}
		})
	}
	t.Run("all refused names them", func(t *testing.T) {
		_, _, err := sol.IPMIOptions{CipherOrder: []int{17, 3}}.Negotiate(context.Background(), n,
			func(_ context.Context, s int) error { return refusal(sol.FaultCipher, s) })
		if got, want := sol.TenantText(err), "the BMC refused IPMI cipher suites 17 and 3"; got != want {
			t.Errorf("got %q, want %q", got, want)
		}
	})
}

// TestIPMIOptionsDefaults: the zero value works; bad values are refused.
func TestIPMIOptionsDefaults(t *testing.T) {
	all := func(int) bool { return true }
	o, err := sol.IPMIOptions{}.WithDefaults(all)
	if err != nil || !slices.Equal(o.CipherOrder, []int{17, 3}) || o.SOLEnable != sol.SOLEnableAuto || o.Held(context.Background(), "n") {
		t.Errorf("zero value: got %+v, %v; want order 17, 3, sol_enable auto", o, err)
	}
	for _, bad := range []sol.IPMIOptions{
		{CipherOrder: []int{17, 17}},
		{CipherOrder: []int{99}},
		{SOLEnable: "yes"},
	} {
		if _, err := bad.WithDefaults(func(c int) bool { return c < 20 }); err == nil {
			t.Errorf("%+v: got nil error, want one", bad)
		}
	}
	held := sol.IPMIOptions{ConsoleHeld: func(_ context.Context, l string) bool { return l == "n1" }}
	if !held.Held(context.Background(), "n1") || held.Held(context.Background(), "n2") {
		t.Error("Held: want the hook's answer")
	}
}

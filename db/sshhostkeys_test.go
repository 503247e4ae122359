package db

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
)

// TestSSHHostKeys runs the host-key cases on every engine.
func TestSSHHostKeys(t *testing.T) {
	runCases(t, []storeCase{{"ssh_host_keys", testSSHHostKeys}, {"ssh_host_keys_race", testSSHHostKeysRace}})
}

// testSSHHostKeysRace: replicas that meet a node's BMC at a new address at
// once, each shown another key, agree on one pin: each gets back the key
// stored at the end, never its own key overwritten by a later one.
func testSSHHostKeysRace(t *testing.T, s *Store, env testEnv) {
	ctx := context.Background()
	stores := []*Store{s, openTestStore(t, env.at(1))}
	mustCreate(t, s, "n1")
	const pinners = 6
	for round := range 15 {
		old := SSHHostKey{Node: "n1", Addr: fmt.Sprintf("10.0.0.%d:22", round), Key: "ssh-ed25519 AAAAold"}
		if _, err := s.PinSSHHostKey(ctx, old); err != nil {
			t.Fatal(err)
		}
		addr := fmt.Sprintf("10.0.1.%d:22", round)
		got := make([]SSHHostKey, pinners)
		errs := make([]error, pinners)
		var wg sync.WaitGroup
		for i := range pinners {
			wg.Go(func() {
				k := SSHHostKey{Node: "n1", Addr: addr, Key: fmt.Sprintf("ssh-ed25519 AAAA%d", i)}
				got[i], errs[i] = stores[i%len(stores)].PinSSHHostKey(ctx, k)
			})
		}
		wg.Wait()
		stored, err := s.SSHHostKey(ctx, "n1")
		if err != nil || stored.Addr != addr {
			t.Fatalf("round %d: stored %+v, %v", round, stored, err)
		}
		for i := range pinners {
			if errs[i] != nil || got[i].Key != stored.Key {
				t.Fatalf("round %d: pinner %d got %q (%v), but %q is pinned: two keys were accepted", round, i, got[i].Key, errs[i], stored.Key)
			}
		}
	}
}

// testSSHHostKeys: the first pin stands at its address (a later one there
// gets it back), another address replaces it, a reset forgets it; none of
// it moves the node's epoch; the pin goes with its node.
func testSSHHostKeys(t *testing.T, s *Store, _ testEnv) {
	ctx := context.Background()
	n := mustCreate(t, s, "n1")
	if _, err := s.SSHHostKey(ctx, "n1"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("no pin: got %v, want ErrNotFound", err)
	}
	first := SSHHostKey{Node: "n1", Addr: "10.0.0.5:22", Key: "ssh-ed25519 AAAAfirst"}
	got, err := s.PinSSHHostKey(ctx, first)
	if err != nil || got.Key != first.Key || got.Addr != first.Addr {
		t.Fatalf("first pin: got %+v, %v", got, err)
	}
	got, err = s.PinSSHHostKey(ctx, SSHHostKey{Node: "n1", Addr: "10.0.0.5:22", Key: "ssh-ed25519 AAAAsecond"})
	if err != nil || got.Key != first.Key {
		t.Errorf("second pin at the same address: got %+v, %v, want the first key", got, err)
	}
	moved := SSHHostKey{Node: "n1", Addr: "10.0.0.6:22", Key: "ssh-ed25519 AAAAmoved"}
	if got, err = s.PinSSHHostKey(ctx, moved); err != nil || got.Key != moved.Key {
		t.Errorf("pin at another address: got %+v, %v, want it to replace the old", got, err)
	}
	if got, err := s.SSHHostKey(ctx, "n1"); err != nil || got.Key != moved.Key || got.Addr != moved.Addr || got.CreatedAt.IsZero() {
		t.Errorf("read: got %+v, %v", got, err)
	}
	if existed, err := s.DeleteSSHHostKey(ctx, "n1"); !existed || err != nil {
		t.Errorf("reset: got %v, %v, want true", existed, err)
	}
	if existed, err := s.DeleteSSHHostKey(ctx, "n1"); existed || err != nil {
		t.Errorf("reset again: got %v, %v, want false", existed, err)
	}
	if epoch, err := s.Epoch(ctx, "n1"); err != nil || epoch != n.Epoch {
		t.Errorf("epoch: got %d, %v, want %d (pins are no access change)", epoch, err, n.Epoch)
	}
	if _, err := s.PinSSHHostKey(ctx, SSHHostKey{Node: "nope", Addr: "a:22", Key: "k"}); !errors.Is(err, ErrNotFound) {
		t.Errorf("unknown node: got %v, want ErrNotFound", err)
	}
	if _, err := s.DeleteSSHHostKey(ctx, "nope"); !errors.Is(err, ErrNotFound) {
		t.Errorf("reset of an unknown node: got %v, want ErrNotFound", err)
	}
	if _, err := s.PinSSHHostKey(ctx, first); err != nil {
		t.Fatal(err)
	}
	if _, err := s.DeleteNode(ctx, "n1"); err != nil {
		t.Fatal(err)
	}
	mustCreate(t, s, "n1")
	if _, err := s.SSHHostKey(ctx, "n1"); !errors.Is(err, ErrNotFound) {
		t.Errorf("a new node of the same label inherited the pin: %v", err)
	}
}

package sshconsole_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"

	"golang.org/x/crypto/ssh"

	"github.com/obmd/obmd/sol"
	"github.com/obmd/obmd/sol/soltest/sshbmc"
	"github.com/obmd/obmd/sol/sshconsole"
)

// events collects what a client reports of host keys.
type events struct {
	mu sync.Mutex
	e  []sshconsole.HostKeyEvent
}

func (ev *events) add(_ context.Context, e sshconsole.HostKeyEvent) {
	ev.mu.Lock()
	defer ev.mu.Unlock()
	ev.e = append(ev.e, e)
}

func (ev *events) all() []sshconsole.HostKeyEvent {
	ev.mu.Lock()
	defer ev.mu.Unlock()
	return append([]sshconsole.HostKeyEvent(nil), ev.e...)
}

// TestHostKeyPinned: the first contact pins the BMC's key (reported
// once); the same key opens again; a changed key is refused, classified
// FaultHostKey without the BMC's address for tenants, and reported once
// however often it is offered; after an administrator's reset the new key
// is pinned.
func TestHostKeyPinned(t *testing.T) {
	b := sshbmc.Start(t, sshbmc.Options{Vendor: "ilo"})
	keys := sshbmc.NewKeys()
	var ev events
	c := newClient(t, keys, ev.add)
	tg := target(t, "n1", b)
	open := func() error {
		con, err := c.Open(ctxWait(t), tg)
		if err == nil {
			con.Close()
		}
		return err
	}
	if err := open(); err != nil {
		t.Fatalf("first contact: %v", err)
	}
	p, ok, _ := keys.PinnedHostKey(context.Background(), "n1")
	if !ok || p.Key != sshconsole.KeyLine(b.HostKey()) || p.Addr != b.Addr() {
		t.Fatalf("pin: got %+v (%v), want the BMC's key at %s", p, ok, b.Addr())
	}
	if err := open(); err != nil {
		t.Fatalf("same key again: %v", err)
	}
	old := ssh.FingerprintSHA256(b.HostKey())
	b.RotateHostKey(t)
	for i := range 3 {
		err := open()
		var e *sol.Error
		var he *sshconsole.HostKeyError
		if !errors.As(err, &e) || e.Fault != sol.FaultHostKey || !errors.As(err, &he) {
			t.Fatalf("changed key, try %d: got %v, want FaultHostKey", i, err)
		}
		if he.Pinned != old || he.Offered != ssh.FingerprintSHA256(b.HostKey()) {
			t.Errorf("HostKeyError: got %+v, want offered the new key, pinned %s", he, old)
		}
		if tt := sol.TenantText(err); strings.Contains(tt, "127.0.0.1") || !strings.Contains(tt, "host key") {
			t.Errorf("tenant text: got %q, want the fault without the address", tt)
		}
	}
	if got := b.Stats().Attaches; got != 2 {
		t.Errorf("attaches: got %d, want 2 (nothing sent after a changed key)", got)
	}
	got := ev.all()
	if len(got) != 2 || got[0].Changed || !got[1].Changed || got[1].Pinned != old {
		t.Errorf("events: got %+v, want one pin then one change", got)
	}
	keys.Reset("n1")
	if err := open(); err != nil {
		t.Fatalf("after the reset: %v", err)
	}
	if p, _, _ := keys.PinnedHostKey(context.Background(), "n1"); p.Key != sshconsole.KeyLine(b.HostKey()) {
		t.Errorf("after the reset: pinned %q, want the new key", p.Key)
	}
}

// TestHostKeyRegistered: a key registered with the node is the only one
// accepted, and nothing is pinned.
func TestHostKeyRegistered(t *testing.T) {
	b := sshbmc.Start(t, sshbmc.Options{Vendor: "openbmc"})
	keys := sshbmc.NewKeys()
	c := newClient(t, keys, nil)
	for _, tc := range []struct {
		name string
		key  ssh.PublicKey
		ok   bool
	}{{"the BMC's", b.HostKey(), true}, {"another", sshbmc.Start(t, sshbmc.Options{}).HostKey(), false}} {
		ci := b.ConsoleInfo()
		ci.SSHHostKey = sshconsole.KeyLine(tc.key) + " comment"
		tg, err := sshconsole.TargetOf("n1", b.Host, "u", "p", ci)
		if err != nil {
			t.Fatal(err)
		}
		con, err := c.Open(ctxWait(t), tg)
		if err == nil {
			con.Close()
		}
		var e *sol.Error
		if tc.ok != (err == nil) || !tc.ok && (!errors.As(err, &e) || e.Fault != sol.FaultHostKey) {
			t.Errorf("%s key: got %v, want ok %v", tc.name, err, tc.ok)
		}
	}
	if _, ok, _ := keys.PinnedHostKey(context.Background(), "n1"); ok {
		t.Errorf("a registered key was pinned as well")
	}
}

// TestHostKeyOtherAddress: a pin applies to the address it was made at: a
// node moved to another BMC pins that BMC's key.
func TestHostKeyOtherAddress(t *testing.T) {
	a, b := sshbmc.Start(t, sshbmc.Options{}), sshbmc.Start(t, sshbmc.Options{})
	keys := sshbmc.NewKeys()
	c := newClient(t, keys, nil)
	for _, m := range []*sshbmc.BMC{a, b} {
		con, err := c.Open(ctxWait(t), target(t, "n1", m))
		if err != nil {
			t.Fatalf("open %s: %v", m.Addr(), err)
		}
		con.Close()
	}
	if p, _, _ := keys.PinnedHostKey(context.Background(), "n1"); p.Addr != b.Addr() || p.Key != sshconsole.KeyLine(b.HostKey()) {
		t.Errorf("pin: got %+v, want the second BMC's", p)
	}
}

// lostRace is a host-key store where another replica pins its key between
// this one's read (nothing pinned) and its pin.
type lostRace struct {
	*sshbmc.Keys
	other sshconsole.PinnedKey
}

func (l lostRace) PinnedHostKey(context.Context, string) (sshconsole.PinnedKey, bool, error) {
	return sshconsole.PinnedKey{}, false, nil
}

func (l lostRace) PinHostKey(ctx context.Context, label string, _ sshconsole.PinnedKey) (sshconsole.PinnedKey, error) {
	return l.Keys.PinHostKey(ctx, label, l.other)
}

// TestHostKeyPinRaceLost: when another replica pinned another key for the
// node first, this one's first contact is refused as a changed key (its
// BMC may be the impostor), reported, and nothing is attached.
func TestHostKeyPinRaceLost(t *testing.T) {
	b := sshbmc.Start(t, sshbmc.Options{Vendor: "ilo"})
	other := sshbmc.Start(t, sshbmc.Options{}).HostKey()
	var ev events
	c := newClient(t, lostRace{sshbmc.NewKeys(), sshconsole.PinnedKey{Key: sshconsole.KeyLine(other), Addr: b.Addr()}}, ev.add)
	con, err := c.Open(ctxWait(t), target(t, "n1", b))
	if err == nil {
		con.Close()
	}
	var he *sshconsole.HostKeyError
	if !errors.As(err, &he) || he.Pinned != ssh.FingerprintSHA256(other) || he.Offered != ssh.FingerprintSHA256(b.HostKey()) {
		t.Fatalf("got %v, want the other replica's pin to refuse this key", err)
	}
	if got := ev.all(); len(got) != 1 || !got[0].Changed {
		t.Errorf("events: %+v, want one change (no pin reported)", got)
	}
	if s := b.Stats(); s.Logins != 0 || s.Attaches != 0 {
		t.Errorf("stats: %+v, want no login and nothing attached past the refused key", s)
	}
}

// TestHostKeyChangeReportedAfterRepin: a key refused once, then shown
// again after an administrator's reset and a new pin, is reported again:
// "once per key" holds per pin, not for the client's life.
func TestHostKeyChangeReportedAfterRepin(t *testing.T) {
	b := sshbmc.Start(t, sshbmc.Options{Vendor: "openbmc"})
	impostor, replacement := sshbmc.Start(t, sshbmc.Options{}), sshbmc.Start(t, sshbmc.Options{})
	keys := sshbmc.NewKeys()
	var ev events
	c := newClient(t, keys, ev.add)
	open := func() error {
		con, err := c.Open(ctxWait(t), target(t, "n1", b))
		if err == nil {
			con.Close()
		}
		return err
	}
	if err := open(); err != nil {
		t.Fatal(err)
	}
	b.ShowHostKeyOf(impostor)
	if err := open(); !errors.As(err, new(*sshconsole.HostKeyError)) {
		t.Fatalf("impostor: got %v, want a changed key", err)
	}
	keys.Reset("n1")
	b.ShowHostKeyOf(replacement)
	if err := open(); err != nil {
		t.Fatalf("after the reset: %v", err)
	}
	b.ShowHostKeyOf(impostor)
	if err := open(); !errors.As(err, new(*sshconsole.HostKeyError)) {
		t.Fatalf("impostor again: got %v, want a changed key", err)
	}
	var changed []string
	for _, e := range ev.all() {
		if e.Changed {
			changed = append(changed, e.Pinned+" -> "+e.Offered)
		}
	}
	if len(changed) != 2 {
		t.Errorf("changes reported: %q, want the impostor's key reported against each pin", changed)
	}
}

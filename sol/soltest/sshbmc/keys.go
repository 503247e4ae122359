package sshbmc

import (
	"context"
	"sync"

	"github.com/obmd/obmd/sol/sshconsole"
)

// Keys is an in-memory sshconsole.HostKeys, for tests without a database.
type Keys struct {
	mu sync.Mutex
	m  map[string]sshconsole.PinnedKey
}

// NewKeys returns an empty store.
func NewKeys() *Keys { return &Keys{m: map[string]sshconsole.PinnedKey{}} }

// PinnedHostKey implements sshconsole.HostKeys.
func (k *Keys) PinnedHostKey(_ context.Context, label string) (sshconsole.PinnedKey, bool, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	p, ok := k.m[label]
	return p, ok, nil
}

// PinHostKey implements sshconsole.HostKeys.
func (k *Keys) PinHostKey(_ context.Context, label string, p sshconsole.PinnedKey) (sshconsole.PinnedKey, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if old, ok := k.m[label]; ok && old.Addr == p.Addr {
		return old, nil
	}
	k.m[label] = p
	return p, nil
}

// Reset drops label's pin, as an administrator's reset does.
func (k *Keys) Reset(label string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	delete(k.m, label)
}

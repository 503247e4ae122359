package transport

import "sync"

// Memory remembers, per node, the console transport that last opened (and,
// for SSH, the port and command it used), so that "auto" tries it first
// and the admin API can show it. Each entry is tied to the BMC host it was
// learnt from: a node moved to another BMC starts afresh. Safe for
// concurrent use; the methods of a nil *Memory remember nothing. The
// composition root owns one and calls Forget when a node is deleted.
type Memory struct {
	mu sync.Mutex
	m  map[string]entry
}

type entry struct {
	bmc       string
	transport string
	port      int
	command   string
}

// NewMemory returns an empty memory.
func NewMemory() *Memory { return &Memory{m: map[string]entry{}} }

// InUse returns the transport remembered for label ("sol" or "ssh").
func (m *Memory) InUse(label string) (string, bool) {
	if m == nil {
		return "", false
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	e, ok := m.m[label]
	return e.transport, ok
}

// Forget drops what is remembered of label.
func (m *Memory) Forget(label string) {
	if m == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.m, label)
}

func (m *Memory) lookup(label, bmc string) (entry, bool) {
	if m == nil {
		return entry{}, false
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	e, ok := m.m[label]
	return e, ok && e.bmc == bmc
}

// remember records e for label; it reports whether that changed anything.
func (m *Memory) remember(label string, e entry) bool {
	if m == nil {
		return false
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.m[label] == e {
		return false
	}
	m.m[label] = e
	return true
}

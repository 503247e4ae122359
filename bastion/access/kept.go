package access

import (
	"context"
	"sync"

	"github.com/obmd/obmd/db"
)

// keptMax bounds the nodes whose access a Gate keeps: about 100 bytes
// each. Past it, reads are made but not kept until the next cut.
const keptMax = 4096

// keptAccess is the access of nodes as read at one Revoker mark
// (Revoker.Mark): all of it is as good as a new read while the mark has not
// moved and the database has no other writer. Every change of a node's
// token or epoch made through this replica is applied by the Revoker,
// which moves the mark, once it is committed; a read made at a mark never
// serves a later one.
type keptAccess struct {
	mu   sync.Mutex
	mark uint64
	m    map[string]db.Access
}

func (k *keptAccess) get(label string, mark uint64) (db.Access, bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.mark != mark {
		return db.Access{}, false
	}
	a, ok := k.m[label]
	return a, ok
}

// put keeps a, read at mark (taken before the read began).
func (k *keptAccess) put(label string, mark uint64, a db.Access) {
	k.mu.Lock()
	defer k.mu.Unlock()
	switch {
	case mark < k.mark:
		return // read before a cut this one has seen
	case mark > k.mark:
		k.mark, k.m = mark, make(map[string]db.Access)
	}
	if len(k.m) < keptMax {
		k.m[label] = a
	}
}

// AccessAt is Access for a login that took the Revoker's mark just before
// (Revoker.Mark). On a database only this process writes (NewGate's
// exclusive, db.Store.Exclusive: SQLite), a node's access read at the same
// mark is answered from memory: an access change moves the mark when it is
// applied here, after its commit, which is also when a change made here is
// acknowledged (a login between its commit and its application is
// admitted as one whose read came just before the commit is, and cut when
// the change is applied). Unknown nodes are never kept (a node registered
// since must be found), and while the database is unusable this fails as
// Access does.
func (g *Gate) AccessAt(ctx context.Context, label string, mark uint64) (db.Access, error) {
	if g.kept == nil || mark == 0 {
		return g.Access(ctx, label)
	}
	if !g.health.Usable() {
		return db.Access{}, ErrDBDown
	}
	if a, ok := g.kept.get(label, mark); ok {
		return a, nil
	}
	a, err := g.Access(ctx, label)
	if err == nil {
		g.kept.put(label, mark, a)
	}
	return a, err
}

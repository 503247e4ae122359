package replicas

import (
	"testing"
	"time"

	"github.com/obmd/obmd/bastion/daemon"
	"github.com/obmd/obmd/bastion/e2e/obmdtest"
	"github.com/obmd/obmd/db/dbtest"
)

// TestFrozenDiskPostgres: a PostgreSQL cluster of the test's own whose
// data directory's filesystem is frozen (fsfreeze), as TestFrozenDisk
// freezes SQLite's. Reads still come from its buffers; a commit waits on
// the WAL's flush, so every change's outcome is unknown at its bound: the
// nodes fail closed, and after the thaw a late revocation stands and a
// late grant is undone.
func TestFrozenDiskPostgres(t *testing.T) {
	fs := dbtest.MountSharedLoopFS(t, "256M")
	p := dbtest.StartPostgresOn(t, fs.Dir)
	// No poll (and so no write probe) during the test: the first change
	// is the write that the frozen disk holds, mid-commit.
	o := obmdtest.Start(t, func(c *daemon.Config) {
		c.DB.DSN, c.Access.ChangeTimeout, c.Access.Poll = p.DSN, outageBound, time.Hour
	})
	t.Cleanup(fs.Thaw) // runs before the daemon's stop (last in, first out)
	storeOutage(t, o, fs.Freeze, fs.Thaw, true)
}

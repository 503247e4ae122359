package access

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/obmd/obmd/bastion/e2e/obmdtest"

	"github.com/obmd/obmd/bastion/daemon"
)

// TestKeptAccessNeedsTheLock: a login's access read is kept on SQLite
// (access.Gate.AccessAt) only while no other process can write the file.
// With a DSN that SQLite opens without holding its lock (a plain path with
// "?mode=memory", which the driver strips: a real file, unlocked; a file:
// URI with nolock=1), another process (here the sqlite3 shell) can revoke a
// node's token while obmd runs: the next login with that token must fail,
// as it does when every login reads the database. Where the lock holds
// (always with the DSNs docs/configuration.md documents), the other writer is refused
// and the token stays good.
func TestKeptAccessNeedsTheLock(t *testing.T) {
	if _, err := exec.LookPath("sqlite3"); err != nil {
		t.Fatalf("sqlite3 shell missing (apt-get install sqlite3): %v", err)
	}
	for _, c := range []struct {
		name, dsn string
		mustLock  bool // the forms obmd documents: no other process may write
	}{
		{"path", "%s", true},
		{"uri", "file:%s", true},
		{"path-mode-memory", "%s?mode=memory", false},
		{"uri-nolock", "file:%s?nolock=1", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "obmd.db")
			o := obmdtest.Start(t, func(cfg *daemon.Config) {
				cfg.DB.DSN = strings.Replace(c.dsn, "%s", path, 1)
				// The change watcher would pick the change up at its
				// next poll: the login below comes long before it.
				cfg.Access.Poll = time.Minute
			})
			tok := o.AddSimNode("n1")
			for range 2 { // read, then (on SQLite) kept
				if r, err := o.ExecGo("n1", tok, "power-status"); err != nil || r.Code != 0 {
					t.Fatalf("login before the revocation: %+v %v", r, err)
				}
			}
			// What RevokeToken does: a recorded change, a new epoch, no token.
			out, err := exec.Command("sqlite3", "-cmd", ".timeout 300", path, `BEGIN IMMEDIATE;
				UPDATE access_seq SET epoch = epoch + 1 WHERE id = 1;
				INSERT INTO access_changes (epoch, node, at, reason) SELECT epoch, 'n1', 0, 'token revoked' FROM access_seq WHERE id = 1;
				UPDATE nodes SET access_epoch = (SELECT epoch FROM access_seq WHERE id = 1) WHERE label = 'n1';
				DELETE FROM node_tokens WHERE node = 'n1';
				COMMIT;`).CombinedOutput()
			wrote := err == nil
			if wrote && c.mustLock {
				t.Fatal("another process wrote the database while obmd runs")
			}
			if !wrote && !strings.Contains(string(out), "locked") {
				t.Fatalf("sqlite3: %v: %s", err, out)
			}
			r, err := o.ExecGo("n1", tok, "power-status")
			if admitted := err == nil && r.Code == 0; admitted != !wrote {
				t.Fatalf("login after another process revoked the token (wrote %v): admitted %v (%+v %v)", wrote, admitted, r, err)
			}
		})
	}
}

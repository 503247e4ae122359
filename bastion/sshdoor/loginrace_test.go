package sshdoor_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	gossh "golang.org/x/crypto/ssh"

	"github.com/obmd/obmd/bastion/access"
	"github.com/obmd/obmd/bastion/access/authlimit"
	"github.com/obmd/obmd/bastion/access/sessions"
	"github.com/obmd/obmd/bastion/sshdoor"
	"github.com/obmd/obmd/commands"
	"github.com/obmd/obmd/db"
	"github.com/obmd/obmd/db/dbtest"
	"github.com/obmd/obmd/keys"
	"github.com/obmd/obmd/sol"
)

// raceStore is the database, with a hook run once right after a token
// login's read (Access), and a count of the epoch reads that start a
// session (Epoch).
type raceStore struct {
	*db.Store
	afterRead atomic.Pointer[func()]
	epochs    atomic.Int32
	reads     atomic.Int32 // of Access
}

func (s *raceStore) Access(ctx context.Context, label string) (db.Access, error) {
	s.reads.Add(1)
	a, err := s.Store.Access(ctx, label)
	if f := s.afterRead.Swap(nil); f != nil {
		(*f)()
	}
	return a, err
}

// gated is the front door's view of a raceStore: through the daemon's
// Gate, which on SQLite keeps what logins read (access.Gate.AccessAt).
type gated struct {
	*raceStore
	gate *access.Gate
}

func newGated(s *raceStore) gated {
	return gated{s, access.NewGate(s, access.NewHealth(s, nil), 0, s.Exclusive())}
}

func (g gated) AccessAt(ctx context.Context, label string, mark uint64) (db.Access, error) {
	return g.gate.AccessAt(ctx, label, mark)
}

func (s *raceStore) Epoch(ctx context.Context, label string) (int64, error) {
	s.epochs.Add(1)
	return s.Store.Epoch(ctx, label)
}

// ranRunner runs every command as "ran".
type ranRunner struct{ runs atomic.Int32 }

func (r *ranRunner) Run(_ context.Context, _ commands.Request, _ commands.Command, stdout, _ io.Writer) int {
	r.runs.Add(1)
	fmt.Fprintln(stdout, "ran")
	return 0
}

// noConsoles has no console.
type noConsoles struct{}

func (noConsoles) Attach(context.Context, string, sol.AttachOptions) (*sol.Viewer, error) {
	return nil, errors.New("no console here")
}
func (noConsoles) Viewers(string) []sol.ViewerInfo { return nil }
func (noConsoles) Writer(string) sol.Who           { return sol.Who{} }
func (noConsoles) Cut(string, error)               {}

// hookedSessions is the Revoker, with a hook run once just before a
// session is registered (Open).
type hookedSessions struct {
	*access.Revoker
	beforeOpen atomic.Pointer[func()]
}

func (h *hookedSessions) Open(ctx context.Context, info sessions.Info, host string, unblock func()) (*access.Session, error) {
	if f := h.beforeOpen.Swap(nil); f != nil {
		(*f)()
	}
	return h.Revoker.Open(ctx, info, host, unblock)
}

// TestLoginRacingRotation, on SQLite and MariaDB: a token login racing a
// rotation applied on this replica gets no session, and its connection is
// closed. Applied between the login's read and the watch of its
// connection, the rotation told no one: the watch reads the access again,
// and the connection is closed before any session. Applied between the
// session channel's opening and the session's registration, it marks the
// connection cut; the session's start reads the epoch again, refuses it
// and says why, and the connection is closed once it has ended. A login
// that raced nothing starts its session without a second read.
func TestLoginRacingRotation(t *testing.T) {
	for _, eng := range dbtest.Engines() {
		t.Run(eng.Name, func(t *testing.T) {
			ctx := context.Background()
			st, log := tokenDB(t, eng)
			store := &raceStore{Store: st}
			rev := &hookedSessions{Revoker: newRevoker(store, 5*time.Second, log)}
			runner := &ranRunner{}
			addr := serveBastion(t, newGated(store), runner, rev, log)

			out, err := execToken(addr, "n1", "token-0", "power-status")
			if err != nil || out != "ran\n" || store.epochs.Load() != 0 {
				t.Fatalf("login racing nothing: got %q (%v) after %d epoch reads, want ran after 0", out, err, store.epochs.Load())
			}

			// Each rotation is applied here, and the change watcher passes
			// it, so that the Revoker no longer holds the node's state:
			// only a read can tell the login's epoch is stale.
			n := 0
			rotate := func() {
				n++
				epoch, err := rotateVia(ctx, rev.Revoker, st, "n1", fmt.Sprint("token-", n))
				if err != nil {
					t.Errorf("rotate: %v", err)
				}
				rev.Watched(epoch)
				store.epochs.Store(0) // the change's own read
			}

			store.afterRead.Store(&rotate)
			c, err := dialToken(addr, "n1", "token-0")
			if err == nil {
				t.Errorf("login racing a rotation before its watch: logged in, want its connection closed at once")
				c.Close()
			}

			rev.beforeOpen.Store(&rotate)
			c, err = dialToken(addr, "n1", "token-1")
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			out, err = runLine(c, "power-status")
			var exit *gossh.ExitError
			if !errors.As(err, &exit) || exit.ExitStatus() != commands.ExitNotAllowed ||
				!strings.Contains(out, "access to n1 was revoked (access changed)") {
				t.Errorf("session racing a rotation: got %q (%v), want exit %d and the revocation", out, err, commands.ExitNotAllowed)
			}
			if n := store.epochs.Load(); n != 1 {
				t.Errorf("epoch reads at session starts: %d, want 1 (the raced session's)", n)
			}
			if !closedWithin(c, 10*time.Second) {
				t.Error("the raced session's connection is still open, want it closed once the session ended")
			}

			if n := runner.runs.Load(); n != 1 {
				t.Errorf("commands run: %d, want only the first login's", n)
			}
			if _, err := execToken(addr, "n1", "token-0", "power-status"); err == nil {
				t.Errorf("the old token logged in after the rotation")
			}
		})
	}
}

// TestLoginsKeepAccess, on SQLite and MariaDB: on SQLite, whose file no
// other process can write, token logins with nothing cut in between read
// the node's access once; a rotation or the issue of a node's first token
// (access changes, applied through the Revoker) is seen by the next login
// all the same, as is a node registered after a login to it failed. On
// MariaDB, which other replicas write, every login reads.
func TestLoginsKeepAccess(t *testing.T) {
	for _, eng := range dbtest.Engines() {
		t.Run(eng.Name, func(t *testing.T) {
			ctx := context.Background()
			st, log := raceDB(t, eng)
			store := &raceStore{Store: st}
			rev := newRevoker(store, 5*time.Second, log)
			addr := serveBastion(t, newGated(store), &ranRunner{}, rev, log)
			setToken := func(label, token string) {
				t.Helper()
				if _, err := rotateVia(ctx, rev, st, label, token); err != nil {
					t.Fatalf("set token of %s: %v", label, err)
				}
			}
			login := func(label, token string, want bool) {
				t.Helper()
				out, err := execToken(addr, label, token, "power-status")
				if got := err == nil && out == "ran\n"; got != want {
					t.Fatalf("login %s with %s: got %q (%v), want success %v", label, token, out, err, want)
				}
			}
			setToken("n1", "token-a")
			kept := st.Exclusive()
			if kept != (eng.Name == "sqlite") {
				t.Fatalf("%s: Exclusive %v", eng.Name, kept)
			}
			store.reads.Store(0)
			for range 3 {
				login("n1", "token-a", true)
			}
			login("n1", "token-x", false)
			if n, want := store.reads.Load(), map[bool]int32{true: 1, false: 4}[kept]; n != want {
				t.Errorf("reads for 4 logins with nothing cut: %d, want %d", n, want)
			}

			setToken("n1", "token-b")
			login("n1", "token-a", false)
			login("n1", "token-b", true)

			login("n2", "token-c", false) // no such node yet
			if _, err := st.CreateNode(ctx, db.Node{Label: "n2", Type: "sim"}); err != nil {
				t.Fatal(err)
			}
			login("n2", "token-c", false) // no token issued: read, and kept on SQLite
			setToken("n2", "token-c")
			login("n2", "token-c", true)
			login("n1", "token-b", true)
		})
	}
}

// raceDB opens a migrated database of eng holding node n1 (closed when
// t ends), and a logger that discards.
func raceDB(t *testing.T, eng dbtest.Engine) (*db.Store, logrus.FieldLogger) {
	t.Helper()
	ctx := context.Background()
	log := logrus.New()
	log.SetOutput(io.Discard)
	st, err := db.Open(ctx, eng.DSN(t), log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	if err := st.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := st.CreateNode(ctx, db.Node{Label: "n1", Type: "sim"}); err != nil {
		t.Fatal(err)
	}
	return st, log
}

// tokenDB is raceDB, with n1's token set to token-0.
func tokenDB(t *testing.T, eng dbtest.Engine) (*db.Store, logrus.FieldLogger) {
	t.Helper()
	st, log := raceDB(t, eng)
	if _, err := st.SetToken(context.Background(), "n1", keys.HashToken("token-0")); err != nil {
		t.Fatal(err)
	}
	return st, log
}

// newRevoker is a Revoker over epochs, with no consoles, whose cuts wait
// up to cutWait for their sessions to end.
func newRevoker(epochs access.Epochs, cutWait time.Duration, log logrus.FieldLogger) *access.Revoker {
	reg := sessions.New(sessions.Config{CutWait: cutWait})
	return access.NewRevoker(access.RevokerConfig{}, noConsoles{}, reg, epochs, log)
}

// rotateVia sets label's token to token through rev.Change, as an admin's
// rotation applied on this replica, and returns the change's epoch. It
// returns the error rather than failing t: callers run it from hooks and
// goroutines as well as from the test's own.
func rotateVia(ctx context.Context, rev *access.Revoker, st *db.Store, label, token string) (int64, error) {
	var epoch int64
	err := rev.Change(ctx, access.Change{Node: label, Why: "token rotated", Do: func(ctx context.Context) (int64, error) {
		var err error
		epoch, err = st.SetToken(ctx, label, keys.HashToken(token))
		return epoch, err
	}})
	return epoch, err
}

// serveBastion serves a front door over store on 127.0.0.1 until t ends.
func serveBastion(t *testing.T, store sshdoor.Store, runner sshdoor.Runner, sess sshdoor.Sessions, log logrus.FieldLogger) string {
	t.Helper()
	host, err := keys.LoadOrCreateHostKey(filepath.Join(t.TempDir(), "host_key"))
	if err != nil {
		t.Fatal(err)
	}
	srv, err := sshdoor.New(sshdoor.Config{HostKeys: []gossh.Signer{host}, FailDelay: time.Millisecond,
		Limiter: authlimit.New(authlimit.Config{}, time.Now)}, store, runner, noConsoles{}, sess, log)
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // owned by the test: Shutdown ends it, the cleanup waits
		defer wg.Done()
		srv.Serve(l)
	}()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
		wg.Wait()
	})
	return l.Addr().String()
}

// execToken runs line on label with token; it returns stdout and stderr
// together, and the session's error (*gossh.ExitError for a non-zero exit).
func execToken(addr, label, token, line string) (string, error) {
	c, err := dialToken(addr, label, token)
	if err != nil {
		return "", err
	}
	defer c.Close()
	return runLine(c, line)
}

// dialToken logs in to label with token.
func dialToken(addr, label, token string) (*gossh.Client, error) {
	return gossh.Dial("tcp", addr, &gossh.ClientConfig{User: label, Auth: []gossh.AuthMethod{gossh.Password(token)},
		HostKeyCallback: gossh.InsecureIgnoreHostKey(), Timeout: 10 * time.Second})
}

// runLine runs line in a session of c, as execToken.
func runLine(c *gossh.Client, line string) (string, error) {
	s, err := c.NewSession()
	if err != nil {
		return "", err
	}
	var out, errOut bytes.Buffer
	s.Stdout, s.Stderr = &out, &errOut
	err = s.Run(line)
	return out.String() + errOut.String(), err
}

package bastion_test

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

	"github.com/obmd/obmd/bastion"
	"github.com/obmd/obmd/bastion/access"
	"github.com/obmd/obmd/bastion/authlimit"
	"github.com/obmd/obmd/bastion/sessions"
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
func (noConsoles) Writer(string) string            { return "" }
func (noConsoles) Cut(string, error)               {}

// TestLoginRacingRotation, on SQLite and MariaDB: a token login that read
// the node's token just before a rotation, which is applied before the
// login's session is registered, gets no session: its start reads the
// epoch again and refuses it. A login that raced nothing starts its
// session without that second read.
func TestLoginRacingRotation(t *testing.T) {
	for _, eng := range dbtest.Engines() {
		t.Run(eng.Name, func(t *testing.T) {
			ctx := context.Background()
			log := logrus.New()
			log.SetOutput(io.Discard)
			st, err := db.Open(ctx, eng.DSN(t), log)
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			if err := st.Migrate(ctx); err != nil {
				t.Fatal(err)
			}
			store := &raceStore{Store: st}
			if _, err := st.CreateNode(ctx, db.Node{Label: "n1", Type: "sim"}); err != nil {
				t.Fatal(err)
			}
			if _, err := st.SetToken(ctx, "n1", keys.HashToken("token-a")); err != nil {
				t.Fatal(err)
			}
			reg := sessions.New(sessions.Config{CutWait: 5 * time.Second})
			rev := access.NewRevoker(access.RevokerConfig{}, noConsoles{}, reg, store, log)
			runner := &ranRunner{}
			addr := serveBastion(t, newGated(store), runner, rev, log)

			out, err := execToken(addr, "n1", "token-a", "power-status")
			if err != nil || out != "ran\n" || store.epochs.Load() != 0 {
				t.Fatalf("login racing nothing: got %q (%v) after %d epoch reads, want ran after 0", out, err, store.epochs.Load())
			}

			// The rotation is applied here, and the change watcher passes
			// it, so that the Revoker no longer holds the node's state:
			// only a read can tell the login's epoch is stale.
			rotate := func() {
				var epoch int64
				err := rev.Change(ctx, access.Change{Node: "n1", Why: "token rotated", Do: func(ctx context.Context) (int64, error) {
					var err error
					epoch, err = st.SetToken(ctx, "n1", keys.HashToken("token-b"))
					return epoch, err
				}})
				if err != nil {
					t.Errorf("rotate: %v", err)
				}
				rev.Watched(epoch)
				store.epochs.Store(0) // the change's own read
			}
			store.afterRead.Store(&rotate)
			out, err = execToken(addr, "n1", "token-a", "power-status")
			var exit *gossh.ExitError
			if !errors.As(err, &exit) || exit.ExitStatus() != commands.ExitNotAllowed ||
				!strings.Contains(out, "access to n1 was revoked (access changed)") {
				t.Errorf("login racing a rotation: got %q (%v), want exit %d and the revocation", out, err, commands.ExitNotAllowed)
			}
			if n := runner.runs.Load(); n != 1 {
				t.Errorf("commands run: %d, want only the first login's", n)
			}
			if n := store.epochs.Load(); n != 1 {
				t.Errorf("epoch reads at session starts: %d, want 1 (the raced login's)", n)
			}
			if _, err := execToken(addr, "n1", "token-a", "power-status"); err == nil {
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
			log := logrus.New()
			log.SetOutput(io.Discard)
			st, err := db.Open(ctx, eng.DSN(t), log)
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			if err := st.Migrate(ctx); err != nil {
				t.Fatal(err)
			}
			store := &raceStore{Store: st}
			reg := sessions.New(sessions.Config{CutWait: 5 * time.Second})
			rev := access.NewRevoker(access.RevokerConfig{}, noConsoles{}, reg, store, log)
			addr := serveBastion(t, newGated(store), &ranRunner{}, rev, log)
			setToken := func(label, token string) {
				t.Helper()
				err := rev.Change(ctx, access.Change{Node: label, Why: "token rotated", Do: func(ctx context.Context) (int64, error) {
					return st.SetToken(ctx, label, keys.HashToken(token))
				}})
				if err != nil {
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
			if _, err := st.CreateNode(ctx, db.Node{Label: "n1", Type: "sim"}); err != nil {
				t.Fatal(err)
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

// serveBastion serves a front door over store on 127.0.0.1 until t ends.
func serveBastion(t *testing.T, store bastion.Store, runner bastion.Runner, sess bastion.Sessions, log logrus.FieldLogger) string {
	t.Helper()
	host, err := keys.LoadOrCreateHostKey(filepath.Join(t.TempDir(), "host_key"))
	if err != nil {
		t.Fatal(err)
	}
	srv, err := bastion.New(bastion.Config{HostKeys: []gossh.Signer{host}, FailDelay: time.Millisecond,
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
	c, err := gossh.Dial("tcp", addr, &gossh.ClientConfig{User: label, Auth: []gossh.AuthMethod{gossh.Password(token)},
		HostKeyCallback: gossh.InsecureIgnoreHostKey(), Timeout: 10 * time.Second})
	if err != nil {
		return "", err
	}
	defer c.Close()
	s, err := c.NewSession()
	if err != nil {
		return "", err
	}
	var out, errOut bytes.Buffer
	s.Stdout, s.Stderr = &out, &errOut
	err = s.Run(line)
	return out.String() + errOut.String(), err
}

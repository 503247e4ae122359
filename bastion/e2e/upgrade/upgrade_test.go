package upgrade

// Rolling upgrades (docs/replicas.md, Upgrades): replicas of the previous
// release (its binary built from its tag) and of this one serve one
// cluster on MariaDB, side by side, and an upgrade one replica at a time
// never stops logins.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	gossh "golang.org/x/crypto/ssh"

	"github.com/obmd/obmd/bastion/e2e/obmdtest"
	"github.com/obmd/obmd/db"
	"github.com/obmd/obmd/db/dbtest"
	"github.com/obmd/obmd/sol/soltest"
	"github.com/obmd/obmd/sol/soltest/ipmisim"
)

// The previous release, which the skew tests run beside this one: an
// operator running it upgrades to this code one replica at a time. Both
// move at each release (docs/contributing.md, Releases); the commit is
// used where the tag is missing (a clone without tags) and must be the
// tag's.
const (
	previousRelease       = "v0.9.0"
	previousReleaseCommit = "94c2ee3fce05c5de9d4bbdd5eeebc20dd00f5570"
)

// previousBuild builds the previous release's obmd once per test binary,
// into previousDir (removed by TestMain).
var (
	previousBuild = sync.OnceValues(buildPrevious)
	previousDir   string
)

// errNoRelease: the repository has neither the tag nor the commit.
var errNoRelease = errors.New("the previous release is not in this repository")

// previousBinary returns the path of the previous release's obmd.
func previousBinary(t testing.TB) string {
	t.Helper()
	path, err := previousBuild()
	if errors.Is(err, errNoRelease) {
		soltest.Missing(t, "%v (git fetch --tags, or a clone with history): %v", errNoRelease, err)
	}
	if err != nil {
		t.Fatal(err)
	}
	return path
}

// buildPrevious extracts the previous release's tree (git archive) and
// builds its cmd/obmd; the module cache serves its dependencies.
func buildPrevious() (string, error) {
	git := func(args ...string) ([]byte, error) {
		out, err := exec.Command("git", args...).Output()
		if err != nil {
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				err = fmt.Errorf("git %s: %v: %s", strings.Join(args, " "), err, ee.Stderr)
			}
		}
		return bytes.TrimSpace(out), err
	}
	commit, err := git("rev-parse", "--verify", "-q", previousRelease+"^{commit}")
	switch {
	case err == nil && string(commit) != previousReleaseCommit:
		return "", fmt.Errorf("tag %s is commit %s, want %s", previousRelease, commit, previousReleaseCommit)
	case err != nil:
		if commit, err = git("rev-parse", "--verify", "-q", previousReleaseCommit+"^{commit}"); err != nil {
			return "", fmt.Errorf("%w: %v", errNoRelease, err)
		}
	}
	top, err := git("rev-parse", "--show-toplevel") // git archive takes the subtree of the directory it runs in
	if err != nil {
		return "", err
	}
	dir, err := os.MkdirTemp("", "obmd-previous-")
	if err != nil {
		return "", err
	}
	previousDir = dir
	src := filepath.Join(dir, "src")
	if err := os.Mkdir(src, 0o755); err != nil {
		return "", err
	}
	archive := exec.Command("git", "archive", string(commit))
	archive.Dir = string(top)
	untar := exec.Command("tar", "-x", "-C", src)
	pipe, err := archive.StdoutPipe()
	if err != nil {
		return "", err
	}
	untar.Stdin = pipe
	var archiveErr, untarErr bytes.Buffer
	archive.Stderr, untar.Stderr = &archiveErr, &untarErr
	if err := untar.Start(); err != nil {
		return "", err
	}
	if err := archive.Run(); err != nil {
		untar.Wait()
		return "", fmt.Errorf("git archive %s: %v: %s", previousRelease, err, archiveErr.Bytes())
	}
	if err := untar.Wait(); err != nil {
		return "", fmt.Errorf("untar %s: %v: %s", previousRelease, err, untarErr.Bytes())
	}
	path := filepath.Join(dir, "obmd")
	build := exec.Command("go", "build", "-ldflags", "-X main.version="+previousRelease, "-o", path, "./cmd/obmd")
	build.Dir = src
	if out, err := build.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build %s: %v\n%s", previousRelease, err, out)
	}
	return path, nil
}

// upEnv returns what every replica of one cluster shares (the database,
// the keys, the admin token, a peer listener, the lease timing) as each
// release reads it: start(t, bin, name, release) runs a replica of the
// previous release with its flat OBMD_ variables, or of this one
// ("dev") with the sectioned ones it requires.
func upEnv(t *testing.T, dsn string) func(bin, name, release string) *obmdtest.Replica {
	hostKey, sealKey := obmdtest.SharedKeys(t)
	token := obmdtest.Random(t)
	return func(bin, name, release string) *obmdtest.Replica {
		if release == "dev" {
			return obmdtest.StartReplica(t, bin, name, map[string]string{"OBMD_SSH_HOST_KEY": hostKey,
				"OBMD_DB_SEAL_KEY": sealKey, "OBMD_DB": dsn, "OBMD_ADMIN_TOKEN": token,
				"OBMD_REPLICA_PEER_ADDR": "127.0.0.1:0", "OBMD_CLUSTER_LEASE_TTL": obmdtest.LeaseTTL.String()})
		}
		return obmdtest.StartReplicaEnv(t, bin, name, map[string]string{"OBMD_HOST_KEY": hostKey,
			"OBMD_SEAL_KEY": sealKey, "OBMD_DB": dsn, "OBMD_ADMIN_TOKEN": token,
			"OBMD_PEER_ADDR": "127.0.0.1:0", "OBMD_LEASE_TTL": obmdtest.LeaseTTL.String(),
			"OBMD_SSH_ADDR": "127.0.0.1:0", "OBMD_ADMIN_ADDR": "127.0.0.1:0", "OBMD_STATE_DIR": t.TempDir(),
			"OBMD_REPLICA_ID": name, "OBMD_LOG_FORMAT": "json", "OBMD_LOG_LEVEL": "info",
			"OBMD_FAIL_DELAY": "20ms", "OBMD_LINGER": "200ms", "OBMD_CONSOLE_CAPTURE": "attached"})
	}
}

// upVersion checks that r runs release want ("dev": this code).
func upVersion(t *testing.T, r *obmdtest.Replica, want string) {
	t.Helper()
	if got := r.Listening["version"]; got != want {
		t.Fatalf("%s runs %q, want %q", r.Name, got, want)
	}
}

// TestUpgradeSkew: a replica of the previous release and one of this
// release serve one cluster on one MariaDB (the database migrated by this
// release while the older one runs), in front of ipmi_sim: a console on
// each is relayed through the other's holder, whichever holds it; one
// writer across them; `sessions` (SSH and admin API) lists both replicas'
// sessions; an automation command runs through the replica that does not
// hold the link; a rotation through either cuts the sessions on both.
func TestUpgradeSkew(t *testing.T) {
	dsn := dbtest.MySQLDSN(t)
	ipmisim.Require(t, "ssh", "ipmitool")
	oldBin, newBin := previousBinary(t), obmdtest.Binary(t)
	bmc := ipmisim.Start(t)
	start := upEnv(t, dsn)
	// The previous release first, on a fresh database; then this one,
	// which migrates past it while it serves.
	old := start(oldBin, "rep-old", previousRelease)
	if old == nil {
		t.FailNow()
	}
	cur := start(newBin, "rep-new", "dev")
	if cur == nil {
		t.FailNow()
	}
	upVersion(t, old, previousRelease)
	upVersion(t, cur, "dev")
	old.MustAPI(200, "PUT", "/node/n1", map[string]any{"type": "ipmi", "info": bmc.Info()})
	tok := old.Rotate("n1")
	signer, keyFile := obmdtest.NewKey(t)
	line := strings.TrimSpace(string(gossh.MarshalAuthorizedKey(signer.PublicKey())))
	cur.MustAPI(201, "POST", "/v1/nodes/n1/keys", map[string]string{"key": line})
	st := obmdtest.OpenStore(t, dsn)
	reps := map[string]*obmdtest.Replica{old.Name: old, cur.Name: cur}

	// holds waits until r holds n1's link.
	holds := func(t *testing.T, r *obmdtest.Replica) {
		t.Helper()
		obmdtest.WaitUntil(t, r.Name+" holding n1's link", func() bool {
			l, err := st.Lease(context.Background(), "n1", db.LeaseSOL)
			return err == nil && l.Owner == r.Name
		})
	}
	// released waits until no replica holds n1's link.
	released := func(t *testing.T) {
		t.Helper()
		obmdtest.WaitUntil(t, "n1's link closed", func() bool {
			_, err := st.Lease(context.Background(), "n1", db.LeaseSOL)
			return errors.Is(err, db.ErrNotFound)
		})
	}

	for _, order := range [][2]*obmdtest.Replica{{old, cur}, {cur, old}} {
		holder, relaying := order[0], order[1]
		t.Run("relayed_through_"+holder.Name, func(t *testing.T) {
			vh := holder.GoViewer(t, "n1", tok)
			vh.Out.Wait(t, "the banner on "+holder.Name, 0, "you are writing")
			holds(t, holder)
			vr := relaying.SSHViewer(t, "n1", keyFile)
			vr.Out.Wait(t, "the banner on "+relaying.Name, 0, "console of n1")
			obmdtest.SeeAll(t, bmc, "skew", vh, vr)
			if relaying.Count("sol_relay_opened", "n1") == 0 {
				t.Errorf("%s did not relay n1 from %s", relaying.Name, holder.Name)
			}
			if got := obmdtest.ActivePayloads(t, bmc); got != 1 {
				t.Errorf("active SOL payloads: got %d, want 1", got)
			}
			upOneWriter(t, bmc, vh, vr, holder.Name, relaying.Name)
			vr.Detach()
			vh.Detach()
			released(t)
		})
	}

	t.Run("sessions_list_both", func(t *testing.T) {
		vh := cur.GoViewer(t, "n1", tok)
		holds(t, cur)
		vr := old.SSHViewer(t, "n1", keyFile)
		obmdtest.SeeAll(t, bmc, "listed", vh, vr)
		for _, r := range reps {
			var body struct {
				Sessions []struct{ ID, Replica string }
			}
			if err := json.Unmarshal(r.MustAPI(200, "GET", "/v1/sessions?node=n1", nil), &body); err != nil {
				t.Fatal(err)
			}
			per := map[string]int{}
			for _, s := range body.Sessions {
				per[s.Replica]++
			}
			if per[old.Name] != 1 || per[cur.Name] != 1 {
				t.Errorf("GET /v1/sessions through %s: got %+v, want one session on each replica", r.Name, body.Sessions)
			}
			res, err := r.Exec("n1", tok, "sessions")
			if err != nil || res.Code != 0 {
				t.Fatalf("sessions through %s: %+v, %v", r.Name, res, err)
			}
			for _, s := range body.Sessions {
				if !strings.Contains(res.Stdout, s.ID) {
					t.Errorf("`sessions` through %s does not list %s (on %s):\n%s", r.Name, s.ID, s.Replica, res.Stdout)
				}
			}
		}
		vr.Detach()
		vh.Detach()
		released(t)
	})

	// The link is the new replica's: the old one relays the automation.
	t.Run("automation_through_the_relaying_replica", func(t *testing.T) {
		cur.GoViewer(t, "n1", tok).Out.Wait(t, "the banner on "+cur.Name, 0, "console of n1")
		holds(t, cur)
		done := old.SSHBackground("n1", keyFile, "wait-for", "'skew-auto-[0-9]+ ready'", "--timeout", "40s")
		n := 0
		res := obmdtest.PrintUntil(t, func([]byte) error {
			n++
			return bmc.WriteSerial(fmt.Appendf(nil, "skew-auto-%d ready\r\n", n))
		}, "line", done)
		if res.Code != 0 || !strings.Contains(res.Stdout, " ready") {
			t.Errorf("wait-for through %s: got %+v, want exit 0 and the line", old.Name, res)
		}
		bmc.ResetSerial()
		if res := old.SSH(t, "n1", keyFile, "send", "--force", `'sent-through-old\r'`); res.Code != 0 {
			t.Errorf("send --force through %s: got %+v", old.Name, res)
		}
		bmc.WaitSerial(t, []byte("sent-through-old\r"), obmdtest.Timeout)
		holds(t, cur)
	})

	for _, through := range []*obmdtest.Replica{old, cur} {
		t.Run("rotation_through_"+through.Name+"_cuts_both", func(t *testing.T) {
			vs := []*obmdtest.Client{cur.GoViewer(t, "n1", tok), old.SSHViewer(t, "n1", keyFile)}
			obmdtest.SeeAll(t, bmc, "before-rotation", vs...)
			tok = through.Rotate("n1")
			for i, v := range vs {
				v.End.Wait(t, fmt.Sprintf("viewer %d", i))
				if !strings.Contains(v.Out.String(), "access to n1 was revoked (token rotated)") {
					t.Errorf("viewer %d: not told the reason; screen %q", i, obmdtest.Tail(v.Out.String(), 400))
				}
			}
			for _, r := range reps {
				if res, err := r.Exec("n1", tok, "power-status"); err != nil || res.Code != 0 {
					t.Errorf("power-status with the new token through %s: got %+v, %v", r.Name, res, err)
				}
			}
		})
	}
}

// upOneWriter: the holder's viewer vh writes and the relayed viewer vr's
// keys do not reach the node, until vr takes over: then vh is told, and
// only vr's keys reach it; when vh takes writing back, vr is told (which
// only the holder's roles message, read by the relaying replica, tells
// it), and only vh's keys reach the node again.
func upOneWriter(t *testing.T, bmc *ipmisim.Sim, vh, vr *obmdtest.Client, holder, relaying string) {
	t.Helper()
	typed := func(v *obmdtest.Client, who string) {
		t.Helper()
		k := "w-" + who + "-" + obmdtest.Random(t)[:6]
		v.TypeKeys(k + "\r")
		bmc.WaitSerial(t, []byte(k), obmdtest.Timeout)
	}
	dropped := func(v *obmdtest.Client, who string) string {
		k := "r-" + who + "-" + obmdtest.Random(t)[:6]
		v.TypeKeys(k + "\r")
		return k
	}
	lost := []string{dropped(vr, relaying)}
	typed(vh, holder)
	mark := len(vh.Out.String())
	vr.TypeKeys(obmdtest.EscTakeOver)
	vh.Out.Wait(t, "the viewer on "+holder+" told of the takeover", mark, "took over writing; you are read-only")
	typed(vr, relaying)
	lost = append(lost, dropped(vh, holder))
	typed(vr, relaying+"-again")
	mark = len(vr.Out.String())
	vh.TypeKeys(obmdtest.EscTakeOver)
	vr.Out.Wait(t, "the viewer on "+relaying+" told of the takeover", mark, "took over writing; you are read-only")
	typed(vh, holder+"-back")
	lost = append(lost, dropped(vr, relaying+"-after"))
	typed(vh, holder+"-back-again")
	for _, k := range lost {
		if bytes.Contains(bmc.Serial(), []byte(k)) {
			t.Errorf("%q, typed by a viewer that was not writing, reached the serial port", k)
		}
	}
}

// upBalancer is the load balancer of TestUpgradeRolling: logins go to the
// replicas in it, in turn; a replica taken out is drained first (no login
// of the loop is in flight on it when it is stopped).
type upBalancer struct {
	mu       sync.Mutex
	in       []*obmdtest.Replica
	next     int
	inflight map[*obmdtest.Replica]int
	drained  *sync.Cond
}

func newBalancer(reps ...*obmdtest.Replica) *upBalancer {
	b := &upBalancer{in: reps, inflight: map[*obmdtest.Replica]int{}}
	b.drained = sync.NewCond(&b.mu)
	return b
}

// pick returns the next replica and counts a login on it until done.
func (b *upBalancer) pick() (r *obmdtest.Replica, done func()) {
	b.mu.Lock()
	defer b.mu.Unlock()
	r = b.in[b.next%len(b.in)]
	b.next++
	b.inflight[r]++
	return r, func() {
		b.mu.Lock()
		defer b.mu.Unlock()
		b.inflight[r]--
		b.drained.Broadcast()
	}
}

// remove takes r out and waits until no login is in flight on it.
func (b *upBalancer) remove(r *obmdtest.Replica) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for i, x := range b.in {
		if x == r {
			b.in = append(b.in[:i:i], b.in[i+1:]...)
			break
		}
	}
	for b.inflight[r] > 0 {
		b.drained.Wait()
	}
}

func (b *upBalancer) add(r *obmdtest.Replica) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.in = append(b.in, r)
}

// TestUpgradeRolling: two replicas of the previous release, upgraded one
// at a time as docs/replicas.md says (migrate with this release, then
// each replica in turn: out of the balancer, stopped, started with this
// release, back in), with logins served throughout: every login of a loop
// through the balancer succeeds, a console on the replica not being
// upgraded keeps its output, and one on an upgraded replica too.
func TestUpgradeRolling(t *testing.T) {
	dsn := dbtest.MySQLDSN(t)
	ipmisim.Require(t, "ssh", "ipmitool")
	oldBin, newBin := previousBinary(t), obmdtest.Binary(t)
	bmc := ipmisim.Start(t)
	start := upEnv(t, dsn)
	a := start(oldBin, "rep-a", previousRelease)
	if a == nil {
		t.FailNow()
	}
	b := start(oldBin, "rep-b", previousRelease)
	if b == nil {
		t.FailNow()
	}
	a.MustAPI(200, "PUT", "/node/n1", map[string]any{"type": "ipmi", "info": bmc.Info()})
	tok := a.Rotate("n1")

	lb := newBalancer(a, b)
	stop := make(chan struct{})
	var (
		mu       sync.Mutex
		logins   int
		failures []string
		wg       sync.WaitGroup
	)
	wg.Add(1)
	go func() { // the login loop; ends at stop
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
			r, done := lb.pick()
			res, err := r.Exec("n1", tok, "power-status")
			done()
			mu.Lock()
			logins++
			if err != nil || res.Code != 0 {
				failures = append(failures, fmt.Sprintf("%s (%s): %+v %v", r.Name, r.Listening["version"], res, err))
			}
			mu.Unlock()
		}
	}()
	loopDone := func() {
		close(stop)
		wg.Wait()
	}
	defer func() {
		select {
		case <-stop:
		default:
			loopDone()
		}
	}()

	// A console on B, watched across A's upgrade.
	vb := b.GoViewer(t, "n1", tok)
	obmdtest.SeeAll(t, bmc, "old-old", vb)

	// 1. The migrations of this release, while both old replicas serve.
	migrate := exec.Command(newBin, "migrate")
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "OBMD_") {
			migrate.Env = append(migrate.Env, kv)
		}
	}
	migrate.Env = append(migrate.Env, "OBMD_DB="+dsn, "OBMD_LOG_FORMAT=json")
	if out, err := migrate.CombinedOutput(); err != nil {
		t.Fatalf("obmd migrate (this release): %v\n%s", err, out)
	}
	obmdtest.SeeAll(t, bmc, "migrated", vb)

	// upgrade takes r out of the balancer, stops it and starts this
	// release in its place.
	upgrade := func(r *obmdtest.Replica) *obmdtest.Replica {
		t.Helper()
		lb.remove(r)
		r.Stop(t)
		n := start(newBin, r.Name+"2", "dev")
		if n == nil {
			t.FailNow()
		}
		upVersion(t, n, "dev")
		obmdtest.WaitUntil(t, n.Name+" ready", func() bool {
			code, _ := n.Request("GET", "/readyz", nil, "", "")
			return code == 200
		})
		lb.add(n)
		return n
	}

	// 2. A: old -> new, B still old; A's new console relays from B.
	a2 := upgrade(a)
	va := a2.GoViewer(t, "n1", tok)
	obmdtest.SeeAll(t, bmc, "new-old", vb, va)

	// 3. B: old -> new; A's console follows the link to its new holder.
	b2 := upgrade(b)
	obmdtest.SeeAll(t, bmc, "new-new", va)
	vb2 := b2.GoViewer(t, "n1", tok)
	obmdtest.SeeAll(t, bmc, "new-new-both", va, vb2)

	loopDone()
	mu.Lock()
	defer mu.Unlock()
	if len(failures) > 0 {
		t.Errorf("%d of %d logins through the balancer failed during the upgrade:\n%s", len(failures), logins, strings.Join(failures, "\n"))
	}
	if logins < 20 {
		t.Errorf("%d logins during the upgrade, want at least 20: the loop did not run", logins)
	}
	t.Logf("%d logins through the balancer during the upgrade, %d failed", logins, len(failures))
}

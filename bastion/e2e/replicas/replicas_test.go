package replicas

// Several obmd replicas on one MariaDB (issue 6): three obmd processes built
// from ./cmd/obmd share a database, the host and seal keys and the admin
// token, in front of one ipmi_sim. Their viewers of one node share one SOL
// payload, rotation through one replica ends sessions on the others within
// 2 s, a killed lease holder's link moves to a survivor, and power
// operations on a node never overlap across replicas.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	mrand "math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/obmd/obmd/bastion/e2e/obmdtest"

	"github.com/sirupsen/logrus"
	gossh "golang.org/x/crypto/ssh"

	"github.com/obmd/obmd/bastion/daemon"
	"github.com/obmd/obmd/db"
	"github.com/obmd/obmd/db/dbtest"
	"github.com/obmd/obmd/sol"
	"github.com/obmd/obmd/sol/soltest/ipmisim"
)

// Poll timings of the replicas under test (their lease is LeaseTTL).
// The epoch poll is the default (1 s): the 2 s rotation goal is measured
// as shipped.
const (
	powerTimeout = 3 * time.Second
	rotateGoal   = 2 * time.Second
)

// TestReplicas runs three obmd processes on one MariaDB, then on one
// PostgreSQL, and one ipmi_sim. The subtests run in order on the same
// replicas (the last one kills one).
func TestReplicas(t *testing.T) { obmdtest.OnSharedEngines(t, testReplicas) }

func testReplicas(t *testing.T, dsn string) {
	ipmisim.Require(t, "ssh", "ipmitool")
	bmc := ipmisim.Start(t)
	// Three replicas start at once (they migrate the database concurrently).
	reps := obmdtest.Cluster(t, dsn, map[string]string{"OBMD_CLUSTER_LEASE_TTL": obmdtest.LeaseTTL.String(),
		"OBMD_COMMANDS_TIMEOUT": powerTimeout.String()})
	a, b, c := reps[0], reps[1], reps[2]
	if fa, fb := a.Listening["host_key"], b.Listening["host_key"]; fa == "" || fa != fb {
		t.Errorf("host key fingerprints: got %q and %q, want one shared key", fa, fb)
	}

	// The node, registered through A; its key lets OpenSSH in without
	// sshpass.
	a.MustAPI(200, "PUT", "/node/n1", map[string]any{"type": "ipmi", "info": bmc.Info()})
	tok := a.Rotate("n1")
	signer, keyFile := obmdtest.NewKey(t)
	line := strings.TrimSpace(string(gossh.MarshalAuthorizedKey(signer.PublicKey())))
	b.MustAPI(201, "POST", "/v1/nodes/n1/keys", map[string]string{"key": line})
	st := obmdtest.OpenStore(t, dsn)

	// These viewers outlive the first subtest: the rotation ends them.
	top := t
	var viewers []*obmdtest.Client
	t.Run("same_output_one_payload", func(t *testing.T) {
		// A attaches first: it writes (one_writer_in_the_cluster).
		va := a.GoViewer(top, "n1", tok)
		va.Out.Wait(t, "the first viewer's banner", 0, "you are writing")
		viewers = []*obmdtest.Client{va, b.SSHViewer(top, "n1", keyFile), c.SSHViewer(top, "n1", keyFile)}
		obmdtest.SeeAll(t, bmc, "boot-1", viewers...)
		marker := "same-stream-" + obmdtest.Random(t)[:8]
		if err := bmc.WriteSerial([]byte(marker + "\r\n")); err != nil {
			t.Fatal(err)
		}
		for i, v := range viewers {
			v.Out.Wait(t, "viewer on "+reps[i].Name, 0, marker)
		}
		if got := obmdtest.ActivePayloads(t, bmc); got != 1 {
			t.Errorf("active SOL payloads on the BMC: got %d, want 1", got)
		}
		l, err := st.Lease(context.Background(), "n1", db.LeaseSOL)
		if err != nil {
			t.Fatalf("SOL lease: %v", err)
		}
		var acquired, relayed, deactivated int
		for _, r := range reps {
			acquired += r.Count("sol_lease_acquired", "n1")
			relayed += r.Count("sol_relay_opened", "n1")
			deactivated += r.CountState("n1", "deactivating")
		}
		if acquired != 1 || relayed != 2 || deactivated != 0 {
			t.Errorf("across replicas: got %d lease acquisitions, %d relays, %d deactivations, want 1, 2, 0", acquired, relayed, deactivated)
		}
		t.Logf("SOL lease held by %s; viewers on %s, %s and %s", l.Owner, a.Name, b.Name, c.Name)
	})

	t.Run("one_writer_in_the_cluster", func(t *testing.T) {
		if len(viewers) != 3 {
			t.Fatal("no viewers: the step that attaches them failed")
		}
		oneWriter(t, bmc, viewers, reps, keyFile)
	})

	t.Run("one_session_list", func(t *testing.T) {
		if len(viewers) != 3 {
			t.Fatal("no viewers: the step that attaches them failed")
		}
		oneSessionList(t, reps, tok, c.Name) // C writes (one_writer_in_the_cluster)
	})

	// doctor, on any replica, tells obmd's payload (the lease holder's)
	// from another's: the SOL step passes everywhere, holder or not.
	t.Run("doctor_sees_obmd_holding_the_payload", func(t *testing.T) {
		for _, r := range reps {
			res, err := r.Exec("n1", tok, "doctor")
			if err != nil || res.Code != 0 || !strings.Contains(res.Stdout, "held by obmd's console") {
				t.Errorf("doctor through %s: got %v, %v, want exit 0 and the payload held by obmd", r.Name, res, err)
			}
		}
		if got := obmdtest.ActivePayloads(t, bmc); got != 1 {
			t.Errorf("active SOL payloads after the doctor runs: got %d, want 1", got)
		}
	})

	t.Run("rotation_ends_sessions_everywhere", func(t *testing.T) {
		if len(viewers) != 3 {
			t.Fatal("no viewers: the step that attaches them failed")
		}
		// OBMD_REPLICA_RUNS repeats the measure (for BENCHMARKS.md).
		runs := 1
		if n, err := strconv.Atoi(os.Getenv("OBMD_REPLICA_RUNS")); err == nil && n > 1 {
			runs = n
		}
		var worsts []time.Duration
		for run := range runs {
			if run > 0 {
				viewers = []*obmdtest.Client{a.GoViewer(t, "n1", tok), b.SSHViewer(t, "n1", keyFile), c.SSHViewer(t, "n1", keyFile)}
				obmdtest.SeeAll(t, bmc, fmt.Sprintf("run-%d", run), viewers...)
				// A random phase against the replicas' 1 s poll.
				time.Sleep(mrand.N(time.Second))
			}
			start := time.Now()
			tok = a.On(t).Rotate("n1")
			var worst time.Duration
			for i, v := range viewers {
				took := v.End.Wait(t, "viewer on "+reps[i].Name).Sub(start)
				t.Logf("viewer on %s ended %v after the rotation through %s", reps[i].Name, took.Round(time.Millisecond), a.Name)
				if i > 0 && took > worst {
					worst = took
				}
				// The reason crosses replicas (issue 14): not a generic text.
				if !strings.Contains(v.Out.String(), "access to n1 was revoked (token rotated)") {
					t.Errorf("viewer on %s: not told the reason; screen %q", reps[i].Name, obmdtest.Tail(v.Out.String(), 400))
				}
			}
			if worst >= rotateGoal {
				t.Errorf("rotation through %s ended the sessions on the other replicas after %v, want under %v", a.Name, worst, rotateGoal)
			}
			worsts = append(worsts, worst)
		}
		slices.Sort(worsts)
		t.Logf("BENCH replicas rotate_to_end_other_replicas runs=%d median=%v max=%v", runs,
			worsts[len(worsts)/2].Round(time.Millisecond), worsts[len(worsts)-1].Round(time.Millisecond))
	})

	t.Run("power_busy_across_replicas", func(t *testing.T) {
		// A BMC that never answers keeps a power operation in flight on
		// B for PowerTimeout; meanwhile C's is busy at once.
		hole, cipher := obmdtest.BlackHole(t), 3
		a.On(t).MustAPI(200, "PUT", "/node/nb", map[string]any{"type": "ipmi",
			"info": sol.Info{Addr: "127.0.0.1", Port: hole, User: "u", Pass: "p", Cipher: &cipher}})
		tokNB := a.On(t).Rotate("nb")
		first := make(chan obmdtest.Result, 1)
		go func() {
			res, err := b.Exec("nb", tokNB, "power-cycle")
			if err != nil {
				t.Errorf("power-cycle through %s: %v", b.Name, err)
			}
			first <- res
		}()
		obmdtest.WaitUntil(t, "the power lease of nb", func() bool {
			_, err := st.Lease(context.Background(), "nb", db.LeasePower)
			return err == nil
		})
		res, err := c.Exec("nb", tokNB, "power-on")
		if err != nil || res.Code != 4 || !strings.Contains(res.Stderr, "rep-b") {
			t.Errorf("power-on through %s while %s cycles: got %v, %v, want exit 4 naming rep-b", c.Name, b.Name, res, err)
		}
		code, body := a.On(t).Request("POST", "/node/nb/power_off?token="+url.QueryEscape(tokNB), nil, "", "")
		if code != http.StatusConflict {
			t.Errorf("HTTP power_off through %s while %s cycles: got %d %s, want 409", a.Name, b.Name, code, body)
		}
		if res := <-first; res.Code != 1 {
			t.Errorf("power-cycle on a dead BMC through %s: got %v, want exit 1", b.Name, res)
		}
		// Released: the real BMC's node powers through any replica.
		for _, r := range []*obmdtest.Replica{c, b} {
			if res, err := r.Exec("n1", tok, "power-on"); err != nil || res.Code != 0 {
				t.Errorf("power-on through %s: got %v, %v, want exit 0", r.Name, res, err)
			}
		}
	})

	t.Run("holder_killed_survivor_takes_over", func(t *testing.T) {
		viewers = []*obmdtest.Client{a.GoViewer(t, "n1", tok), b.SSHViewer(t, "n1", keyFile), c.SSHViewer(t, "n1", keyFile)}
		obmdtest.SeeAll(t, bmc, "boot-2", viewers...)
		l, err := st.Lease(context.Background(), "n1", db.LeaseSOL)
		if err != nil {
			t.Fatalf("SOL lease: %v", err)
		}
		var holder *obmdtest.Replica
		var survivors []*obmdtest.Client
		var where []string // the survivors' replicas
		for i, r := range reps {
			if r.Name == l.Owner {
				holder = r
			} else {
				survivors = append(survivors, viewers[i])
				where = append(where, r.Name)
			}
		}
		if holder == nil || len(survivors) != 2 {
			t.Fatalf("lease owner %q is none of the replicas", l.Owner)
		}
		marks := make([]int, len(survivors))
		for i, v := range survivors {
			marks[i] = len(v.Out.String())
		}
		survivingWriter(t, bmc, survivors, true)
		killed := time.Now()
		holder.Kill(t)
		obmdtest.SeeAll(t, bmc, "after-kill", survivors...)
		gap := time.Since(killed)
		survivingWriter(t, bmc, survivors, false)
		for i, v := range survivors {
			if !strings.Contains(v.Out.String()[marks[i]:], "console link lost") {
				t.Errorf("survivor viewer on %s: no gap marker after the kill; screen %q", where[i], obmdtest.Tail(v.Out.String(), 600))
			}
		}
		nl, err := st.Lease(context.Background(), "n1", db.LeaseSOL)
		if err != nil || nl.Owner == holder.Name {
			t.Errorf("SOL lease after the kill: got %+v, %v, want a survivor's", nl, err)
		}
		if got := obmdtest.ActivePayloads(t, bmc); got != 1 {
			t.Errorf("active SOL payloads after the takeover: got %d, want 1", got)
		}
		t.Logf("holder %s killed; %s took the link over, viewers on survivors received again after %v (lease TTL %v)",
			holder.Name, nl.Owner, gap.Round(time.Millisecond), obmdtest.LeaseTTL)
		t.Logf("BENCH replicas takeover_gap=%v lease_ttl=%v", gap.Round(time.Millisecond), obmdtest.LeaseTTL)
	})
}

// TestReplicaDatabaseLost: a replica that loses its database says so: its
// /readyz fails and SSH logins are refused with a banner that explains why;
// sessions already open are cut after db_grace (access changes made
// elsewhere can no longer reach it); when the database is back, so are
// logins. On MariaDB and on PostgreSQL.
func TestReplicaDatabaseLost(t *testing.T) { obmdtest.OnSharedEngines(t, testReplicaDatabaseLost) }

func testReplicaDatabaseLost(t *testing.T, dsn string) {
	proxy := dbtest.StartProxy(t, dsn)
	o := obmdtest.Start(t, func(c *daemon.Config) { c.DB.DSN = proxy.DSN; c.DB.Grace = time.Second })
	tok := o.AddSimNode("n1")
	if res, err := o.ExecGo("n1", tok, "power-status"); err != nil || res.Code != 0 {
		t.Fatalf("before: got %v, %v", res, err)
	}
	v := obmdtest.StartGoSession(t, o.SSHAddr(), "n1", gossh.Password(tok), obmdtest.SessionOpts{PTY: true, Merge: true})
	v.Out.Wait(t, "console", 0, "console of n1")

	cut := time.Now()
	proxy.Cut(true)
	obmdtest.WaitUntil(t, "/readyz to fail", func() bool {
		code, _ := o.Request("GET", "/readyz", nil, "", "")
		return code == http.StatusServiceUnavailable
	})
	var banner string
	obmdtest.WaitUntil(t, "the login banner", func() bool {
		banner = ""
		c, err := gossh.Dial("tcp", o.SSHAddr(), &gossh.ClientConfig{User: "n1", Auth: []gossh.AuthMethod{gossh.Password(tok)},
			HostKeyCallback: gossh.InsecureIgnoreHostKey(), Timeout: 10 * time.Second,
			BannerCallback: func(msg string) error { banner = msg; return nil }})
		if err == nil {
			c.Close()
			return false // still admitted: the poll has not failed yet
		}
		return strings.Contains(banner, "cannot reach its database")
	})
	end := v.End.Wait(t, "console")
	if !strings.Contains(v.Out.String(), "lost its database") {
		t.Errorf("console cut without the reason; screen %q", obmdtest.Tail(v.Out.String(), 400))
	}
	t.Logf("console cut %v after the database was lost (db_grace 1 s, epoch_poll 100 ms)", end.Sub(cut).Round(time.Millisecond))

	proxy.Cut(false)
	obmdtest.WaitUntil(t, "logins again", func() bool {
		res, err := o.ExecGo("n1", tok, "power-status")
		return err == nil && res.Code == 0
	})
	code, _ := o.Request("GET", "/readyz", nil, "", "")
	if code != http.StatusOK {
		t.Errorf("/readyz after the database is back: got %d, want 200", code)
	}
}

// TestReplicaPeerConfig: a peer_addr other replicas cannot dial (every
// address, without peer_advertise) is a configuration error, found before
// anything is created; a taken peer port fails the start before the state
// directory is touched, as a taken SSH or admin port does.
func TestReplicaPeerConfig(t *testing.T) {
	quiet := logrus.New()
	quiet.SetOutput(io.Discard)
	base := func(state string) daemon.Config {
		var c daemon.Config
		c.SSH.Addr, c.Admin.Addr, c.Daemon.StateDir = "127.0.0.1:0", "127.0.0.1:0", state
		return c
	}
	absent := func(t *testing.T, state string) {
		t.Helper()
		if entries, err := os.ReadDir(state); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("state directory: got %d entries (%v), want it never created", len(entries), err)
		}
	}
	for _, tc := range []struct{ addr, advertise, want string }{
		{":0", "", "listens on every address"},
		{"0.0.0.0:0", "", "listens on every address"},
		{"[::]:0", "", "listens on every address"},
		{"127.0.0.1", "", "peer_addr"},
		{":0", "0.0.0.0:2223", "peer_advertise"},
		{":0", "10.0.0.11:0", "peer_advertise"},
		{":0", "10.0.0.11", "peer_advertise"},
	} {
		t.Run(tc.addr+" "+tc.advertise, func(t *testing.T) {
			state := filepath.Join(t.TempDir(), "state")
			cfg := base(state)
			cfg.Replica.PeerAddr, cfg.Replica.PeerAdvertise = tc.addr, tc.advertise
			if _, err := cfg.WithDefaults(); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("WithDefaults: got %v, want an error naming %q", err, tc.want)
			}
			d, err := daemon.New(cfg, quiet)
			if err == nil {
				err := d.Start(t.Context())
				t.Errorf("daemon.New: accepted (Start: %v), want a configuration error", err)
				if err == nil {
					runBriefly(d)
				}
			}
			absent(t, state)
		})
	}

	for _, ok := range [][2]string{{"127.0.0.1:0", ""}, {"localhost:2223", ""}, {":2223", "10.0.0.11:2223"}, {"[::]:2223", "obmd-2:2223"}} {
		cfg := base(t.TempDir())
		cfg.Replica.PeerAddr, cfg.Replica.PeerAdvertise = ok[0], ok[1]
		if _, err := cfg.WithDefaults(); err != nil {
			t.Errorf("peer_addr %q, peer_advertise %q: got %v, want accepted", ok[0], ok[1], err)
		}
	}

	t.Run("peer port taken", func(t *testing.T) {
		taken, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer taken.Close()
		state := filepath.Join(t.TempDir(), "state")
		cfg := base(state)
		cfg.Replica.PeerAddr = taken.Addr().String()
		d, err := daemon.New(cfg, quiet)
		if err != nil {
			t.Fatalf("daemon.New: %v", err)
		}
		if err := d.Start(t.Context()); err == nil || !strings.Contains(err.Error(), "listen for peers") {
			t.Errorf("Start: got %v, want listen for peers to fail", err)
			if err == nil {
				runBriefly(d)
			}
		}
		absent(t, state)
	})
}

// runBriefly runs a daemon that started when it should not have, so that
// it stops and closes what it opened.
func runBriefly(d *daemon.Daemon) {
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	d.Run(ctx)
}

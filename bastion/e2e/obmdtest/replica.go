package obmdtest

// Helpers of the replica tests (bastion/e2e/replicas): obmd processes,
// console viewers through x/crypto and OpenSSH, the BMC's payload status.
// (The TCP proxy that cuts a replica off its database is dbtest.Proxy.)

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	gossh "golang.org/x/crypto/ssh"

	"github.com/obmd/obmd/db"
	"github.com/obmd/obmd/keys"
	"github.com/obmd/obmd/sol/soltest/ipmisim"
)

// ---- replicas as processes ----

// Replica is one obmd process.
type Replica struct {
	*Admin    // its admin API, failing the test that started it (on: another)
	Name      string
	Cmd       *exec.Cmd
	Logs      *SyncBuffer
	Listening map[string]string // fields of the obmd_listening line
	Exited    chan struct{}     // closed when the process has been reaped
}

// StartReplica runs `obmd serve` with env (plus test defaults) and waits for
// its obmd_listening line. On failure it reports and returns nil.
func StartReplica(t *testing.T, bin, name string, env map[string]string) *Replica {
	vars := map[string]string{
		"OBMD_SSH_ADDR": "127.0.0.1:0", "OBMD_ADMIN_ADDR": "127.0.0.1:0", "OBMD_STATE_DIR": t.TempDir(),
		"OBMD_REPLICA_ID": name, "OBMD_LOG_FORMAT": "json", "OBMD_LOG_LEVEL": "info",
		"OBMD_SSH_FAIL_DELAY": "20ms", "OBMD_ADMIN_FAIL_DELAY": "20ms", "OBMD_CONSOLE_LINGER": "200ms",
		// As startObmd: links open for viewers only, unless a test says.
		"OBMD_CONSOLE_CAPTURE": "attached",
	}
	for k, v := range env {
		vars[k] = v
	}
	return StartReplicaEnv(t, bin, name, vars)
}

// StartReplicaEnv runs `obmd serve` with exactly the OBMD_ variables vars
// (a release older than this code reads other names) and waits for its
// obmd_listening line. On failure it reports and returns nil.
func StartReplicaEnv(t *testing.T, bin, name string, vars map[string]string) *Replica {
	cmd := exec.Command(bin, "serve")
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "OBMD_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	for k, v := range vars {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	output, err := cmd.StdoutPipe()
	if err != nil {
		t.Error(err)
		return nil
	}
	cmd.Stderr = cmd.Stdout // the log is on stderr; stdout gets nothing
	r := &Replica{Name: name, Cmd: cmd, Logs: &SyncBuffer{}, Exited: make(chan struct{})}
	if err := cmd.Start(); err != nil {
		t.Errorf("start %s: %v", name, err)
		return nil
	}
	listening := make(chan map[string]string, 1)
	go func() { // ends when the process's output closes
		sc := bufio.NewScanner(output)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			r.Logs.Write(append(sc.Bytes(), '\n'))
			var m map[string]any
			if json.Unmarshal(sc.Bytes(), &m) == nil && m["msg"] == "obmd_listening" {
				f := map[string]string{}
				for k, v := range m {
					f[k] = fmt.Sprint(v)
				}
				listening <- f
			}
		}
		io.Copy(io.Discard, output)
	}()
	go func() { // reaps the process; closes exited
		cmd.Wait()
		close(r.Exited)
	}()
	t.Cleanup(func() {
		r.Stop(t)
		if t.Failed() {
			t.Logf("%s log (tail):\n%s", name, Tail(r.Logs.String(), 6000))
		}
	})
	select {
	case r.Listening = <-listening:
		r.Admin = NewAdmin(t, r.Listening["admin"], vars["OBMD_ADMIN_TOKEN"], " on "+name)
		return r
	case <-r.Exited:
		t.Errorf("%s exited before listening:\n%s", name, r.Logs.String())
	case <-time.After(60 * time.Second):
		t.Errorf("%s did not listen within a minute:\n%s", name, r.Logs.String())
	}
	return nil
}

// Stop ends the process with SIGTERM (SIGKILL after 20 s).
func (r *Replica) Stop(t testing.TB) {
	select {
	case <-r.Exited:
		return
	default:
	}
	r.Cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-r.Exited:
	case <-time.After(20 * time.Second):
		t.Errorf("%s did not stop within 20 s of SIGTERM", r.Name)
		r.Cmd.Process.Kill()
		<-r.Exited
	}
}

// Kill ends the process with SIGKILL, as a crashed host would.
func (r *Replica) Kill(t testing.TB) {
	if err := r.Cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatalf("kill %s: %v", r.Name, err)
	}
	<-r.Exited
}

// Count counts log lines with message msg for node.
func (r *Replica) Count(msg, node string) int {
	n := 0
	for _, m := range r.LogLines() {
		if m["msg"] == msg && m["node"] == node {
			n++
		}
	}
	return n
}

// CountState counts console link state lines of node in state s.
func (r *Replica) CountState(node, s string) int {
	n := 0
	for _, m := range r.LogLines() {
		if m["msg"] == "console link state" && m["node"] == node && m["state"] == s {
			n++
		}
	}
	return n
}

// LogLines returns r's JSON log lines, decoded.
func (r *Replica) LogLines() []map[string]any {
	var out []map[string]any
	for _, line := range strings.Split(r.Logs.String(), "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(line), &m) == nil {
			out = append(out, m)
		}
	}
	return out
}

// Exec runs one command over SSH (x/crypto, token).
func (r *Replica) Exec(user, token, cmd string) (Result, error) {
	return ExecSSH(r.Listening["ssh"], user, cmd, gossh.Password(token))
}

// ---- viewers ----

// SeeAll prints on the serial port until every viewer has shown the same
// line (output from before a relay is up is not replayed to it).
func SeeAll(t testing.TB, bmc *ipmisim.Sim, prefix string, vs ...*Client) {
	t.Helper()
	var bufs []*Buffer
	for _, v := range vs {
		bufs = append(bufs, v.Out)
	}
	PrintUntilSeen(t, bmc.WriteSerial, prefix, Shows(bufs...))
}

// GoViewer attaches through x/crypto/ssh with a pty; its out holds
// everything it printed.
func (r *Replica) GoViewer(t testing.TB, label, token string) *Client {
	t.Helper()
	return &StartGoSession(t, r.Listening["ssh"], label, gossh.Password(token), SessionOpts{PTY: true, Merge: true}).Client
}

// SSHViewer attaches through OpenSSH (ssh -tt under a pty, key auth).
func (r *Replica) SSHViewer(t testing.TB, label, keyFile string) *Client {
	t.Helper()
	return &SSHPTY(t, r.Listening["ssh"], label, "", []string{"-i", keyFile}).Client
}

// ---- the BMC and the database ----

// ActivePayloads asks the BMC how many SOL payload instances are active
// (Get Payload Activation Status, IPMI v2.0 24.4).
func ActivePayloads(t testing.TB, bmc *ipmisim.Sim) int {
	t.Helper()
	info := bmc.Info()
	c := exec.Command("ipmitool", "-I", "lanplus", "-C", "3", "-H", info.Addr, "-p", fmt.Sprint(info.Port),
		"-U", info.User, "-E", "raw", "0x06", "0x4a", "0x01")
	c.Env = append(os.Environ(), "IPMI_PASSWORD="+info.Pass)
	out, err := c.CombinedOutput()
	if err != nil {
		t.Fatalf("ipmitool payload status: %v: %s", err, out)
	}
	f := strings.Fields(string(out))
	if len(f) < 3 {
		t.Fatalf("payload status: got %q, want capacity and two bitmap bytes", out)
	}
	n := 0
	for _, h := range f[1:3] {
		var x byte
		if _, err := fmt.Sscanf(h, "%02x", &x); err != nil {
			t.Fatalf("payload status %q: %v", out, err)
		}
		for ; x != 0; x &= x - 1 {
			n++
		}
	}
	return n
}

// OpenStore opens the replicas' database (already migrated by them).
func OpenStore(t testing.TB, dsn string) *db.Store {
	t.Helper()
	log := logrus.New()
	log.SetOutput(io.Discard)
	s, err := db.Open(context.Background(), dsn, log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// BlackHole returns a UDP port on 127.0.0.1 where nothing ever answers.
func BlackHole(t testing.TB) int {
	t.Helper()
	c, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c.LocalAddr().(*net.UDPAddr).Port
}

// ---- small things ----

// Random returns a random hex string, for a unique name or token.
func Random(t testing.TB) string {
	t.Helper()
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b[:])
}

// Cluster starts three obmd processes (rep-a, rep-b, rep-c) on dsn with
// shared keys and admin token, in cluster mode, with env added.
func Cluster(t *testing.T, dsn string, env map[string]string) []*Replica {
	t.Helper()
	return ClusterOn(t, []string{dsn, dsn, dsn}, env)
}

// SharedKeys makes the host key and sealing key every replica of
// one cluster shares, and returns their paths.
func SharedKeys(t *testing.T) (hostKey, sealKey string) {
	t.Helper()
	shared := t.TempDir()
	hostKey, sealKey = filepath.Join(shared, "host_key"), filepath.Join(shared, "seal.key")
	if _, err := keys.LoadOrCreateHostKey(hostKey); err != nil {
		t.Fatal(err)
	}
	if _, err := keys.LoadOrCreateSealer(sealKey); err != nil {
		t.Fatal(err)
	}
	return hostKey, sealKey
}

// ClusterOn starts one replica per database in dsns (at most three),
// replica i on dsns[i] (the nodes of one Galera cluster, or one server).
func ClusterOn(t *testing.T, dsns []string, env map[string]string) []*Replica {
	t.Helper()
	bin := Binary(t)
	hostKey, sealKey := SharedKeys(t)
	vars := map[string]string{"OBMD_SSH_HOST_KEY": hostKey, "OBMD_DB_SEAL_KEY": sealKey,
		"OBMD_ADMIN_TOKEN": Random(t), "OBMD_REPLICA_PEER_ADDR": "127.0.0.1:0"}
	for k, v := range env {
		vars[k] = v
	}
	names := []string{"rep-a", "rep-b", "rep-c"}[:len(dsns)]
	reps := make([]*Replica, len(names))
	var wg sync.WaitGroup
	for i, name := range names {
		wg.Add(1)
		go func() {
			defer wg.Done()
			own := maps.Clone(vars)
			own["OBMD_DB"] = dsns[i]
			reps[i] = StartReplica(t, bin, name, own)
		}()
	}
	wg.Wait()
	for _, r := range reps {
		if r == nil {
			t.FailNow() // StartReplica reported why
		}
	}
	return reps
}

// ReplicaEnv returns the obmd binary and the environment of a replica
// of one cluster (shared keys and admin token) on database db, advertising
// advertise to its peers ("": its bound peer address).
func ReplicaEnv(t *testing.T) (string, func(db, advertise string) map[string]string) {
	t.Helper()
	bin := Binary(t)
	hostKey, sealKey := SharedKeys(t)
	return bin, func(db, advertise string) map[string]string {
		m := map[string]string{"OBMD_DB": db, "OBMD_SSH_HOST_KEY": hostKey, "OBMD_DB_SEAL_KEY": sealKey,
			"OBMD_ADMIN_TOKEN": "attack11-admin-token-0123456789abcdef", "OBMD_REPLICA_PEER_ADDR": "127.0.0.1:0",
			"OBMD_CLUSTER_LEASE_TTL": LeaseTTL.String()}
		if advertise != "" {
			m["OBMD_REPLICA_PEER_ADVERTISE"] = advertise
		}
		return m
	}
}

// LeaseTTL is the lease of the replicas under test (short, so that a
// lost holder's links move within a test).
const LeaseTTL = 3 * time.Second

// sshKeyArgs is the OpenSSH command line (-T, key auth) that runs cmd on
// label through this replica.
func (r *Replica) sshKeyArgs(label, keyFile string, cmd ...string) []string {
	args := SSHArgs(r.Listening["ssh"], label, "-T", "-i", keyFile, "-o", "PasswordAuthentication=no",
		"-o", "KbdInteractiveAuthentication=no")
	return append(args, cmd...)
}

// SSH runs cmd on label through this replica with OpenSSH, stdin nil.
func (r *Replica) SSH(t testing.TB, label, keyFile string, cmd ...string) Result {
	t.Helper()
	res, err := RunClient(60*time.Second, "ssh", r.sshKeyArgs(label, keyFile, cmd...)...)
	if err != nil {
		t.Fatalf("ssh %v through %s: %v", cmd, r.Name, err)
	}
	return res
}

// SSHBackground is SSH in the background; the channel gets its result
// (exit -1 if the client could not run).
func (r *Replica) SSHBackground(label, keyFile string, cmd ...string) <-chan Result {
	done := make(chan Result, 1)
	go func() { // ends with the command (bounded by RunClient)
		res, err := RunClient(60*time.Second, "ssh", r.sshKeyArgs(label, keyFile, cmd...)...)
		if err != nil {
			res.Code, res.Stderr = -1, err.Error()
		}
		done <- res
	}()
	return done
}

package daemon_test

// Helpers of the replica tests (e2e_replicas_test.go): obmd processes,
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
	"net"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	gossh "golang.org/x/crypto/ssh"

	"github.com/obmd/obmd/db"
	"github.com/obmd/obmd/sol/soltest/ipmisim"
)

// ---- replicas as processes ----

// rpReplica is one obmd process.
type rpReplica struct {
	*adminClient // its admin API, failing the test that started it (on: another)
	name         string
	cmd          *exec.Cmd
	logs         *syncBuffer
	listening    map[string]string // fields of the obmd_listening line
	exited       chan struct{}     // closed when the process has been reaped
}

// rpStart runs `obmd serve` with env (plus test defaults) and waits for
// its obmd_listening line. On failure it reports and returns nil.
func rpStart(t *testing.T, bin, name string, env map[string]string) *rpReplica {
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
	r := &rpReplica{name: name, cmd: cmd, logs: &syncBuffer{}, exited: make(chan struct{})}
	if err := cmd.Start(); err != nil {
		t.Errorf("start %s: %v", name, err)
		return nil
	}
	listening := make(chan map[string]string, 1)
	go func() { // ends when the process's output closes
		sc := bufio.NewScanner(output)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			r.logs.Write(append(sc.Bytes(), '\n'))
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
		close(r.exited)
	}()
	t.Cleanup(func() {
		r.stop(t)
		if t.Failed() {
			t.Logf("%s log (tail):\n%s", name, tailString(r.logs.String(), 6000))
		}
	})
	select {
	case r.listening = <-listening:
		r.adminClient = newAdminClient(t, r.listening["admin"], vars["OBMD_ADMIN_TOKEN"], " on "+name)
		return r
	case <-r.exited:
		t.Errorf("%s exited before listening:\n%s", name, r.logs.String())
	case <-time.After(60 * time.Second):
		t.Errorf("%s did not listen within a minute:\n%s", name, r.logs.String())
	}
	return nil
}

// stop ends the process with SIGTERM (SIGKILL after 20 s).
func (r *rpReplica) stop(t testing.TB) {
	select {
	case <-r.exited:
		return
	default:
	}
	r.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-r.exited:
	case <-time.After(20 * time.Second):
		t.Errorf("%s did not stop within 20 s of SIGTERM", r.name)
		r.cmd.Process.Kill()
		<-r.exited
	}
}

// kill ends the process with SIGKILL, as a crashed host would.
func (r *rpReplica) kill(t testing.TB) {
	if err := r.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatalf("kill %s: %v", r.name, err)
	}
	<-r.exited
}

// count counts log lines with message msg for node.
func (r *rpReplica) count(msg, node string) int {
	n := 0
	for _, m := range r.logLines() {
		if m["msg"] == msg && m["node"] == node {
			n++
		}
	}
	return n
}

// countState counts console link state lines of node in state s.
func (r *rpReplica) countState(node, s string) int {
	n := 0
	for _, m := range r.logLines() {
		if m["msg"] == "console link state" && m["node"] == node && m["state"] == s {
			n++
		}
	}
	return n
}

func (r *rpReplica) logLines() []map[string]any {
	var out []map[string]any
	for _, line := range strings.Split(r.logs.String(), "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(line), &m) == nil {
			out = append(out, m)
		}
	}
	return out
}

// exec runs one command over SSH (x/crypto, token).
func (r *rpReplica) exec(user, token, cmd string) (execResult, error) {
	return execSSH(r.listening["ssh"], user, cmd, gossh.Password(token))
}

// ---- viewers ----

// rpSeeAll prints on the serial port until every viewer has shown the same
// line (output from before a relay is up is not replayed to it).
func rpSeeAll(t testing.TB, bmc *ipmisim.Sim, prefix string, vs ...*client) {
	t.Helper()
	var bufs []*conBuf
	for _, v := range vs {
		bufs = append(bufs, v.out)
	}
	printUntilSeen(t, bmc.WriteSerial, prefix, shows(bufs...))
}

// goViewer attaches through x/crypto/ssh with a pty; its out holds
// everything it printed.
func (r *rpReplica) goViewer(t testing.TB, label, token string) *client {
	t.Helper()
	return &goSession(t, r.listening["ssh"], label, gossh.Password(token), conOpts{pty: true, merge: true}).client
}

// sshViewer attaches through OpenSSH (ssh -tt under a pty, key auth).
func (r *rpReplica) sshViewer(t testing.TB, label, keyFile string) *client {
	t.Helper()
	return &sshPTY(t, r.listening["ssh"], label, "", []string{"-i", keyFile}).client
}

// ---- the BMC and the database ----

// rpActivePayloads asks the BMC how many SOL payload instances are active
// (Get Payload Activation Status, IPMI v2.0 24.4).
func rpActivePayloads(t testing.TB, bmc *ipmisim.Sim) int {
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

// rpStore opens the replicas' database (already migrated by them).
func rpStore(t testing.TB, dsn string) *db.Store {
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

// rpBlackHole returns a UDP port on 127.0.0.1 where nothing ever answers.
func rpBlackHole(t testing.TB) int {
	t.Helper()
	c, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c.LocalAddr().(*net.UDPAddr).Port
}

// ---- small things ----

func rpRandom(t testing.TB) string {
	t.Helper()
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b[:])
}

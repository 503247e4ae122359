package certs

// Helpers of the idle-connection tests (idle_test.go): an
// OpenSSH ControlMaster (`ssh -N -M`) that logged in and holds no session,
// and the clients run through it.

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/obmd/obmd/bastion/e2e/obmdtest"

	"github.com/obmd/obmd/sol/soltest/ipmisim"
)

// master is `ssh -N -o ControlMaster=yes`: a connection that logged in
// and opens sessions only for the clients run through its socket.
type master struct {
	t      testing.TB
	name   string
	args   []string // a client's through the socket, but the command
	cmd    *exec.Cmd
	stderr *obmdtest.Buffer
	done   chan struct{} // closed once ssh has exited, at exitedAt
	at     time.Time
}

// idleMaster starts a ControlMaster to user@addr logging in with extra
// (a key or certificate: "-i", ...; with a token, through sshpass), and
// waits until a command through it has run: it is logged in, and holds no
// session from then on.
func idleMaster(t testing.TB, name, addr, user, token string, extra []string) *master {
	t.Helper()
	ipmisim.Require(t, "ssh", "sshpass")
	// A socket's path is at most 107 bytes: not under t.TempDir().
	dir, err := os.MkdirTemp("", "cm")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "s")
	auth := []string{"-o", "PasswordAuthentication=no", "-o", "KbdInteractiveAuthentication=no"}
	if token != "" {
		auth = []string{"-o", "PubkeyAuthentication=no"}
	}
	m := &master{t: t, name: name, stderr: obmdtest.NewBuffer(), done: make(chan struct{}),
		args: append([]string{"-o", "ControlMaster=no"}, obmdtest.SSHArgs(addr, user, "-o", "ControlPath="+sock)...)}
	args := append([]string{"-N", "-o", "ControlMaster=yes"}, obmdtest.SSHArgs(addr, user, append(append(auth, "-o", "ControlPath="+sock), extra...)...)...)
	m.cmd = exec.Command("ssh", args...)
	if token != "" {
		m.cmd = exec.Command("sshpass", append([]string{"-e", "ssh"}, args...)...)
		m.cmd.Env = append(os.Environ(), "SSHPASS="+token)
	}
	m.cmd.Stderr = m.stderr
	if err := m.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	go func() { // reaps ssh
		m.cmd.Wait()
		m.at = time.Now()
		close(m.done)
	}()
	t.Cleanup(func() {
		if !m.exited() {
			m.cmd.Process.Kill()
			<-m.done
		}
		if t.Failed() {
			t.Logf("%s's stderr: %q", name, m.stderr.String())
		}
	})
	obmdtest.WaitUntil(t, name+"'s control socket", func() bool {
		_, err := os.Stat(sock)
		return err == nil || m.exited()
	})
	if res := m.run("power-status"); res.Code != 0 {
		t.Fatalf("%s: power-status through it: got %v, want exit 0", name, res)
	}
	return m
}

// run runs cmd through the master.
func (m *master) run(cmd ...string) obmdtest.Result {
	m.t.Helper()
	res, err := obmdtest.RunClient(60*time.Second, "ssh", append(m.args, cmd...)...)
	if err != nil {
		m.t.Fatalf("ssh through %s: %v (%v)", m.name, err, res)
	}
	return res
}

// start starts cmd through the master and leaves it running (its stdin
// stays open); its stderr is returned, and a channel closed once it has
// exited.
func (m *master) start(cmd ...string) (*obmdtest.Buffer, chan struct{}) {
	m.t.Helper()
	c := exec.Command("ssh", append(m.args, cmd...)...)
	stderr := obmdtest.NewBuffer()
	c.Stderr = stderr
	in, err := c.StdinPipe()
	if err != nil {
		m.t.Fatal(err)
	}
	if err := c.Start(); err != nil {
		m.t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { // reaps ssh
		c.Wait()
		close(done)
	}()
	m.t.Cleanup(func() {
		in.Close()
		select {
		case <-done:
		default:
			c.Process.Kill()
			<-done
		}
	})
	return stderr, done
}

func (m *master) exited() bool {
	select {
	case <-m.done:
		return true
	default:
		return false
	}
}

// closed checks that the master exits (obmd closed its connection)
// within bound of start; it returns how long it took.
func (m *master) closed(start time.Time, bound time.Duration) time.Duration {
	m.t.Helper()
	select {
	case <-m.done:
	case <-time.After(bound + obmdtest.Timeout):
		m.t.Fatalf("%s: still running %v after the change, want its connection closed", m.name, bound+obmdtest.Timeout)
	}
	d := m.at.Sub(start)
	if d > bound {
		m.t.Errorf("%s: exited %v after the change, want within %v", m.name, d, bound)
	}
	return d
}

// alive checks that the master still runs and opens a session.
func (m *master) alive(why string) {
	m.t.Helper()
	if m.exited() {
		m.t.Errorf("%s: exited after %s (%q), want it open", m.name, why, m.stderr.String())
		return
	}
	if res := m.run("power-status"); res.Code != 0 || !strings.Contains(res.Stdout, "power on") {
		m.t.Errorf("%s after %s: power-status got %v, want exit 0", m.name, why, res)
	}
}

// closedAudit checks that node's audit has a conn.close, result cut,
// with why in its detail, and actor starting with actor.
func closedAudit(o *obmdtest.Daemon, node, actor, why string) {
	o.T.Helper()
	var got []obmdtest.AuditRow
	for range 150 { // deferred rows: GET /v1/audit commits this replica's first; repeats, the window's end
		got = got[:0]
		for _, e := range o.Audit(node) {
			if e.Action == "conn.close" {
				got = append(got, e)
				if e.Result == "cut" && strings.HasPrefix(e.Actor, actor) && strings.Contains(e.Detail, why) {
					return
				}
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	o.T.Errorf("audit of %s: conn.close rows %+v, want one by %s, result cut, with %q", node, got, actor, why)
}

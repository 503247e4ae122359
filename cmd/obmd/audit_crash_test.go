package main

import (
	"database/sql"
	"strings"
	"syscall"
	"testing"
	"time"

	gossh "golang.org/x/crypto/ssh"
)

// TestBinaryAuditAfterKill tests what the audit trail promises after a
// crash (docs/security.md, "The audit trail"), on each engine, with a child obmd:
//
//   - SIGKILL right after a power action was acknowledged: its row is
//     stored, and so are the rows of its login and session start, which were
//     queued before it;
//   - SIGKILL a while (60 windows) after a power-status: its row was
//     committed by the deferred-audit goroutine alone;
//   - SIGTERM right after a power-status: shutdown commits its row.
func TestBinaryAuditAfterKill(t *testing.T) {
	t.Parallel()
	onEngines(t, auditAfterKill)
}

func auditAfterKill(t *testing.T, e engine) {
	t.Parallel()
	state := t.TempDir()
	dsn := e.dsn(t, state)
	p := startObmd(t, dbEnv(dsn), loopbackArgs(state)...)
	admin := p.adminToken()
	p.must(200, "PUT", "/node/n1", `{"type":"mock","info":{"addr":"10.0.0.4"}}`, admin)
	tok := rotate(p, "n1", admin)

	sshExec(t, p, "n1", tok, "power-on", "powered on")
	p.stop(syscall.SIGKILL, 15*time.Second)
	got := auditActions(t, dsn, state, "n1")
	for _, want := range []string{"auth", "session.start", "power.on"} {
		if got[want] == 0 {
			t.Errorf("after SIGKILL following an acknowledged power-on: no %s row (rows: %v)", want, got)
		}
	}

	p = startObmd(t, dbEnv(dsn), loopbackArgs(state)...)
	sshExec(t, p, "n1", tok, "power-status", "n1: power ")
	time.Sleep(3 * time.Second) // 60 windows: generous on a loaded machine
	p.stop(syscall.SIGKILL, 15*time.Second)
	if got := auditActions(t, dsn, state, "n1"); got["power.status"] != 1 {
		t.Errorf("after SIGKILL 3 s after a power-status: %d power.status rows, want 1", got["power.status"])
	}

	p = startObmd(t, dbEnv(dsn), loopbackArgs(state)...)
	sshExec(t, p, "n1", tok, "power-status", "n1: power ")
	if code, _ := p.stop(syscall.SIGTERM, 15*time.Second); code != 0 {
		t.Errorf("SIGTERM: exit %d", code)
	}
	if got := auditActions(t, dsn, state, "n1"); got["power.status"] != 2 {
		t.Errorf("after SIGTERM right after a power-status: %d power.status rows, want 2", got["power.status"])
	}
}

// sshExec runs cmd as node label with its token and wants want in the output.
func sshExec(t *testing.T, p *proc, label, tok, cmd, want string) {
	t.Helper()
	c, err := gossh.Dial("tcp", p.SSHAddr, &gossh.ClientConfig{User: label, Auth: []gossh.AuthMethod{gossh.Password(tok)},
		HostKeyCallback: checkHostKey(t, p.HostKey), Timeout: 10 * time.Second})
	if err != nil {
		t.Fatalf("ssh %s: %v", label, err)
	}
	defer c.Close()
	s, err := c.NewSession()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	out, err := s.Output(cmd)
	if err != nil || !strings.Contains(string(out), want) {
		t.Fatalf("ssh %s %s: got %q, %v; want %q", label, cmd, out, err, want)
	}
}

// auditActions counts node's stored audit rows by action, read from the
// database of a stopped obmd.
func auditActions(t *testing.T, dsn, state, node string) map[string]int {
	t.Helper()
	conn, dialect := openDB(t, dsn, state)
	defer conn.Close()
	arg := "?"
	if dialect == "postgres" {
		arg = "$1"
	}
	rows, err := conn.Query(`SELECT action, COUNT(*) FROM audit_events WHERE node = `+arg+` GROUP BY action`, node)
	if err != nil {
		t.Fatalf("read audit rows: %v", err)
	}
	defer rows.Close()
	got := map[string]int{}
	for rows.Next() {
		var (
			action string
			n      sql.NullInt64
		)
		if err := rows.Scan(&action, &n); err != nil {
			t.Fatal(err)
		}
		got[action] = int(n.Int64)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return got
}

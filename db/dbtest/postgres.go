package dbtest

import (
	"context"
	"database/sql"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Postgres is a PostgreSQL cluster of one test's own: initdb'd into a
// private directory, listening only on a unix socket there, never the
// shared server. Stop stops its postmaster and every process it forked (a
// backend serves each connection; each is a session of its own).
type Postgres struct {
	// DSN is a postgres:// DSN of database obmd on it, as the superuser.
	DSN     string
	t       testing.TB
	cmd     *exec.Cmd
	exited  chan struct{}
	stopped bool
}

// StartPostgres initialises a cluster and starts it; it is killed (after a
// SIGCONT) when t ends, and its postmaster with this process if it dies
// (its backends follow). It runs as the postgres user (PostgreSQL refuses
// root). It skips (fails under OBMD_REQUIRE_INTEGRATION=1) without root or
// PostgreSQL.
func StartPostgres(t testing.TB) *Postgres {
	t.Helper()
	return StartPostgresOn(t, "")
}

// StartPostgresOn is StartPostgres with the cluster's directory in parent
// ("": the system's temporary directory), such as a filesystem the test
// freezes (MountSharedLoopFS). Its WAL segments are 1 MiB, so that a
// small filesystem holds it.
func StartPostgresOn(t testing.TB, parent string) *Postgres {
	t.Helper()
	External(t, "a private PostgreSQL")
	if os.Geteuid() != 0 {
		Missing(t, "a private PostgreSQL runs as the postgres user, started as root here")
	}
	bins, _ := filepath.Glob("/usr/lib/postgresql/*/bin/postgres")
	owner, err := user.Lookup("postgres")
	if len(bins) == 0 || err != nil {
		Missing(t, "PostgreSQL is not installed (no /usr/lib/postgresql/*/bin/postgres, or no postgres user)")
	}
	slices.SortFunc(bins, func(a, b string) int { return pgMajor(a) - pgMajor(b) })
	bin := filepath.Dir(bins[len(bins)-1])
	uid, _ := strconv.Atoi(owner.Uid)
	gid, _ := strconv.Atoi(owner.Gid)
	as := &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}}

	// Not t.TempDir(): its parents are private to root.
	dir, err := os.MkdirTemp(parent, "obmd-pg-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chown(dir, uid, gid); err != nil {
		t.Fatal(err)
	}
	data := filepath.Join(dir, "data")
	initdb := exec.Command(filepath.Join(bin, "initdb"), "-D", data, "-U", "postgres", "--auth=trust",
		"-E", "UTF8", "--locale=C", "--no-sync", "--wal-segsize=1")
	initdb.SysProcAttr, initdb.Dir = as, dir
	if out, err := initdb.CombinedOutput(); err != nil {
		t.Fatalf("initdb: %v\n%s", err, out)
	}
	cmd := exec.Command(filepath.Join(bin, "postgres"), "-D", data, "-k", dir, "-c", "listen_addresses=",
		"-c", "shared_buffers=16MB", "-c", "max_connections=100")
	cmd.Dir = dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: as.Credential, Pdeathsig: syscall.SIGKILL}
	logFile, err := os.Create(filepath.Join(dir, "postgres.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer logFile.Close() // the child has its own descriptor
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		t.Fatalf("start postgres: %v", err)
	}
	p := &Postgres{t: t, cmd: cmd, exited: make(chan struct{})}
	go func() { cmd.Wait(); close(p.exited) }() // reaps the postmaster
	t.Cleanup(p.kill)

	q := url.Values{"host": {dir}, "user": {"postgres"}, "sslmode": {"disable"}}
	server := "postgres:///postgres?" + q.Encode()
	admin, err := sql.Open("pgx", server)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	deadline := time.Now().Add(60 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err = admin.ExecContext(ctx, "CREATE DATABASE obmd"+PostgresOptions)
		cancel()
		if err == nil {
			break
		}
		select {
		case <-p.exited:
			log, _ := os.ReadFile(filepath.Join(dir, "postgres.log"))
			t.Fatalf("postgres exited: %s", log)
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("postgres did not answer within a minute: %v", err)
		}
	}
	p.DSN = "postgres:///obmd?" + q.Encode()
	return p
}

// pgMajor is the major version in a path /usr/lib/postgresql/15/bin/...
func pgMajor(path string) int {
	v, _ := strconv.Atoi(filepath.Base(filepath.Dir(filepath.Dir(path))))
	return v
}

// Stop stops the postmaster and every process it forked (backends, one
// per connection, and its helpers) with SIGSTOP: connections stay open,
// new ones are not accepted, nothing is answered, until Cont. It returns
// once every one of them has stopped, so that no query is answered after
// it.
func (p *Postgres) Stop() {
	p.t.Helper()
	pm := p.cmd.Process.Pid
	p.stopped = true
	// The postmaster first: it forks nothing more.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		stopped := true
		for _, pid := range append([]int{pm}, children(pm)...) {
			if state(pid) != 'T' {
				stopped = false
				if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil && pid == pm {
					p.t.Fatalf("SIGSTOP postgres: %v", err)
				}
			}
		}
		if stopped {
			return
		}
		if time.Now().After(deadline) {
			p.t.Fatalf("postgres did not stop within 10 s of SIGSTOP")
		}
	}
}

// Cont resumes a stopped cluster (idempotent).
func (p *Postgres) Cont() {
	if !p.stopped {
		return
	}
	pm := p.cmd.Process.Pid
	for _, pid := range children(pm) {
		syscall.Kill(pid, syscall.SIGCONT)
	}
	syscall.Kill(pm, syscall.SIGCONT)
	p.stopped = false
}

// kill ends the postmaster and the processes it forked, and waits for the
// postmaster.
func (p *Postgres) kill() {
	p.Cont()
	pm := p.cmd.Process.Pid
	kids := children(pm)
	syscall.Kill(pm, syscall.SIGKILL)
	for _, pid := range kids {
		syscall.Kill(pid, syscall.SIGKILL)
	}
	<-p.exited
}

// stat returns the fields of /proc/PID/stat after the command (state,
// ppid, ...), or nil if pid is gone.
func stat(pid int) []string {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	i := strings.LastIndexByte(string(b), ')')
	if err != nil || i < 0 {
		return nil
	}
	return strings.Fields(string(b[i+1:]))
}

// state is pid's state letter (T: stopped), or 0 if it is gone.
func state(pid int) byte {
	if f := stat(pid); len(f) > 0 {
		return f[0][0]
	}
	return 0
}

// children lists the processes whose parent is pid.
func children(pid int) []int {
	ents, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range ents {
		child, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if f := stat(child); len(f) > 1 && f[1] == strconv.Itoa(pid) {
			out = append(out, child)
		}
	}
	return out
}

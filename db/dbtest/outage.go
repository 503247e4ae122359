package dbtest

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
)

// Outages for the tests of what obmd does when its database stops
// answering: a filesystem that can be frozen under a SQLite file, and a
// MariaDB server of the test's own that can be stopped (SIGSTOP). Both
// need root; both are undone when the test ends, even if it fails, and a
// frozen filesystem is thawed by a watchdog process even if the test
// binary dies.

// maxFreeze is how long a filesystem may stay frozen: the watchdog thaws
// it then, whatever happened to the test.
const maxFreeze = 2 * time.Minute

// LoopFS is an ext4 filesystem in an image file, mounted for one test.
type LoopFS struct {
	// Dir is where it is mounted.
	Dir string
	t   testing.TB
	dog *os.Process // thaws Dir after maxFreeze; nil while thawed
}

// MountLoopFS creates and mounts a small ext4 image in t.TempDir(). It is
// thawed and unmounted (which frees its loop device) when t ends. It skips
// (fails under OBMD_REQUIRE_INTEGRATION=1) without root or the tools.
func MountLoopFS(t testing.TB) *LoopFS {
	t.Helper()
	return mountLoopFS(t, t.TempDir(), "64M")
}

// MountSharedLoopFS is MountLoopFS of size (as truncate takes it: "256M")
// in a directory other users can reach, for a server that runs as its own
// user (StartPostgresOn).
func MountSharedLoopFS(t testing.TB, size string) *LoopFS {
	t.Helper()
	dir, err := os.MkdirTemp("", "obmd-loopfs-") // not t.TempDir(): its parents are private to root
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) }) // after the unmount (last in, first out)
	return mountLoopFS(t, dir, size)
}

func mountLoopFS(t testing.TB, dir, size string) *LoopFS {
	t.Helper()
	External(t, "a loop mount and fsfreeze")
	if os.Geteuid() != 0 {
		Missing(t, "loop mounts and fsfreeze need root")
	}
	for _, p := range []string{"mkfs.ext4", "mount", "umount", "fsfreeze", "sh"} {
		if _, err := exec.LookPath(p); err != nil {
			Missing(t, "%s is not installed", p)
		}
	}
	img, mnt := filepath.Join(dir, "fs.img"), filepath.Join(dir, "mnt")
	if err := os.Mkdir(mnt, 0o700); err != nil {
		t.Fatal(err)
	}
	run(t, "truncate", "-s", size, img)
	run(t, "mkfs.ext4", "-q", "-F", img)
	run(t, "mount", "-o", "loop", img, mnt)
	fs := &LoopFS{Dir: mnt, t: t}
	t.Cleanup(func() {
		fs.Thaw()
		// A lazy unmount if something still holds a file open there;
		// the loop device goes with the last reference (autoclear).
		if out, err := exec.Command("umount", mnt).CombinedOutput(); err != nil {
			t.Logf("umount %s: %v %s; unmounting lazily", mnt, err, out)
			if out, err := exec.Command("umount", "-l", mnt).CombinedOutput(); err != nil {
				t.Errorf("umount -l %s: %v %s", mnt, err, out)
			}
		}
	})
	return fs
}

// Freeze freezes the filesystem (fsfreeze -f): writes to it block in the
// kernel until Thaw. A watchdog process thaws it after maxFreeze anyway.
func (f *LoopFS) Freeze() {
	f.t.Helper()
	// The watchdog outlives this process (own session): a test binary
	// killed mid-test must not leave a frozen filesystem behind.
	dog := exec.Command("sh", "-c", fmt.Sprintf("sleep %d; fsfreeze -u '%s'", int(maxFreeze.Seconds()), f.Dir))
	dog.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := dog.Start(); err != nil {
		f.t.Fatalf("start the thaw watchdog: %v", err)
	}
	go dog.Wait() // reaps it once Thaw kills it
	f.dog = dog.Process
	run(f.t, "fsfreeze", "-f", f.Dir)
}

// Thaw unfreezes the filesystem (idempotent) and stops the watchdog.
func (f *LoopFS) Thaw() {
	if f.dog == nil {
		return
	}
	if out, err := exec.Command("fsfreeze", "-u", f.Dir).CombinedOutput(); err != nil {
		f.t.Errorf("fsfreeze -u %s: %v %s", f.Dir, err, out)
	}
	syscall.Kill(-f.dog.Pid, syscall.SIGKILL) // its process group: the shell and its sleep
	f.dog = nil
}

func run(t testing.TB, args ...string) {
	t.Helper()
	if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// MariaDB is a mariadbd of one test's own: its data directory in
// t.TempDir(), listening only on a unix socket, never the shared server.
type MariaDB struct {
	// DSN is a mysql:// DSN of database obmd on it, as root.
	DSN     string
	t       testing.TB
	cmd     *exec.Cmd
	exited  chan struct{}
	stopped bool
}

// StartMariaDB initialises a data directory and starts mariadbd on it; it
// is killed (after a SIGCONT) when t ends, and with this process if it
// dies. It skips (fails under OBMD_REQUIRE_INTEGRATION=1) without root or
// MariaDB.
func StartMariaDB(t testing.TB) *MariaDB {
	t.Helper()
	External(t, "a private mariadbd")
	if os.Geteuid() != 0 {
		Missing(t, "a private mariadbd runs as root here")
	}
	for _, p := range []string{"mariadbd", "mariadb-install-db"} {
		if _, err := exec.LookPath(p); err != nil {
			Missing(t, "%s is not installed", p)
		}
	}
	dir := t.TempDir()
	data, sock := filepath.Join(dir, "data"), filepath.Join(dir, "mysqld.sock")
	if out, err := exec.Command("mariadb-install-db", "--no-defaults", "--user=root", "--datadir="+data,
		"--auth-root-authentication-method=normal", "--skip-test-db").CombinedOutput(); err != nil {
		t.Fatalf("mariadb-install-db: %v\n%s", err, out)
	}
	cmd := exec.Command("mariadbd", "--no-defaults", "--user=root", "--datadir="+data, "--socket="+sock,
		"--skip-networking", "--pid-file="+filepath.Join(dir, "mysqld.pid"), "--innodb-buffer-pool-size=32M",
		"--log-error="+filepath.Join(dir, "error.log"))
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start mariadbd: %v", err)
	}
	m := &MariaDB{t: t, cmd: cmd, exited: make(chan struct{})}
	go func() { cmd.Wait(); close(m.exited) }() // reaps mariadbd
	t.Cleanup(m.kill)
	cfg := mysql.NewConfig()
	cfg.User, cfg.Net, cfg.Addr = "root", "unix", sock
	root, err := mysql.NewConnector(cfg)
	if err != nil {
		t.Fatal(err)
	}
	pool := sql.OpenDB(root)
	defer pool.Close()
	deadline := time.Now().Add(60 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err = pool.ExecContext(ctx, "CREATE DATABASE IF NOT EXISTS obmd CHARACTER SET utf8mb4 COLLATE utf8mb4_bin")
		cancel()
		if err == nil {
			break
		}
		select {
		case <-m.exited:
			log, _ := os.ReadFile(filepath.Join(dir, "error.log"))
			t.Fatalf("mariadbd exited: %s", log)
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("mariadbd did not answer within a minute: %v", err)
		}
	}
	cfg.DBName = "obmd"
	m.DSN = "mysql://" + cfg.FormatDSN()
	return m
}

// Stop stops the server with SIGSTOP: connections stay open, nothing is
// answered, until Cont. It returns once every thread of it has stopped,
// so that no query is answered after it.
func (m *MariaDB) Stop() {
	m.t.Helper()
	if err := m.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		m.t.Fatalf("SIGSTOP mariadbd: %v", err)
	}
	m.stopped = true
	tasks := fmt.Sprintf("/proc/%d/task", m.cmd.Process.Pid)
	for deadline := time.Now().Add(10 * time.Second); !allStopped(tasks); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			m.t.Fatalf("mariadbd did not stop within 10 s of SIGSTOP")
		}
	}
}

// allStopped reports whether every thread listed in dir (/proc/PID/task)
// is in state T (stopped).
func allStopped(dir string) bool {
	ents, err := os.ReadDir(dir)
	if err != nil || len(ents) == 0 {
		return false
	}
	for _, e := range ents {
		stat, err := os.ReadFile(filepath.Join(dir, e.Name(), "stat"))
		if err != nil {
			return false
		}
		// pid (comm) state ...: the state follows the last ')'.
		i := strings.LastIndexByte(string(stat), ')')
		if i < 0 || i+2 >= len(stat) || stat[i+2] != 'T' {
			return false
		}
	}
	return true
}

// Cont resumes a stopped server (idempotent).
func (m *MariaDB) Cont() {
	if m.stopped {
		m.cmd.Process.Signal(syscall.SIGCONT)
		m.stopped = false
	}
}

func (m *MariaDB) kill() {
	m.Cont()
	m.cmd.Process.Kill()
	<-m.exited
}

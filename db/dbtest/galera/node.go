package galera

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/go-sql-driver/mysql"
)

// node is one mariadbd of the cluster.
type node struct {
	c                                   *Cluster
	index                               int
	name                                string // n1, n2, n3
	dir, cnf, sock, errLog              string
	sqlPort, basePort, istPort, sstPort int
	root                                *sql.DB // over sock, as root

	mu     sync.Mutex
	proc   *proc // nil when not running
	runLog int64 // where the error log of the current (or last) run starts
}

// proc is one run of mariadbd. exited is closed once it has been reaped.
type proc struct {
	cmd    *exec.Cmd
	exited chan struct{}
}

// mkdirs creates the node's directories, owned by mysql where mariadbd
// writes (the data directory is created by mariadb-install-db).
func (n *node) mkdirs() error {
	uid, gid, err := mysqlUser()
	if err != nil {
		return err
	}
	run, tmp := filepath.Join(n.dir, "run"), filepath.Join(n.dir, "tmp")
	for _, d := range []string{n.dir, run, tmp} {
		if err := os.Mkdir(d, 0o755); err != nil {
			return err
		}
		if err := os.Chown(d, uid, gid); err != nil {
			return err
		}
	}
	n.cnf = filepath.Join(n.dir, "my.cnf")
	n.sock = filepath.Join(run, "mysqld.sock")
	n.errLog = filepath.Join(n.dir, "error.log")
	cfg := mysql.NewConfig()
	cfg.User, cfg.Net, cfg.Addr = "root", "unix", n.sock
	cfg.Timeout = 2 * time.Second
	cfg.Logger = &mysql.NopLogger{} // a killed node's broken connections are expected
	conn, err := mysql.NewConnector(cfg)
	if err != nil {
		return err
	}
	n.root = sql.OpenDB(conn)
	n.root.SetMaxIdleConns(1)
	return nil
}

func mysqlUser() (uid, gid int, err error) {
	u, err := user.Lookup("mysql")
	if err != nil {
		return 0, 0, fmt.Errorf("%w: no mysql user: %v", ErrUnavailable, err)
	}
	uid, _ = strconv.Atoi(u.Uid)
	gid, _ = strconv.Atoi(u.Gid)
	return uid, gid, nil
}

// config is the node's my.cnf (../shared/notes/galera.md), plus a small
// redo log (less to copy in a state transfer), no name resolution, and a
// temporary directory of its own (mariadb-install-db runs of the three
// nodes at once, sharing /tmp, once failed on each other's temporary
// tables).
const config = `[mysqld]
user=mysql
datadir=%[1]s/data
tmpdir=%[1]s/tmp
socket=%[2]s
pid-file=%[1]s/run/mysqld.pid
log-error=%[3]s
port=%[4]d
bind-address=127.0.0.1
skip-name-resolve
binlog_format=ROW
default_storage_engine=InnoDB
innodb_autoinc_lock_mode=2
innodb_buffer_pool_size=64M
innodb_log_file_size=16M
wsrep_on=ON
wsrep_provider=%[5]s
wsrep_cluster_name=obmdtest
wsrep_cluster_address=gcomm://%[6]s
wsrep_node_address=127.0.0.1:%[7]d
wsrep_node_name=%[8]s
wsrep_provider_options="base_port=%[7]d;ist.recv_addr=127.0.0.1:%[9]d;gcache.size=32M"
wsrep_sst_method=rsync
wsrep_sst_receive_address=127.0.0.1:%[10]d
`

func (n *node) writeConfig(peers string) error {
	text := fmt.Sprintf(config, n.dir, n.sock, n.errLog, n.sqlPort, Provider, peers,
		n.basePort, n.name, n.istPort, n.sstPort)
	return os.WriteFile(n.cnf, []byte(text), 0o644)
}

func (n *node) installDB(ctx context.Context) error {
	cmd := exec.CommandContext(ctx, "mariadb-install-db", "--defaults-file="+n.cnf, "--user=mysql",
		"--auth-root-authentication-method=normal", "--skip-test-db")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("mariadb-install-db for %s: %v\n%s", n.name, err, out)
	}
	return nil
}

// start runs mariadbd and waits until it is a synced member. A node whose
// ports were taken meanwhile (another process bound one since pickPorts)
// gets new ones and is tried again, at most three times.
func (n *node) start(ctx context.Context, bootstrap bool) error {
	for attempt := 1; ; attempt++ {
		err := n.startOnce(ctx, bootstrap)
		if err == nil || attempt == 3 || !strings.Contains(n.logSince(0), "already in use") {
			return err
		}
		ports, perr := pickPorts(4)
		if perr != nil {
			return errors.Join(err, perr)
		}
		n.sqlPort, n.basePort, n.istPort, n.sstPort = ports[0], ports[1], ports[2], ports[3]
		if werr := n.c.writeConfigs(); werr != nil {
			return errors.Join(err, werr)
		}
		_ = os.Truncate(n.errLog, 0)
	}
}

func (n *node) startOnce(ctx context.Context, bootstrap bool) error {
	if n.running() {
		return fmt.Errorf("%s is already running", n.name)
	}
	logStart := n.logSize()
	args := []string{"--defaults-file=" + n.cnf}
	if bootstrap {
		args = append(args, "--wsrep-new-cluster")
	}
	pos, err := n.recoverPosition(ctx)
	if err != nil {
		return err
	}
	if pos != "" {
		args = append(args, "--wsrep-start-position="+pos)
	}
	cmd := exec.Command("mariadbd", args...)
	// Its own process group, so that kill reaches the state-transfer
	// scripts it runs too; killed with this process if the test binary dies.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start mariadbd for %s: %w", n.name, err)
	}
	p := &proc{cmd: cmd, exited: make(chan struct{})}
	go func() { // reaps mariadbd; kill and stop wait for it
		_ = cmd.Wait()
		close(p.exited)
	}()
	n.mu.Lock()
	n.proc, n.runLog = p, logStart
	n.mu.Unlock()

	err = n.waitUp(ctx, p)
	if err == nil {
		err = n.waitSynced(ctx, 0)
	}
	if err != nil {
		_ = n.kill()
		return fmt.Errorf("%w\n%s", err, tail(n.logSince(logStart), 40))
	}
	return nil
}

// recoverPosition returns the last committed position (uuid:seqno) of a
// node that was killed, read from InnoDB by mariadbd --wsrep-recover, as
// Debian's galera_recovery does before systemd starts a node: without it
// the node does not know what it has and takes a full state transfer (SST)
// instead of the writesets it missed (IST). "" for a node that stopped
// cleanly (its grastate.dat holds the position) or never started.
func (n *node) recoverPosition(ctx context.Context) (string, error) {
	state, err := os.ReadFile(filepath.Join(n.dir, "data", "grastate.dat"))
	if err != nil || !strings.Contains(string(state), "seqno:   -1") {
		return "", nil
	}
	off := n.logSize()
	cmd := exec.CommandContext(ctx, "mariadbd", "--defaults-file="+n.cnf, "--wsrep-recover")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("recover %s: %v\n%s%s", n.name, err, out, tail(n.logSince(off), 20))
	}
	const mark = "WSREP: Recovered position: "
	log := n.logSince(off)
	i := strings.LastIndex(log, mark)
	if i < 0 {
		return "", fmt.Errorf("recover %s: no position in its log:\n%s", n.name, tail(log, 20))
	}
	pos, _, _ := strings.Cut(log[i+len(mark):], "\n")
	return strings.TrimSpace(pos), nil
}

// waitUp waits until the node answers on its socket, failing early if
// mariadbd exits.
func (n *node) waitUp(ctx context.Context, p *proc) error {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	for {
		qctx, qcancel := context.WithTimeout(ctx, 2*time.Second)
		err := n.root.PingContext(qctx)
		qcancel()
		if err == nil {
			return nil
		}
		select {
		case <-p.exited:
			return fmt.Errorf("mariadbd for %s exited: %v", n.name, p.cmd.ProcessState)
		case <-ctx.Done():
			return fmt.Errorf("%s did not answer: %w", n.name, err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// waitSynced waits until the node is Synced and, if size > 0, sees size
// members in its primary component.
func (n *node) waitSynced(ctx context.Context, size int) error {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	var last string
	for {
		state, err := n.status(ctx, "wsrep_local_state_comment")
		members := ""
		if err == nil {
			members, err = n.status(ctx, "wsrep_cluster_size")
		}
		if err == nil && state == "Synced" && (size == 0 || members == strconv.Itoa(size)) {
			return nil
		}
		last = fmt.Sprintf("state %q, cluster size %q, err %v", state, members, err)
		select {
		case <-ctx.Done():
			return fmt.Errorf("not synced with %d members: %s", size, last)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// waitDatabase waits until the node, if it runs, has database name.
func (n *node) waitDatabase(ctx context.Context, name string) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for n.running() {
		var found int
		err := n.root.QueryRowContext(ctx,
			`SELECT COUNT(*) FROM information_schema.SCHEMATA WHERE SCHEMA_NAME = ?`, name).Scan(&found)
		if err == nil && found == 1 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("database %s did not reach %s: %v", name, n.name, err)
		case <-time.After(10 * time.Millisecond):
		}
	}
	return nil
}

func (n *node) status(ctx context.Context, name string) (string, error) {
	if !n.running() {
		return "", fmt.Errorf("%s is not running", n.name)
	}
	qctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	var k, v string
	err := n.root.QueryRowContext(qctx, "SHOW STATUS LIKE '"+name+"'").Scan(&k, &v)
	if err != nil {
		return "", fmt.Errorf("status %s of %s: %w", name, n.name, err)
	}
	return v, nil
}

func (n *node) running() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.proc != nil
}

// kill SIGKILLs the node's process group and waits for mariadbd (a no-op
// when it is not running).
func (n *node) kill() error {
	n.mu.Lock()
	p := n.proc
	n.proc = nil
	n.mu.Unlock()
	if p == nil {
		return nil
	}
	killGroup(p.cmd.Process.Pid)
	select {
	case <-p.exited:
		return nil
	case <-time.After(time.Minute):
		return fmt.Errorf("%s did not exit within a minute of SIGKILL", n.name)
	}
}

// stop sends SIGTERM and waits for a clean shutdown (SIGKILL after two
// minutes or when ctx ends).
func (n *node) stop(ctx context.Context) error {
	n.mu.Lock()
	p := n.proc
	n.mu.Unlock()
	if p == nil {
		return nil
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
		n.mu.Lock()
		n.proc = nil
		n.mu.Unlock()
		killGroup(p.cmd.Process.Pid) // a state-transfer script it left behind, if any
		return nil
	case <-ctx.Done():
	case <-time.After(2 * time.Minute):
	}
	return errors.Join(fmt.Errorf("%s did not shut down", n.name), n.kill())
}

func (n *node) logSize() int64 {
	fi, err := os.Stat(n.errLog)
	if err != nil {
		return 0
	}
	return fi.Size()
}

// logSince returns the error log from byte offset off.
func (n *node) logSince(off int64) string {
	b, _ := os.ReadFile(n.errLog)
	if off > int64(len(b)) {
		off = 0
	}
	return string(b[off:])
}

func tail(s string, lines int) string {
	ls := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(ls) > lines {
		ls = ls[len(ls)-lines:]
	}
	return strings.Join(ls, "\n")
}

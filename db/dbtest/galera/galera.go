// Package galera runs a three-node MariaDB Galera cluster on loopback for
// tests.
//
// It uses Debian's mariadb-server with galera-4 (../shared/notes/galera.md),
// state transfers by rsync, every node on 127.0.0.1 with its own data
// directory, socket, SQL port and Galera ports. A test can stop, SIGKILL and
// restart one node; a restarted node rejoins by IST from a peer.
//
// Starting takes about 20 s on two cores, so a test binary starts one
// cluster and shares it (Shared, owned by TestMain). It does not import db.
package galera

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/go-sql-driver/mysql"
)

// Size is the number of nodes in a cluster.
const Size = 3

// Provider is the Galera library the nodes load.
const Provider = "/usr/lib/galera/libgalera_smm.so"

// ErrUnavailable is wrapped by Start's error when this machine cannot run a
// cluster (not root, or a package is missing): tests skip then, or fail
// under OBMD_REQUIRE_INTEGRATION=1.
var ErrUnavailable = errors.New("galera cluster unavailable")

// Cluster is a running cluster. Its methods are safe for concurrent use,
// but a test that stops or kills a node must not run in parallel with tests
// that need all three.
type Cluster struct {
	dir   string
	user  string
	pass  string
	nodes [Size]*node
	// Started is how long Start took.
	Started time.Duration
}

// Start creates the nodes' directories under a new temporary directory,
// bootstraps node 0 (--wsrep-new-cluster), starts nodes 1 and 2, waits until
// the cluster has three synced members, and creates a user with every
// privilege for DSN. Close stops the nodes and removes the directory.
func Start(ctx context.Context) (*Cluster, error) {
	if err := available(); err != nil {
		return nil, err
	}
	begin := time.Now()
	dir, err := os.MkdirTemp("", "obmd-galera-")
	if err != nil {
		return nil, fmt.Errorf("start galera: %w", err)
	}
	// mariadbd runs as mysql: the tree must be reachable (MkdirTemp is 0700).
	if err := os.Chmod(dir, 0o755); err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("start galera: %w", err)
	}
	c := &Cluster{dir: dir, user: "obmd", pass: randomHex(12)}
	if err := c.start(ctx); err != nil {
		return nil, errors.Join(err, c.Close())
	}
	c.Started = time.Since(begin)
	return c, nil
}

func (c *Cluster) start(ctx context.Context) error {
	if err := c.initNodes(ctx); err != nil {
		return fmt.Errorf("start galera: %w", err)
	}
	if err := c.nodes[0].start(ctx, true); err != nil {
		return fmt.Errorf("start galera: bootstrap %s: %w", c.nodes[0].name, err)
	}
	// The joiners take their state by SST one after the other: a donor
	// serves one at a time.
	for _, n := range c.nodes[1:] {
		if err := n.start(ctx, false); err != nil {
			return fmt.Errorf("start galera: join %s: %w", n.name, err)
		}
	}
	if err := c.WaitSynced(ctx); err != nil {
		return fmt.Errorf("start galera: %w", err)
	}
	if _, err := c.nodes[0].root.ExecContext(ctx, fmt.Sprintf(
		"CREATE USER '%s'@'127.0.0.1' IDENTIFIED BY '%s'", c.user, c.pass)); err != nil {
		return fmt.Errorf("start galera: create user: %w", err)
	}
	if _, err := c.nodes[0].root.ExecContext(ctx, fmt.Sprintf(
		"GRANT ALL ON *.* TO '%s'@'127.0.0.1'", c.user)); err != nil {
		return fmt.Errorf("start galera: grant: %w", err)
	}
	return nil
}

// available reports (wrapping ErrUnavailable) what this machine lacks.
func available() error {
	if os.Geteuid() != 0 {
		return fmt.Errorf("%w: mariadbd is started as root (it runs as mysql)", ErrUnavailable)
	}
	for _, p := range []string{"mariadbd", "mariadb-install-db", "rsync", "wsrep_sst_rsync"} {
		if _, err := exec.LookPath(p); err != nil {
			return fmt.Errorf("%w: %s is not installed", ErrUnavailable, p)
		}
	}
	if _, err := os.Stat(Provider); err != nil {
		return fmt.Errorf("%w: %s is missing (install galera-4)", ErrUnavailable, Provider)
	}
	return nil
}

// initNodes picks the ports, writes each node's configuration and creates
// its system tables (in parallel: mariadb-install-db takes seconds).
func (c *Cluster) initNodes(ctx context.Context) error {
	ports, err := pickPorts(Size * 4)
	if err != nil {
		return err
	}
	for i := range c.nodes {
		n := &node{c: c, index: i, name: fmt.Sprintf("n%d", i+1), dir: filepath.Join(c.dir, fmt.Sprintf("n%d", i+1))}
		n.sqlPort, n.basePort, n.istPort, n.sstPort = ports[4*i], ports[4*i+1], ports[4*i+2], ports[4*i+3]
		if err := n.mkdirs(); err != nil {
			return err
		}
		c.nodes[i] = n
	}
	if err := c.writeConfigs(); err != nil {
		return err
	}
	errs := make([]error, Size)
	var wg sync.WaitGroup
	for i, n := range c.nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = n.installDB(ctx)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// writeConfigs (re)writes every node's my.cnf from the current ports.
func (c *Cluster) writeConfigs() error {
	var peers []string
	for _, n := range c.nodes {
		peers = append(peers, fmt.Sprintf("127.0.0.1:%d", n.basePort))
	}
	for _, n := range c.nodes {
		if err := n.writeConfig(strings.Join(peers, ",")); err != nil {
			return err
		}
	}
	return nil
}

// DSN returns the mysql:// DSN of database on node i (0-based), over TCP as
// the cluster's user, with extra DSN parameters ("k=v&k2=v2") if any.
func (c *Cluster) DSN(i int, database, params string) string {
	cfg := mysql.NewConfig()
	cfg.User, cfg.Passwd = c.user, c.pass
	cfg.Net, cfg.Addr = "tcp", fmt.Sprintf("127.0.0.1:%d", c.nodes[i].sqlPort)
	cfg.DBName = database
	dsn := "mysql://" + cfg.FormatDSN()
	if params != "" {
		sep := "?"
		if strings.Contains(dsn, "?") {
			sep = "&"
		}
		dsn += sep + params
	}
	return dsn
}

// Root returns a pool of root connections to node i over its socket (for
// status queries and test setup; it reconnects after a restart).
func (c *Cluster) Root(i int) *sql.DB { return c.nodes[i].root }

// Status returns the value of SHOW STATUS variable name on node i.
func (c *Cluster) Status(ctx context.Context, i int, name string) (string, error) {
	return c.nodes[i].status(ctx, name)
}

// CreateDatabase creates a database with a random name (on node 0 or, if
// it is down, the first running node; Galera replicates it) and returns the
// name once every running node has it: a node runs replicated DDL in the
// cluster's order, but after the node that took it has answered, so a
// connection to another node named the database "unknown" a moment later.
func (c *Cluster) CreateDatabase(ctx context.Context) (string, error) {
	name := "obmd_galera_" + randomHex(6)
	err := c.onAnyNode(ctx, "CREATE DATABASE "+name+" CHARACTER SET utf8mb4 COLLATE utf8mb4_bin")
	if err != nil {
		return "", fmt.Errorf("create database: %w", err)
	}
	for _, n := range c.nodes {
		if err := n.waitDatabase(ctx, name); err != nil {
			return "", fmt.Errorf("create database: %w", err)
		}
	}
	return name, nil
}

// DropDatabase drops database name (from the first running node).
func (c *Cluster) DropDatabase(ctx context.Context, name string) error {
	if err := c.onAnyNode(ctx, "DROP DATABASE IF EXISTS "+name); err != nil {
		return fmt.Errorf("drop database %s: %w", name, err)
	}
	return nil
}

func (c *Cluster) onAnyNode(ctx context.Context, stmt string) error {
	for _, n := range c.nodes {
		if n.running() {
			_, err := n.root.ExecContext(ctx, stmt)
			return err
		}
	}
	return errors.New("no node is running")
}

// Kill sends SIGKILL to node i (its process group: mariadbd and any state
// transfer script it runs) and waits until it has exited.
func (c *Cluster) Kill(i int) error { return c.nodes[i].kill() }

// Stop shuts node i down cleanly (SIGTERM) and waits until it has exited.
func (c *Cluster) Stop(ctx context.Context, i int) error { return c.nodes[i].stop(ctx) }

// Restart starts a stopped or killed node i again without
// --wsrep-new-cluster: it rejoins the others (IST when their gcache still
// holds what it missed) and Restart returns once it is synced.
func (c *Cluster) Restart(ctx context.Context, i int) error {
	if err := c.nodes[i].start(ctx, false); err != nil {
		return fmt.Errorf("restart %s: %w", c.nodes[i].name, err)
	}
	return nil
}

// Heal restarts every node that is not running and waits until all three
// are synced members (a test that killed a node and failed before it
// restarted it leaves the next test a whole cluster).
func (c *Cluster) Heal(ctx context.Context) error {
	for i, n := range c.nodes {
		if !n.running() {
			if err := c.Restart(ctx, i); err != nil {
				return err
			}
		}
	}
	return c.WaitSynced(ctx)
}

// WaitSynced waits until every node is running, synced, and sees a cluster
// of Size members.
func (c *Cluster) WaitSynced(ctx context.Context) error {
	for _, n := range c.nodes {
		if err := n.waitSynced(ctx, Size); err != nil {
			return fmt.Errorf("%s: %w", n.name, err)
		}
	}
	return nil
}

// WaitSize waits until node i sees a cluster of want members (after a
// node died, the survivors evict it).
func (c *Cluster) WaitSize(ctx context.Context, i, want int) error {
	if err := c.nodes[i].waitSynced(ctx, want); err != nil {
		return fmt.Errorf("%s: %w", c.nodes[i].name, err)
	}
	return nil
}

// ErrorLog returns the error log of node i's current (or last) run.
func (c *Cluster) ErrorLog(i int) string {
	n := c.nodes[i]
	n.mu.Lock()
	off := n.runLog
	n.mu.Unlock()
	return n.logSince(off)
}

// StateTransfer says how node i's current run took the state it missed,
// as its error log reports it: "IST" (the writesets it missed, from a
// peer's gcache), "SST" (a full copy of a peer's data directory), or ""
// (none yet: the bootstrap node, or one that has not joined).
func (c *Cluster) StateTransfer(i int) string {
	log := c.ErrorLog(i)
	switch {
	case strings.Contains(log, "rsync SST completed on joiner"):
		return "SST"
	case strings.Contains(log, "rsync IST completed on joiner"):
		return "IST"
	}
	return ""
}

// Close kills every node this cluster started (by process group), waits
// for them, and removes the directory. Only processes Start or Restart
// started are signalled.
func (c *Cluster) Close() error {
	var errs []error
	for _, n := range c.nodes {
		if n == nil {
			continue
		}
		if n.root != nil {
			_ = n.root.Close() // its server may be gone: nothing to report
		}
		errs = append(errs, n.kill())
	}
	errs = append(errs, os.RemoveAll(c.dir))
	return errors.Join(errs...)
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // crypto/rand.Read never fails (Go 1.24+)
	return hex.EncodeToString(b)
}

// killGroup SIGKILLs process group pgid (our child's, made with Setpgid).
func killGroup(pgid int) {
	_ = syscall.Kill(-pgid, syscall.SIGKILL) // ESRCH: already gone
}

// Package daemon is obmd's composition root: it assembles one replica, runs
// it, and shuts it down in order.
//
// A replica is built from a Config: the state directory and keys; the
// database, migrated; the table of node types over the drivers
// (nodetypes.go); the console hub; access control and the session registry;
// the SSH front door and the admin API; in cluster mode the cluster and its
// peer server. They run until the context ends. It is the one package that
// knows every other one, and the only part of the server that imports the
// drivers (TestLayout holds that).
//
// It is a package rather than part of cmd/obmd because three programs run
// the same assembly: cmd/obmd (which only maps flags, OBMD_* variables and
// the YAML file onto Config, sets up logging and exits), the end-to-end
// tests, which run whole replicas in one process (all of them live here,
// so that the slow ones run once), and bench/. A main package can be
// imported by none of them.
package daemon

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/gliderlabs/ssh"
	"github.com/sirupsen/logrus"
	"golang.org/x/sync/errgroup"

	"github.com/obmd/obmd/bastion/access"
	"github.com/obmd/obmd/bastion/access/authlimit"
	"github.com/obmd/obmd/bastion/access/sessions"
	"github.com/obmd/obmd/bastion/internal/metrics"
	"github.com/obmd/obmd/bastion/nodes"
	"github.com/obmd/obmd/bastion/sshdoor"
	"github.com/obmd/obmd/commands"
	"github.com/obmd/obmd/db"
	"github.com/obmd/obmd/db/auditlog"
	"github.com/obmd/obmd/keys/sshcert"
	"github.com/obmd/obmd/sol"
	"github.com/obmd/obmd/sol/ipmi"
	"github.com/obmd/obmd/sol/sim"
)

// Daemon is one obmd replica. Start prepares and listens; Run serves.
type Daemon struct {
	cfg Config
	log logrus.FieldLogger

	store    *db.Store
	auditLog *auditlog.Log // the audit export (audit.export), nil if none
	lab      *sim.Lab
	ciphers  *sol.Ciphers   // each node's negotiated IPMI cipher suite
	cons     *consoles      // consoles over the BMCs' SSH services (sshconsole.go)
	ipmiPool *ipmi.Sessions // native IPMI sessions kept between power calls
	types    *nodes.Table
	resolver *nodes.Resolver
	consoles *sol.Manager
	history  *consoleHistory // history.go
	reg      *sessions.Registry
	metrics  *metrics.Registry
	revoker  *access.Revoker
	health   *access.Health
	watcher  *access.Watcher
	limiter  *authlimit.Limiter
	ssh      *sshdoor.Server
	certs    *sshcert.Policy // certificate logins (certs.go)
	http     *http.Server
	rep      replicas // cluster mode (replicas.go)
	web      web      // the web console (web.go)

	sshL, adminL  net.Listener
	caps          connCaps // of the admin, peer and SSH listeners (conns.go)
	adminToken    string
	newAdminToken string // adminToken when this Start generated it
	fingerprint   string
	demoToken     string
	dbOpts        []db.Option // db.Open's, from New
}

// New validates cfg; it does no I/O. dbOpts are passed to db.Open (tests:
// e.g. db.WithClockSkew for a replica whose clock is wrong).
func New(cfg Config, log logrus.FieldLogger, dbOpts ...db.Option) (*Daemon, error) {
	if log == nil {
		return nil, errors.New("daemon: nil logger")
	}
	if err := cfg.setDefaults(); err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	return &Daemon{cfg: cfg, log: log, dbOpts: dbOpts}, nil
}

// SSHAddr, AdminAddr, AdminToken, DemoToken and HostKeyFingerprint describe
// a started daemon.
func (d *Daemon) SSHAddr() string            { return d.sshL.Addr().String() }
func (d *Daemon) AdminAddr() string          { return d.adminL.Addr().String() }
func (d *Daemon) AdminToken() string         { return d.adminToken }
func (d *Daemon) DemoToken() string          { return d.demoToken }
func (d *Daemon) HostKeyFingerprint() string { return d.fingerprint }

// NewAdminToken is the admin token if Start generated it (the first start
// on a state directory), else "": the caller shows it once to whoever
// started obmd. It is never logged.
func (d *Daemon) NewAdminToken() string { return d.newAdminToken }

// Lab is the simulator holding "sim" and "mock" nodes' state (tests).
func (d *Daemon) Lab() *sim.Lab { return d.lab }

// Run serves until ctx ends, then shuts down: new sessions are refused,
// live ones are told and cut, console links are deactivated, listeners and
// connections are closed, and the database is closed, within
// ShutdownTimeout. It returns nil after a clean stop.
func (d *Daemon) Run(ctx context.Context) error {
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		// A Serve that starts after the stop closed the listener fails on
		// it: gliderlabs resets its closed state when it takes a listener.
		err := d.ssh.Serve(d.sshL)
		if errors.Is(err, ssh.ErrServerClosed) || (errors.Is(err, net.ErrClosed) && gctx.Err() != nil) {
			return nil
		}
		return fmt.Errorf("ssh: %w", err)
	})
	g.Go(func() error {
		if err := d.http.Serve(d.adminL); !errors.Is(err, http.ErrServerClosed) {
			return fmt.Errorf("admin http: %w", err)
		}
		return nil
	})
	g.Go(d.serveWeb)
	// The loops that use the database end before shutdown closes it. On
	// PostgreSQL the watcher also polls as soon as a change commits
	// anywhere (ListenChanges; on other engines it returns at once).
	listen := func(ctx context.Context) error { return d.store.ListenChanges(ctx, d.watcher.Wake) }
	var loops sync.WaitGroup
	purge := func(ctx context.Context) error { return d.store.RunPurge(ctx, d.cfg.Audit) }
	for _, loop := range []func(context.Context) error{d.watcher.Run, d.guard, d.limiter.Run, purge, listen} {
		loops.Add(1)
		g.Go(func() error {
			defer loops.Done()
			return loop(gctx)
		})
	}
	g.Go(d.servePeer)
	g.Go(func() error { return d.purgeRevocations(gctx, d.certs.Skew()) })
	g.Go(func() error { return d.runCapture(gctx) })
	g.Go(func() error {
		<-gctx.Done()
		return d.shutdown(loops.Wait)
	})
	return g.Wait()
}

// hangupGrace is how long a stop waits for SSH clients to hang up once
// their sessions have ended.
const hangupGrace = time.Second

// shutdown stops everything; waitLoops returns once the loops that use
// the database have ended (they end with Run's context).
func (d *Daemon) shutdown(waitLoops func()) error {
	ctx, cancel := context.WithTimeout(context.Background(), d.cfg.Daemon.ShutdownTimeout)
	defer cancel()
	d.log.Info("obmd_stopping")
	cut, late := d.reg.Shutdown()
	var errs []error
	if err := d.consoles.Close(ctx); err != nil {
		errs = append(errs, fmt.Errorf("close consoles: %w", err))
	}
	if err := d.history.close(ctx); err != nil { // after the hub: nothing writes
		errs = append(errs, err)
	}
	d.ipmiPool.Close() // each bounded by ipmi.attempt_timeout; later calls keep none
	// Every session has been told and has ended: SSH connections still open
	// belong to clients that have not hung up yet (x/crypto clients, an
	// OpenSSH control master). Give them a moment to, rather than hold the
	// stop until the deadline; unless a session is still ending.
	sshCtx := ctx
	if late == 0 {
		var cancelGrace context.CancelFunc
		sshCtx, cancelGrace = context.WithTimeout(ctx, hangupGrace)
		defer cancelGrace()
	}
	if err := d.ssh.Shutdown(sshCtx); err != nil {
		errs = append(errs, fmt.Errorf("stop ssh: %w", err))
	}
	// gliderlabs' Shutdown closes only the listeners its Serve has taken:
	// a stop that comes before Run's Serve got that far would leave it
	// accepting for ever. Closed here, Serve's Accept fails and Run takes
	// that for the stop (closing twice is harmless).
	d.sshL.Close()
	if err := d.http.Shutdown(ctx); err != nil {
		d.http.Close()
	}
	if err := d.stopWeb(ctx); err != nil {
		errs = append(errs, err)
	}
	d.closePeer() // after the consoles: their leases are released, relays told
	if err := d.revoker.Close(ctx); err != nil {
		errs = append(errs, err)
	}
	d.withdraw(ctx)
	if err := waitFor(ctx, waitLoops); err != nil {
		errs = append(errs, fmt.Errorf("stop the access watcher: %w", err))
	}
	if err := d.closeStore(ctx); err != nil {
		errs = append(errs, err)
	}
	if d.auditLog != nil { // after the store: its last rows are exported
		if err := d.auditLog.Close(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	d.log.WithFields(logrus.Fields{"sessions_cut": cut, "sessions_late": late}).Info("obmd_stopped")
	return errors.Join(errs...)
}

// closeStore closes the database within ctx. A write stuck in the kernel
// (a frozen disk) would hold Close until it returns: past ctx the close is
// left behind, with the process about to exit.
func (d *Daemon) closeStore(ctx context.Context) error {
	done := make(chan error, 1)
	go func() { done <- d.store.Close() }() // waited for below, or left to the exiting process
	select {
	case err := <-done:
		if err != nil {
			return fmt.Errorf("close database: %w", err)
		}
		return nil
	case <-ctx.Done():
		return fmt.Errorf("close database: not done within the shutdown bound (a write is stuck?)")
	}
}

// waitFor runs wait and returns when it does, or with ctx's error once ctx
// ends first (wait's goroutine is then left to finish on its own).
func waitFor(ctx context.Context, wait func()) error {
	done := make(chan struct{})
	go func() { // ends when wait does
		wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// closeAll releases what a failed Start opened.
func (d *Daemon) closeAll() {
	d.closePeer()
	for _, l := range []net.Listener{d.sshL, d.adminL, d.web.l} {
		if l != nil {
			l.Close()
		}
	}
	if d.consoles != nil {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		d.consoles.Close(ctx)
		cancel()
	}
	if d.history != nil {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		d.history.close(ctx)
		cancel()
	}
	d.ipmiPool.Close()
	if d.store != nil {
		d.store.Close()
	}
	if d.auditLog != nil {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		d.auditLog.Close(ctx)
		cancel()
	}
}

// auditor writes commands' audit events to the database.
type auditor struct {
	store *db.Store
	log   logrus.FieldLogger
}

func (a auditor) Audit(ctx context.Context, e commands.Event) {
	err := a.store.Audit(ctx, db.AuditEvent{Node: e.Node, Actor: e.Actor, Action: e.Action,
		Source: e.Source, Result: e.Result, Detail: e.Detail})
	if err != nil {
		a.log.WithError(err).WithField("action", e.Action).Error("audit_failed")
	}
}

// sessionList answers the `sessions` command (commands.Sessions): the
// node's sessions on every replica (clusterSessions), with the console's
// writer marked wherever it is.
type sessionList struct {
	all      clusterSessions
	consoles *sol.Manager
}

func (l sessionList) Sessions(node string) []commands.SessionInfo {
	writer := l.consoles.Writer(node).Session // "" when nobody writes, or no session does
	ctx, cancel := context.WithTimeout(context.Background(), l.all.wait)
	defer cancel()
	var out []commands.SessionInfo
	for _, s := range l.all.List(ctx, node) {
		out = append(out, commands.SessionInfo{ID: s.ID, Kind: string(s.Kind), User: s.User, Remote: s.Remote,
			Started: s.Started, Writer: s.ID == writer && writer != "", Epoch: s.Epoch})
	}
	return out
}

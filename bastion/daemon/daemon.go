// Package daemon assembles a running obmd from a Config: state directory and
// keys, database (migrated), drivers, console hub, session registry, the SSH
// front door and the admin API; it runs them until its context ends and
// then shuts them down in order. cmd/obmd and the end-to-end tests use it.
package daemon

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/gliderlabs/ssh"
	"github.com/sirupsen/logrus"
	gossh "golang.org/x/crypto/ssh"
	"golang.org/x/sync/errgroup"

	"github.com/obmd/obmd/bastion"
	"github.com/obmd/obmd/bastion/admin"
	"github.com/obmd/obmd/bastion/conncap"
	"github.com/obmd/obmd/bastion/metrics"
	"github.com/obmd/obmd/bastion/nodes"
	"github.com/obmd/obmd/bastion/sessions"
	"github.com/obmd/obmd/commands"
	"github.com/obmd/obmd/db"
	"github.com/obmd/obmd/keys"
	"github.com/obmd/obmd/sol"
	"github.com/obmd/obmd/sol/sim"
)

// Daemon is one obmd replica. Start prepares and listens; Run serves.
type Daemon struct {
	cfg Config
	log logrus.FieldLogger

	store    *db.Store
	lab      *sim.Lab
	resolver *nodes.Resolver
	consoles *sol.Manager
	reg      *sessions.Registry
	metrics  *metrics.Registry
	revoker  *bastion.Revoker
	limiter  *bastion.Limiter
	ssh      *bastion.Server
	http     *http.Server
	rep      replicas // cluster mode (replicas.go)

	sshL, adminL  net.Listener
	caps          connCaps // of the admin and peer listeners (conns.go)
	adminToken    string
	newAdminToken string // adminToken when this Start generated it
	fingerprint   string
	demoToken     string
}

// New validates cfg; it does no I/O.
func New(cfg Config, log logrus.FieldLogger) (*Daemon, error) {
	if log == nil {
		return nil, errors.New("daemon: nil logger")
	}
	if err := cfg.setDefaults(); err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	return &Daemon{cfg: cfg, log: log}, nil
}

// Start opens the listeners, opens and migrates the database, loads or
// creates keys and builds every part. On error, whatever was opened is closed.
// The listeners come first, so that a taken port fails the start before
// anything is created in the state directory.
func (d *Daemon) Start(ctx context.Context) (err error) {
	defer func() {
		if err != nil {
			d.closeAll()
		}
	}()
	if err := d.listen(); err != nil {
		return err
	}
	if err := os.MkdirAll(d.cfg.StateDir, 0o700); err != nil {
		return fmt.Errorf("state directory: %w", err)
	}
	// The database before the secrets: an unreachable database fails the
	// start without generating an admin token nobody would see.
	d.store, err = db.Open(ctx, d.cfg.DB, d.log)
	if err != nil {
		return err
	}
	if err := d.store.Migrate(ctx); err != nil {
		return err
	}
	hostKey, err := keys.LoadOrCreateHostKey(d.cfg.HostKey)
	if err != nil {
		return err
	}
	d.fingerprint = keys.Fingerprint(hostKey.PublicKey())
	sealer, err := keys.LoadOrCreateSealer(d.cfg.SealKey)
	if err != nil {
		return err
	}
	d.adminToken = d.cfg.AdminToken
	tokenFile := filepath.Join(d.cfg.StateDir, "admin-token")
	if d.adminToken == "" {
		var created bool
		d.adminToken, created, err = keys.LoadOrCreateSecret(tokenFile)
		if err != nil {
			return err
		}
		if created {
			d.newAdminToken = d.adminToken
		}
		if len(d.adminToken) < admin.MinAdminTokenLen {
			return fmt.Errorf("admin token in %s is %d characters; it must have at least %d (delete the file to have a new one generated)",
				tokenFile, len(d.adminToken), admin.MinAdminTokenLen)
		}
	}

	d.lab = sim.NewLab()
	d.resolver, err = nodes.New(nodes.Config{}, d.store, sealer, d.lab, d.log)
	if err != nil {
		return err
	}
	bmcs, powerBMCs, err := d.startCluster(hostKey, d.resolver, d.resolver.ForCommands())
	if err != nil {
		return err
	}
	d.consoles, err = sol.NewManager(sol.Config{Scrollback: d.cfg.Scrollback, Linger: d.cfg.Linger,
		QueueBytes: d.cfg.ViewerQueue, DropSlow: d.cfg.DropSlowViewers}, bmcs, d.log.WithField("part", "sol"))
	if err != nil {
		return fmt.Errorf("console hub: %w", err)
	}
	if err := d.startPeer(); err != nil {
		return err
	}
	d.reg = sessions.New(sessions.Config{MaxPerNode: unlimited(d.cfg.MaxSessionsPerNode),
		MaxPerSource: unlimited(d.cfg.MaxSessionsPerSource), MaxPerSourceHTTP: unlimited(d.cfg.MaxHTTPSessionsPerSource)})
	gated := gatedStore{d.store, d}
	var peers bastion.Peers
	if d.rep.cluster != nil {
		peers = d.rep.cluster
	}
	d.revoker = bastion.NewRevoker(bastion.RevokerConfig{ChangeTimeout: d.cfg.ChangeTimeout, Peers: peers},
		d.consoles, d.reg, gated, d.log)
	d.metrics = d.newMetrics()
	runner, err := commands.NewRunner(commands.Config{Timeout: d.cfg.PowerTimeout, Version: d.cfg.Version,
		Observe: d.metrics.ObservePower},
		powerBMCs, d.consoles, bastion.NewSessionList(d.reg, d.consoles), auditor{d.store, d.log}, d.log)
	if err != nil {
		return fmt.Errorf("command runner: %w", err)
	}
	proxyFrom, trustedProxies, err := d.cfg.balancers()
	if err != nil {
		return err
	}
	// One guessing budget per source for SSH and the admin API.
	d.limiter = bastion.NewLimiter(d.cfg.AuthLimits, time.Now)
	api, err := admin.New(admin.Config{AdminToken: d.adminToken, Admit: d.revoker.Admit, Limiter: d.limiter, Metrics: d.metrics,
		ChangeTimeout: d.cfg.ChangeTimeout, Ready: d.ready, OnAuth: d.metrics.ObserveAuth, TrustedProxies: trustedProxies,
		Authenticated: conncap.TrustContext, TenantSession: conncap.TrustTenantContext, FailDelay: d.cfg.FailDelay},
		d.store, sealer, runner,
		bastion.NewHTTPConsoles(d.consoles), revokeAndForget{d.revoker, d.resolver}, d.reg, d.log.WithField("part", "admin"))
	if err != nil {
		return err
	}
	d.ssh, err = bastion.New(bastion.Config{HostKeys: []gossh.Signer{hostKey}, Escape: d.cfg.Escape,
		Limiter: d.limiter, FailDelay: d.cfg.FailDelay, HandshakeTimeout: d.cfg.LoginGraceTime,
		MaxConns: d.caps.ssh, MaxUnauthenticated: d.caps.sshUnauth, MaxUnauthenticatedPerSource: d.cfg.MaxUnauthenticatedPerSource,
		MaxConnsPerSource: d.cfg.MaxConnsPerSource, ProxyProtocolFrom: proxyFrom, Admit: d.revoker.Admit,
		Banner: d.loginBanner, OnAuth: d.metrics.ObserveAuth, LegacyAlgorithms: d.cfg.SSHLegacyAlgorithms},
		gated, runner, d.consoles, d.reg, d.log.WithField("part", "ssh"))
	if err != nil {
		return err
	}
	d.http = d.newHTTPServer(ctx, api.Handler())

	if d.cfg.Demo {
		if err := d.registerDemo(ctx, sealer); err != nil {
			return err
		}
	}
	if err := d.firstAnnounce(ctx); err != nil {
		return err
	}
	d.log.WithFields(d.caps.fields()).WithFields(logrus.Fields{
		"ssh": d.sshL.Addr().String(), "admin": d.adminL.Addr().String(), "tls": d.cfg.TLSCert != "",
		"host_key": d.fingerprint, "db": d.store.Dialect(), "admin_token_file": adminTokenSource(d.cfg, tokenFile),
		"version": d.cfg.Version, "replica": d.cfg.ReplicaID, "peer": d.PeerAddr(),
	}).Info("obmd_listening")
	return nil
}

// listen opens the SSH and admin listeners (the admin one with TLS when
// configured) and, in cluster mode, the peer listener. Connections wait in
// the backlog until Run serves them.
func (d *Daemon) listen() error {
	var cert tls.Certificate
	if d.cfg.TLSCert != "" {
		var err error
		if cert, err = tls.LoadX509KeyPair(d.cfg.TLSCert, d.cfg.TLSKey); err != nil {
			return fmt.Errorf("admin TLS: %w", err)
		}
	}
	var err error
	if d.sshL, err = net.Listen("tcp", d.cfg.SSHAddr); err != nil {
		return fmt.Errorf("listen for SSH: %w", err)
	}
	if d.adminL, err = net.Listen("tcp", d.cfg.AdminAddr); err != nil {
		return fmt.Errorf("listen for admin HTTP: %w", err)
	}
	d.caps = sizeCaps(d.cfg, openFileLimit())
	if d.adminL, err = d.proxyAdmin(d.adminL); err != nil { // before the caps: they count the real client
		return err
	}
	if d.adminL, err = d.capAdmin(d.adminL); err != nil {
		return err
	}
	if d.cfg.TLSCert != "" {
		d.adminL = tls.NewListener(d.adminL, &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12})
	}
	if d.cfg.PeerAddr != "" {
		if d.rep.peerL, err = net.Listen("tcp", d.cfg.PeerAddr); err != nil {
			return fmt.Errorf("listen for peers: %w", err)
		}
		if d.rep.peerL, err = d.capPeer(d.rep.peerL); err != nil {
			return err
		}
	}
	return nil
}

func adminTokenSource(cfg Config, file string) string {
	if cfg.AdminToken != "" {
		return "(from configuration)"
	}
	return file
}

// registerDemo makes sure node "demo" exists on the simulator and gives it a
// fresh token (only hashes are stored, so the old one cannot be shown).
func (d *Daemon) registerDemo(ctx context.Context, sealer *keys.Sealer) error {
	if _, err := d.store.Node(ctx, DemoNode); errors.Is(err, db.ErrNotFound) {
		sealed, err := nodes.SealInfo(sealer, DemoNode, sol.Info{Addr: "simulator"})
		if err != nil {
			return err
		}
		if _, err := d.store.CreateNode(ctx, db.Node{Label: DemoNode, Type: nodes.TypeSim, InfoSealed: sealed}); err != nil {
			return fmt.Errorf("register demo node: %w", err)
		}
	} else if err != nil {
		return fmt.Errorf("register demo node: %w", err)
	}
	token, err := keys.NewToken()
	if err != nil {
		return err
	}
	if _, err := d.store.SetToken(ctx, DemoNode, keys.HashToken(token)); err != nil {
		return fmt.Errorf("demo token: %w", err)
	}
	d.demoToken = token
	return nil
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
		if err := d.ssh.Serve(d.sshL); !errors.Is(err, ssh.ErrServerClosed) {
			return fmt.Errorf("ssh: %w", err)
		}
		return nil
	})
	g.Go(func() error {
		if err := d.http.Serve(d.adminL); !errors.Is(err, http.ErrServerClosed) {
			return fmt.Errorf("admin http: %w", err)
		}
		return nil
	})
	g.Go(func() error { return d.watchChanges(gctx) })
	g.Go(func() error { return d.guard(gctx) })
	g.Go(func() error { return d.limiter.Run(gctx) })
	g.Go(d.servePeer)
	g.Go(func() error {
		<-gctx.Done()
		return d.shutdown()
	})
	return g.Wait()
}

// hangupGrace is how long a stop waits for SSH clients to hang up once
// their sessions have ended.
const hangupGrace = time.Second

func (d *Daemon) shutdown() error {
	ctx, cancel := context.WithTimeout(context.Background(), d.cfg.ShutdownTimeout)
	defer cancel()
	d.log.Info("obmd_stopping")
	cut, late := d.reg.Shutdown()
	var errs []error
	if err := d.consoles.Close(ctx); err != nil {
		errs = append(errs, fmt.Errorf("close consoles: %w", err))
	}
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
	if err := d.http.Shutdown(ctx); err != nil {
		d.http.Close()
	}
	d.closePeer() // after the consoles: their leases are released, relays told
	if err := d.revoker.Close(ctx); err != nil {
		errs = append(errs, err)
	}
	d.withdraw(ctx)
	if err := d.closeStore(ctx); err != nil {
		errs = append(errs, err)
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

// closeAll releases what a failed Start opened.
func (d *Daemon) closeAll() {
	d.closePeer()
	for _, l := range []net.Listener{d.sshL, d.adminL} {
		if l != nil {
			l.Close()
		}
	}
	if d.consoles != nil {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		d.consoles.Close(ctx)
		cancel()
	}
	if d.store != nil {
		d.store.Close()
	}
}

// watchChanges applies access changes made elsewhere (another replica, or
// obmctl against another replica) to this replica's sessions. Changes made
// here were applied by the admin call already; Revoker skips them. Each
// poll is also this replica's look at the database's health (dbPolled)
// and, in cluster mode, its announcement to the others (announce).
func (d *Daemon) watchChanges(ctx context.Context) error {
	cursor, err := d.store.LatestChange(ctx)
	if err != nil {
		if ctx.Err() != nil { // stopped while starting: not a failure
			return nil
		}
		return fmt.Errorf("read access changes: %w", err)
	}
	d.revoker.Watched(cursor)
	d.announce(ctx, cursor)
	t := time.NewTicker(d.cfg.EpochPoll)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		pctx, cancel := context.WithTimeout(ctx, d.cfg.ChangeTimeout)
		changes, err := d.store.ChangesSince(pctx, cursor, 1000)
		cancel()
		if ctx.Err() != nil {
			return nil
		}
		health := d.checkDB(err)
		d.dbPolled(health)
		if health != nil {
			d.log.WithError(health).Warn("access_poll_failed")
		}
		if err != nil {
			continue
		}
		for _, c := range changes {
			d.revoker.Revoke(c.Node, c.Epoch, "access changed")
			cursor = c.Epoch
		}
		d.revoker.Watched(cursor)
		d.announce(ctx, cursor)
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

// revokeAndForget also drops simulator state of deleted nodes.
type revokeAndForget struct {
	r   *bastion.Revoker
	res *nodes.Resolver
}

func (v revokeAndForget) Change(ctx context.Context, c bastion.Change) error {
	err := v.r.Change(ctx, c)
	if (err == nil || errors.Is(err, bastion.ErrNotConfirmed)) && c.Why == admin.WhyNodeDeleted {
		v.res.Forget(c.Node)
	}
	return err
}

package daemon

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/sirupsen/logrus"
	gossh "golang.org/x/crypto/ssh"

	"github.com/obmd/obmd/bastion/access"
	"github.com/obmd/obmd/bastion/access/authlimit"
	"github.com/obmd/obmd/bastion/access/sessions"
	"github.com/obmd/obmd/bastion/admin"
	"github.com/obmd/obmd/bastion/internal/conncap"
	"github.com/obmd/obmd/bastion/internal/metrics"
	"github.com/obmd/obmd/bastion/nodes"
	"github.com/obmd/obmd/bastion/sshdoor"
	"github.com/obmd/obmd/commands"
	"github.com/obmd/obmd/db"
	"github.com/obmd/obmd/db/auditlog"
	"github.com/obmd/obmd/keys"
	"github.com/obmd/obmd/sol"
	"github.com/obmd/obmd/sol/ipmi"
	"github.com/obmd/obmd/sol/sim"
)

// Start opens the listeners, opens and migrates the database, loads or
// creates keys and builds every part, in that order, one step each. On
// error, whatever was opened is closed. The listeners come first, so that
// a taken port fails the start before anything is created in the state
// directory; the database before the secrets, so that an unreachable
// database fails the start without generating an admin token nobody would
// see.
func (d *Daemon) Start(ctx context.Context) (err error) {
	defer func() {
		if err != nil {
			d.closeAll()
		}
	}()
	if err := d.listen(); err != nil {
		return err
	}
	if err := d.openStore(ctx); err != nil {
		return err
	}
	sec, err := d.loadSecrets()
	if err != nil {
		return err
	}
	powerBMCs, err := d.buildBMCSide(sec)
	if err != nil {
		return err
	}
	gate, err := d.buildAccess()
	if err != nil {
		return err
	}
	if err := d.startPeer(); err != nil { // serves the registry buildAccess made
		return err
	}
	if err := d.buildDoors(ctx, sec, gate, powerBMCs); err != nil {
		return err
	}
	if d.cfg.Daemon.Demo {
		if err := d.registerDemo(ctx); err != nil {
			return err
		}
	}
	if err := d.watcher.Start(ctx); err != nil {
		return err
	}
	d.log.WithFields(d.caps.fields()).WithFields(logrus.Fields{
		"ssh": d.sshL.Addr().String(), "admin": d.adminL.Addr().String(), "tls": d.cfg.Admin.TLSCert != "", "web": d.WebAddr(),
		"host_key": d.fingerprint, "db": d.store.Dialect(), "admin_token_file": adminTokenSource(d.cfg, sec.tokenFile),
		"version": d.cfg.Version, "replica": d.cfg.Replica.ID, "peer": d.PeerAddr(),
	}).Info("obmd_listening")
	return nil
}

// openStore creates the state directory, then opens and migrates the
// database.
func (d *Daemon) openStore(ctx context.Context) error {
	if err := os.MkdirAll(d.cfg.Daemon.StateDir, 0o700); err != nil {
		return fmt.Errorf("state directory: %w", err)
	}
	a := d.cfg.Audit
	opts := []db.Option{db.WithAuditAggregation(a.AggregateWindow, a.AggregateKeys)}
	if d.auditLog = auditlog.New(a.Export, d.log); d.auditLog != nil {
		if err := d.auditLog.Start(); err != nil {
			d.auditLog = nil
			return err
		}
		opts = append(opts, db.WithAuditSink(d.auditLog))
	}
	var err error
	if d.store, err = db.Open(ctx, d.cfg.DB.DSN, d.log, append(opts, d.dbOpts...)...); err != nil {
		return err
	}
	return d.store.Migrate(ctx)
}

// secrets are what loadSecrets read or created in the state directory.
type secrets struct {
	hostKey   gossh.Signer
	sealer    *keys.Sealer
	tokenFile string // where the admin token is kept when not configured
}

// loadSecrets loads (or creates, on a first start) the host key, the
// sealing key and the admin token.
func (d *Daemon) loadSecrets() (secrets, error) {
	var sec secrets
	var err error
	if sec.hostKey, err = keys.LoadOrCreateHostKey(d.cfg.SSH.HostKey); err != nil {
		return sec, err
	}
	d.fingerprint = keys.Fingerprint(sec.hostKey.PublicKey())
	if sec.sealer, err = keys.LoadOrCreateSealer(d.cfg.DB.SealKey); err != nil {
		return sec, err
	}
	d.adminToken = d.cfg.Admin.Token
	sec.tokenFile = filepath.Join(d.cfg.Daemon.StateDir, "admin-token")
	if d.adminToken != "" {
		return sec, nil
	}
	var created bool
	if d.adminToken, created, err = keys.LoadOrCreateSecret(sec.tokenFile); err != nil {
		return sec, err
	}
	if created {
		d.newAdminToken = d.adminToken
	}
	if len(d.adminToken) < admin.MinAdminTokenLen {
		return sec, fmt.Errorf("admin token in %s is %d characters; it must have at least %d (delete the file to have a new one generated)",
			sec.tokenFile, len(d.adminToken), admin.MinAdminTokenLen)
	}
	return sec, nil
}

// buildBMCSide builds what reaches the BMCs: the table of node types over
// the drivers, the resolver, in cluster mode the cluster around it, the
// console hub. It returns the BMCs as the commands
// reach them.
func (d *Daemon) buildBMCSide(sec secrets) (commands.Resolver, error) {
	if err := d.cfg.Redfish.LoadCAs(); err != nil {
		return nil, err
	}
	d.lab = sim.NewLab()
	cfg := d.cfg
	d.ipmiPool = ipmi.NewSessions()
	cfg.IPMI.Sessions = d.ipmiPool
	var err error
	if d.cons, err = d.newConsoles(); err != nil {
		return nil, err
	}
	if d.types, err = nodeTypes(cfg, d.ipmiOptions(), d.lab, sec.sealer, d.cons); err != nil {
		return nil, err
	}
	if d.resolver, err = nodes.NewResolver(d.types, d.store, d.log); err != nil {
		return nil, err
	}
	bmcs, powerBMCs, err := d.startCluster(sec.hostKey, d.resolver, d.resolver.ForCommands())
	if err != nil {
		return nil, err
	}
	if d.history, err = d.newConsoleHistory(); err != nil {
		return nil, err
	}
	hub := d.cfg.Console
	if d.rep.cluster != nil {
		// A replay waits for a link being opened to know whether it is a
		// relay (the holder's replay) or held here (the history).
		hub.RelayWait = max(d.cfg.Cluster.DialTimeout, 5*time.Second)
	}
	if d.consoles, err = sol.NewManager(hub, bmcs, d.history, d.log.WithField("part", "sol")); err != nil {
		return nil, fmt.Errorf("console hub: %w", err)
	}
	return powerBMCs, nil
}

// ipmiOptions are the IPMI drivers' shared options: the configured ones,
// with this replica's memory of each node's cipher suite (d.ciphers, which
// the admin API shows), the sol.enable audit event for every BMC on which
// a driver switched SOL on, and whether obmd holds a node's console
// (consoleHeld), for doctor.
func (d *Daemon) ipmiOptions() sol.IPMIOptions {
	opts := d.cfg.IPMIOptions
	d.ciphers = sol.NewCiphers()
	opts.Ciphers = d.ciphers
	opts.OnSOLEnable = func(ctx context.Context, e sol.SOLEnabled) {
		auditor{d.store, d.log}.Audit(ctx, commands.Event{Node: e.Node, Actor: "obmd", Action: "sol.enable",
			Result: commands.ResultOK, Detail: strings.Join(e.Changes, ", ")})
	}
	opts.ConsoleHeld = d.consoleHeld
	return opts
}

// consoleHeld reports whether obmd holds label's SOL payload: in cluster
// mode, whether any replica holds the node's SOL lease (the one holder of
// its link, wherever the doctor runs); otherwise whether this replica's
// console hub has the node's link up. The drivers call it only once the
// daemon has started (a diagnosis), when both exist.
func (d *Daemon) consoleHeld(ctx context.Context, label string) bool {
	if d.rep.cluster != nil {
		return d.rep.cluster.ConsoleHeld(ctx, label)
	}
	return d.consoles.LinkUp(label)
}

// buildAccess builds who may use a node: the session registry, the
// database's health (in cluster mode with the replica's fence) and gate,
// the Revoker and its change watcher, and the guessing limiter. It returns
// the gated database the doors look up logins in.
func (d *Daemon) buildAccess() (*access.Gate, error) {
	d.reg = sessions.New(d.sessionsConfig())
	var (
		peers      access.Peers
		fence      access.Fence
		fenceAfter time.Duration
	)
	if d.rep.cluster != nil {
		peers, fence, fenceAfter = d.rep.cluster, d.rep.cluster, d.rep.cluster.FenceAfter()
	}
	d.health = access.NewHealth(d.store, fence)
	gate := access.NewGate(d.store, d.health, d.dbBound(), d.store.Exclusive() && d.rep.cluster == nil)
	onApply := func(label string, epoch int64) {
		d.history.applied(label, epoch)
		d.resolver.Forget(label, epoch) // the info of the node's previous epochs is no longer served
	}
	d.revoker = access.NewRevoker(access.RevokerConfig{ChangeTimeout: d.cfg.Access.ChangeTimeout, Peers: peers,
		OnApply: onApply, Usable: d.health.Usable},
		d.consoles, d.reg, gate, d.log)
	var err error
	d.watcher, err = access.NewWatcher(access.WatchConfig{Poll: d.cfg.Access.Poll, Bound: d.dbBound(),
		DBGrace: d.cfg.DB.Grace, FenceAfter: fenceAfter}, d.store, d.health, d.revoker, d.announce, d.log)
	if err != nil {
		return nil, err
	}
	// One guessing budget per source for SSH and the admin API.
	d.limiter = authlimit.New(d.cfg.AuthLimits, time.Now)
	return gate, nil
}

// dbBound bounds each database call of a login's lookups, the change
// watcher's polls and this replica's announcements: access.change_timeout, plus
// on a Galera node the time the cluster may hold every call while it
// evicts a dead member (db.Store.Eviction), so that such a call waits the
// eviction out instead of failing in it.
func (d *Daemon) dbBound() time.Duration { return d.cfg.Access.ChangeTimeout + d.store.Eviction() }

// buildDoors builds the metrics, the command runner, the admin API and the
// SSH front door.
func (d *Daemon) buildDoors(ctx context.Context, sec secrets, gate *access.Gate, powerBMCs commands.Resolver) error {
	d.metrics = metrics.New()
	runner, err := commands.NewRunner(commands.Config{Timeout: d.cfg.Commands.Timeout, Version: d.cfg.Version,
		Observe: d.metrics.ObservePower, History: d.history},
		powerBMCs, d.consoles, sessionList{d.allSessions(), d.consoles}, auditor{d.store, d.log}, d.log)
	if err != nil {
		return fmt.Errorf("command runner: %w", err)
	}
	proxyFrom, err := d.cfg.SSH.balancers()
	if err != nil {
		return err
	}
	trustedProxies, err := d.cfg.Admin.trustedProxies()
	if err != nil {
		return err
	}
	if err := d.buildWeb(ctx, gate); err != nil {
		return err
	}
	var clusterSessions admin.ClusterSessions
	if d.rep.cluster != nil {
		clusterSessions = d.allSessions()
	}
	api, err := admin.New(admin.Config{AdminToken: d.adminToken, Cluster: clusterSessions, Limiter: d.limiter, Metrics: d.metrics,
		ChangeTimeout: d.cfg.Access.ChangeTimeout, Ready: d.health.Ready, ReadyNotes: d.readyNotes, OnAuth: d.metrics.ObserveAuth, TrustedProxies: trustedProxies,
		Authenticated: conncap.TrustContext, TenantSession: conncap.TrustTenantContext, FailDelay: d.cfg.Admin.FailDelay,
		CipherInUse: d.ciphers.Suite, ConsoleInUse: d.cons.mem.InUse, History: d.history, WebTickets: d.webTicketMinter()},
		d.store, d.types, runner, d.consoles, d.revoker, d.reg, d.log.WithField("part", "admin"))
	if err != nil {
		return err
	}
	if d.certs, err = d.certPolicy(); err != nil {
		return err
	}
	d.ssh, err = sshdoor.New(sshdoor.Config{HostKeys: []gossh.Signer{sec.hostKey}, Escape: d.cfg.SSH.Escape,
		Limiter: d.limiter, FailDelay: d.cfg.SSH.FailDelay, LoginGraceTime: d.cfg.SSH.LoginGraceTime,
		MaxConns: d.caps.ssh, MaxUnauthenticated: d.caps.sshUnauth, MaxUnauthenticatedPerSource: d.cfg.SSH.MaxUnauthenticatedPerSource,
		MaxConnsPerSource: d.cfg.SSH.MaxConnsPerSource, ProxyProtocolFrom: proxyFrom,
		Banner: d.loginBanner, OnAuth: d.metrics.ObserveAuth, LegacyAlgorithms: d.cfg.SSH.LegacyAlgorithms,
		Certs: d.certs, RoleWait: d.roleWait()},
		gate, runner, d.consoles, d.revoker, d.log.WithField("part", "ssh"))
	if err != nil {
		return err
	}
	if err := d.pullMetrics(); err != nil {
		return err
	}
	d.http = d.newHTTPServer(ctx, api.Handler())
	return nil
}

// listen opens the SSH and admin listeners (the admin one with TLS when
// configured) and, in cluster mode, the peer listener. Connections wait in
// the backlog until Run serves them.
func (d *Daemon) listen() error {
	var cert tls.Certificate
	if d.cfg.Admin.TLSCert != "" {
		var err error
		if cert, err = tls.LoadX509KeyPair(d.cfg.Admin.TLSCert, d.cfg.Admin.TLSKey); err != nil {
			return fmt.Errorf("admin TLS: %w", err)
		}
	}
	var err error
	if d.sshL, err = net.Listen("tcp", d.cfg.SSH.Addr); err != nil {
		return fmt.Errorf("listen for SSH: %w", err)
	}
	if d.adminL, err = net.Listen("tcp", d.cfg.Admin.Addr); err != nil {
		return fmt.Errorf("listen for admin HTTP: %w", err)
	}
	d.caps = sizeCaps(d.cfg, openFileLimit())
	if d.adminL, err = d.proxyAdmin(d.adminL); err != nil { // before the caps: they count the real client
		return err
	}
	if d.adminL, err = d.capAdmin(d.adminL); err != nil {
		return err
	}
	if d.cfg.Admin.TLSCert != "" {
		d.adminL = tls.NewListener(d.adminL, &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12})
	}
	if err := d.listenWeb(); err != nil {
		return err
	}
	if d.cfg.Replica.PeerAddr != "" {
		if d.rep.peerL, err = net.Listen("tcp", d.cfg.Replica.PeerAddr); err != nil {
			return fmt.Errorf("listen for peers: %w", err)
		}
		if d.rep.peerL, err = d.capPeer(d.rep.peerL); err != nil {
			return err
		}
	}
	return nil
}

func adminTokenSource(cfg Config, file string) string {
	if cfg.Admin.Token != "" {
		return "(from configuration)"
	}
	return file
}

// registerDemo makes sure node "demo" exists on the simulator and gives it a
// fresh token (only hashes are stored, so the old one cannot be shown).
func (d *Daemon) registerDemo(ctx context.Context) error {
	if _, err := d.store.Node(ctx, DemoNode); errors.Is(err, db.ErrNotFound) {
		info, err := d.types.Parse(string(TypeSim), false, func(v any) error {
			return json.Unmarshal([]byte(`{"addr":"simulator"}`), v)
		})
		if err != nil {
			return fmt.Errorf("register demo node: %w", err)
		}
		sealed, err := d.types.Seal(DemoNode, info)
		if err != nil {
			return err
		}
		if _, err := d.store.CreateNode(ctx, db.Node{Label: DemoNode, Type: string(TypeSim), InfoSealed: sealed}); err != nil {
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

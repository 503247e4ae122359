package daemon

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"time"

	"github.com/sirupsen/logrus"
	gossh "golang.org/x/crypto/ssh"

	"github.com/obmd/obmd/bastion/access"
	"github.com/obmd/obmd/bastion/cluster"
	"github.com/obmd/obmd/commands"
	"github.com/obmd/obmd/db"
	"github.com/obmd/obmd/sol"
)

// dbDownBanner is shown to SSH clients while this replica cannot use its
// database (it does not answer, or does not complete writes: a frozen
// disk): their login will fail (access is never decided from memory), and
// this says why.
const dbDownBanner = "obmd: this server cannot reach its database right now (it does not answer, or does not complete writes),\r\n" +
	"so it cannot check your access. Logins are refused until it is back; try again shortly\r\n" +
	"(another obmd replica may serve you).\r\n"

// replicas is the daemon's part in a cluster of replicas sharing one
// database. With no peer address configured it is single-replica mode:
// no leases, no peer server.
type replicas struct {
	cluster *cluster.Cluster
	peer    *cluster.PeerServer
	peerL   net.Listener
	zones   zoneStatus // zones.go
}

// everyAddress reports whether a listen host binds every address ("",
// 0.0.0.0, ::).
func everyAddress(host string) bool {
	ip := net.ParseIP(host)
	return host == "" || ip != nil && ip.IsUnspecified()
}

// defaultReplicaID is the host name and a random suffix: unique per run,
// and readable in logs and "busy on replica ..." messages.
func defaultReplicaID() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "obmd"
	}
	host, _, _ = strings.Cut(host, ".")
	if len(host) > 60 {
		host = host[:60]
	}
	var b [4]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
	return host + "-" + hex.EncodeToString(b[:])
}

// startCluster, in cluster mode, wraps local in the cluster's resolver
// (the peer listener is open already: listen); otherwise it returns local
// as it is.
func (d *Daemon) startCluster(hostKey gossh.Signer, local sol.Resolver, forCommands commands.Resolver) (sol.Resolver, commands.Resolver, error) {
	if d.cfg.Replica.PeerAddr == "" {
		return local, forCommands, nil
	}
	advertise := d.cfg.Replica.PeerAdvertise
	if advertise == "" {
		advertise = d.rep.peerL.Addr().String() // a specific address: replicaDefaults checked
	}
	var err error
	cfg := d.cfg.Cluster
	cfg.ReplicaID, cfg.PeerAddr = d.cfg.Replica.ID, advertise
	cfg.LeaseTTL = leaseTTL(d.cfg.Cluster.LeaseTTL, d.store.GaleraSuspect(), d.log)
	d.rep.cluster, err = cluster.New(cfg, hostKey, clusterAccess{d}, d.store, local, d.log.WithField("part", "cluster"))
	if err != nil {
		return nil, nil, err
	}
	return d.rep.cluster, d.rep.cluster.ForCommands(), nil
}

// leaseTTL is the lease TTL to run with: the configured one, or, left
// unset on a Galera cluster (suspect, its evs.suspect_timeout, above 0),
// one that outlasts the eviction of a dead node, during which every write
// stalls (measured: suspect + 1-2 s): twice (suspect + 1 s), and at least
// the default. With a shorter TTL the death of any one database node
// fences every replica (docs/replicas.md); a configured TTL that short is
// kept, and warned about.
func leaseTTL(configured, suspect time.Duration, log logrus.FieldLogger) time.Duration {
	if suspect <= 0 {
		return configured
	}
	outlast := 2 * (suspect + time.Second)
	switch {
	case configured == 0:
		ttl := max(outlast, cluster.DefaultLeaseTTL)
		log.WithFields(logrus.Fields{"lease_ttl": ttl.String(), "evs_suspect_timeout": suspect.String()}).Info("lease_ttl_from_galera")
		return ttl
	case configured < outlast:
		log.WithFields(logrus.Fields{"lease_ttl": configured.String(), "evs_suspect_timeout": suspect.String(), "want_at_least": outlast.String()}).
			Warn("lease_ttl_below_galera_eviction")
	}
	return configured
}

// startPeer builds the peer server over the console hub (cluster mode).
func (d *Daemon) startPeer() error {
	if d.rep.cluster == nil {
		return nil
	}
	var err error
	d.rep.peer, err = cluster.NewPeerServer(d.rep.cluster, d.consoles, d.reg, d.log.WithField("part", "peer"))
	return err
}

// guard fences this replica whenever its announcement may have lapsed for
// the others (cluster.Guard): its links are closed and every session cut,
// before any other replica may count it stopped. It returns when ctx ends.
func (d *Daemon) guard(ctx context.Context) error {
	if d.rep.cluster == nil {
		return nil
	}
	return d.rep.cluster.Guard(ctx, d.watcher.Fence)
}

// servePeer serves other replicas until the peer server closes.
func (d *Daemon) servePeer() error {
	if d.rep.peer == nil {
		return nil
	}
	if err := d.rep.peer.Serve(d.rep.peerL); !errors.Is(err, cluster.ErrServerClosed) {
		return fmt.Errorf("peer server: %w", err)
	}
	return nil
}

// closePeer stops the peer server (relayed viewers elsewhere reconnect),
// or just its listener after a failed Start.
func (d *Daemon) closePeer() {
	if d.rep.peer != nil {
		d.rep.peer.Close()
	}
	if d.rep.peerL != nil {
		d.rep.peerL.Close()
	}
}

// announce tells the other replicas, through the database, that this one
// is alive and has applied every access change up to applied (cluster
// mode), within dbBound. The Watcher logs a failure: the
// announcement expires, and replicas that change access then stop waiting
// for this one, which fences itself first (guard).
func (d *Daemon) announce(ctx context.Context, applied int64) error {
	if d.rep.cluster == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, d.dbBound())
	defer cancel()
	return d.rep.cluster.Announce(ctx, applied)
}

// withdraw removes this replica's announcement at a clean stop.
func (d *Daemon) withdraw(ctx context.Context) {
	if d.rep.cluster == nil {
		return
	}
	if err := d.rep.cluster.Withdraw(ctx); err != nil {
		d.log.WithError(err).Warn("replica_withdraw_failed")
	}
}

// PeerAddr is the peer listener's address ("" in single-replica mode).
func (d *Daemon) PeerAddr() string {
	if d.rep.peerL == nil {
		return ""
	}
	return d.rep.peerL.Addr().String()
}

// loginBanner is the SSH banner: empty while the database answers.
func (d *Daemon) loginBanner() string {
	if !d.health.Usable() {
		return dbDownBanner
	}
	return ""
}

// clusterAccess is the cluster's view of the Revoker (cluster.Access). It
// exists because the cluster is built before the Revoker (which needs the
// console hub, which needs the cluster): d.revoker is set before anything
// opens a console.
type clusterAccess struct{ d *Daemon }

func (a clusterAccess) Current(ctx context.Context, label string) (int64, error) {
	return a.d.revoker.Current(ctx, label)
}

func (a clusterAccess) Serve(ctx context.Context, label string, epoch int64, attach func() error) error {
	err := a.d.revoker.Serve(ctx, label, epoch, attach)
	if errors.Is(err, access.ErrStaleEpoch) {
		return fmt.Errorf("%w: %w", cluster.ErrStale, err)
	}
	return err
}

func (a clusterAccess) Apply(label string, epoch int64, why string) {
	a.d.revoker.Apply(label, epoch, why)
}

func (a clusterAccess) ApplyCred(epoch int64, c db.CredChange, why string) {
	a.d.revoker.ApplyCred(epoch, c, why)
}

// roleWait is how long a console's banner waits to learn who writes: in
// cluster mode the SOL lease holder decides, so the dial to it (bounded by
// the cluster's dial timeout) and a second for its answer; a single
// replica decides at once.
func (d *Daemon) roleWait() time.Duration {
	if d.rep.cluster == nil {
		return 0
	}
	return d.rep.cluster.DialTimeout() + time.Second
}

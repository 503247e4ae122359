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
	"sync/atomic"
	"time"

	"github.com/sirupsen/logrus"
	gossh "golang.org/x/crypto/ssh"

	"github.com/obmd/obmd/bastion/cluster"
	"github.com/obmd/obmd/commands"
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
	// dbDown is set while the last look at the database (the access-change
	// poll) failed.
	dbDown atomic.Bool
	// downSince is when the database stopped answering (zero while it
	// answers). Owned by the access-change poll.
	downSince time.Time
}

// whyDBLost is why the sessions of a replica that has not reached its
// database for DBGrace end.
const whyDBLost = "this obmd lost its database and cannot check access; reconnect"

// replicaDefaults fills the replica settings (part of setDefaults).
func (c *Config) replicaDefaults() error {
	if c.ReplicaID == "" {
		c.ReplicaID = defaultReplicaID()
	}
	if c.LeaseTTL < 0 {
		return errors.New("lease_ttl must not be negative")
	}
	if c.LeaseTTL == 0 {
		c.LeaseTTL = 6 * time.Second
	}
	if c.DBGrace < 0 {
		return errors.New("db_grace must not be negative")
	}
	if c.DBGrace == 0 {
		c.DBGrace = 30 * time.Second
	}
	if c.PeerAdvertise != "" && c.PeerAddr == "" {
		return errors.New("peer_advertise needs peer_addr")
	}
	if c.PeerAddr == "" {
		return nil
	}
	// A replica announces itself at each poll and stops serving lease_ttl
	// less the fence margin after the last one began: a poll must fit in
	// there twice.
	if fence := c.LeaseTTL - cluster.DefaultFenceMargin(c.LeaseTTL); 2*c.EpochPoll >= fence {
		return fmt.Errorf("epoch_poll %v must be below half of %v (lease_ttl %v less a sixth): a replica that has not announced itself by then stops serving",
			c.EpochPoll, fence, c.LeaseTTL)
	}
	host, _, err := net.SplitHostPort(c.PeerAddr)
	if err != nil {
		return fmt.Errorf("peer_addr: %w", err)
	}
	if c.PeerAdvertise == "" {
		// The others dial the bound address: it must be one they can.
		if everyAddress(host) {
			return fmt.Errorf("peer_addr %s listens on every address: set peer_advertise to the address other replicas dial", c.PeerAddr)
		}
		return nil
	}
	host, port, err := net.SplitHostPort(c.PeerAdvertise)
	if err != nil {
		return fmt.Errorf("peer_advertise: %w", err)
	}
	if everyAddress(host) || port == "" || port == "0" {
		return fmt.Errorf("peer_advertise %s: want the host and port other replicas dial", c.PeerAdvertise)
	}
	return nil
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
	if d.cfg.PeerAddr == "" {
		return local, forCommands, nil
	}
	advertise := d.cfg.PeerAdvertise
	if advertise == "" {
		advertise = d.rep.peerL.Addr().String() // a specific address: replicaDefaults checked
	}
	var err error
	d.rep.cluster, err = cluster.New(cluster.Config{ReplicaID: d.cfg.ReplicaID, PeerAddr: advertise, HostKey: hostKey,
		Access: clusterAccess{d}, LeaseTTL: d.cfg.LeaseTTL}, d.store, local, d.log.WithField("part", "cluster"))
	if err != nil {
		return nil, nil, err
	}
	return d.rep.cluster, d.rep.cluster.ForCommands(), nil
}

// startPeer builds the peer server over the console hub (cluster mode).
func (d *Daemon) startPeer() error {
	if d.rep.cluster == nil {
		return nil
	}
	var err error
	d.rep.peer, err = cluster.NewPeerServer(d.rep.cluster, d.consoles, d.log.WithField("part", "peer"))
	return err
}

// firstAnnounce announces this replica before it serves anything (cluster
// mode): until it has, it is fenced (cluster.Fenced), since no other
// replica would wait for it. Changes made before it started have nothing
// to cut here. It also says when db_grace is more than the fence allows.
func (d *Daemon) firstAnnounce(ctx context.Context) error {
	if d.rep.cluster == nil {
		return nil
	}
	latest, err := d.store.LatestChange(ctx)
	if err != nil {
		return fmt.Errorf("read access changes: %w", err)
	}
	if err := d.rep.cluster.Announce(ctx, latest); err != nil {
		return fmt.Errorf("announce this replica: %w", err)
	}
	if fence := d.rep.cluster.FenceAfter(); d.cfg.DBGrace > fence {
		d.log.WithFields(logrus.Fields{"db_grace": d.cfg.DBGrace.String(), "fence_after": fence.String(),
			"lease_ttl": d.cfg.LeaseTTL.String()}).Info("db_grace_capped")
	}
	return nil
}

// guard fences this replica whenever its announcement may have lapsed for
// the others (cluster.Guard): its links are closed and every session cut,
// before any other replica may count it stopped. It returns when ctx ends.
func (d *Daemon) guard(ctx context.Context) error {
	if d.rep.cluster == nil {
		return nil
	}
	return d.rep.cluster.Guard(ctx, func() { d.cutAll(whyDBLost) })
}

// fenced reports whether this replica is fenced (cluster mode): it refuses
// logins, sessions, consoles and relays as while its database is down.
func (d *Daemon) fenced() bool {
	return d.rep.cluster != nil && d.rep.cluster.Fenced()
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
// mode). A failure is logged: the announcement expires, and replicas that
// change access then stop waiting for this one.
func (d *Daemon) announce(ctx context.Context, applied int64) {
	if d.rep.cluster == nil {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, d.cfg.ChangeTimeout)
	defer cancel()
	if err := d.rep.cluster.Announce(ctx, applied); err != nil && ctx.Err() == nil {
		d.log.WithError(err).Warn("replica_announce_failed")
	}
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

// dbPolled records the outcome of a look at the database (the access-change
// poll, its only caller). While it fails, logins are refused with a banner;
// once it has failed for DBGrace, every session is cut, since access
// changes made through other replicas can no longer reach this one. (In
// cluster mode the fence cuts them sooner when DBGrace is longer than
// cluster.FenceAfter: guard.)
func (d *Daemon) dbPolled(err error) {
	d.rep.dbDown.Store(err != nil)
	switch {
	case err == nil:
		if !d.rep.downSince.IsZero() {
			d.log.WithField("down_for", time.Since(d.rep.downSince).Round(time.Millisecond)).Info("db_reachable_again")
		}
		d.rep.downSince = time.Time{}
	case d.rep.downSince.IsZero():
		d.rep.downSince = time.Now()
	case time.Since(d.rep.downSince) >= d.cfg.DBGrace:
		d.cutAll(whyDBLost)
	}
}

// cutAll ends every live session (as revoked, with why) and wipes their
// nodes' scrollback, through the Revoker: one pass over the registry, then
// the consoles, each node under its revocation lock.
func (d *Daemon) cutAll(why string) {
	if cut := d.revoker.CutAll(why); cut > 0 {
		d.log.WithField("cut", cut).Warn("sessions_cut_db_lost")
	}
}

// loginBanner is the SSH banner: empty while the database answers.
func (d *Daemon) loginBanner() string {
	if d.dbUnusable() {
		return dbDownBanner
	}
	return ""
}

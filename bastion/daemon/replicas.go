package daemon

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"sync/atomic"
	"time"

	gossh "golang.org/x/crypto/ssh"

	"github.com/obmd/obmd/bastion/cluster"
	"github.com/obmd/obmd/commands"
	"github.com/obmd/obmd/sol"
)

// dbDownBanner is shown to SSH clients while this replica cannot reach its
// database: their login will fail (access is never decided from memory),
// and this says why.
const dbDownBanner = "obmd: this server cannot reach its database right now, so it cannot check your access.\r\n" +
	"Logins are refused until it is back; try again shortly (another obmd replica may serve you).\r\n"

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
}

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
	if c.PeerAdvertise != "" && c.PeerAddr == "" {
		return errors.New("peer_advertise needs peer_addr")
	}
	return nil
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

// startCluster, in cluster mode, opens the peer listener and wraps local in
// the cluster's resolver; otherwise it returns local as it is.
func (d *Daemon) startCluster(hostKey gossh.Signer, local sol.Resolver, forCommands commands.Resolver) (sol.Resolver, commands.Resolver, error) {
	if d.cfg.PeerAddr == "" {
		return local, forCommands, nil
	}
	l, err := net.Listen("tcp", d.cfg.PeerAddr)
	if err != nil {
		return nil, nil, fmt.Errorf("listen for peers: %w", err)
	}
	d.rep.peerL = l
	advertise := d.cfg.PeerAdvertise
	if advertise == "" {
		advertise = l.Addr().String()
		if ip := l.Addr().(*net.TCPAddr).IP; ip.IsUnspecified() {
			return nil, nil, fmt.Errorf("peer_addr %s listens on every address: set peer_advertise to the address other replicas dial", d.cfg.PeerAddr)
		}
	}
	d.rep.cluster, err = cluster.New(cluster.Config{ReplicaID: d.cfg.ReplicaID, PeerAddr: advertise, HostKey: hostKey,
		LeaseTTL: d.cfg.LeaseTTL}, d.store, local, d.log.WithField("part", "cluster"))
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

// PeerAddr is the peer listener's address ("" in single-replica mode).
func (d *Daemon) PeerAddr() string {
	if d.rep.peerL == nil {
		return ""
	}
	return d.rep.peerL.Addr().String()
}

// ReplicaID is this replica's ID.
func (d *Daemon) ReplicaID() string { return d.cfg.ReplicaID }

// dbPolled records the outcome of a look at the database.
func (d *Daemon) dbPolled(err error) { d.rep.dbDown.Store(err != nil) }

// loginBanner is the SSH banner: empty while the database answers.
func (d *Daemon) loginBanner() string {
	if d.rep.dbDown.Load() {
		return dbDownBanner
	}
	return ""
}

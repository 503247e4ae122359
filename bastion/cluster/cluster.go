// Package cluster lets several obmd replicas share one database and the same
// BMCs.
//
// It wraps the replica's BMC resolver so that, across the cluster, a node
// has at most one SOL link and one power operation at a time.
//
// Consoles: the replica whose console hub opens a node's link first takes
// the node's SOL lease (a row in the database, renewed while the link is
// open, released when it closes) and activates SOL on the BMC. A replica
// that finds the lease held by another connects to that replica's peer
// server instead and relays: the holder attaches a relay viewer to its own
// hub, so every viewer in the cluster sees the same live stream from one
// SOL payload. When the holder dies its lease expires and the next replica
// that needs the console takes it over (its hub reconnects on its own).
//
// Power: every power or boot-device operation takes the node's power lease
// for its duration; a replica that finds it held answers commands.ErrBusy.
//
// Access: since every byte of a node's console passes through its holder,
// the holder is where access changes are enforced across the cluster. A
// replica opens a link or relay only at the node's current access epoch
// (Access.Current), a relay carries that epoch, and the holder serves it
// only at the node's current epoch, applied there first (Access.Serve).
// The replica that takes a change tells the others (Notify: a notice over
// the peer link, or their announcements in the database) before it is
// acknowledged, so the holder has cut the previous tenancy by then. One
// that cannot be told is counted out only once its announcement has
// expired by a margin; it has fenced itself a margin before that
// (fence.go: Guard, and the SOL links' own deadlines).
//
// Replicas authenticate each other with the SSH host key they already
// share: the peer channel is SSH, the server proves the shared host key and
// so does the client, and console bytes are encrypted on the wire.
package cluster

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/sirupsen/logrus"
	gossh "golang.org/x/crypto/ssh"

	"github.com/obmd/obmd/commands"
	"github.com/obmd/obmd/db"
	"github.com/obmd/obmd/sol"
	"github.com/obmd/obmd/sol/screen"
)

// Store is the part of the database the cluster uses: leases, and the
// replicas' announcements.
type Store interface {
	AcquireLease(ctx context.Context, l db.Lease, ttl time.Duration) (db.Lease, error)
	RenewLease(ctx context.Context, node, kind, token string, ttl time.Duration) (time.Time, error)
	ReleaseLease(ctx context.Context, node, kind, token string) error
	Lease(ctx context.Context, node, kind string) (db.Lease, error)
	AnnounceIn(ctx context.Context, id, addr string, zones []string, applied int64, ttl time.Duration) error
	NodeZone(ctx context.Context, label string) (string, error)
	Withdraw(ctx context.Context, id string) error
	ReplicasWithin(ctx context.Context, grace time.Duration) ([]db.Replica, error)
}

// Access is this replica's side of access changes (access.Revoker). The
// cluster opens a node's console link or relay only once this replica has
// applied the node's current access epoch (Current), serves a relay only
// to a replica at that epoch (Serve, which applies it here first if need
// be), and applies the changes other replicas announce (Apply, and
// ApplyCred for a credential change: a CA removed, a certificate revoked).
type Access interface {
	Current(ctx context.Context, label string) (int64, error)
	Serve(ctx context.Context, label string, epoch int64, attach func() error) error
	Apply(label string, epoch int64, why string)
	ApplyCred(epoch int64, c db.CredChange, why string)
}

// DefaultLeaseTTL is Config.LeaseTTL's default.
const DefaultLeaseTTL = 6 * time.Second

// Config configures one replica's part in the cluster (its tunables: the
// YAML section cluster; the rest the wiring sets). Zero durations take the
// defaults noted.
type Config struct {
	// ReplicaID names this replica in leases, logs and messages ("busy on
	// replica X"); unique per running replica. Required.
	ReplicaID string `yaml:"-"`
	// PeerAddr is where other replicas reach this replica's peer server
	// (host:port). Required.
	PeerAddr string `yaml:"-"`
	// LeaseTTL is how long a lease outlives its last renewal, so how long
	// a dead holder blocks the takeover of its consoles (default
	// DefaultLeaseTTL), and how long an announcement lasts.
	LeaseTTL time.Duration `yaml:"lease_ttl"`
	// FenceMargin is how long before its announcement (or a SOL lease)
	// expires this replica stops serving, and how long after another
	// replica's announcement expired this one counts it stopped (default
	// LeaseTTL/6, below LeaseTTL/2): it covers the time a fence takes and
	// the clocks (fence.go). The wiring leaves it at its default.
	FenceMargin time.Duration `yaml:"-"`
	// Renew is how often a held SOL lease is renewed (default LeaseTTL/3).
	Renew time.Duration `yaml:"renew"`
	// PowerHold bounds one power operation that comes without a deadline
	// (default 1 min); the power lease lasts as long as the operation may.
	PowerHold time.Duration `yaml:"power_hold"`
	// DialTimeout bounds connecting to a peer (default 5 s).
	DialTimeout time.Duration `yaml:"dial_timeout"`
	// Keepalive is how often peer connections are probed; a peer that
	// does not answer within two intervals is dropped (default 5 s).
	Keepalive time.Duration `yaml:"keepalive"`
	// Zones are the BMC networks this replica reaches (db.ValidZones):
	// it opens the console links of the nodes in them and of the nodes
	// without a zone only, and relays the others (zones.go). None (the
	// default): every zone.
	Zones []string `yaml:"zones"`
	// HandOffRate bounds the captured links this replica hands off to
	// replicas short of their share, a second (default
	// DefaultHandOffRate): each closes a SOL session here and opens one
	// there.
	HandOffRate int `yaml:"handoff_rate"`
}

// DefaultHandOffRate is Config.HandOffRate's default: a replica joining
// one that holds 10,000 captured links is handed its 5,000 over 50 s.
const DefaultHandOffRate = 100

// WithDefaults returns c with its unset tunables at their defaults (the
// lease TTL's is DefaultLeaseTTL; the wiring may settle another at start),
// or an error for ones that do not fit together. It checks no dependency:
// New does.
func (c Config) WithDefaults() (Config, error) {
	switch {
	case db.ValidZones(c.Zones) != nil:
		return c, fmt.Errorf("zones: %w", db.ValidZones(c.Zones))
	case c.HandOffRate < 0:
		return c, errors.New("negative hand-off rate")
	case c.LeaseTTL < 0 || c.Renew < 0 || c.PowerHold < 0 || c.DialTimeout < 0 || c.Keepalive < 0 || c.FenceMargin < 0:
		return c, errors.New("negative duration")
	}
	if c.LeaseTTL == 0 {
		c.LeaseTTL = DefaultLeaseTTL
	}
	if c.Renew == 0 {
		c.Renew = c.LeaseTTL / 3
	}
	if c.FenceMargin == 0 {
		c.FenceMargin = DefaultFenceMargin(c.LeaseTTL)
	}
	if c.FenceMargin >= c.LeaseTTL/2 {
		return c, fmt.Errorf("fence margin %v must be below half the lease TTL %v", c.FenceMargin, c.LeaseTTL)
	}
	if c.Renew >= c.LeaseTTL-c.FenceMargin {
		return c, fmt.Errorf("renew interval %v must be below the lease TTL %v less the fence margin %v", c.Renew, c.LeaseTTL, c.FenceMargin)
	}
	if c.PowerHold == 0 {
		c.PowerHold = time.Minute
	}
	if c.DialTimeout == 0 {
		c.DialTimeout = 5 * time.Second
	}
	if c.Keepalive == 0 {
		c.Keepalive = 5 * time.Second
	}
	if c.HandOffRate == 0 {
		c.HandOffRate = DefaultHandOffRate
	}
	return c, nil
}

func (c *Config) setDefaults() error {
	switch {
	case c.ReplicaID == "":
		return errors.New("no replica ID")
	case len(c.ReplicaID) > 100:
		return errors.New("replica ID longer than 100 bytes")
	case c.PeerAddr == "":
		return errors.New("no peer address")
	}
	var err error
	*c, err = c.WithDefaults()
	return err
}

// DefaultFenceMargin is Config.FenceMargin's default for a lease TTL.
func DefaultFenceMargin(leaseTTL time.Duration) time.Duration { return leaseTTL / 6 }

// Cluster is one replica's view of the cluster: a sol.Resolver (and, via
// ForCommands, a commands.Resolver) whose BMCs take leases, and the record
// of which SOL leases this replica holds (for its PeerServer).
type Cluster struct {
	cfg     Config
	hostKey gossh.Signer // shared by every replica: authenticates the peer channel both ways
	access  Access       // this replica's revocation state
	store   Store
	local   sol.Resolver
	log     logrus.FieldLogger
	// proto is the highest peer protocol version this replica speaks:
	// ProtocolVersion (tests set a lower one to play an older release).
	proto int

	mu    sync.Mutex
	held  map[string]string         // label -> token of the SOL lease this replica holds
	links map[*heldConsole]struct{} // the SOL links open under those leases

	fence fence // fence.go
}

// New validates cfg and returns a Cluster over local, the resolver that
// builds this replica's real drivers. hostKey is the SSH host key every
// replica shares (it authenticates the peer channel in both directions);
// access is this replica's revocation state. It starts nothing.
func New(cfg Config, hostKey gossh.Signer, access Access, store Store, local sol.Resolver, log logrus.FieldLogger) (*Cluster, error) {
	switch {
	case hostKey == nil:
		return nil, errors.New("cluster: no host key")
	case access == nil:
		return nil, errors.New("cluster: no access state")
	case store == nil || local == nil || log == nil:
		return nil, errors.New("cluster: missing dependency")
	}
	if err := cfg.setDefaults(); err != nil {
		return nil, fmt.Errorf("cluster: %w", err)
	}
	return &Cluster{cfg: cfg, hostKey: hostKey, access: access, store: store, local: local, log: log, proto: ProtocolVersion, held: map[string]string{},
		links: map[*heldConsole]struct{}{}, fence: newFence()}, nil
}

// Resolve returns label's BMC as the cluster shares it: power operations
// take the node's power lease around the real driver's call; OpenConsole
// opens the real console under the node's SOL lease, or relays through the
// replica that holds it.
func (c *Cluster) Resolve(ctx context.Context, label string) (sol.BMC, error) {
	return c.ResolveAt(ctx, label, 0)
}

// EpochResolver is a local resolver that can find a node's BMC as it was
// at an access epoch (nodes.Resolver; see commands.EpochResolver).
type EpochResolver interface {
	ResolveAt(ctx context.Context, label string, epoch int64) (sol.BMC, error)
}

// ResolveAt is Resolve for a session admitted at access epoch epoch: the
// local resolver is asked for the BMC at that epoch, if it can be (0:
// Resolve).
func (c *Cluster) ResolveAt(ctx context.Context, label string, epoch int64) (sol.BMC, error) {
	var (
		inner sol.BMC
		err   error
	)
	if at, ok := c.local.(EpochResolver); ok && epoch > 0 {
		inner, err = at.ResolveAt(ctx, label, epoch)
	} else {
		inner, err = c.local.Resolve(ctx, label)
	}
	if err != nil {
		return nil, err
	}
	return &bmc{c: c, label: label, inner: inner}, nil
}

// ScreenSize is sol.ScreenSizer's: the local resolver's, if it has one
// (else the default).
func (c *Cluster) ScreenSize(ctx context.Context, label string) (screen.Size, error) {
	if s, ok := c.local.(sol.ScreenSizer); ok {
		return s.ScreenSize(ctx, label)
	}
	return screen.Size{}, nil
}

// ForCommands adapts the cluster to commands.Resolver (and
// commands.EpochResolver).
func (c *Cluster) ForCommands() commands.Resolver { return commandsResolver{c} }

type commandsResolver struct{ c *Cluster }

func (r commandsResolver) Resolve(ctx context.Context, label string) (commands.BMC, error) {
	return r.c.Resolve(ctx, label)
}

func (r commandsResolver) ResolveAt(ctx context.Context, label string, epoch int64) (commands.BMC, error) {
	return r.c.ResolveAt(ctx, label, epoch)
}

// Announce records in the database that this replica is alive (for
// LeaseTTL) and has applied every access change up to applied: the others
// tell it of their changes (Notify) and, when it cannot be reached, read
// there whether it applied them. The change watcher calls it at each poll.
// A successful announcement moves this replica's fence (fence.go) to
// LeaseTTL less FenceMargin after the write began.
func (c *Cluster) Announce(ctx context.Context, applied int64) error {
	start := time.Now()
	if err := c.store.AnnounceIn(ctx, c.cfg.ReplicaID, c.cfg.PeerAddr, c.cfg.Zones, applied, c.cfg.LeaseTTL); err != nil {
		return err
	}
	c.fence.move(start.Add(c.fenceAfter()))
	return nil
}

// HandOffRate is Config.HandOffRate, defaulted: the most captured links
// this replica hands off a second (bastion/daemon's capture poll).
func (c *Cluster) HandOffRate() int { return c.cfg.HandOffRate }

// Withdraw removes this replica's announcement (a clean stop), so that no
// one waits for it.
func (c *Cluster) Withdraw(ctx context.Context) error {
	return c.store.Withdraw(ctx, c.cfg.ReplicaID)
}

// Holds reports whether this replica holds label's SOL lease (its hub has,
// or is opening, the node's one SOL link).
func (c *Cluster) Holds(label string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.held[label] != ""
}

// ConsoleHeld reports whether any replica holds label's SOL lease, so
// that obmd (in the cluster) holds, or is opening, the node's one SOL
// link: what a diagnosis (doctor) takes an active payload held by obmd to
// mean. A lease it cannot read counts as not held (the diagnosis then
// reports the payload as another's, which is the cautious answer).
func (c *Cluster) ConsoleHeld(ctx context.Context, label string) bool {
	if c.Holds(label) {
		return true
	}
	l, err := c.store.Lease(ctx, label, db.LeaseSOL)
	if err != nil {
		if !errors.Is(err, db.ErrNotFound) {
			c.log.WithError(err).WithField("node", label).Debug("lease_read_failed")
		}
		return false
	}
	return time.Now().Before(l.ExpiresAt)
}

func (c *Cluster) hold(label, token string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.held[label] = token
}

func (c *Cluster) unhold(label, token string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.held[label] == token {
		delete(c.held, label)
	}
}

// releaseSOL gives up a SOL lease. It runs on close paths, so it has its
// own deadline and outlives the caller's context; a failure only delays a
// takeover until the lease expires. Holds turns false only afterwards.
func (c *Cluster) releaseSOL(label, token string) {
	c.release(label, db.LeaseSOL, token)
	c.unhold(label, token)
}

func (c *Cluster) release(label, kind, token string) {
	ctx, cancel := context.WithTimeout(context.Background(), c.cfg.DialTimeout)
	defer cancel()
	if err := c.store.ReleaseLease(ctx, label, kind, token); err != nil {
		c.log.WithError(err).WithFields(logrus.Fields{"node": label, "kind": kind}).Warn("lease_release_failed")
		return
	}
	c.log.WithFields(logrus.Fields{"node": label, "kind": kind}).Debug("lease_released")
}

func (c *Cluster) lease(label, kind, token string) db.Lease {
	return db.Lease{Node: label, Kind: kind, Owner: c.cfg.ReplicaID, Token: token, Addr: c.cfg.PeerAddr}
}

// newToken returns 16 random bytes in hex: one lease acquisition.
func newToken() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
	return hex.EncodeToString(b[:])
}

// exclusive runs op under label's power lease. A lease held elsewhere is
// commands.ErrBusy at once. The lease lasts as long as op may run (ctx's
// deadline, at most PowerHold) plus LeaseTTL, so a replica that dies
// mid-operation blocks the node no longer than that.
func (c *Cluster) exclusive(ctx context.Context, label string, op func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.PowerHold)
	defer cancel()
	dl, _ := ctx.Deadline()
	token := newToken()
	held, err := c.store.AcquireLease(ctx, c.lease(label, db.LeasePower, token), time.Until(dl)+c.cfg.LeaseTTL)
	if errors.Is(err, db.ErrLeaseHeld) {
		c.log.WithFields(logrus.Fields{"node": label, "holder": held.Owner}).Info("power_busy_elsewhere")
		return &commands.BusyError{Replica: held.Owner}
	}
	if err != nil {
		return fmt.Errorf("take the power lease: %w", err)
	}
	defer c.release(label, db.LeasePower, token)
	return op(ctx)
}

// bmc is a node's BMC as the cluster shares it. The console hub resolves a
// fresh one for every open attempt, so its state covers one attempt.
type bmc struct {
	c     *Cluster
	label string
	inner sol.BMC

	mu sync.Mutex
	// pending is the SOL lease token kept after OpenConsole met an active
	// payload: the hub then calls DeactivateConsole and OpenConsole again,
	// both under that lease. "" when none.
	pending string
}

var _ sol.Exclusive = (*bmc)(nil)

// Exclusive passes the driver's sol.Exclusive through, so the console hub
// keeps a mock console to one reader at a time in a cluster too. (The
// relay viewer a holder attaches for another replica's reader is such a
// reader: a new one anywhere displaces the current one.)
func (b *bmc) Exclusive() bool {
	x, ok := b.inner.(sol.Exclusive)
	return ok && x.Exclusive()
}

func (b *bmc) PowerStatus(ctx context.Context) (string, error) { return b.inner.PowerStatus(ctx) }

// Diagnose passes the driver's diagnosis through (doctor), after the
// zone's check (zoneCheck) for a node in a zone, which stops it if this
// replica cannot reach the BMC. It takes no lease: a diagnosis changes
// nothing on the node. A driver that cannot diagnose gives none.
func (b *bmc) Diagnose(ctx context.Context) []sol.Check {
	var checks []sol.Check
	if zc, ok := b.c.zoneCheck(ctx, b.label); ok {
		checks = append(checks, zc)
		if !zc.OK {
			return checks
		}
	}
	if d, ok := b.inner.(sol.Diagnoser); ok {
		return append(checks, d.Diagnose(ctx)...)
	}
	return checks
}

func (b *bmc) PowerOn(ctx context.Context) error {
	return b.c.exclusive(ctx, b.label, b.inner.PowerOn)
}

func (b *bmc) PowerOff(ctx context.Context, soft bool) error {
	return b.c.exclusive(ctx, b.label, func(ctx context.Context) error { return b.inner.PowerOff(ctx, soft) })
}

func (b *bmc) PowerCycle(ctx context.Context) error {
	return b.c.exclusive(ctx, b.label, b.inner.PowerCycle)
}

func (b *bmc) PowerReset(ctx context.Context) error {
	return b.c.exclusive(ctx, b.label, b.inner.PowerReset)
}

func (b *bmc) SetBootDevice(ctx context.Context, dev string, persistent bool) error {
	return b.c.exclusive(ctx, b.label, func(ctx context.Context) error { return b.inner.SetBootDevice(ctx, dev, persistent) })
}

// DeactivateConsole frees a payload left active (by a holder that died),
// only while this attempt holds the node's SOL lease: a replica without it
// must never kill the holder's payload.
func (b *bmc) DeactivateConsole(ctx context.Context) error {
	b.mu.Lock()
	token := b.pending
	b.mu.Unlock()
	if token == "" {
		return fmt.Errorf("deactivate SOL of %s: this replica does not hold its SOL lease", b.label)
	}
	if _, err := b.c.store.RenewLease(ctx, b.label, db.LeaseSOL, token, b.c.cfg.LeaseTTL); err != nil {
		b.drop(token)
		return fmt.Errorf("deactivate SOL of %s: renew lease: %w", b.label, err)
	}
	if err := b.inner.DeactivateConsole(ctx); err != nil {
		b.drop(token)
		return err
	}
	return nil
}

// drop gives up the pending lease of a failed attempt.
func (b *bmc) drop(token string) {
	b.mu.Lock()
	if b.pending == token {
		b.pending = ""
	}
	b.mu.Unlock()
	b.c.releaseSOL(b.label, token)
}

// DialTimeout is the bound on dialing a peer (Config.DialTimeout, with its
// default).
func (c *Cluster) DialTimeout() time.Duration { return c.cfg.DialTimeout }

package cluster

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	gossh "golang.org/x/crypto/ssh"

	"github.com/obmd/obmd/db"
)

// Notify tells every other live replica of an access change made here
// (label's epoch moved to epoch) and returns once each has applied it: cut
// its sessions of the node older than epoch and wiped the node's console.
// The replicas are those announced in the database (Announce), plus the
// holder of the node's SOL lease in any case: the holder is the one that
// must have applied the change before it is acknowledged, since every
// byte of the node's console passes through it.
//
// A replica is told over the peer link (a noticeRequest it answers once
// the change is applied). One that cannot be reached there counts as
// confirmed once its announcement shows the change applied (it polls the
// database) or expired FenceMargin ago: it stopped, or it has fenced
// itself FenceMargin before its announcement expired (fence.go), so it
// serves no session of the node any more. Notify returns an error naming
// the replicas not confirmed when ctx ends.
func (c *Cluster) Notify(ctx context.Context, label string, epoch int64, why string) error {
	targets, err := c.notifyTargets(ctx, label)
	if err != nil {
		return fmt.Errorf("tell the other replicas: %w", err)
	}
	notice := gossh.Marshal(accessNotice{Label: label, Epoch: uint64(epoch), Why: why})
	return c.tellAll(ctx, targets, epoch, noticeRequest, notice)
}

// NotifyCred tells every other live replica of a credential change made
// here (c, of epoch: see access.RevokeCred) and returns once each has
// applied it, as Notify does. No SOL lease holder needs telling as such: a
// credential change wipes no console, it ends sessions, on whichever
// replica they are.
func (c *Cluster) NotifyCred(ctx context.Context, epoch int64, cred db.CredChange, why string) error {
	targets, err := c.notifyTargets(ctx, "")
	if err != nil {
		return fmt.Errorf("tell the other replicas: %w", err)
	}
	notice := gossh.Marshal(credNotice{Epoch: uint64(epoch), Kind: cred.Kind, CA: cred.CA, Serial: cred.Serial,
		KeyID: cred.KeyID, Why: why})
	return c.tellAll(ctx, targets, epoch, credNoticeRequest, notice)
}

// tellAll sends notice (a request of type kind) to every target, each
// confirmed as notifyOne says, and returns an error naming those that were
// not when ctx ends.
func (c *Cluster) tellAll(ctx context.Context, targets map[string]string, epoch int64, kind string, notice []byte) error {
	failed := fanOut(targets, func(id, addr string) error {
		return c.notifyOne(ctx, id, addr, epoch, kind, notice)
	})
	if len(failed) > 0 {
		return fmt.Errorf("not confirmed by replica %s", strings.Join(failed, ", "))
	}
	return nil
}

// fanOut runs f for every target (replica ID to peer address) at once and
// returns, once all have returned, those whose f failed ("ID (error)",
// sorted). f bounds its own wait.
func fanOut(targets map[string]string, f func(id, addr string) error) []string {
	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		failed []string
	)
	for id, addr := range targets {
		wg.Add(1)
		go func() { // ends when f does
			defer wg.Done()
			if err := f(id, addr); err != nil {
				mu.Lock()
				failed = append(failed, fmt.Sprintf("%s (%v)", id, err))
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	sort.Strings(failed)
	return failed
}

// notifyTargets returns the other live replicas by ID, with their peer
// addresses (those whose announcement has not expired FenceMargin ago),
// and the holder of label's SOL lease (label "": none).
func (c *Cluster) notifyTargets(ctx context.Context, label string) (map[string]string, error) {
	targets, err := c.otherReplicas(ctx, c.cfg.FenceMargin)
	if err != nil {
		return nil, err
	}
	if label == "" {
		return targets, nil
	}
	l, err := c.store.Lease(ctx, label, db.LeaseSOL)
	switch {
	case errors.Is(err, db.ErrNotFound):
	case err != nil:
		return nil, err
	case l.Owner != c.cfg.ReplicaID && time.Now().Before(l.ExpiresAt):
		targets[l.Owner] = l.Addr
	}
	return targets, nil
}

// otherReplicas returns the other replicas whose announcement has not
// expired more than within ago, by ID, with their peer addresses.
func (c *Cluster) otherReplicas(ctx context.Context, within time.Duration) (map[string]string, error) {
	reps, err := c.store.ReplicasWithin(ctx, within)
	if err != nil {
		return nil, err
	}
	others := make(map[string]string, len(reps))
	for _, r := range reps {
		if r.ID != c.cfg.ReplicaID {
			others[r.ID] = r.Addr
		}
	}
	return others, nil
}

// notifyOne tells replica id at addr, or failing that waits for its
// announcement to show epoch applied (or to have expired FenceMargin ago),
// until ctx ends.
func (c *Cluster) notifyOne(ctx context.Context, id, addr string, epoch int64, kind string, notice []byte) error {
	_, err := c.ask(ctx, id, addr, kind, notice)
	if err == nil {
		return nil
	}
	c.log.WithError(err).WithField("replica", id).Warn("peer_notice_failed")
	for {
		reps, rerr := c.store.ReplicasWithin(ctx, c.cfg.FenceMargin)
		if rerr == nil {
			live := false
			for _, r := range reps {
				if r.ID == id {
					live = r.Applied < epoch
				}
			}
			if !live {
				return nil // applied it (seen in the database), or stopped or fenced
			}
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// errRefused: a peer answered a request with a refusal.
var errRefused = errors.New("the replica refused the request")

// ask sends the global request name with payload to replica id's peer
// server at addr, on a connection of its own, and returns its answer.
func (c *Cluster) ask(ctx context.Context, id, addr, name string, payload []byte) ([]byte, error) {
	reply, _, err := c.askIn(ctx, id, addr, name, payload)
	return reply, err
}

// askIn is ask, which also returns the protocol version the answer is in.
func (c *Cluster) askIn(ctx context.Context, id, addr, name string, payload []byte) ([]byte, int, error) {
	if addr == "" {
		return nil, 0, errors.New("no peer address")
	}
	client, err := c.dialPeer(ctx, addr, id)
	if err != nil {
		return nil, 0, err
	}
	defer client.Close()
	stop := context.AfterFunc(ctx, func() { client.Close() }) // unblocks the request
	defer stop()
	ok, reply, err := client.SendRequest(name, true, payload)
	switch {
	case err != nil:
		return nil, 0, errors.Join(err, ctx.Err())
	case !ok:
		return nil, 0, errRefused
	}
	return reply, client.proto, nil
}

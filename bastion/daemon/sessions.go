package daemon

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/obmd/obmd/bastion/access/sessions"
	"github.com/obmd/obmd/bastion/cluster"
)

// clusterSessions is the session list of the whole cluster: this
// replica's registry and, in cluster mode, every other live replica's,
// asked over the peer link (docs/replicas.md).
type clusterSessions struct {
	reg     *sessions.Registry
	cluster *cluster.Cluster // nil: a single replica
	wait    time.Duration    // bound on asking the others
	log     logrus.FieldLogger
}

func (d *Daemon) allSessions() clusterSessions {
	// Each replica asked is bounded by the cluster's dial timeout.
	return clusterSessions{reg: d.reg, cluster: d.rep.cluster, wait: 10 * time.Second,
		log: d.log.WithField("part", "sessions")}
}

// sessionsConfig is the session registry's configuration: in cluster
// mode its session IDs begin with a random prefix (unique in the cluster
// without naming the replica) and name the replica for operators.
func (d *Daemon) sessionsConfig() sessions.Config {
	c := d.cfg.Sessions
	if d.rep.cluster != nil {
		var b [4]byte
		rand.Read(b[:]) // never fails (crypto/rand)
		c.IDPrefix, c.Replica = hex.EncodeToString(b[:])+"-", d.cfg.Replica.ID
	}
	return c
}

// List returns node's sessions ("": every node's) on every replica that
// answers within ctx; those that do not are logged and left out.
func (s clusterSessions) List(ctx context.Context, node string) []sessions.Info {
	list := s.reg.List(node)
	if s.cluster == nil {
		return list
	}
	remote, err := s.cluster.RemoteSessions(ctx, node)
	if err != nil {
		s.log.WithError(err).Warn("sessions_incomplete")
	}
	return append(list, remote...)
}

// Kick ends session id on whichever replica holds it, with cause
// `access to NODE was revoked (why)`, and returns its node; false if no
// replica holds it.
func (s clusterSessions) Kick(ctx context.Context, id, why string) (string, bool, error) {
	for _, si := range s.reg.List("") {
		if si.ID == id {
			return si.Node, s.reg.Kick(id, &sessions.RevokedError{Node: si.Node, Why: why}), nil
		}
	}
	if s.cluster == nil {
		return "", false, nil
	}
	node, err := s.cluster.Kick(ctx, id, why)
	switch {
	case errors.Is(err, cluster.ErrNoSession):
		return "", false, nil
	case err != nil:
		return "", false, err
	}
	return node, true, nil
}

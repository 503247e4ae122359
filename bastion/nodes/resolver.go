package nodes

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/sirupsen/logrus"

	"github.com/obmd/obmd/bastion/access/sessions"
	"github.com/obmd/obmd/commands"
	"github.com/obmd/obmd/db"
	"github.com/obmd/obmd/sol"
	"github.com/obmd/obmd/sol/screen"
)

// Store is the part of the database the resolver reads.
type Store interface {
	Node(ctx context.Context, label string) (db.Node, error)
}

// whyChanged is what a session of an ended tenancy is told (ResolveAt).
const whyChanged = "access changed"

// MaxKept bounds the nodes whose info a Resolver keeps (ResolveAt).
const MaxKept = 4096

// Resolver builds BMC drivers from the database (sol.Resolver). Building
// is cheap (no I/O): drivers connect per call, so no driver is kept and a
// changed BMC address takes effect on the next call.
//
// ResolveAt, for a session admitted at an access epoch, serves the node's
// info as it was at that epoch without reading the database again once
// read: every change of a node's info moves its epoch (db.Store.
// UpdateNodeInfo), so a node's epoch names one version of its info. It
// keeps the newest info read of up to MaxKept nodes, opened (the process
// holds the key that seals it anyway); Forget drops a node's.
type Resolver struct {
	table *Table
	store Store
	log   logrus.FieldLogger

	mu   sync.Mutex
	kept map[string]keptInfo // by label
}

// keptInfo is a node's info as read at an access epoch.
type keptInfo struct {
	epoch int64
	info  Info
}

// NewResolver returns a Resolver over the node types of table.
func NewResolver(table *Table, store Store, log logrus.FieldLogger) (*Resolver, error) {
	if table == nil || store == nil || log == nil {
		return nil, errors.New("nodes: missing dependency")
	}
	return &Resolver{table: table, store: store, log: log, kept: map[string]keptInfo{}}, nil
}

// Resolve returns the BMC of label, read from the database now.
func (r *Resolver) Resolve(ctx context.Context, label string) (sol.BMC, error) {
	return r.ResolveAt(ctx, label, 0)
}

// ResolveAt returns the BMC of label for a session admitted at access
// epoch epoch: from the info kept for that epoch if there is one, else
// read from the database now (and kept if no newer info is). epoch 0:
// always read. If the node read is at another epoch, the session is from
// a tenancy that has ended (every change of a node moves its epoch, and
// cuts the sessions from before it once applied here): it fails with a
// *sessions.RevokedError, so that a session not cut yet never reaches a
// new registration's BMC, nor acts for a tenancy not its own.
func (r *Resolver) ResolveAt(ctx context.Context, label string, epoch int64) (sol.BMC, error) {
	info, ok := r.keptAt(label, epoch)
	if !ok {
		n, err := r.store.Node(ctx, label)
		if err != nil { // db.ErrNotFound for no such node
			return nil, fmt.Errorf("resolve %s: %w", label, err)
		}
		if info, err = r.table.Open(n); err != nil {
			return nil, err
		}
		r.keep(label, n.Epoch, info)
		if epoch > 0 && n.Epoch != epoch {
			return nil, fmt.Errorf("resolve %s: %w", label, &sessions.RevokedError{Node: label, Why: whyChanged})
		}
	}
	bmc, err := r.table.New(label, info, r.log.WithField("node", label))
	if err != nil {
		return nil, fmt.Errorf("resolve %s: %w", label, err)
	}
	return bmc, nil
}

// keptAt returns label's info kept at epoch, if any.
func (r *Resolver) keptAt(label string, epoch int64) (Info, bool) {
	if epoch <= 0 {
		return Info{}, false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	k, ok := r.kept[label]
	return k.info, ok && k.epoch == epoch
}

// keep keeps info, read at epoch, unless newer info of label is kept. At
// MaxKept nodes an arbitrary other node's info goes.
func (r *Resolver) keep(label string, epoch int64, info Info) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if k, ok := r.kept[label]; ok && k.epoch >= epoch {
		return
	}
	if _, ok := r.kept[label]; !ok && len(r.kept) >= MaxKept {
		for other := range r.kept {
			delete(r.kept, other)
			break
		}
	}
	r.kept[label] = keptInfo{epoch: epoch, info: info}
}

// Forget drops the info kept of label below epoch: the Revoker applied an
// access change of the node (a new version of its info, or its deletion).
func (r *Resolver) Forget(label string, epoch int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if k, ok := r.kept[label]; ok && k.epoch < epoch {
		delete(r.kept, label)
	}
}

// ScreenSize is sol.ScreenSizer's: label's screen_size, read from the
// database now (the zero Size: the default).
func (r *Resolver) ScreenSize(ctx context.Context, label string) (screen.Size, error) {
	n, err := r.store.Node(ctx, label)
	if err != nil {
		return screen.Size{}, fmt.Errorf("screen size of %s: %w", label, err)
	}
	s, err := screen.ParseSize(n.ScreenSize)
	if err != nil {
		return screen.Size{}, fmt.Errorf("screen size of %s: %w", label, err)
	}
	return s, nil
}

// ForCommands adapts the resolver to commands.Resolver (and
// commands.EpochResolver).
func (r *Resolver) ForCommands() commands.Resolver { return commandsResolver{r} }

type commandsResolver struct{ r *Resolver }

func (c commandsResolver) Resolve(ctx context.Context, label string) (commands.BMC, error) {
	return c.r.Resolve(ctx, label)
}

func (c commandsResolver) ResolveAt(ctx context.Context, label string, epoch int64) (commands.BMC, error) {
	return c.r.ResolveAt(ctx, label, epoch)
}

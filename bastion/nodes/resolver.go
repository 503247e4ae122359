package nodes

import (
	"context"
	"errors"
	"fmt"

	"github.com/sirupsen/logrus"

	"github.com/obmd/obmd/commands"
	"github.com/obmd/obmd/db"
	"github.com/obmd/obmd/sol"
)

// Store is the part of the database the resolver reads.
type Store interface {
	Node(ctx context.Context, label string) (db.Node, error)
}

// Resolver builds BMC drivers from the database (sol.Resolver). Building
// is cheap (no I/O): drivers connect per call, so nothing is cached and a
// changed BMC address takes effect on the next call.
type Resolver struct {
	table *Table
	store Store
	log   logrus.FieldLogger
}

// NewResolver returns a Resolver over the node types of table.
func NewResolver(table *Table, store Store, log logrus.FieldLogger) (*Resolver, error) {
	if table == nil || store == nil || log == nil {
		return nil, errors.New("nodes: missing dependency")
	}
	return &Resolver{table: table, store: store, log: log}, nil
}

// Resolve returns the BMC of label.
func (r *Resolver) Resolve(ctx context.Context, label string) (sol.BMC, error) {
	n, err := r.store.Node(ctx, label)
	if err != nil { // db.ErrNotFound for no such node
		return nil, fmt.Errorf("resolve %s: %w", label, err)
	}
	info, err := r.table.Open(n)
	if err != nil {
		return nil, err
	}
	bmc, err := r.table.New(label, info, r.log.WithField("node", label))
	if err != nil {
		return nil, fmt.Errorf("resolve %s: %w", label, err)
	}
	return bmc, nil
}

// ForCommands adapts the resolver to commands.Resolver.
func (r *Resolver) ForCommands() commands.Resolver { return commandsResolver{r} }

type commandsResolver struct{ r *Resolver }

func (c commandsResolver) Resolve(ctx context.Context, label string) (commands.BMC, error) {
	return c.r.Resolve(ctx, label)
}

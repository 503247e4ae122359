// Package nodes resolves a node label to a driver for its BMC: it reads the
// node from the database, unseals its BMC info and builds the driver of its
// type. It is where the driver types of the admin API ("ipmi", "ipmitool",
// "mock") meet their implementations, and it owns the sealed form of a
// node's BMC info in the database (SealInfo, OpenInfo).
package nodes

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/sirupsen/logrus"

	"github.com/obmd/obmd/commands"
	"github.com/obmd/obmd/db"
	"github.com/obmd/obmd/keys"
	"github.com/obmd/obmd/sol"
	"github.com/obmd/obmd/sol/ipmi"
	"github.com/obmd/obmd/sol/ipmitool"
	"github.com/obmd/obmd/sol/sim"
)

// Driver types, as registered through the admin API.
const (
	TypeIPMI     = "ipmi"     // native RMCP+ (sol/ipmi)
	TypeIPMITool = "ipmitool" // the ipmitool binary (sol/ipmitool)
	TypeMock     = "mock"     // obmd's mock BMC (sol/sim in mock mode)
	TypeSim      = "sim"      // the built-in simulator (sol/sim), for demos
)

// Store is the part of the database the resolver reads.
type Store interface {
	Node(ctx context.Context, label string) (db.Node, error)
}

// Config carries the drivers' settings.
type Config struct {
	IPMI     ipmi.Config
	IPMITool ipmitool.Config
}

// Resolver builds BMC drivers from the database. Building is cheap (no I/O):
// drivers connect per call, so nothing is cached and a changed BMC address
// takes effect on the next call.
type Resolver struct {
	cfg    Config
	store  Store
	sealer *keys.Sealer
	lab    *sim.Lab
	log    logrus.FieldLogger
}

// New returns a Resolver. lab holds the state of simulated and mock BMCs.
func New(cfg Config, store Store, sealer *keys.Sealer, lab *sim.Lab, log logrus.FieldLogger) (*Resolver, error) {
	if store == nil || sealer == nil || lab == nil || log == nil {
		return nil, errors.New("nodes: missing dependency")
	}
	return &Resolver{cfg: cfg, store: store, sealer: sealer, lab: lab, log: log}, nil
}

// Resolve returns the BMC of label.
func (r *Resolver) Resolve(ctx context.Context, label string) (sol.BMC, error) {
	n, err := r.store.Node(ctx, label)
	if err != nil { // db.ErrNotFound for no such node
		return nil, fmt.Errorf("resolve %s: %w", label, err)
	}
	info, err := OpenInfo(r.sealer, n)
	if err != nil {
		return nil, err
	}
	log := r.log.WithField("node", label)
	switch n.Type {
	case TypeIPMI:
		return ipmi.New(label, info, r.cfg.IPMI, log)
	case TypeIPMITool:
		return ipmitool.New(label, info, r.cfg.IPMITool, log)
	case TypeMock:
		return r.lab.BMC(label, sim.ModeMock), nil
	case TypeSim:
		return r.lab.BMC(label, sim.ModeNormal), nil
	}
	return nil, fmt.Errorf("resolve %s: unknown driver type %q", label, n.Type)
}

// SealInfo encodes a node's BMC info and seals it to the node's label, as
// db.Node.InfoSealed holds it: the database never sees the BMC password.
func SealInfo(sealer *keys.Sealer, label string, info sol.Info) ([]byte, error) {
	plain, err := json.Marshal(info)
	if err != nil {
		return nil, fmt.Errorf("encode BMC info of %s: %w", label, err)
	}
	sealed, err := sealer.Seal(plain, label)
	if err != nil {
		return nil, fmt.Errorf("seal BMC info of %s: %w", label, err)
	}
	return sealed, nil
}

// OpenInfo unseals and decodes the BMC info of a stored node. It fails if
// the info was sealed under another key or to another label.
func OpenInfo(sealer *keys.Sealer, n db.Node) (sol.Info, error) {
	plain, err := sealer.Open(n.InfoSealed, n.Label)
	if err != nil {
		return sol.Info{}, fmt.Errorf("unseal BMC info of %s: %w", n.Label, err)
	}
	var info sol.Info
	if err := json.Unmarshal(plain, &info); err != nil {
		return sol.Info{}, fmt.Errorf("decode BMC info of %s: %w", n.Label, err)
	}
	return info, nil
}

// Forget drops simulator state of a deleted node.
func (r *Resolver) Forget(label string) { r.lab.Forget(label) }

// ForCommands adapts the resolver to commands.Resolver.
func (r *Resolver) ForCommands() commands.Resolver { return commandsResolver{r} }

type commandsResolver struct{ r *Resolver }

func (c commandsResolver) Resolve(ctx context.Context, label string) (commands.BMC, error) {
	return c.r.Resolve(ctx, label)
}

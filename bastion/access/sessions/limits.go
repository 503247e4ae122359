package sessions

import (
	"errors"
	"fmt"
	"time"
)

// Config bounds sessions (the YAML section sessions). Zero values take the
// defaults noted; a negative limit means none.
type Config struct {
	// MaxPerNode bounds the live sessions of one node, SSH and HTTP
	// (default 64).
	MaxPerNode int `yaml:"max_per_node"`
	// MaxPerSource bounds the SSH and web console sessions of one client address (per
	// SourceKey; default 32); MaxPerSourceHTTP its node-token HTTP
	// sessions, which a cloud controller (HIL) opens from one address for
	// every node it manages, a console stream each and power calls
	// (default 1024).
	MaxPerSource     int `yaml:"max_per_source"`
	MaxPerSourceHTTP int `yaml:"max_per_source_http"`
	// MaxAutomationPerNode bounds the automation sessions (WorkAutomation)
	// of one node (default 8); MaxAutomationPerSource those of one SSH
	// source, and those of one key or certificate whatever its source
	// (default 8).
	MaxAutomationPerNode   int `yaml:"max_automation_per_node"`
	MaxAutomationPerSource int `yaml:"max_automation_per_source"`
	// MaxBMCPerNode bounds the sessions calling one node's BMC (WorkBMC),
	// SSH and HTTP (default 4): besides power operations, which run one
	// at a time, and doctor, one run at a time, power-status calls, each
	// of which may open a BMC session of its own. MaxBMCPerSource bounds
	// those of one SSH source, and those of one key or certificate
	// whatever its source (default 16).
	MaxBMCPerNode   int `yaml:"max_bmc_per_node"`
	MaxBMCPerSource int `yaml:"max_bmc_per_source"`
	// CutWait bounds how long a cut waits for the cancelled sessions to
	// finish (default 2 s). A session that does not end in time is logged
	// by the caller; it has been cancelled regardless, and it holds none
	// of the places above from the cut on.
	CutWait time.Duration `yaml:"cut_wait"`
	// IDPrefix and Replica are set by the daemon in cluster mode, not
	// configured. Session IDs are IDPrefix and a number: a random prefix
	// per replica makes them unique in the cluster without naming the
	// replica (tenants see IDs; replica IDs are for operators). Replica
	// is this replica's ID, given in Info.Replica.
	IDPrefix string `yaml:"-"`
	Replica  string `yaml:"-"`
}

// WithDefaults returns c with its unset limits at their defaults, and a
// negative one (none) as 0: afterwards a limit of 0 means none.
func (c Config) WithDefaults() Config {
	c.setDefaults()
	return c
}

// setDefaults fills the defaults; afterwards a limit of 0 means none.
func (c *Config) setDefaults() {
	def := func(n *int, v int) {
		switch {
		case *n == 0:
			*n = v
		case *n < 0:
			*n = 0
		}
	}
	def(&c.MaxPerNode, 64)
	def(&c.MaxPerSource, 32)
	def(&c.MaxPerSourceHTTP, 1024)
	def(&c.MaxAutomationPerNode, 8)
	def(&c.MaxAutomationPerSource, 8)
	def(&c.MaxBMCPerNode, 4)
	def(&c.MaxBMCPerSource, 16)
	if c.CutWait <= 0 {
		c.CutWait = 2 * time.Second
	}
}

// Work is what a session spends beyond its place under the session caps,
// for the caps on concurrent work (Config.MaxAutomation*, MaxBMC*): the
// front door that starts the session says which (Info.Work).
type Work string

// Kinds of work.
const (
	// WorkAutomation watches or types on the node's console for one
	// command: wait-for, send, expect, power-on/power-cycle --wait-for,
	// console-log --follow.
	WorkAutomation Work = "automation"
	// WorkBMC calls the node's BMC: power commands, bootdev, doctor, and
	// the node-token HTTP power routes.
	WorkBMC Work = "bmc"
)

// ErrTooMany is returned (wrapped) by Start when a session cap is
// reached: the node's (Config.MaxPerNode) or the source's
// (MaxPerSource, MaxPerSourceHTTP).
var ErrTooMany = errors.New("too many sessions")

// ErrBusy is returned by Start, as a *BusyError, when a cap on concurrent
// work is reached: the session may start once one of that work ends.
var ErrBusy = errors.New("too much work at once")

// BusyError is a cap on concurrent work that refused a session. Its text
// is shown to the user as is.
type BusyError struct {
	Work  Work
	Where string // "on node node-17", "from your address", "with your key or certificate"
	Limit int
}

func (e *BusyError) Error() string {
	what := "automation sessions"
	if e.Work == WorkBMC {
		what = "sessions calling the BMC"
	}
	return fmt.Sprintf("too many %s %s (limit %d); try again when one ends", what, e.Where, e.Limit)
}

// Unwrap returns ErrBusy.
func (e *BusyError) Unwrap() error { return ErrBusy }

// scope is what a count of sessions is kept per.
type scope uint8

const (
	scopeNode       scope = iota
	scopeSource           // SSH sessions of a source (SourceKey)
	scopeSourceHTTP       // node-token HTTP sessions of a source
	scopeCredential       // SSH sessions of a key or certificate (Info.Credential)
)

// slot names one count the registry keeps: the sessions of a node or of a
// source, and, for each kind of work, those doing it on a node, from a
// source and with a credential.
type slot struct {
	scope scope
	name  string
	work  Work // "": every session
}

// limit is one cap a new session must fit under.
type limit struct {
	slot slot
	max  int // 0: none
}

// limits are the caps info must fit under, from source src (SourceKey).
// Every session counts against its node's and its source's session caps;
// a session doing work also against that work's caps on its node and, over
// SSH, from its source and with its credential (a key or certificate may
// open many nodes; a token opens one, which its node's caps bound). The
// node-token HTTP sessions of a source (a cloud controller's power calls
// for every node it manages) are bounded by MaxPerSourceHTTP instead.
func (c *Config) limits(info Info, src string) []limit {
	ls := make([]limit, 0, 5)
	ls = append(ls, limit{slot{scopeNode, info.Node, ""}, c.MaxPerNode})
	if info.HTTP {
		ls = append(ls, limit{slot{scopeSourceHTTP, src, ""}, c.MaxPerSourceHTTP})
	} else {
		ls = append(ls, limit{slot{scopeSource, src, ""}, c.MaxPerSource})
	}
	if info.Work == "" {
		return ls
	}
	perNode, perSource := c.MaxAutomationPerNode, c.MaxAutomationPerSource
	if info.Work == WorkBMC {
		perNode, perSource = c.MaxBMCPerNode, c.MaxBMCPerSource
	}
	ls = append(ls, limit{slot{scopeNode, info.Node, info.Work}, perNode})
	if !info.HTTP {
		ls = append(ls, limit{slot{scopeSource, src, info.Work}, perSource})
		if info.Credential != "" {
			ls = append(ls, limit{slot{scopeCredential, info.Credential, info.Work}, perSource})
		}
	}
	return ls
}

// refusal is why l refuses a session of node.
func (l limit) refusal(node string) error {
	where := "from your address"
	switch l.slot.scope {
	case scopeNode:
		where = "on node " + node
	case scopeCredential:
		where = "with your key or certificate"
	}
	if l.slot.work != "" {
		return &BusyError{Work: l.slot.work, Where: where, Limit: l.max}
	}
	if l.slot.scope == scopeNode {
		return fmt.Errorf("%w on node %s (limit %d)", ErrTooMany, node, l.max)
	}
	return fmt.Errorf("%w %s (limit %d)", ErrTooMany, where, l.max)
}

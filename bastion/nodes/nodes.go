// Package nodes owns what a node's type means: registering its BMC info,
// sealing it, and building its driver.
//
// It says how a node's BMC info is registered (decoded, checked, compared
// with the stored one, shown without the password), sealed at rest, and
// turned into the driver of its type (Resolver). It knows no type itself:
// the composition root builds the Table, one Entry a type, from the drivers,
// and hands it to the admin API, which registers nodes, and to the Resolver,
// which builds drivers. Adding a BMC type is a row of that table and a
// driver; nothing here or in the admin API changes.
//
// Every rule a driver enforces on its info is in its entry's Check, so a
// node the driver would refuse is refused at registration (the admin API's
// 400, naming the field), never later when its BMC is used.
package nodes

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"

	"github.com/sirupsen/logrus"

	"github.com/obmd/obmd/bastion/admin/api"
	"github.com/obmd/obmd/db"
	"github.com/obmd/obmd/keys"
	"github.com/obmd/obmd/sol"
	"github.com/obmd/obmd/sol/printable"
)

// Type names a node type as registered ("ipmi").
type Type string

// Kind is what the table knows of a node type whose BMC info is I (the
// driver's own info struct: sol.Info, redfish.Info, ...). Check, View and
// New are required.
type Kind[I any] struct {
	// Decode reads a registration's info with decode, which fills a value
	// from the JSON object the client sent ("info") and says in safe words
	// what is wrong with it; strict (the /v1 API) refuses fields the type
	// does not take, otherwise (the obmd routes) they are ignored, as obmd
	// did. Default: decode into an I.
	Decode func(decode func(any) error, strict bool) (I, error)
	// Check validates the decoded info: every rule the driver enforces.
	// Its errors name the field ("info.pass is longer than 20 bytes") and
	// never contain the password.
	Check func(I) error
	// Canonical folds the documented defaults into their absent forms, so
	// that two registrations of the same BMC compare equal; the info is
	// stored canonical. Default: unchanged.
	Canonical func(I) I
	// Equal reports whether two canonical infos register the same BMC the
	// same way (an identical re-registration is idempotent). Default:
	// reflect.DeepEqual.
	Equal func(a, b I) bool
	// View is the info as GET /v1/nodes shows it, beside the node's label
	// and type (api.BMC, which has no field for a password; obmctl reads
	// it too).
	View func(I) api.BMC
	// New builds the node's driver; it does no I/O.
	New func(label string, info I, log logrus.FieldLogger) (sol.BMC, error)
	// Forget, if set, drops what the type keeps of a deleted node (the
	// simulator's state).
	Forget func(label string)
	// BMCs, if set, names the BMC services the node uses, each normalised
	// (sol.IPMIEndpoint: "IPMI 10.0.0.5 port 623"), so that a second node
	// on a BMC another node uses is found (Info.BMCs). Default: none.
	BMCs func(I) []string
}

// Entry is one row of the Table: a node type and what it means (Define).
type Entry struct {
	typ    Type
	decode func(decode func(any) error, strict bool) (any, error)
	open   func(plain []byte) (any, error)
	equal  func(a, b any) bool
	view   func(any) api.BMC
	build  func(label string, info any, log logrus.FieldLogger) (sol.BMC, error)
	forget func(label string)
	bmcs   func(any) []string
	checks bool // Kind.Check is set
}

// Define makes the Entry of typ from k.
func Define[I any](typ Type, k Kind[I]) Entry {
	canonical := k.Canonical
	if canonical == nil {
		canonical = func(i I) I { return i }
	}
	equal := k.Equal
	if equal == nil {
		equal = func(a, b I) bool { return reflect.DeepEqual(a, b) }
	}
	decode := k.Decode
	if decode == nil {
		decode = func(decode func(any) error, _ bool) (I, error) {
			var i I
			err := decode(&i)
			return i, err
		}
	}
	e := Entry{typ: typ,
		decode: func(dec func(any) error, strict bool) (any, error) {
			i, err := decode(dec, strict)
			if err == nil && k.Check != nil {
				err = k.Check(i)
			}
			if err != nil {
				return nil, err
			}
			return canonical(i), nil
		},
		open: func(plain []byte) (any, error) {
			var i I
			err := json.Unmarshal(plain, &i)
			return canonical(i), err
		},
		equal:  func(a, b any) bool { return equal(a.(I), b.(I)) },
		forget: k.Forget,
		checks: k.Check != nil,
	}
	if k.View != nil {
		e.view = func(i any) api.BMC { return k.View(i.(I)) }
	}
	if k.New != nil {
		e.build = func(label string, i any, log logrus.FieldLogger) (sol.BMC, error) { return k.New(label, i.(I), log) }
	}
	if k.BMCs != nil {
		e.bmcs = func(i any) []string { return k.BMCs(i.(I)) }
	}
	return e
}

// Info is a node's type and its BMC info, as that type decoded it. The
// zero value is no info.
type Info struct {
	e *Entry
	v any
}

// Type is the node's type ("" for the zero Info).
func (i Info) Type() Type {
	if i.e == nil {
		return ""
	}
	return i.e.typ
}

// Equal reports whether i and o register the same BMC the same way: the
// same type, and infos its type calls equal.
func (i Info) Equal(o Info) bool {
	return i.e != nil && i.e == o.e && i.e.equal(i.v, o.v)
}

// View is the info as the admin API shows it: never the password (Kind.View).
func (i Info) View() api.BMC {
	if i.e == nil {
		return api.BMC{}
	}
	return i.e.view(i.v)
}

// BMCs names the BMC services the node uses, normalised (Kind.BMCs): two
// nodes that share one take its console from each other.
func (i Info) BMCs() []string {
	if i.e == nil || i.e.bmcs == nil {
		return nil
	}
	return i.e.bmcs(i.v)
}

// SharedBMC returns the first of mine (Info.BMCs) that theirs holds too,
// or "".
func SharedBMC(mine, theirs []string) string {
	for _, b := range mine {
		if slices.Contains(theirs, b) {
			return b
		}
	}
	return ""
}

// Table is the node types this obmd serves, and the key that seals their
// BMC info at rest. Safe for concurrent use (it does not change).
type Table struct {
	byType map[Type]*Entry
	order  []Type
	sealer *keys.Sealer
}

// NewTable returns the table of entries (in the order error messages list
// them); sealer seals every node's info.
func NewTable(sealer *keys.Sealer, entries ...Entry) (*Table, error) {
	if sealer == nil {
		return nil, errors.New("nodes: no sealer")
	}
	t := &Table{byType: map[Type]*Entry{}, sealer: sealer}
	for i := range entries {
		e := &entries[i]
		switch {
		case e.typ == "":
			return nil, errors.New("nodes: an entry has no type")
		case t.byType[e.typ] != nil:
			return nil, fmt.Errorf("nodes: type %q defined twice", e.typ)
		case !e.checks || e.view == nil || e.build == nil:
			return nil, fmt.Errorf("nodes: type %q needs Check, View and New", e.typ)
		}
		t.byType[e.typ] = e
		t.order = append(t.order, e.typ)
	}
	return t, nil
}

// Types lists the table's types in order.
func (t *Table) Types() []Type { return append([]Type(nil), t.order...) }

// Parse decodes and checks a registration of type typ whose info decode
// reads (see Kind.Decode; strict for the /v1 API). Every error it returns
// is the registration's fault: its text is safe to show the client (it
// names the field, never the password).
func (t *Table) Parse(typ string, strict bool, decode func(any) error) (Info, error) {
	if typ == "" {
		return Info{}, fmt.Errorf("field \"type\" is required (%s)", t.list())
	}
	e := t.byType[Type(typ)]
	if e == nil {
		return Info{}, fmt.Errorf("unknown type %s (want %s)", printable.Quote(typ, 64), t.list())
	}
	v, err := e.decode(decode, strict)
	if err != nil {
		return Info{}, err
	}
	return Info{e: e, v: v}, nil
}

// list is the table's types as a message lists them: "a, b or c".
func (t *Table) list() string {
	names := make([]string, len(t.order))
	for i, typ := range t.order {
		names[i] = string(typ)
	}
	if len(names) < 2 {
		return strings.Join(names, "")
	}
	return strings.Join(names[:len(names)-1], ", ") + " or " + names[len(names)-1]
}

// Seal encodes a node's BMC info and seals it to the node's label, as
// db.Node.InfoSealed holds it: the database never sees the BMC password.
func (t *Table) Seal(label string, info Info) ([]byte, error) {
	if info.e == nil {
		return nil, fmt.Errorf("seal BMC info of %s: no info", label)
	}
	plain, err := json.Marshal(info.v)
	if err != nil {
		return nil, fmt.Errorf("encode BMC info of %s: %w", label, err)
	}
	sealed, err := t.sealer.Seal(plain, label)
	if err != nil {
		return nil, fmt.Errorf("seal BMC info of %s: %w", label, err)
	}
	return sealed, nil
}

// Open unseals and decodes the BMC info of a stored node. It fails if the
// info was sealed under another key or to another label, or if obmd does
// not know the node's type.
func (t *Table) Open(n db.Node) (Info, error) {
	e := t.byType[Type(n.Type)]
	if e == nil {
		return Info{}, fmt.Errorf("open BMC info of %s: unknown node type %s", n.Label, printable.Quote(n.Type, 64))
	}
	plain, err := t.sealer.Open(n.InfoSealed, n.Label)
	if err != nil {
		return Info{}, fmt.Errorf("unseal BMC info of %s: %w", n.Label, err)
	}
	v, err := e.open(plain)
	if err != nil {
		return Info{}, fmt.Errorf("decode BMC info of %s: %w", n.Label, err)
	}
	return Info{e: e, v: v}, nil
}

// New builds the driver of node label from its info; it does no I/O.
func (t *Table) New(label string, info Info, log logrus.FieldLogger) (sol.BMC, error) {
	if info.e == nil {
		return nil, fmt.Errorf("build the driver of %s: no info", label)
	}
	return info.e.build(label, info.v, log)
}

// Forget drops what any type keeps of label, a node just deleted.
func (t *Table) Forget(label string) {
	for _, typ := range t.order {
		if f := t.byType[typ].forget; f != nil {
			f(label)
		}
	}
}

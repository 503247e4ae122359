// Package sessions owns the registry of live sessions, through which access
// changes reach and cut them.
//
// The registry holds SSH consoles, SSH exec commands, HTTP console
// streams and web consoles: a cut cancels every session of a node that authenticated before
// the change and waits until each has ended. It also watches authenticated
// SSH connections (Watch, conns.go), so that a cut, or the expiry of the
// certificate a connection logged in with, reaches those too.
package sessions

import (
	"context"
	"fmt"
	"net"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/obmd/obmd/sol"
)

// Kind is what a session is.
type Kind string

// Kinds of session.
const (
	KindConsole     Kind = "console"      // an SSH console
	KindExec        Kind = "exec"         // an SSH command, or a node-token HTTP power call
	KindHTTPConsole Kind = "http-console" // a node-token HTTP console stream
	KindWeb         Kind = "web"          // a web console (bastion/webdoor)
)

// RevokedError is the cause given to sessions cut by an access change, or
// ended by an administrator (WhyKicked). Its text is shown to the user as
// is, so it never carries secrets.
type RevokedError struct {
	Node string
	Why  string // "token rotated", "token revoked", "key removed", "node deleted", "node changed", WhyKicked
}

// WhyKicked is the Why of a session an administrator ended (DELETE
// /v1/sessions/{id}): not an access change, so its text says that access
// is unchanged. Replicas pass it to each other as is.
const WhyKicked = "kicked by admin"

func (e *RevokedError) Error() string {
	if e.Why == WhyKicked {
		return fmt.Sprintf("your session on %s was ended by an administrator; your access is unchanged", e.Node)
	}
	return fmt.Sprintf("access to %s was revoked (%s)", e.Node, e.Why)
}

// WhyExpired is the Why of an ExpiredError.
const WhyExpired = "certificate expired"

// ExpiredError is the cause given to a session whose credential expired
// (Info.Expires): "your certificate for node-17 expired". It is the
// *RevokedError it wraps (errors.As), with its own text.
type ExpiredError struct{ *RevokedError }

func (e *ExpiredError) Error() string {
	return fmt.Sprintf("your certificate for %s expired", e.Node)
}

// Unwrap returns the revocation.
func (e *ExpiredError) Unwrap() error { return e.RevokedError }

// Info describes a live session. Epoch is the node's access epoch at
// authentication. Every field is plain data.
type Info struct {
	ID      string    `json:"id"`
	Node    string    `json:"node"`
	Kind    Kind      `json:"kind"`
	User    string    `json:"user"`   // auth method and identity, e.g. "key SHA256:...", "token", "cert hil:alice serial 42"
	Remote  string    `json:"remote"` // client address
	Started time.Time `json:"started"`
	// Replica is the ID of the replica holding the session, in cluster
	// mode.
	Replica string `json:"replica,omitempty"`
	// Epoch is the node's access epoch the session was admitted at: its
	// tenancy. Replicas pass it along with the session lists they serve
	// one another, so that a tenant is shown its own tenancy's sessions
	// only.
	Epoch int64 `json:"epoch,omitempty"`
	// Mark, if set, is what the login took just before it read Epoch
	// (access.Revoker.Mark): the start of the session may then skip
	// reading the epoch again. 0: it is read again.
	Mark uint64 `json:"-"`
	// Expires, if set, is when the session ends by itself (a certificate's
	// expiry): it is cut then with an *ExpiredError.
	Expires time.Time `json:"expires,omitzero"`
	// Cert is the certificate the session logged in with (nil: another
	// credential); credential changes are matched against it (CutCerts).
	Cert *Cert `json:"cert,omitempty"`
	// HTTP marks a session of the admin API's node-token routes (console
	// streams, power calls): they count against Config.MaxPerSourceHTTP,
	// SSH sessions against MaxPerSource.
	HTTP bool `json:"-"`
	// Work is the work the session does, if it counts against a cap on
	// concurrent work (Config.MaxAutomation*, MaxBMC*).
	Work Work `json:"work,omitempty"`
	// Credential names the key or certificate an SSH session logged in
	// with, whatever the node ("": a node's token, which opens that node
	// only): the per-source caps on work also bound each credential.
	Credential string `json:"-"`
}

// Cert is the OpenSSH certificate a session logged in with, as a
// credential change (a CA removed, a serial or key id revoked) names it.
type Cert struct {
	CA     string `json:"ca"`      // SHA256:... of the CA's key
	CAName string `json:"ca_name"` // the admin's name for the CA
	Serial uint64 `json:"serial"`
	KeyID  string `json:"key_id"` // exactly as signed
	// Seen is the latest access epoch when the login read the database:
	// every credential change up to it was reflected in that read, so only
	// a later one (epoch > Seen) can end the session.
	Seen int64 `json:"-"`
}

// Registry is safe for concurrent use. The zero value is not; use New.
type Registry struct {
	cfg    Config
	nextID atomic.Uint64

	mu sync.Mutex
	// byID holds the live sessions: listed, and counted in counts. A cut
	// session leaves both at once and waits in unwinding until it has
	// ended (its end called): the places it held are another tenancy's
	// from the cut on, whatever its work still takes to stop.
	byID      map[string]*entry
	unwinding map[*entry]struct{}
	counts    map[slot]int
	watchers  map[uint64]*watcher // by Watch's sequence number
	nextW     uint64
	shutdown  bool
}

// Entry states, guarded by Registry.mu.
const (
	stateLive  = iota // in byID, counted
	stateCut          // cut before it ended: in unwinding
	stateEnded        // its end was called
)

type entry struct {
	info   Info
	slots  []slot // the counts it holds while live
	cancel context.CancelCauseFunc
	done   chan struct{} // closed by the end func, once
	state  int
}

// New returns an empty registry.
func New(cfg Config) *Registry {
	cfg.setDefaults()
	return &Registry{cfg: cfg, byID: map[string]*entry{}, unwinding: map[*entry]struct{}{}, counts: map[slot]int{},
		watchers: map[uint64]*watcher{}}
}

// SourceKey is obmd's name for the client host (an address without port)
// in every per-source limit (sessions, connections, guessing): the address
// itself for IPv4, its /64 for IPv6. A single host is usually given a whole
// /64; counting its addresses one by one would give it 2^64 budgets.
func SourceKey(host string) string {
	ip := net.ParseIP(host)
	if ip == nil {
		return host
	}
	if v4 := ip.To4(); v4 != nil {
		return v4.String() // also for ::ffff:a.b.c.d from a dual-stack listener
	}
	return ip.Mask(net.CIDRMask(64, 128)).String() + "/64"
}

// Start registers a session described by info (ID and Started are filled in).
// The returned context is cancelled, with a cause the session shows its user,
// when the session is cut; end must be called exactly once when the session
// has finished (it is what Cut waits for). Sessions start through
// access.Revoker.Open, which also admits them. host is the client's address
// without port; the per-source limits count it by SourceKey.
//
// It refuses a session over a cap (Config): a session cap with an error
// wrapping ErrTooMany, a cap on concurrent work (info.Work) with a
// *BusyError; the texts are safe to show.
func (r *Registry) Start(parent context.Context, info Info, host string) (ctx context.Context, _ Info, end func(), err error) {
	limits := r.cfg.limits(info, SourceKey(host))
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.shutdown {
		return nil, Info{}, nil, sol.ErrShutdown
	}
	for _, l := range limits {
		if l.max > 0 && r.counts[l.slot] >= l.max {
			return nil, Info{}, nil, l.refusal(info.Node)
		}
	}
	info.ID = r.cfg.IDPrefix + strconv.FormatUint(r.nextID.Add(1), 10)
	info.Replica = r.cfg.Replica
	info.Started = time.Now()
	ctx, cancel := context.WithCancelCause(parent)
	e := &entry{info: info, slots: make([]slot, len(limits)), cancel: cancel, done: make(chan struct{})}
	for i, l := range limits {
		e.slots[i] = l.slot
		r.counts[l.slot]++
	}
	r.byID[info.ID] = e
	// The expiry's timer only cuts (its goroutine is short-lived); end
	// stops it.
	stopExpiry := func() bool { return false }
	if !info.Expires.IsZero() {
		node := info.Node
		stopExpiry = time.AfterFunc(time.Until(info.Expires), func() {
			r.mu.Lock()
			r.cutLocked(e)
			r.mu.Unlock()
			cancel(expired(node))
		}).Stop
	}
	var once sync.Once
	end = func() {
		once.Do(func() {
			stopExpiry()
			r.mu.Lock()
			if e.state == stateLive {
				r.releaseLocked(e)
			}
			delete(r.unwinding, e)
			e.state = stateEnded
			r.mu.Unlock()
			cancel(context.Canceled)
			close(e.done)
		})
	}
	return ctx, info, end, nil
}

// releaseLocked takes live e out of the list and gives back its places.
// r.mu held.
func (r *Registry) releaseLocked(e *entry) {
	delete(r.byID, e.info.ID)
	for _, s := range e.slots {
		if r.counts[s]--; r.counts[s] <= 0 {
			delete(r.counts, s)
		}
	}
}

// cutLocked moves e, if live, to unwinding, releasing it. The caller
// cancels it. r.mu held.
func (r *Registry) cutLocked(e *entry) {
	if e.state != stateLive {
		return
	}
	r.releaseLocked(e)
	r.unwinding[e] = struct{}{}
	e.state = stateCut
}

// Cut tells the watched connections (Watch) of node from before epoch,
// then cancels every session of node whose epoch is below epoch (epoch <= 0
// cuts them all) with cause, and waits until they have ended or the
// configured bound passes. It returns how many sessions were cut and how
// many had not ended in time.
func (r *Registry) Cut(node string, epoch int64, cause error) (cut, late int) {
	before := func(n string, e int64) bool { return n == node && (epoch <= 0 || e < epoch) }
	r.endWatched(func(c *Conn) bool { return before(c.Node, c.Epoch) }, func(string) error { return cause })
	victims, late := r.cutWhere(func(e *entry) bool { return before(e.info.Node, e.info.Epoch) }, func(string) error { return cause })
	return len(victims), late
}

// CutAll tells every watched connection, then cuts every live session,
// each with cause(its node), and waits as Cut does: one bound for all of
// them. It returns how many sessions of each node were cut, and how many
// sessions had not ended in time.
func (r *Registry) CutAll(cause func(node string) error) (cut map[string]int, late int) {
	r.endWatched(func(*Conn) bool { return true }, cause)
	victims, late := r.cutWhere(func(*entry) bool { return true }, cause)
	return perNode(victims), late
}

// CutCerts tells the watched connections that logged in with a
// certificate (Conn.Cert) match selects, then cuts every session that did
// (Info.Cert), each with cause(its node), and waits as Cut does. It
// returns how many sessions of each node were cut, and how many had not
// ended in time.
func (r *Registry) CutCerts(match func(Cert) bool, cause func(node string) error) (cut map[string]int, late int) {
	r.endWatched(func(c *Conn) bool { return c.Cert != nil && match(*c.Cert) }, cause)
	victims, late := r.cutWhere(func(e *entry) bool { return e.info.Cert != nil && match(*e.info.Cert) }, cause)
	return perNode(victims), late
}

func perNode(victims []*entry) map[string]int {
	cut := map[string]int{}
	for _, e := range victims {
		cut[e.info.Node]++
	}
	return cut
}

// Kick cuts one session by ID; it reports whether the session existed.
func (r *Registry) Kick(id string, cause error) bool {
	victims, _ := r.cutWhere(func(e *entry) bool { return e.info.ID == id }, func(string) error { return cause })
	return len(victims) > 0
}

// Shutdown refuses new sessions and cuts every live one with
// sol.ErrShutdown, obmd's one shutdown cause; it waits for them, and for
// those cut before that have not ended yet, as Cut does.
func (r *Registry) Shutdown() (cut, late int) {
	r.mu.Lock()
	r.shutdown = true
	earlier := make([]*entry, 0, len(r.unwinding))
	for e := range r.unwinding {
		earlier = append(earlier, e)
	}
	r.mu.Unlock()
	victims := r.cancelWhere(func(*entry) bool { return true }, func(string) error { return sol.ErrShutdown })
	return len(victims), r.await(append(victims, earlier...))
}

// cutWhere cancels every live session match selects, with cause(its
// node), and waits until they have ended or the configured bound passes.
// It returns them and how many had not ended in time.
func (r *Registry) cutWhere(match func(*entry) bool, cause func(node string) error) (victims []*entry, late int) {
	victims = r.cancelWhere(match, cause)
	return victims, r.await(victims)
}

// cancelWhere cuts every live session match selects: each leaves the list
// and gives back its places at once, and is cancelled with cause(its
// node). It returns them.
func (r *Registry) cancelWhere(match func(*entry) bool, cause func(node string) error) (victims []*entry) {
	r.mu.Lock()
	for _, e := range r.byID {
		if match(e) {
			victims = append(victims, e)
		}
	}
	for _, e := range victims {
		r.cutLocked(e)
	}
	r.mu.Unlock()
	for _, e := range victims {
		e.cancel(cause(e.info.Node))
	}
	return victims
}

// await waits until every one of victims has ended, or the configured
// bound passes; it returns how many had not ended in time.
func (r *Registry) await(victims []*entry) (late int) {
	deadline := time.NewTimer(r.cfg.CutWait)
	defer deadline.Stop()
	for _, e := range victims {
		select {
		case <-e.done:
		case <-deadline.C:
			// Count the rest without waiting any longer.
			for _, v := range victims {
				select {
				case <-v.done:
				default:
					late++
				}
			}
			return late
		}
	}
	return 0
}

// List returns the live sessions of node (all nodes if node is ""), oldest first.
func (r *Registry) List(node string) []Info {
	r.mu.Lock()
	out := make([]Info, 0, len(r.byID))
	for _, e := range r.byID {
		if node == "" || e.info.Node == node {
			out = append(out, e.info)
		}
	}
	r.mu.Unlock()
	sort.Slice(out, func(i, j int) bool {
		a, _ := strconv.ParseUint(strings.TrimPrefix(out[i].ID, r.cfg.IDPrefix), 10, 64)
		b, _ := strconv.ParseUint(strings.TrimPrefix(out[j].ID, r.cfg.IDPrefix), 10, 64)
		return a < b
	})
	return out
}

// Unwinding returns the number of sessions cut that have not ended yet:
// they hold no place and are not listed, but their work is still
// stopping.
func (r *Registry) Unwinding() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.unwinding)
}

// Count returns the number of live sessions by kind.
func (r *Registry) Count() map[Kind]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[Kind]int{}
	for _, e := range r.byID {
		out[e.info.Kind]++
	}
	return out
}

package history

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// Kind says what a Chunk holds: console output, or a marker.
type Kind uint8

// Chunk kinds. Their numbers are stored: never renumber them.
const (
	KindOutput       Kind = 1 // console bytes, untouched
	KindLinkLost     Kind = 2 // the console link to the BMC was lost
	KindLinkRestored Kind = 3 // ... and is back
	KindPower        Kind = 4 // a power operation, with who ran it
	KindBootDevice   Kind = 5 // a boot-device change, with who made it
	KindTenancyEnd   Kind = 6 // an access change ended the tenancy
	KindGap          Kind = 7 // bytes that were not recorded, or not delivered
)

// Valid reports whether k is one of the kinds above.
func (k Kind) Valid() bool { return k >= KindOutput && k <= KindGap }

// IsMarker reports whether chunks of kind k hold marker text.
func (k Kind) IsMarker() bool { return k != KindOutput }

// String names k ("output", "link_lost", ...).
func (k Kind) String() string {
	switch k {
	case KindOutput:
		return "output"
	case KindLinkLost:
		return "link_lost"
	case KindLinkRestored:
		return "link_restored"
	case KindPower:
		return "power"
	case KindBootDevice:
		return "boot_device"
	case KindTenancyEnd:
		return "tenancy_end"
	case KindGap:
		return "gap"
	}
	return "kind(" + strconv.Itoa(int(k)) + ")"
}

// Size limits a Store enforces.
const (
	// MaxChunkBytes is the most data one chunk holds (the Recorder cuts
	// output into chunks of at most Config.FlushBytes).
	MaxChunkBytes = 64 << 10
	// MaxMarkerLen is the longest marker text; longer text is cut.
	MaxMarkerLen = 256
)

// Stamp is the arrival time of a chunk's bytes from offset Off on: a chunk
// holds the output of many writes, and each write's time is kept (at the
// millisecond) so that --timestamps and asciicast replay place every line
// at the time it arrived.
type Stamp struct {
	Off int
	At  time.Time
}

// Chunk is one piece of a node's history: console output that arrived from
// At on, or one marker (Data is its text).
type Chunk struct {
	Node  string
	Epoch int64 // the tenancy: the node's access epoch when it began
	// Seq orders the chunks of one tenancy; the Store assigns it when it
	// stores the chunk (0 while the chunk is only buffered).
	Seq  int64
	At   time.Time // arrival of the first byte (milliseconds, UTC)
	Kind Kind
	Data []byte
	// Stamps give the arrival of later bytes of an output chunk: offsets
	// strictly increasing within (0, len(Data)), times not decreasing and
	// not before At. Bytes before the first stamp arrived at At.
	Stamps []Stamp
}

// Until is when the chunk's last byte arrived.
func (c *Chunk) Until() time.Time {
	if n := len(c.Stamps); n > 0 {
		return c.Stamps[n-1].At
	}
	return c.At
}

// TimeAt is when the byte at offset off arrived.
func (c *Chunk) TimeAt(off int) time.Time {
	at := c.At
	for _, s := range c.Stamps {
		if s.Off > off {
			break
		}
		at = s.At
	}
	return at
}

// Lines counts the newlines of an output chunk (0 for a marker).
func (c *Chunk) Lines() int {
	if c.Kind != KindOutput {
		return 0
	}
	return bytes.Count(c.Data, []byte{'\n'})
}

// tail returns the chunk from byte off on, with its stamps rebased (in a
// new slice: c's are left as they are).
func (c Chunk) tail(off int) Chunk {
	if off <= 0 {
		return c
	}
	at := c.TimeAt(off)
	var st []Stamp
	for _, s := range c.Stamps {
		if s.Off > off {
			st = append(st, Stamp{Off: s.Off - off, At: s.At})
		}
	}
	c.At, c.Data, c.Stamps = at, c.Data[off:], st
	return c
}

// Check reports what makes c unfit to store, if anything.
func (c *Chunk) Check() error {
	switch {
	case c.Node == "":
		return errors.New("chunk of no node")
	case c.Epoch <= 0:
		return fmt.Errorf("chunk of %s: no tenancy epoch", c.Node)
	case !c.Kind.Valid():
		return fmt.Errorf("chunk of %s: unknown %v", c.Node, c.Kind)
	case c.At.IsZero():
		return fmt.Errorf("chunk of %s: no time", c.Node)
	case len(c.Data) > MaxChunkBytes:
		return fmt.Errorf("chunk of %s: %d bytes, more than %d", c.Node, len(c.Data), MaxChunkBytes)
	case c.Kind.IsMarker() && (len(c.Data) > MaxMarkerLen || !utf8.Valid(c.Data)):
		return fmt.Errorf("chunk of %s: marker text not valid UTF-8 of at most %d bytes", c.Node, MaxMarkerLen)
	case c.Kind.IsMarker() && len(c.Stamps) > 0:
		return fmt.Errorf("chunk of %s: a marker with stamps", c.Node)
	}
	off, at := 0, c.At
	for _, s := range c.Stamps {
		if s.Off <= off || s.Off >= len(c.Data) || s.At.Before(at) {
			return fmt.Errorf("chunk of %s: stamps out of order", c.Node)
		}
		off, at = s.Off, s.At
	}
	return nil
}

// clone returns a deep copy of c.
func (c Chunk) clone() Chunk {
	c.Data = bytes.Clone(c.Data)
	c.Stamps = append([]Stamp(nil), c.Stamps...)
	return c
}

// AppendStamps appends the encoding of c's stamps to dst: per stamp, the
// offset from the previous one and the milliseconds since the previous
// time, as uvarints. Most stamps take two or three bytes.
func AppendStamps(dst []byte, c Chunk) []byte {
	off, ms := 0, c.At.UnixMilli()
	for _, s := range c.Stamps {
		t := s.At.UnixMilli()
		dst = binary.AppendUvarint(dst, uint64(s.Off-off))
		dst = binary.AppendUvarint(dst, uint64(max(t-ms, 0)))
		off, ms = s.Off, max(t, ms)
	}
	return dst
}

// ErrBadStamps: stored stamps that do not decode for their chunk.
var ErrBadStamps = errors.New("malformed chunk stamps")

// ParseStamps decodes what AppendStamps wrote for a chunk that began at at
// and holds size bytes.
func ParseStamps(b []byte, at time.Time, size int) ([]Stamp, error) {
	if len(b) == 0 {
		return nil, nil
	}
	var out []Stamp
	off, ms := 0, at.UnixMilli()
	for len(b) > 0 {
		d, n := binary.Uvarint(b)
		if n <= 0 || d == 0 || d >= uint64(size-off) {
			return nil, ErrBadStamps
		}
		b = b[n:]
		dt, n := binary.Uvarint(b)
		if n <= 0 || dt > uint64(maxStampStep/time.Millisecond) {
			return nil, ErrBadStamps
		}
		b = b[n:]
		off += int(d)
		ms += int64(dt)
		out = append(out, Stamp{Off: off, At: time.UnixMilli(ms).UTC()})
	}
	return out, nil
}

// maxStampStep bounds the time between two stamps a decoder accepts, so a
// corrupt row cannot overflow a time.
const maxStampStep = 100 * 365 * 24 * time.Hour

// Marker is a marker's kind and text, for Recorder.Mark.
type Marker struct {
	Kind Kind
	Text string
}

// Actors, as markers name who ran an operation.
const (
	ActorSSHToken = "ssh:token" // an SSH session that logged in with the node's token
	ActorHTTP     = "http"      // the HTTP API (node token)
)

// ActorSSHKey is the actor of an SSH session that logged in with the key
// of fingerprint fp ("SHA256:...").
func ActorSSHKey(fp string) string { return "ssh:key " + fp }

// ActorSSHCert is the actor of an SSH session that logged in with the
// certificate who names ("hil:alice serial 42": its CA's name, key id and
// serial, as the audit names it).
func ActorSSHCert(who string) string { return "ssh:cert " + who }

// LinkLost is the marker of a lost console link.
func LinkLost() Marker { return Marker{KindLinkLost, "console link lost"} }

// LinkRestored is the marker of a console link that is back.
func LinkRestored() Marker { return Marker{KindLinkRestored, "console link restored"} }

// Power is the marker of power operation op ("power-cycle", "power-off
// --soft", ...) run by actor.
func Power(op, actor string) Marker {
	return Marker{KindPower, cleanText(op + " by " + actor)}
}

// BootDevice is the marker of a boot-device change to dev by actor.
func BootDevice(dev string, persistent bool, actor string) Marker {
	text := "boot device " + dev
	if persistent {
		text += " (persistent)"
	}
	return Marker{KindBootDevice, cleanText(text + " by " + actor)}
}

// TenancyEnded is the marker an ended tenancy ends with, when it is kept.
func TenancyEnded() Marker { return Marker{KindTenancyEnd, "tenancy ended (access changed)"} }

// notRecorded is the text of a gap in the recording: bytes (and markers)
// that gave way because the Store did not take them in time.
func notRecorded(bytes, markers int) string {
	s := fmt.Sprintf("history: %d bytes not recorded", bytes)
	if markers > 0 {
		s = fmt.Sprintf("history: %d bytes and %d markers not recorded", bytes, markers)
	}
	return s
}

// notDelivered is the text of a gap in what a slow follower got.
func notDelivered(bytes, markers int) string {
	s := fmt.Sprintf("history: %d bytes skipped (reading too slowly)", bytes)
	if markers > 0 {
		s = fmt.Sprintf("history: %d bytes and %d markers skipped (reading too slowly)", bytes, markers)
	}
	return s
}

// cleanText makes marker text safe to print and to store: valid UTF-8,
// no control characters, at most MaxMarkerLen bytes.
func cleanText(s string) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	s = strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0) {
			return '?'
		}
		return r
	}, s)
	if len(s) > MaxMarkerLen {
		s = s[:MaxMarkerLen]
		for !utf8.ValidString(s) {
			s = s[:len(s)-1]
		}
	}
	return s
}

// Errors a Store returns and readers branch on.
var (
	// ErrEnded: a tenant's read of a tenancy that is no longer the node's
	// current one (its access changed, or the node is gone). Its text is
	// safe to show the tenant.
	ErrEnded = errors.New("this tenancy of the node has ended")
	// ErrNoTenancy: an admin's read of a tenancy that is not stored.
	ErrNoTenancy = errors.New("no such tenancy")
)

// Query selects part of one tenancy's history.
type Query struct {
	Node string
	// Epoch names the tenancy (required). For a tenant it is the epoch its
	// session was admitted at: the read returns ErrEnded unless that is
	// still the node's current epoch.
	Epoch int64
	// Admin reads any stored tenancy, current or ended and retained. The
	// zero value is the tenant's read.
	Admin bool
	// Since keeps what arrived at or after it (zero: everything).
	Since time.Time
	// After keeps stored chunks with Seq > After (a follower's position).
	After int64
	// Lines keeps the last Lines lines of output (0: all); markers among
	// them are kept and do not count. A Store returns whole chunks that
	// hold at least that many; Recorder.Read cuts to the exact line.
	Lines int
	// MaxBytes bounds the bytes returned, data and stamps (0: no bound but
	// the history's own): the newest whole chunks that fit are kept.
	MaxBytes int
}

func (q Query) check() error {
	switch {
	case q.Node == "":
		return errors.New("history query: no node")
	case q.Epoch <= 0:
		return fmt.Errorf("history query of %s: no tenancy epoch", q.Node)
	case q.Lines < 0 || q.MaxBytes < 0 || q.After < 0:
		return fmt.Errorf("history query of %s: negative bound", q.Node)
	}
	return nil
}

// Store keeps the history. package db implements it on SQLite, MySQL and
// PostgreSQL.
type Store interface {
	// AppendHistory stores chunks in one transaction, in order. It sets
	// the Seq of each chunk it stored; a chunk of a tenancy that has ended
	// and is not kept (or that is not the node's current one and was
	// never stored) is dropped, its Seq left 0. Then the oldest chunks of
	// each tenancy written to go until it holds at most maxBytes.
	AppendHistory(ctx context.Context, chunks []Chunk, maxBytes int64) error
	// ReadHistory returns the chunks q selects, in order (see Query).
	ReadHistory(ctx context.Context, q Query) ([]Chunk, error)
	// EndTenancies ends every tenancy of node that began before epoch:
	// deleted at once when retention is 0, else kept (for admins only)
	// with a TenancyEnded marker, until PurgeHistory removes it once
	// retention has passed. Idempotent.
	EndTenancies(ctx context.Context, node string, epoch int64, retention time.Duration) error
	// PurgeHistory removes the kept tenancies whose retention has passed,
	// and ends (as EndTenancies does) any tenancy left open although its
	// node's epoch has moved on (its end was missed: a crash, a race with
	// another replica). It returns how many tenancies it removed.
	PurgeHistory(ctx context.Context, retention time.Duration) (int, error)
}

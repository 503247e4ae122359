package history

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"time"
	"unicode/utf8"
)

// Format is an output format of a history.
type Format int

// Formats.
const (
	// FormatRaw is the console output, byte for byte; markers are left out.
	FormatRaw Format = iota + 1
	// FormatText is the console output with each marker on a line of its
	// own, "[obmd: ...]"; with Options.Timestamps every line starts with
	// the time its first byte arrived.
	FormatText
	// FormatCast is asciicast v2 (asciinema): a header line, then one
	// [t, "o", data] event per write and [t, "m", text] per marker.
	FormatCast
)

// ParseFormat parses "raw", "text" or "cast".
func ParseFormat(s string) (Format, error) {
	switch s {
	case "raw":
		return FormatRaw, nil
	case "text":
		return FormatText, nil
	case "cast":
		return FormatCast, nil
	}
	return 0, fmt.Errorf("unknown history format %q (want raw, text or cast)", s)
}

// Options tune an Encoder.
type Options struct {
	// Timestamps prefixes each line of FormatText with the arrival of its
	// first byte (RFC 3339, milliseconds, UTC) and a space.
	Timestamps bool
	// Width and Height are FormatCast's terminal size (default 80x24):
	// obmd does not know the size of a serial console.
	Width, Height int
}

// Encoder writes chunks in a Format.
type Encoder interface {
	// Encode writes one chunk, in one Write to the underlying writer.
	Encode(c Chunk) error
	// Close writes what the format still holds (a cast's header when no
	// chunk came, an unfinished UTF-8 sequence); it does not close the
	// underlying writer.
	Close() error
}

// NewEncoder returns an Encoder of format f to w.
func NewEncoder(w io.Writer, f Format, o Options) (Encoder, error) {
	switch f {
	case FormatRaw:
		return &rawEncoder{w: w}, nil
	case FormatText:
		return &TextEncoder{w: w, stamps: o.Timestamps, start: true}, nil
	case FormatCast:
		if o.Width <= 0 {
			o.Width = 80
		}
		if o.Height <= 0 {
			o.Height = 24
		}
		return &CastEncoder{w: w, width: o.Width, height: o.Height}, nil
	}
	return nil, fmt.Errorf("unknown history format %d", f)
}

// rawEncoder writes output only, untouched.
type rawEncoder struct{ w io.Writer }

func (e *rawEncoder) Encode(c Chunk) error {
	if c.Kind != KindOutput || len(c.Data) == 0 {
		return nil
	}
	_, err := e.w.Write(c.Data)
	return err
}

func (e *rawEncoder) Close() error { return nil }

// TimeLayout is the time of a line in FormatText: RFC 3339 with
// milliseconds.
const TimeLayout = "2006-01-02T15:04:05.000Z07:00"

// TextEncoder writes FormatText. Console bytes pass untouched; a marker
// that comes in the middle of a line ends it first (a newline is added),
// and the rest of that line starts a line of its own.
type TextEncoder struct {
	w      io.Writer
	stamps bool
	start  bool // the next byte starts a line
	buf    []byte
}

// Encode writes c.
func (e *TextEncoder) Encode(c Chunk) error {
	e.buf = e.buf[:0]
	if c.Kind == KindOutput {
		e.appendOutput(c)
	} else {
		if !e.start {
			e.buf = append(e.buf, '\n')
		}
		e.prefix(c.At)
		e.buf = append(e.buf, "[obmd: "...)
		e.buf = append(e.buf, cleanText(string(c.Data))...)
		e.buf = append(e.buf, "]\n"...)
		e.start = true
	}
	if len(e.buf) == 0 {
		return nil
	}
	_, err := e.w.Write(e.buf)
	return err
}

// appendOutput appends c's bytes, a time prefix at each line start.
func (e *TextEncoder) appendOutput(c Chunk) {
	d := c.Data
	for off := 0; off < len(d); {
		if e.start {
			e.prefix(c.TimeAt(off))
			e.start = false
		}
		end := len(d)
		if i := bytes.IndexByte(d[off:], '\n'); i >= 0 {
			end = off + i + 1
			e.start = true
		}
		e.buf = append(e.buf, d[off:end]...)
		off = end
	}
}

func (e *TextEncoder) prefix(at time.Time) {
	if e.stamps {
		e.buf = at.UTC().AppendFormat(e.buf, TimeLayout)
		e.buf = append(e.buf, ' ')
	}
}

// Close writes nothing: an unfinished last line stays unfinished.
func (e *TextEncoder) Close() error { return nil }

// CastEncoder writes asciicast v2. Event data must be a JSON string, i.e.
// Unicode: bytes that are not valid UTF-8 each become U+FFFD (what
// asciinema's own recorder does with them); a sequence cut between two
// writes is joined first. Control characters, escape sequences and NUL
// are JSON escapes and replay as they were. FormatRaw is the byte-exact
// export.
type CastEncoder struct {
	w             io.Writer
	width, height int
	header        bool
	start         time.Time
	last          float64 // seconds of the last event: never go back
	carry         []byte  // the start of a UTF-8 sequence cut by a write
	buf           []byte
}

// Encode writes c's events (the header first, on the first chunk).
func (e *CastEncoder) Encode(c Chunk) error {
	e.buf = e.buf[:0]
	e.writeHeader(c.At)
	if c.Kind == KindOutput {
		seg, at := 0, c.At
		for i := 0; i <= len(c.Stamps); i++ {
			end, next := len(c.Data), at
			if i < len(c.Stamps) {
				end, next = c.Stamps[i].Off, c.Stamps[i].At
			}
			e.event(at, "o", e.decode(c.Data[seg:end]))
			seg, at = end, next
		}
	} else {
		e.event(c.At, "m", cleanText(string(c.Data)))
	}
	if len(e.buf) == 0 {
		return nil
	}
	_, err := e.w.Write(e.buf)
	return err
}

// writeHeader appends the header line if it is not written yet.
func (e *CastEncoder) writeHeader(at time.Time) {
	if e.header {
		return
	}
	e.header, e.start = true, at
	h := struct {
		Version   int   `json:"version"`
		Width     int   `json:"width"`
		Height    int   `json:"height"`
		Timestamp int64 `json:"timestamp,omitempty"`
	}{2, e.width, e.height, 0}
	if !at.IsZero() {
		h.Timestamp = at.Unix()
	}
	line, _ := json.Marshal(h) // a struct of ints always marshals
	e.buf = append(append(e.buf, line...), '\n')
}

// event appends [t, kind, data] unless data is empty.
func (e *CastEncoder) event(at time.Time, kind, data string) {
	if data == "" {
		return
	}
	t := max(at.Sub(e.start).Seconds(), e.last)
	e.last = t
	e.buf = append(e.buf, '[')
	e.buf = strconv.AppendFloat(e.buf, t, 'f', 3, 64)
	e.buf = append(e.buf, ", \""...)
	e.buf = append(e.buf, kind...)
	e.buf = append(e.buf, "\", "...)
	e.buf = appendJSONString(e.buf, data)
	e.buf = append(e.buf, "]\n"...)
}

// decode turns p, after what was carried, into valid UTF-8, carrying a
// sequence that p ends in the middle of.
func (e *CastEncoder) decode(p []byte) string {
	if len(e.carry) > 0 {
		p = append(e.carry, p...)
		e.carry = nil
	}
	for k := 1; k <= min(utf8.UTFMax-1, len(p)); k++ {
		if b := p[len(p)-k]; utf8.RuneStart(b) {
			if !utf8.FullRune(p[len(p)-k:]) {
				e.carry = append([]byte(nil), p[len(p)-k:]...)
				p = p[:len(p)-k]
			}
			break
		}
	}
	return toValidUTF8(p)
}

// toValidUTF8 replaces each byte that is not part of valid UTF-8 with
// U+FFFD.
func toValidUTF8(p []byte) string {
	if utf8.Valid(p) {
		return string(p)
	}
	out := make([]byte, 0, len(p)+8)
	for len(p) > 0 {
		r, n := utf8.DecodeRune(p)
		if r == utf8.RuneError && n == 1 {
			out = utf8.AppendRune(out, utf8.RuneError)
		} else {
			out = append(out, p[:n]...)
		}
		p = p[n:]
	}
	return string(out)
}

// appendJSONString appends s (valid UTF-8) as a JSON string.
func appendJSONString(dst []byte, s string) []byte {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s) // a string always encodes
	return append(dst, bytes.TrimSuffix(b.Bytes(), []byte{'\n'})...)
}

// Close writes the header if no chunk came, and what is carried as U+FFFD.
func (e *CastEncoder) Close() error {
	e.buf = e.buf[:0]
	e.writeHeader(time.Time{})
	if len(e.carry) > 0 {
		carry := e.carry
		e.carry = nil
		e.event(e.start.Add(time.Duration(e.last*float64(time.Second))), "o", toValidUTF8(carry))
	}
	if len(e.buf) == 0 {
		return nil
	}
	_, err := e.w.Write(e.buf)
	return err
}

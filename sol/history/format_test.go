package history

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

// write is one write of a test's console: bytes at a time, or a marker.
type write struct {
	at   int // ms
	out  string
	mark string
}

// chunksOf records writes as the Recorder would (chunks of chunkSize).
func chunksOf(writes []write, chunkSize int) []Chunk {
	var b buffer
	for _, w := range writes {
		if w.mark != "" {
			b.marker(Chunk{Node: "n", Epoch: 1, At: ms(w.at), Kind: KindPower, Data: []byte(w.mark)})
			continue
		}
		b.output("n", 1, []byte(w.out), ms(w.at), chunkSize)
	}
	var out []Chunk
	for _, it := range b.take() {
		out = append(out, it.chunk(notRecorded))
	}
	return out
}

func encode(t testing.TB, f Format, o Options, chunks []Chunk) string {
	t.Helper()
	var buf bytes.Buffer
	e, err := NewEncoder(&buf, f, o)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range chunks {
		if err := e.Encode(c); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.String()
}

// hostile is console output a tenant's node may print.
const hostile = "\x00nul\x00 \xff\xfe bad \xc3\x28 \xe2\x82 cut\x1b]0;title\x07\x1b[2J\x1b[31mred\x1b[0m\r\n" +
	"\"quotes\" \\ </script> \u2028 é 漢字 🙂\r\n"

func TestRawIsByteExact(t *testing.T) {
	var all []byte
	for i := range 256 {
		all = append(all, byte(i))
	}
	writes := []write{{0, hostile, ""}, {1, "", "power-cycle by ssh:token"}, {2, string(all), ""}}
	got := encode(t, FormatRaw, Options{}, chunksOf(writes, 7))
	if want := hostile + string(all); got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}

func TestText(t *testing.T) {
	writes := []write{
		{0, "boot\r\n", ""},
		{1500, "half a ", ""},
		{1600, "", "power-cycle by ssh:key SHA256:abc"},
		{1700, "line\r\nnext", ""},
		{2000, " line\n\n", ""},
		{2100, "", "console link lost\x1b[2J"},
	}
	tests := []struct {
		name string
		o    Options
		want string
	}{
		{"plain", Options{}, "boot\r\nhalf a \n[obmd: power-cycle by ssh:key SHA256:abc]\nline\r\nnext line\n\n" +
			"[obmd: console link lost?[2J]\n"},
		{"timestamps", Options{Timestamps: true},
			"2030-01-02T03:04:05.000Z boot\r\n" +
				"2030-01-02T03:04:06.500Z half a \n" +
				"2030-01-02T03:04:06.600Z [obmd: power-cycle by ssh:key SHA256:abc]\n" +
				"2030-01-02T03:04:06.700Z line\r\n" +
				"2030-01-02T03:04:06.700Z next line\n" +
				"2030-01-02T03:04:07.000Z \n" +
				"2030-01-02T03:04:07.100Z [obmd: console link lost?[2J]\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, size := range []int{3, 1000} { // however the output is chunked
				if got := encode(t, FormatText, tt.o, chunksOf(writes, size)); got != tt.want {
					t.Errorf("chunks of %d: got\n%q\nwant\n%q", size, got, tt.want)
				}
			}
		})
	}
}

// castEvent is one parsed event line.
type castEvent struct {
	t    float64
	kind string
	data string
}

// parseCast checks that every line of a cast is valid JSON, the first a v2
// header, the others [t, kind, data] with t not going back, and returns
// the header and events.
func parseCast(t testing.TB, cast string) (map[string]any, []castEvent) {
	t.Helper()
	lines := strings.Split(strings.TrimSuffix(cast, "\n"), "\n")
	var header map[string]any
	if err := json.Unmarshal([]byte(lines[0]), &header); err != nil || header["version"] != float64(2) {
		t.Fatalf("header %q: %v", lines[0], err)
	}
	var events []castEvent
	last := 0.0
	for _, l := range lines[1:] {
		if !json.Valid([]byte(l)) || !utf8.ValidString(l) {
			t.Fatalf("event line is not valid JSON: %q", l)
		}
		var ev []any
		if err := json.Unmarshal([]byte(l), &ev); err != nil || len(ev) != 3 {
			t.Fatalf("event %q: %v", l, err)
		}
		tm, ok1 := ev[0].(float64)
		kind, ok2 := ev[1].(string)
		data, ok3 := ev[2].(string)
		if !ok1 || !ok2 || !ok3 || tm < last || (kind != "o" && kind != "m") {
			t.Fatalf("event %q: want [t >= %v, \"o\"|\"m\", string]", l, last)
		}
		last = tm
		events = append(events, castEvent{tm, kind, data})
	}
	return header, events
}

func outputOf(events []castEvent) string {
	var b strings.Builder
	for _, e := range events {
		if e.kind == "o" {
			b.WriteString(e.data)
		}
	}
	return b.String()
}

func TestCast(t *testing.T) {
	writes := []write{{0, "hello ", ""}, {250, "wörld\r\n", ""}, {1000, "", "power-on by http"}, {2500, "€ cut: \xe2\x82", ""}, {2600, "\xac ok", ""}}
	for _, size := range []int{1, 5, 1000} {
		cast := encode(t, FormatCast, Options{}, chunksOf(writes, size))
		header, events := parseCast(t, cast)
		if header["width"] != float64(80) || header["height"] != float64(24) || header["timestamp"] != float64(t0.Unix()) {
			t.Errorf("chunks of %d: header %v, want 80x24 at %d", size, header, t0.Unix())
		}
		if got, want := outputOf(events), "hello wörld\r\n€ cut: € ok"; got != want {
			t.Errorf("chunks of %d: output %q, want %q", size, got, want)
		}
		var marks []castEvent
		for _, e := range events {
			if e.kind == "m" {
				marks = append(marks, e)
			}
		}
		if len(marks) != 1 || marks[0].data != "power-on by http" || marks[0].t != 1 {
			t.Errorf("chunks of %d: markers %v, want one at 1.000", size, marks)
		}
		if events[0].t != 0 || events[len(events)-1].t != 2.6 {
			t.Errorf("chunks of %d: times from %v to %v, want 0 to 2.6", size, events[0].t, events[len(events)-1].t)
		}
	}
	// Hostile bytes: still valid JSON, and what is not UTF-8 is U+FFFD.
	_, events := parseCast(t, encode(t, FormatCast, Options{Width: 132, Height: 50}, chunksOf([]write{{0, hostile, ""}}, 5)))
	if got, want := outputOf(events), toValidUTF8([]byte(hostile)); got != want {
		t.Errorf("hostile: got %q, want %q", got, want)
	}
	// No chunk at all: a header alone.
	if h, events := parseCast(t, encode(t, FormatCast, Options{}, nil)); len(events) != 0 || h["timestamp"] != nil {
		t.Errorf("empty cast: header %v, %d events", h, len(events))
	}
}

// fuzzWrites turns fuzz input into writes: data cut at the cut points,
// each write 0-2 ms after the last, and with marks a marker after every
// fourth.
func fuzzWrites(data []byte, cuts []byte, marks bool) []write {
	var writes []write
	at := 0
	for i, c := range cuts {
		if len(data) == 0 {
			break
		}
		n := min(int(c)%17+1, len(data))
		writes = append(writes, write{at: at, out: string(data[:n])})
		data = data[n:]
		at += int(c) % 3
		if marks && i%4 == 3 {
			writes = append(writes, write{at: at, mark: "marker " + fmt.Sprint(i)})
		}
	}
	if len(data) > 0 {
		writes = append(writes, write{at: at, out: string(data)})
	}
	return writes
}

func FuzzCastEncoder(f *testing.F) {
	f.Add([]byte(hostile), []byte{1, 2, 3, 4, 5, 6, 7})
	f.Add([]byte("€🙂漢"), []byte{0, 1, 2})
	f.Fuzz(func(t *testing.T, data, cuts []byte) {
		chunks := chunksOf(fuzzWrites(data, cuts, true), 11)
		_, events := parseCast(t, encode(t, FormatCast, Options{}, chunks))
		if got, want := outputOf(events), toValidUTF8(data); got != want {
			t.Fatalf("output %q, want %q", got, want)
		}
		if utf8.Valid(data) && outputOf(events) != string(data) {
			t.Fatalf("valid UTF-8 changed")
		}
	})
}

func FuzzTextTimestamps(f *testing.F) {
	f.Add([]byte("a\nb\r\nc"), []byte{1, 2, 3, 4, 5, 6, 7})
	f.Add([]byte("\n\n\n"), []byte{0})
	f.Fuzz(func(t *testing.T, data, cuts []byte) {
		writes := fuzzWrites(data, cuts, false)
		// The time of each byte, as written.
		var times []time.Time
		for _, w := range writes {
			for range len(w.out) {
				times = append(times, ms(w.at))
			}
		}
		got := encode(t, FormatText, Options{Timestamps: true}, chunksOf(writes, 11))
		var text []byte
		for len(got) > 0 {
			line := got
			if k := strings.IndexByte(got, '\n'); k >= 0 {
				line = got[:k+1]
			}
			got = got[len(line):]
			stamp, rest, ok := strings.Cut(line, " ")
			at, err := time.Parse(TimeLayout, stamp)
			if !ok || err != nil || rest == "" {
				t.Fatalf("line %q: no time prefix, or nothing after it", line)
			}
			if i := len(text); !at.Equal(times[i]) {
				t.Fatalf("line %q at %v, want %v, the time of its first byte", line, at, times[i])
			}
			text = append(text, rest...)
		}
		if !bytes.Equal(text, data) {
			t.Fatalf("text without its prefixes: got %q, want %q", text, data)
		}
	})
}

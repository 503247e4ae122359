package history

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

var t0 = time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)

func ms(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }

// show renders a buffer's chunks: output as its text with "|" where a
// stamp starts, markers and gaps as [text], each with its epoch.
func show(items []item) string {
	var parts []string
	for _, it := range items {
		c := it.chunk(notRecorded)
		if c.Kind != KindOutput {
			parts = append(parts, fmt.Sprintf("%d:[%s]", c.Epoch, c.Data))
			continue
		}
		var b strings.Builder
		fmt.Fprintf(&b, "%d:", c.Epoch)
		prev := 0
		for _, s := range c.Stamps {
			b.Write(c.Data[prev:s.Off])
			b.WriteByte('|')
			prev = s.Off
		}
		b.Write(c.Data[prev:])
		parts = append(parts, b.String())
	}
	return strings.Join(parts, " ")
}

func TestBuffer(t *testing.T) {
	type op struct {
		epoch int64
		at    int    // ms
		out   string // output, or
		mark  string // a marker
	}
	tests := []struct {
		name        string
		chunk, trim int
		ops         []op
		want        string
		dropped     int
	}{
		{"writes join one chunk, stamped per millisecond", 100, 100,
			[]op{{1, 0, "ab", ""}, {1, 0, "c", ""}, {1, 5, "de", ""}, {1, 9, "f", ""}}, "1:abc|de|f", 0},
		{"a chunk is cut at its size", 4, 100,
			[]op{{1, 0, "abcdef", ""}, {1, 1, "gh", ""}}, "1:abcd 1:ef|gh", 0},
		{"a marker ends the chunk", 100, 100,
			[]op{{1, 0, "ab", ""}, {1, 1, "", "m"}, {1, 2, "cd", ""}}, "1:ab 1:[m] 1:cd", 0},
		{"a new tenancy starts a chunk", 100, 100,
			[]op{{1, 0, "ab", ""}, {2, 1, "cd", ""}}, "1:ab 2:cd", 0},
		{"over the bound, the oldest bytes give way to a gap", 100, 5,
			[]op{{1, 0, "abc", ""}, {1, 1, "defg", ""}}, "1:[history: 2 bytes not recorded] 1:c|defg", 2},
		{"gaps add up", 3, 4,
			[]op{{1, 0, "abc", ""}, {1, 1, "def", ""}, {1, 2, "ghi", ""}}, "1:[history: 5 bytes not recorded] 1:f 1:ghi", 5},
		{"markers give way too, counted", 100, 3,
			[]op{{1, 0, "", "m"}, {1, 1, "abc", ""}}, "1:[history: 0 bytes and 1 markers not recorded] 1:abc", 0},
		{"a gap per tenancy", 100, 2,
			[]op{{1, 0, "ab", ""}, {2, 1, "cd", ""}}, "1:[history: 2 bytes not recorded] 2:cd", 2},
		{"one write larger than the bound keeps its end", 100, 3,
			[]op{{1, 0, "abcdefgh", ""}}, "1:[history: 5 bytes not recorded] 1:fgh", 5},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var b buffer
			dropped := 0
			for _, o := range tt.ops {
				if o.mark != "" {
					b.marker(Chunk{Node: "n", Epoch: o.epoch, At: ms(o.at), Kind: KindPower, Data: []byte(o.mark)})
				} else {
					b.output("n", o.epoch, []byte(o.out), ms(o.at), tt.chunk)
				}
				dropped += b.trim(tt.trim)
			}
			if got := show(b.items); got != tt.want {
				t.Errorf("got %s, want %s", got, tt.want)
			}
			if dropped != tt.dropped {
				t.Errorf("dropped: got %d, want %d", dropped, tt.dropped)
			}
			for _, it := range b.items {
				if c := it.chunk(notRecorded); c.Check() != nil {
					t.Errorf("chunk %+v: %v", c, c.Check())
				}
			}
		})
	}
}

func TestBufferRestoreAndPush(t *testing.T) {
	var b buffer
	b.output("n", 1, []byte("abc"), ms(0), 100)
	taken := b.take()
	b.output("n", 1, []byte("de"), ms(5), 100)
	b.restore(taken) // a failed flush
	if got, want := show(b.items), "1:abc 1:de"; got != want || b.size != 5 {
		t.Errorf("after restore: got %s (size %d), want %s (size 5)", got, b.size, want)
	}
	// A follower's copy of stamped chunks keeps the stamps.
	var f buffer
	for _, it := range b.items {
		f.push(it.c, 100)
	}
	f.push(Chunk{Node: "n", Epoch: 1, At: ms(6), Kind: KindOutput, Data: []byte("f"),
		Stamps: nil}, 100)
	if got, want := show(f.items), "1:abc|de|f"; got != want {
		t.Errorf("follower: got %s, want %s", got, want)
	}
	c, _ := f.pop(notDelivered)
	if string(c.Data) != "abcdef" || f.size != 0 || len(f.items) != 0 {
		t.Errorf("pop: got %q, size %d, %d items left", c.Data, f.size, len(f.items))
	}
}

func TestStampsRoundTrip(t *testing.T) {
	c := Chunk{Node: "n", Epoch: 1, At: ms(0), Kind: KindOutput, Data: []byte("0123456789"),
		Stamps: []Stamp{{1, ms(0)}, {2, ms(300)}, {9, ms(100000)}}}
	got, err := ParseStamps(AppendStamps(nil, c), c.At, len(c.Data))
	if err != nil || fmt.Sprint(got) != fmt.Sprint(c.Stamps) {
		t.Errorf("got %v, %v; want %v", got, err, c.Stamps)
	}
	for _, bad := range [][]byte{{0, 0}, {10, 0}, {1}, {1, 0xff}, {5, 0, 5, 0}} {
		if _, err := ParseStamps(bad, c.At, len(c.Data)); err == nil {
			t.Errorf("ParseStamps(%v): got no error", bad)
		}
	}
}

func FuzzStamps(f *testing.F) {
	f.Add([]byte{1, 0, 2, 5}, 10)
	f.Add([]byte{}, 0)
	f.Fuzz(func(t *testing.T, b []byte, size int) {
		size = max(0, min(size, MaxChunkBytes))
		st, err := ParseStamps(b, t0, size)
		if err != nil {
			return
		}
		c := Chunk{Node: "n", Epoch: 1, At: t0, Kind: KindOutput, Data: make([]byte, size), Stamps: st}
		if err := c.Check(); err != nil {
			t.Fatalf("parsed stamps %v fail Check: %v", st, err)
		}
		again, err := ParseStamps(AppendStamps(nil, c), t0, size)
		if err != nil || fmt.Sprint(again) != fmt.Sprint(st) {
			t.Fatalf("round trip: got %v, %v; want %v", again, err, st)
		}
	})
}

func TestLastLinesAndSince(t *testing.T) {
	out := func(at int, s string, stamps ...Stamp) Chunk {
		return Chunk{Node: "n", Epoch: 1, At: ms(at), Kind: KindOutput, Data: []byte(s), Stamps: stamps}
	}
	mark := Chunk{Node: "n", Epoch: 1, At: ms(50), Kind: KindLinkLost, Data: []byte("lost")}
	history := []Chunk{out(0, "a\nb\n"), out(10, "c\nd", Stamp{2, ms(40)}), mark, out(60, "e\n\n")}
	tests := []struct {
		name  string
		lines int
		since time.Time
		want  string
	}{
		{"one line: the empty last line", 1, time.Time{}, "1:\n"},
		{"two: a line that a marker splits", 2, time.Time{}, "1:d 1:[lost] 1:e\n\n"},
		{"three", 3, time.Time{}, "1:c\n|d 1:[lost] 1:e\n\n"},
		{"all", 100, time.Time{}, "1:a\nb\n 1:c\n|d 1:[lost] 1:e\n\n"},
		{"since cuts at a stamp", 0, ms(30), "1:d 1:[lost] 1:e\n\n"},
		{"since drops an older marker", 0, ms(55), "1:e\n\n"},
		{"since and lines", 5, ms(30), "1:d 1:[lost] 1:e\n\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cs := append([]Chunk(nil), history...)
			cs = cutSince(cs, tt.since)
			if tt.lines > 0 {
				cs = lastLines(cs, tt.lines)
			}
			var items []item
			for _, c := range cs {
				items = append(items, item{c: c})
			}
			if got := show(items); got != tt.want {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}
	if got := lastLines([]Chunk{out(0, "x\ny")}, 1); string(got[0].Data) != "y" {
		t.Errorf("an unfinished last line: got %q, want y", got[0].Data)
	}
}

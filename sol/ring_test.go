package sol

import (
	"bytes"
	"testing"
	"time"
)

func TestRing(t *testing.T) {
	tests := []struct {
		name   string
		size   int
		writes []string
	}{
		{"empty", 8, nil},
		{"fits", 8, []string{"abc", "de"}},
		{"exactly full", 4, []string{"ab", "cd"}},
		{"wraps", 5, []string{"abc", "def", "g"}},
		{"wraps many times", 3, []string{"a", "bc", "def", "g", "hi", "j"}},
		{"write larger than ring", 4, []string{"ab", "cdefghij"}},
		{"write equal to ring", 4, []string{"xy", "abcd", "e"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := ring{size: tt.size}
			var all []byte
			for _, w := range tt.writes {
				r.write([]byte(w))
				all = append(all, w...)
			}
			want := all[max(0, len(all)-tt.size):]
			if got := r.bytes(); !bytes.Equal(got, want) {
				t.Errorf("got %q, want %q", got, want)
			}
			r.reset()
			if got := r.bytes(); len(got) != 0 {
				t.Errorf("after reset: got %q, want nothing", got)
			}
		})
	}
}

func TestViewerPushSkipsAhead(t *testing.T) {
	v := newViewer(nil, nil, "v", time.Time{})
	const limit = 10
	steps := []struct {
		push     string
		notice   string
		skipped  int // newly skipped bytes reported by push
		wantQ    []Chunk
		wantSize int
	}{
		{push: "abcd", wantQ: []Chunk{{Data: []byte("abcd")}}, wantSize: 4},
		{push: "efg", wantQ: []Chunk{{Data: []byte("abcdefg")}}, wantSize: 7},
		{notice: "hello", wantQ: []Chunk{{Data: []byte("abcdefg")}, {Notice: "hello"}}, wantSize: 7},
		{push: "hij", wantQ: []Chunk{{Data: []byte("abcdefg")}, {Notice: "hello"}, {Data: []byte("hij")}}, wantSize: 10},
		// Overflow: queued bytes go, the notice stays, the gap is reported.
		{push: "k", skipped: 10, wantQ: []Chunk{{Notice: "hello"}, {Data: []byte("k"), Skipped: 10}}, wantSize: 1},
		{push: "lm", wantQ: []Chunk{{Notice: "hello"}, {Data: []byte("klm"), Skipped: 10}}, wantSize: 3},
		// A second overflow before delivery adds to the same gap; a push
		// larger than the queue keeps only its tail.
		{push: "0123456789XY", skipped: 5, wantQ: []Chunk{{Notice: "hello"}, {Data: []byte("23456789XY"), Skipped: 15}}, wantSize: 10},
	}
	for i, s := range steps {
		if s.notice != "" {
			v.notice(s.notice)
		} else {
			skipped, drop := v.push([]byte(s.push), limit, false)
			if skipped != s.skipped || drop {
				t.Errorf("step %d: got skipped %d drop %v, want %d false", i, skipped, drop, s.skipped)
			}
		}
		if len(v.q) != len(s.wantQ) || v.queued != s.wantSize {
			t.Fatalf("step %d: got queue %+v (%d bytes), want %+v (%d bytes)", i, v.q, v.queued, s.wantQ, s.wantSize)
		}
		for j := range v.q {
			g, w := v.q[j], s.wantQ[j]
			if !bytes.Equal(g.Data, w.Data) || g.Notice != w.Notice || g.Skipped != w.Skipped {
				t.Errorf("step %d chunk %d: got %+v, want %+v", i, j, g, w)
			}
		}
	}
	if _, drop := v.push([]byte("z"), 1, true); !drop {
		t.Error("dropSlow overflow: got drop false, want true")
	}
	c, ok := v.take()
	if !ok || c.Notice != "hello" {
		t.Errorf("take: got %+v %v, want the notice", c, ok)
	}
	if c, _ := v.take(); v.queued != 0 || c.Skipped != 15 {
		t.Errorf("take: got %+v and %d queued, want the gap chunk and 0", c, v.queued)
	}
}

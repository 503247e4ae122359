package ipmitool

import (
	"bytes"
	"math/rand"
	"testing"
	"time"
)

// ipmitoolInput models ipmitool 1.8.19's processSolUserInput: what it sends
// to the BMC, and which escape commands it runs, for input arriving in
// arbitrary reads. Its state survives across reads, as ipmitool's statics.
type ipmitoolInput struct {
	esc           byte
	escapePending bool
	lastWasCR     bool
	sent          []byte
	commands      []byte
}

func newModel(esc byte) *ipmitoolInput { return &ipmitoolInput{esc: esc, lastWasCR: true} }

func (m *ipmitoolInput) read(in []byte) {
	for _, ch := range in {
		if m.escapePending {
			m.escapePending = false
			switch ch {
			case '.':
				m.commands = append(m.commands, ch) // then falls through to bookkeeping
			case 'Z' - 64, 'X' - 64, 'B', '?':
				m.commands = append(m.commands, ch)
				continue
			default:
				if ch != m.esc {
					m.sent = append(m.sent, m.esc)
				}
				m.sent = append(m.sent, ch)
			}
		} else {
			if m.lastWasCR && ch == m.esc {
				m.escapePending = true
				continue
			}
			m.sent = append(m.sent, ch)
		}
		m.lastWasCR = ch == '\r' || ch == '\n'
	}
}

func TestEncoder(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want string // what the encoder writes to ipmitool
	}{
		{"plain", "ls -l\r", "ls -l\r"},
		{"escape at start", "~.", "~~."},
		{"escape after CR", "a\r~.\r", "a\r~~.\r"},
		{"escape after LF", "a\n~B", "a\n~~B"},
		{"escape mid line", "a~.", "a~."},
		{"doubled escape at start", "~~", "~~~"},
		{"escape then CR", "~\r~?", "~~\r~~?"},
		{"ctrl-z command", "\r~\x1a", "\r~~\x1a"},
		{"binary", "\x00\xff~", "\x00\xff~"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEncoder('~')
			got := e.encode(nil, []byte(tt.in))
			if string(got) != tt.want {
				t.Errorf("encode(%q): got %q, want %q", tt.in, got, tt.want)
			}
			m := newModel('~')
			m.read(got)
			if string(m.sent) != tt.in || len(m.commands) != 0 {
				t.Errorf("ipmitool sends %q and runs %q, want %q and nothing", m.sent, m.commands, tt.in)
			}
		})
	}
}

// checkNeutralised encodes in, written in the given pieces, feeds the result
// to the ipmitool model in other pieces, and checks that exactly in reaches
// the BMC with no command run, and that the encoder's line-start state
// matches the model's.
func checkNeutralised(t *testing.T, esc byte, in []byte, writeCuts, readCuts []int) {
	t.Helper()
	e := newEncoder(esc)
	var wire []byte
	rest := in
	for _, n := range writeCuts {
		if n > len(rest) {
			n = len(rest)
		}
		wire = e.encode(wire, rest[:n])
		rest = rest[n:]
	}
	wire = e.encode(wire, rest)
	m := newModel(esc)
	r := wire
	for _, n := range readCuts {
		if n > len(r) {
			n = len(r)
		}
		m.read(r[:n])
		r = r[n:]
	}
	m.read(r)
	if !bytes.Equal(m.sent, in) {
		t.Fatalf("BMC got %q, want %q", m.sent, in)
	}
	if len(m.commands) != 0 {
		t.Fatalf("ipmitool ran escape commands %q for input %q", m.commands, in)
	}
	if m.escapePending || e.lineStart != m.lastWasCR {
		t.Fatalf("state: encoder lineStart %v, ipmitool last_was_cr %v pending %v", e.lineStart, m.lastWasCR, m.escapePending)
	}
}

func TestEncoderRandom(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	alphabet := []byte("~~~\r\n.B?\x1a\x18ab")
	for i := 0; i < 5000; i++ {
		in := make([]byte, rng.Intn(40))
		for j := range in {
			in[j] = alphabet[rng.Intn(len(alphabet))]
		}
		cuts := func() []int {
			c := make([]int, rng.Intn(5))
			for j := range c {
				c[j] = rng.Intn(6)
			}
			return c
		}
		checkNeutralised(t, '~', in, cuts(), cuts())
	}
}

func FuzzEncoder(f *testing.F) {
	f.Add([]byte("~.\r~B\n~?~~\r~\x1a"), byte('~'), uint8(3), uint8(2))
	f.Add([]byte("abc"), byte('&'), uint8(1), uint8(1))
	f.Fuzz(func(t *testing.T, in []byte, esc byte, wcut, rcut uint8) {
		cfg := Config{Escape: esc}
		if esc == 0 || cfg.setDefaults() != nil {
			t.Skip()
		}
		w := []int{int(wcut % 8), int(wcut / 8 % 8)}
		r := []int{int(rcut % 8), int(rcut / 8 % 8)}
		checkNeutralised(t, esc, in, w, r)
	})
}

func TestEncoderCommandsAtLineStart(t *testing.T) {
	// What Break and Close rely on: at a line start "esc B" and "esc ."
	// are commands, and "esc B" leaves ipmitool at a line start.
	m := newModel('~')
	e := newEncoder('~')
	m.read(e.encode(nil, []byte("boot:\r")))
	if !e.lineStart {
		t.Fatal("encoder not at line start after CR")
	}
	m.read([]byte("~B"))
	m.read([]byte("~B"))
	m.read([]byte("~."))
	if got, want := string(m.commands), "BB."; got != want {
		t.Errorf("commands: got %q, want %q", got, want)
	}
	if got, want := string(m.sent), "boot:\r"; got != want {
		t.Errorf("sent: got %q, want %q", got, want)
	}
}

func TestConsumed(t *testing.T) {
	e := newEncoder('~')
	in := []byte("~a\r~b")
	out := e.encode(nil, in) // "~~a\r~~b"
	start := newEncoder('~')
	for n, want := range []int{0, 0, 1, 2, 3, 3, 4, 5} {
		if got := start.consumed(in, n); got != want {
			t.Errorf("consumed(%q, %d) of %q: got %d, want %d", in, n, out, got, want)
		}
	}
}

func TestFilter(t *testing.T) {
	brk := string(breakLine('~'))
	term := string(terminateLine('~'))
	tests := []struct {
		name   string
		expect []string
		in     string
		want   string
	}{
		{"nothing expected", nil, "a" + brk + "b", "a" + brk + "b"},
		{"break line mid output", []string{brk}, "abc" + brk + "def", "abcdef"},
		{"only once", []string{brk}, brk + brk, brk},
		{"two in order", []string{brk, term}, "x" + brk + "y" + term + "z", "xyz"},
		{"partial lookalike", []string{brk}, "~B [send", "~B [send"},
		{"tilde at end", []string{brk}, "cd ~", "cd ~"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// every way of splitting the input in two reads
			for cut := 0; cut <= len(tt.in); cut++ {
				now := time.Unix(1000, 0)
				var f filter
				for _, l := range tt.expect {
					f.expectLine([]byte(l), now)
				}
				got := f.feed(nil, []byte(tt.in[:cut]), now)
				got = f.feed(got, []byte(tt.in[cut:]), now)
				if _, holding := f.holding(); holding {
					got = f.flush(got)
				}
				if string(got) != tt.want {
					t.Fatalf("cut %d: got %q, want %q", cut, got, tt.want)
				}
			}
		})
	}
}

func TestFilterExpires(t *testing.T) {
	brk := breakLine('~')
	now := time.Unix(1000, 0)
	var f filter
	f.expectLine(brk, now)
	got := f.feed(nil, brk, now.Add(markerTTL+time.Second))
	if !bytes.Equal(got, brk) {
		t.Errorf("after the TTL: got %q, want the line passed through", got)
	}
}

func FuzzFilter(f *testing.F) {
	f.Add([]byte("abc~B [send break]\ndef"), uint8(5))
	f.Fuzz(func(t *testing.T, in []byte, cut uint8) {
		// With nothing expected the filter is the identity; with a line
		// expected, it removes at most that line's bytes, in order.
		now := time.Unix(1000, 0)
		c := int(cut) % (len(in) + 1)
		var id filter
		got := id.feed(id.feed(nil, in[:c], now), in[c:], now)
		if !bytes.Equal(got, in) {
			t.Fatalf("identity: got %q, want %q", got, in)
		}
		var fl filter
		line := breakLine('~')
		fl.expectLine(line, now)
		got = fl.feed(fl.feed(nil, in[:c], now), in[c:], now)
		got = fl.flush(got)
		if !bytes.Equal(got, in) {
			i := bytes.Index(in, line)
			if i < 0 || !bytes.Equal(got, append(append([]byte(nil), in[:i]...), in[i+len(line):]...)) {
				t.Fatalf("filtered %q to %q", in, got)
			}
		}
	})
}

package commands

import (
	"context"
	"errors"
	"fmt"
	"io"
	"regexp"
	"regexp/syntax"
	"runtime"
	"time"
	"unicode/utf8"
)

// Budgets of a tenant's patterns and searches (wait-for, --wait-for, an
// expect script's waits). A pattern is bounded by what it costs, not by
// its text: its compiled size (the instructions of its programs), and a
// search by its steps (instructions x bytes searched), which is what Go's
// regexp spends in the worst case (its NFA may run every instruction of
// the program on every byte). Measured at MaxProgram over its worst input
// (BenchmarkSearchWorst): 25 to 60 ns per step on a shared 2-CPU AMD EPYC,
// up to 110 ns under load.
const (
	// MaxProgram bounds one pattern's compiled size: the instructions of
	// its program and of its mid-line variant (pattern.mid) together. A
	// 1024-byte literal takes about 2,060.
	MaxProgram = 4096
	// MaxScriptProgram bounds the compiled size of an expect script's
	// waits together (each is compiled when it runs).
	MaxScriptProgram = 8 * MaxProgram
	// SearchCPU is the time one command may search per second of wall
	// time (a token bucket holding at most twice this): past it, its
	// search pauses, and resumes with nothing dropped. Eight commands at
	// it (the automation caps of one node) take 16% of a core.
	SearchCPU = 20 * time.Millisecond
)

// Search slicing and scheduling.
const (
	// sliceSteps bounds the work of a search between two checks of its
	// context and budget (at most about 7 ms at 110 ns per step); a search that
	// fits in one slice runs at once (Go's fastest path for it), a longer
	// one reads its input through a sliceReader.
	sliceSteps = 1 << 16
	// amortize and searchDelay rate the searches of a console's output:
	// a search that costs more than a slice runs once the output new
	// since the last search is an amortize-th of what it covers, or
	// searchDelay after that output arrived, so that a console printing
	// tiny chunks costs a bounded number of searches per byte.
	amortize    = 8
	searchDelay = 50 * time.Millisecond
	// searchBurst is the most search time a command saves up.
	searchBurst = 2 * SearchCPU
)

// checkedPattern is a pattern within MaxProgram, not compiled yet.
type checkedPattern struct {
	src       string // as given
	ml        string // multi-line, without capture groups, printed back
	size, mid int    // instructions of the programs of ml and of midExpr(ml)
}

// midExpr is the mid-line variant of ml (see pattern): the context byte,
// then the leftmost match (a lazy prefix), as group 1.
func midExpr(ml string) string { return `\A(?s:.)(?s:.*?)(` + ml + `)` }

// checkPattern parses val (RE2, (?m) implied) and measures its compiled
// size; over a budget or bad, it is a usage error naming the limit.
func checkPattern(name Name, val string) (checkedPattern, error) {
	if val == "" {
		return checkedPattern{}, usagef(name, "%s: empty regular expression", name)
	}
	if len(val) > MaxPattern {
		return checkedPattern{}, usagef(name, "%s: regular expression longer than %d bytes", name, MaxPattern)
	}
	tooLarge := usagef(name, "%s: regular expression too large: it compiles to more than %d instructions "+
		"(the limit; use fewer or smaller repetitions)", name, MaxProgram)
	// Parsed multi-line, then printed back (no \Q...\E left to swallow
	// what is put around it).
	tree, err := syntax.Parse(val, syntax.Perl&^syntax.OneLine)
	var se *syntax.Error
	if errors.As(err, &se) && se.Code == syntax.ErrLarge {
		return checkedPattern{}, tooLarge
	}
	if err != nil {
		return checkedPattern{}, usagef(name, "%s: bad regular expression: %s", name, clean(err.Error(), 200))
	}
	// Groups capture nothing a wait reports; without them a search
	// copies no capture arrays.
	tree = stripCaptures(tree)
	// The bound is cheap and allocates nothing: a pattern far over the
	// budget is never simplified or compiled (that is what took the
	// memory: (x{1000}){1000} is a million instructions).
	if progBound(tree) > 2*MaxProgram {
		return checkedPattern{}, tooLarge
	}
	c := checkedPattern{src: val, ml: tree.String()}
	if c.size, err = progLen(c.ml); err == nil {
		c.mid, err = progLen(midExpr(c.ml))
	}
	if err != nil {
		return checkedPattern{}, usagef(name, "%s: bad regular expression: %s", name, clean(err.Error(), 200))
	}
	if c.cost() > MaxProgram {
		return checkedPattern{}, usagef(name, "%s: regular expression too large: it compiles to %d instructions, "+
			"more than the limit of %d (use fewer or smaller repetitions)", name, c.cost(), MaxProgram)
	}
	return c, nil
}

// cost is c's compiled size, as MaxProgram counts it.
func (c checkedPattern) cost() int { return c.size + c.mid }

// compile builds c's regular expressions.
func (c checkedPattern) compile() (*pattern, error) {
	re, err := regexp.Compile(c.ml)
	if err != nil {
		return nil, fmt.Errorf("compile %s: %w", quote(c.src), err)
	}
	mid, err := regexp.Compile(midExpr(c.ml))
	if err != nil {
		return nil, fmt.Errorf("compile %s: %w", quote(c.src), err)
	}
	prefix, _ := re.LiteralPrefix()
	return &pattern{src: c.src, re: re, mid: mid, size: c.size, midSize: c.mid, prefix: []byte(prefix)}, nil
}

// stripCaptures replaces re's capture groups by what they hold.
func stripCaptures(re *syntax.Regexp) *syntax.Regexp {
	for re.Op == syntax.OpCapture {
		re = re.Sub[0]
	}
	for i, sub := range re.Sub {
		re.Sub[i] = stripCaptures(sub)
	}
	return re
}

// progLen is the number of instructions of expr's program, as regexp
// compiles it (parsed as regexp.Compile does, simplified, compiled).
func progLen(expr string) (int, error) {
	tree, err := syntax.Parse(expr, syntax.Perl)
	if err != nil {
		return 0, err
	}
	prog, err := syntax.Compile(tree.Simplify())
	if err != nil {
		return 0, err
	}
	return len(prog.Inst), nil
}

// boundCap saturates progBound (no overflow however deep the nesting).
const boundCap = 1 << 40

// progBound is an upper bound of the instructions of re's program once
// simplified and compiled (syntax.Compile), computed without building
// either: a counted repetition x{n,m} becomes m copies of x and m-n
// alternations, x{n,} n copies and a loop, a star, plus or quest adds at
// most two instructions, an alternation one per branch; 2 more for the
// program's fail and match instructions.
func progBound(re *syntax.Regexp) int64 {
	return min(bound(re)+2, boundCap)
}

func bound(re *syntax.Regexp) int64 {
	switch re.Op {
	case syntax.OpLiteral:
		return max(int64(len(re.Rune)), 1)
	case syntax.OpCapture, syntax.OpStar, syntax.OpPlus, syntax.OpQuest:
		return min(bound(re.Sub[0])+2, boundCap)
	case syntax.OpRepeat:
		n, extra := int64(re.Max), int64(re.Max-re.Min)+1
		if re.Max < 0 {
			n, extra = max(int64(re.Min), 1), 2
		}
		sub := bound(re.Sub[0])
		if sub > boundCap/max(n, 1) {
			return boundCap
		}
		return min(n*sub+extra, boundCap)
	case syntax.OpConcat, syntax.OpAlternate:
		sum := int64(0)
		if re.Op == syntax.OpAlternate {
			sum = int64(len(re.Sub))
		}
		for _, sub := range re.Sub {
			sum = min(sum+bound(sub), boundCap)
		}
		return max(sum, 1)
	}
	return 1 // one instruction: a character class, any character, an empty-width assertion, no match, empty
}

// meter is one command's search budget. A search runs in slices of at
// most sliceSteps, each holding one of the runner's search slots (a
// daemon-wide cap on searches running at once); between slices the
// command's context is checked (a timeout, a hang-up or a cut ends the
// search within a slice), and a command that searched more than SearchCPU
// per second sleeps until it is within its budget again. The zero meter
// has no budget and no slots (tests).
type meter struct {
	slots  chan struct{} // the runner's; nil: no cap
	rate   time.Duration // search time per second of wall time; 0: unlimited
	now    func() time.Time
	tokens time.Duration // search time left; negative: owed
	last   time.Time     // when tokens was last refilled (zero: never)
	start  time.Time     // the current slice's start, while held
	held   bool          // a slice is running (a slot taken)
	// direct bounds the steps a search may take in one call to regexp
	// without a check (0: sliceSteps); tests lower it to exercise the
	// sliced path.
	direct int
}

// newMeter is the budget of one command.
func (r *Runner) newMeter() meter {
	return meter{slots: r.searching, rate: SearchCPU, now: time.Now}
}

// searchSlots is the daemon-wide cap on searches running at once: half
// the processors obmd may use, so that automation never takes them all.
func searchSlots() chan struct{} {
	return make(chan struct{}, max(1, runtime.GOMAXPROCS(0)/2))
}

func (mt *meter) clock() time.Time {
	if mt.now == nil {
		return time.Now()
	}
	return mt.now()
}

// find runs re over in: its leftmost match (FindIndex), or with sub its
// submatches (FindSubmatchIndex); size is re's program's instructions.
// It fails only with ctx's cause, when ctx ended before the search did.
func (mt *meter) find(ctx context.Context, re *regexp.Regexp, size int, in []byte, sub bool) ([]int, error) {
	if err := mt.acquire(ctx); err != nil {
		return nil, err
	}
	defer mt.release()
	direct := mt.direct
	if direct == 0 {
		direct = sliceSteps
	}
	if size*len(in) <= direct {
		if sub {
			return re.FindSubmatchIndex(in), nil
		}
		return re.FindIndex(in), nil
	}
	r := &sliceReader{in: in, cost: size, left: sliceSteps, pause: func() error {
		mt.release()
		runtime.Gosched() // a search never holds a processor for long
		return mt.acquire(ctx)
	}}
	var loc []int
	if sub {
		loc = re.FindReaderSubmatchIndex(r)
	} else {
		loc = re.FindReaderIndex(r)
	}
	if r.err != nil {
		return nil, r.err
	}
	return loc, nil
}

// acquire starts a slice: it waits until the command is within its
// budget and a slot is free, or fails with ctx's cause.
func (mt *meter) acquire(ctx context.Context) error {
	if ctx.Err() != nil {
		return context.Cause(ctx)
	}
	if owed := mt.owed(); owed > 0 {
		t := time.NewTimer(owed)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
	if mt.slots != nil {
		select {
		case mt.slots <- struct{}{}:
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
	mt.held, mt.start = true, mt.clock()
	return nil
}

// release ends a slice: it frees the slot and charges the slice's time.
func (mt *meter) release() {
	if !mt.held {
		return
	}
	mt.held = false
	if mt.slots != nil {
		<-mt.slots
	}
	mt.tokens -= mt.clock().Sub(mt.start)
}

// owed refills the budget for the time since the last refill and returns
// how long the command must wait before it searches again (0: not at all).
func (mt *meter) owed() time.Duration {
	if mt.rate <= 0 {
		return 0
	}
	now := mt.clock()
	if mt.last.IsZero() {
		mt.tokens = searchBurst
	} else {
		earned := time.Duration(float64(now.Sub(mt.last)) * float64(mt.rate) / float64(time.Second))
		mt.tokens = min(mt.tokens+earned, searchBurst)
	}
	mt.last = now
	if mt.tokens >= 0 {
		return 0
	}
	return time.Duration(float64(-mt.tokens) * float64(time.Second) / float64(mt.rate))
}

// sliceReader feeds a search its input rune by rune (as utf8.DecodeRune
// reads it: an invalid byte is U+FFFD, one byte wide, exactly as a search
// of the bytes sees it), pausing every sliceSteps steps: each rune costs
// the program's instructions. A pause that fails ends the input, and the
// search's result is then meaningless (find drops it).
type sliceReader struct {
	in    []byte
	i     int
	cost  int // steps per rune: the program's instructions
	left  int // steps left in this slice
	pause func() error
	err   error // the pause's failure
}

func (r *sliceReader) ReadRune() (rune, int, error) {
	if r.err != nil || r.i >= len(r.in) {
		return 0, 0, io.EOF
	}
	if r.left -= r.cost; r.left < 0 {
		if r.err = r.pause(); r.err != nil {
			return 0, 0, r.err
		}
		r.left = sliceSteps - r.cost
	}
	if c := r.in[r.i]; c < utf8.RuneSelf {
		r.i++
		return rune(c), 1, nil
	}
	c, n := utf8.DecodeRune(r.in[r.i:])
	r.i += n
	return c, n, nil
}

package history_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/obmd/obmd/db"
	"github.com/obmd/obmd/db/dbtest"
	"github.com/obmd/obmd/keys"
	"github.com/obmd/obmd/sol/history"
	logtest "github.com/sirupsen/logrus/hooks/test"
)

// openDB opens and migrates a fresh database of engine e.
func openDB(t testing.TB, e dbtest.Engine) *db.Store {
	t.Helper()
	ctx := context.Background()
	log, _ := logtest.NewNullLogger()
	s, err := db.Open(ctx, e.DSN(t), log)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	if err := s.Migrate(ctx); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	return s
}

// newNode creates label with a token: its first tenant's tenancy.
func newNode(t testing.TB, s *db.Store, label string) int64 {
	t.Helper()
	if _, err := s.CreateNode(context.Background(), db.Node{Label: label, Type: "mock"}); err != nil {
		t.Fatalf("create %s: %v", label, err)
	}
	return rotateToken(t, s, label)
}

var tokens sync.Map

// rotateToken is an access change: the node's next tenancy.
func rotateToken(t testing.TB, s *db.Store, label string) int64 {
	t.Helper()
	n, _ := tokens.LoadOrStore(label, new(int))
	*n.(*int)++
	e, err := s.SetToken(context.Background(), label, keys.HashToken(fmt.Sprint(label, *n.(*int))))
	if err != nil {
		t.Fatalf("rotate %s: %v", label, err)
	}
	return e
}

func read(t *testing.T, r *history.Recorder, q history.Query) []history.Chunk {
	t.Helper()
	got, err := r.Read(context.Background(), q)
	if err != nil {
		t.Fatalf("read %+v: %v", q, err)
	}
	return got
}

// TestRecorderOnStores runs the recorder against the real store, on
// SQLite and MariaDB.
func TestRecorderOnStores(t *testing.T) {
	cases := []struct {
		name string
		run  func(t *testing.T, s *db.Store)
	}{
		{"tenancy_switch", testTenancySwitch},
		{"retention_keeps_late_bytes_before_the_end", testRetentionLateBytes},
		{"read_merges_what_is_buffered", testReadMerges},
		{"tenant_never_reads_another_tenancy_buffered", testReadBufferedIsolation},
		{"read_waits_for_a_flush_in_flight", testReadWaitsForFlush},
		{"flush_waits_for_a_read", testFlushWaitsForRead},
		{"cut_during_a_flush_that_commits", func(t *testing.T, s *db.Store) { testCutDuringFlush(t, s, false) }},
		{"cut_during_a_flush_that_fails", func(t *testing.T, s *db.Store) { testCutDuringFlush(t, s, true) }},
		{"follow_live", testFollowLive},
		{"follow_polls_another_replica", testFollowPolls},
		{"follow_goes_on_after_takeover", testFollowTakeover},
		{"slow_follower_skips_ahead", testSlowFollower},
		{"tenant_race", testRecorderTenantRace},
		{"hostile_bytes_round_trip", testHostileRoundTrip},
	}
	for _, e := range dbtest.Engines() {
		t.Run(e.Name, func(t *testing.T) {
			for _, c := range cases {
				t.Run(c.name, func(t *testing.T) { c.run(t, openDB(t, e)) })
			}
		})
	}
}

var slow = history.Config{FlushInterval: time.Hour} // flushes only when asked

// recording creates node n and starts recording it with a Recorder of cfg.
func recording(t *testing.T, s *db.Store, cfg history.Config) (int64, *history.Recorder, *history.Recording) {
	t.Helper()
	e := newNode(t, s, "n")
	r := newRecorder(t, s, cfg)
	return e, r, mustOpen(t, r, "n", e)
}

func flush(t *testing.T, r *history.Recorder) {
	t.Helper()
	if err := r.Flush(context.Background()); err != nil {
		t.Fatalf("flush: %v", err)
	}
}

func testTenancySwitch(t *testing.T, s *db.Store) {
	ctx := context.Background()
	e1, r, rec := recording(t, s, slow)
	rec.Write([]byte("first tenant's "))
	rec.Write([]byte("secret"))
	e2 := rotateToken(t, s, "n")
	r.SetEpoch("n", e2) // before the flush: the old bytes stay old
	rec.Write([]byte("second tenant"))
	flush(t, r)
	if got := output(read(t, r, history.Query{Node: "n", Epoch: e2})); got != "second tenant" {
		t.Errorf("new tenant reads %q, want only its own", got)
	}
	if _, err := r.Read(ctx, history.Query{Node: "n", Epoch: e1}); !errors.Is(err, history.ErrEnded) {
		t.Errorf("old tenant's read: got %v, want %v", err, history.ErrEnded)
	}
	if got := output(read(t, r, history.Query{Node: "n", Epoch: e1, Admin: true})); got != "first tenant's secret" {
		t.Errorf("admin read of the old tenancy: got %q", got)
	}
	if err := r.EndTenancies(ctx, "n", e2); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Read(ctx, history.Query{Node: "n", Epoch: e1, Admin: true}); !errors.Is(err, history.ErrNoTenancy) {
		t.Errorf("admin read after the end (no retention): got %v, want %v", err, history.ErrNoTenancy)
	}
}

func testRetentionLateBytes(t *testing.T, s *db.Store) {
	ctx := context.Background()
	e1 := newNode(t, s, "n")
	cfg := slow
	cfg.Retention = time.Hour
	r := newRecorder(t, s, cfg)
	rec := mustOpen(t, r, "n", e1)
	rec.Write([]byte("printed before the change"))
	e2 := rotateToken(t, s, "n")
	r.SetEpoch("n", e2)
	// Not flushed yet: EndTenancies flushes the old bytes first.
	if err := r.EndTenancies(ctx, "n", e2); err != nil {
		t.Fatal(err)
	}
	got := read(t, r, history.Query{Node: "n", Epoch: e1, Admin: true})
	if len(got) != 2 || string(got[0].Data) != "printed before the change" || got[1].Kind != history.KindTenancyEnd {
		t.Errorf("kept tenancy: got %q, want the output then the end marker", output(got))
	}
}

func testReadMerges(t *testing.T, s *db.Store) {
	e, r, rec := recording(t, s, slow)
	q := history.Query{Node: "n", Epoch: e}
	rec.Write([]byte("one\n"))
	if got := output(read(t, r, q)); got != "one\n" {
		t.Errorf("before any flush: got %q, want it from the buffer", got)
	}
	flush(t, r)
	rec.Write([]byte("two\nthr"))
	r.Mark("n", e, history.Power("power-cycle", history.ActorSSHToken))
	rec.Write([]byte("ee\n"))
	got := read(t, r, q)
	if output(got) != "one\ntwo\nthree\n" || len(got) != 4 || got[2].Kind != history.KindPower {
		t.Errorf("stored and buffered: got %q (%d chunks), want each once, in order, the marker among them", output(got), len(got))
	}
	if got := output(read(t, r, history.Query{Node: "n", Epoch: e, Lines: 2})); got != "two\nthree\n" {
		t.Errorf("last 2 lines: got %q", got)
	}
	flush(t, r)
	if got := output(read(t, r, q)); got != "one\ntwo\nthree\n" {
		t.Errorf("all stored: got %q", got)
	}
	// Another replica, recording nothing, reads the store alone.
	other := newRecorder(t, s, slow)
	if got := output(read(t, other, q)); got != "one\ntwo\nthree\n" {
		t.Errorf("another replica: got %q", got)
	}
}

func testReadBufferedIsolation(t *testing.T, s *db.Store) {
	ctx := context.Background()
	e1, r, rec := recording(t, s, slow)
	rec.Write([]byte("old tenant, buffered"))
	e2 := rotateToken(t, s, "n") // this replica has not heard of it yet
	if got := read(t, r, history.Query{Node: "n", Epoch: e2}); len(got) != 0 {
		t.Errorf("new tenant reads %q, want nothing", output(got))
	}
	if got, err := r.Read(ctx, history.Query{Node: "n", Epoch: e1}); !errors.Is(err, history.ErrEnded) {
		t.Errorf("old tenant, its bytes still buffered: got %q, %v; want %v", output(got), err, history.ErrEnded)
	}
}

// pausing wraps a Store: an append pauses after the inner one returned
// (committed) until released; a read pauses before it reads.
type pausing struct {
	history.Store
	mu                 sync.Mutex
	pauseAppend        bool
	failAppend         bool // with pauseAppend: fail instead of storing
	pauseRead          bool
	appended, reading  chan struct{}
	releaseA, releaseR chan struct{}
}

func newPausing(s history.Store) *pausing {
	return &pausing{Store: s, appended: make(chan struct{}, 1), reading: make(chan struct{}, 1),
		releaseA: make(chan struct{}), releaseR: make(chan struct{})}
}

func (p *pausing) AppendHistory(ctx context.Context, cs []history.Chunk, max int64) error {
	p.mu.Lock()
	pause, fail := p.pauseAppend, p.failAppend
	p.pauseAppend, p.failAppend = false, false // once
	p.mu.Unlock()
	err := errors.New("store failed")
	if !fail {
		err = p.Store.AppendHistory(ctx, cs, max)
	}
	if pause {
		p.appended <- struct{}{}
		<-p.releaseA
	}
	return err
}

func (p *pausing) ReadHistory(ctx context.Context, q history.Query) ([]history.Chunk, error) {
	p.mu.Lock()
	pause := p.pauseRead
	p.mu.Unlock()
	if pause {
		p.reading <- struct{}{}
		<-p.releaseR
	}
	return p.Store.ReadHistory(ctx, q)
}

func testReadWaitsForFlush(t *testing.T, s *db.Store) {
	e := newNode(t, s, "n")
	p := newPausing(s)
	p.pauseAppend = true
	r := newRecorder(t, p, slow)
	rec := mustOpen(t, r, "n", e)
	rec.Write([]byte("x"))
	flushed := make(chan error, 1)
	go func() { flushed <- r.Flush(context.Background()) }()
	<-p.appended // committed, not settled: in the store and not yet known to be
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	got, err := r.Read(ctx, history.Query{Node: "n", Epoch: e})
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("read during the flush: got %q, %v; want it to wait (and time out)", output(got), err)
	}
	close(p.releaseA)
	if err := <-flushed; err != nil {
		t.Fatal(err)
	}
	if got := output(read(t, r, history.Query{Node: "n", Epoch: e})); got != "x" {
		t.Errorf("after the flush: got %q, want \"x\" once", got)
	}
}

func testFlushWaitsForRead(t *testing.T, s *db.Store) {
	e := newNode(t, s, "n")
	p := newPausing(s)
	r := newRecorder(t, p, slow)
	rec := mustOpen(t, r, "n", e)
	rec.Write([]byte("a"))
	p.mu.Lock()
	p.pauseRead = true
	p.mu.Unlock()
	reads := make(chan string, 1)
	go func() {
		got, err := r.Read(context.Background(), history.Query{Node: "n", Epoch: e})
		if err != nil {
			t.Error(err)
		}
		reads <- output(got)
	}()
	<-p.reading // snapshot taken ("a" buffered), store not read yet
	rec.Write([]byte("b"))
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	err := r.Flush(ctx)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("flush during a read: got %v, want it held off (and time out)", err)
	}
	p.mu.Lock()
	p.pauseRead = false
	p.mu.Unlock()
	close(p.releaseR)
	if got := <-reads; got != "a" {
		t.Errorf("the read: got %q, want \"a\" once (what was written before it)", got)
	}
	flush(t, r)
	if got := output(read(t, r, history.Query{Node: "n", Epoch: e})); got != "ab" {
		t.Errorf("after: got %q, want \"ab\"", got)
	}
}

// next reads one chunk of a Tail, within 10 s.
func next(t *testing.T, tail *history.Tail) (history.Chunk, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return tail.Next(ctx)
}

// nextText reads chunks until it has want's length of output (markers
// as [text]).
func nextText(t *testing.T, tail *history.Tail, want string) string {
	t.Helper()
	var b strings.Builder
	for b.Len() < len(want) {
		c, err := next(t, tail)
		if err != nil {
			t.Fatalf("next, after %q: %v", b.String(), err)
		}
		if c.Kind != history.KindOutput {
			fmt.Fprintf(&b, "[%s]", c.Data)
			continue
		}
		b.Write(c.Data)
	}
	return b.String()
}

func testFollowLive(t *testing.T, s *db.Store) {
	e, r, rec := recording(t, s, slow)
	rec.Write([]byte("stored "))
	flush(t, r)
	rec.Write([]byte("buffered "))
	tail, err := r.Follow(context.Background(), history.Query{Node: "n", Epoch: e})
	if err != nil {
		t.Fatal(err)
	}
	defer tail.Close()
	rec.Write([]byte("live"))
	r.Mark("n", e, history.LinkLost())
	if got, want := nextText(t, tail, "stored buffered live[console link lost]"), "stored buffered live[console link lost]"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	rec.Write([]byte("unread"))
	r.SetEpoch("n", rotateToken(t, s, "n"))
	if c, err := next(t, tail); !errors.Is(err, history.ErrEnded) {
		t.Errorf("after the access change: got %q, %v; want nothing more and %v", c.Data, err, history.ErrEnded)
	}
}

func testFollowPolls(t *testing.T, s *db.Store) {
	e := newNode(t, s, "n")
	holder := newRecorder(t, s, history.Config{FlushInterval: 20 * time.Millisecond})
	rec := mustOpen(t, holder, "n", e)
	rec.Write([]byte("before "))
	flush(t, holder)
	elsewhere := newRecorder(t, s, history.Config{FlushInterval: 20 * time.Millisecond})
	tail, err := elsewhere.Follow(context.Background(), history.Query{Node: "n", Epoch: e})
	if err != nil {
		t.Fatal(err)
	}
	defer tail.Close()
	rec.Write([]byte("after"))
	if got := nextText(t, tail, "before after"); got != "before after" {
		t.Errorf("got %q", got)
	}
	rotateToken(t, s, "n")
	if c, err := next(t, tail); !errors.Is(err, history.ErrEnded) {
		t.Errorf("after the access change: got %q, %v; want %v", c.Data, err, history.ErrEnded)
	}
}

func testFollowTakeover(t *testing.T, s *db.Store) {
	e := newNode(t, s, "n")
	cfg := history.Config{FlushInterval: 20 * time.Millisecond}
	first := newRecorder(t, s, cfg)
	rec, err := first.Open("n", e)
	if err != nil {
		t.Fatal(err)
	}
	rec.Write([]byte("one "))
	tail, err := first.Follow(context.Background(), history.Query{Node: "n", Epoch: e})
	if err != nil {
		t.Fatal(err)
	}
	defer tail.Close()
	rec.Write([]byte("two "))
	rec.Close() // the link moves to another replica
	eventually(t, "the first replica to let the node go", func() bool { return first.Stats().Nodes == 0 })
	second := newRecorder(t, s, cfg)
	mustOpen(t, second, "n", e).Write([]byte("three"))
	if got := nextText(t, tail, "one two three"); got != "one two three" {
		t.Errorf("got %q, want each once", got)
	}
}

func testSlowFollower(t *testing.T, s *db.Store) {
	e := newNode(t, s, "n")
	cfg := slow
	cfg.FollowBytes = 1000
	cfg.FlushBytes = 100
	r := newRecorder(t, s, cfg)
	rec := mustOpen(t, r, "n", e)
	tail, err := r.Follow(context.Background(), history.Query{Node: "n", Epoch: e})
	if err != nil {
		t.Fatal(err)
	}
	defer tail.Close()
	for range 50 {
		rec.Write([]byte(strings.Repeat("x", 99) + "\n"))
	}
	c, err := next(t, tail)
	if err != nil || c.Kind != history.KindGap || string(c.Data) != "history: 4000 bytes skipped (reading too slowly)" {
		t.Fatalf("first chunk: got %v %q, %v; want the gap", c.Kind, c.Data, err)
	}
	if got := nextText(t, tail, strings.Repeat("x", 1000)); len(got) != 1000 {
		t.Errorf("then %d bytes, want the newest 1000", len(got))
	}
}

// testRecorderTenantRace: one goroutine writes and switches tenancies
// (each write names the tenancy it was written in), the flusher flushes
// every few milliseconds, and tenants read with the epoch they were
// admitted at: none may ever read another tenancy's byte, stored or
// buffered.
func testRecorderTenantRace(t *testing.T, s *db.Store) {
	ctx := context.Background()
	e := newNode(t, s, "n")
	r := newRecorder(t, s, history.Config{FlushInterval: 3 * time.Millisecond})
	rec := mustOpen(t, r, "n", e)
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		defer close(done)
		for range 15 {
			for range 20 {
				rec.Write([]byte(raceTag(e)))
			}
			e = rotateToken(t, s, "n")
			r.SetEpoch("n", e)
			if err := r.EndTenancies(ctx, "n", e); err != nil {
				t.Errorf("end: %v", err)
				return
			}
		}
	})
	var reads atomic.Int64
	for range 3 {
		wg.Go(func() {
			for {
				select {
				case <-done:
					return
				default:
				}
				if !readAsTenant(t, r, s) {
					return
				}
				reads.Add(1)
			}
		})
	}
	wg.Wait()
	if reads.Load() == 0 {
		t.Errorf("no read happened")
	}
}

func raceTag(e int64) string { return fmt.Sprintf("<%d>", e) }

// readAsTenant reads n's history at its current epoch, as a session
// admitted then, and checks it holds that tenancy's bytes only.
func readAsTenant(t *testing.T, r *history.Recorder, s *db.Store) bool {
	ctx := context.Background()
	admitted, err := s.Epoch(ctx, "n")
	if err != nil {
		t.Error(err)
		return false
	}
	got, err := r.Read(ctx, history.Query{Node: "n", Epoch: admitted})
	if err != nil && !errors.Is(err, history.ErrEnded) {
		t.Error(err)
		return false
	}
	if o := strings.ReplaceAll(output(got), raceTag(admitted), ""); o != "" {
		t.Errorf("tenant admitted at %d read %q", admitted, o)
		return false
	}
	return true
}

// testHostileRoundTrip: what a node prints comes back byte for byte in the
// raw format, through the buffer, the store and the merge, however it was
// cut into writes.
func testHostileRoundTrip(t *testing.T, s *db.Store) {
	e, r, rec := recording(t, s, slow)
	var all []byte
	for i := range 256 {
		all = append(all, byte(i))
	}
	printed := []byte("\x00\xff\xfe\xc3\x28\xe2\x82\x1b]0;t\x07\x1b[2J\r\n" + string(all) + "\x00")
	for i := 0; i < len(printed); i += 7 {
		rec.Write(printed[i:min(i+7, len(printed))])
		if i == 70 {
			flush(t, r) // half stored, half buffered
		}
	}
	var out bytes.Buffer
	enc, _ := history.NewEncoder(&out, history.FormatRaw, history.Options{})
	for _, c := range read(t, r, history.Query{Node: "n", Epoch: e}) {
		if err := enc.Encode(c); err != nil {
			t.Fatal(err)
		}
	}
	if !bytes.Equal(out.Bytes(), printed) {
		t.Errorf("raw: got %q, want %q", out.Bytes(), printed)
	}
}

// testCutDuringFlush takes a Cut while the node's flush is in flight
// (committed or failed, not yet settled): the cut must hold what was
// written before it exactly once, whatever the flush's outcome, and
// nothing written after it.
func testCutDuringFlush(t *testing.T, s *db.Store, fails bool) {
	e := newNode(t, s, "n")
	p := newPausing(s)
	p.pauseAppend, p.failAppend = true, fails
	r := newRecorder(t, p, history.Config{FlushInterval: 10 * time.Millisecond})
	rec := mustOpen(t, r, "n", e)
	rec.Write([]byte("before "))
	<-p.appended // the flush of "before " is in flight
	cut, err := r.Cut(history.Query{Node: "n", Epoch: e})
	if err != nil {
		t.Fatal(err)
	}
	rec.Write([]byte("after")) // a viewer registered at the cut gets this live
	close(p.releaseA)
	got, err := cut.Read(context.Background())
	if err != nil || output(got) != "before " {
		t.Errorf("cut: got %q, %v; want \"before \" once, nothing after", output(got), err)
	}
	eventually(t, "everything stored", func() bool {
		got, err := s.ReadHistory(context.Background(), history.Query{Node: "n", Epoch: e})
		return err == nil && output(got) == "before after"
	})
}

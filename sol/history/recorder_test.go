package history_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/obmd/obmd/sol/history"
	logtest "github.com/sirupsen/logrus/hooks/test"
)

// memStore is an in-memory Store for the flush tests: it takes every chunk
// and can be made to block or fail.
type memStore struct {
	mu       sync.Mutex
	batches  [][]history.Chunk
	seq      int64
	block    chan struct{} // when set, AppendHistory waits for it to close
	fail     int           // the next fail appends fail
	discard  bool          // keep nothing (benchmarks)
	drop     bool          // drop every chunk, Seq left 0, as for an ended tenancy
	ends     []string      // EndTenancies calls
	purges   []time.Duration
	appended chan struct{} // cap 1: an append returned
}

func newMemStore() *memStore { return &memStore{appended: make(chan struct{}, 1)} }

func (m *memStore) AppendHistory(ctx context.Context, chunks []history.Chunk, _ int64) error {
	m.mu.Lock()
	block := m.block
	m.mu.Unlock()
	if block != nil {
		select {
		case <-block:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	defer func() {
		select {
		case m.appended <- struct{}{}:
		default:
		}
	}()
	if m.fail > 0 {
		m.fail--
		return errors.New("store is down")
	}
	var batch []history.Chunk
	for i := range chunks {
		if m.drop {
			continue
		}
		m.seq++
		chunks[i].Seq = m.seq
		if m.discard {
			continue
		}
		c := chunks[i]
		c.Data = bytes.Clone(c.Data)
		batch = append(batch, c)
	}
	m.batches = append(m.batches, batch)
	return nil
}

func (m *memStore) ReadHistory(_ context.Context, q history.Query) ([]history.Chunk, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []history.Chunk
	for _, b := range m.batches {
		for _, c := range b {
			if c.Node == q.Node && c.Epoch == q.Epoch && c.Seq > q.After {
				out = append(out, c)
			}
		}
	}
	return out, nil
}

func (m *memStore) EndTenancies(_ context.Context, node string, epoch int64, retention time.Duration) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.ends = append(m.ends, fmt.Sprintf("%s<%d keep %v", node, epoch, retention))
	return nil
}

func (m *memStore) PurgeHistory(_ context.Context, retention time.Duration) (int, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.purges = append(m.purges, retention)
	return 0, nil
}

// stored returns every stored chunk, in order, and how many batches.
func (m *memStore) stored() ([]history.Chunk, int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []history.Chunk
	for _, b := range m.batches {
		out = append(out, b...)
	}
	return out, len(m.batches)
}

func newRecorder(t testing.TB, st history.Store, cfg history.Config) *history.Recorder {
	t.Helper()
	log, _ := logtest.NewNullLogger()
	r, err := history.New(cfg, st, log)
	if err != nil {
		t.Fatalf("new recorder: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = r.Close(ctx) // a test may have closed it, or left its store failing
	})
	return r
}

// eventually polls cond until it holds, failing t after 10 s.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(2 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

func mustOpen(t testing.TB, r *history.Recorder, node string, epoch int64) *history.Recording {
	t.Helper()
	rec, err := r.Open(node, epoch)
	if err != nil {
		t.Fatalf("open %s: %v", node, err)
	}
	t.Cleanup(rec.Close)
	return rec
}

// output is the data of the output chunks, joined.
func output(cs []history.Chunk) string {
	var b bytes.Buffer
	for _, c := range cs {
		if c.Kind == history.KindOutput {
			b.Write(c.Data)
		}
	}
	return b.String()
}

func TestRecorderFlushByTime(t *testing.T) {
	st := newMemStore()
	const interval = 150 * time.Millisecond
	r := newRecorder(t, st, history.Config{FlushInterval: interval})
	rec := mustOpen(t, r, "n", 1)
	start := time.Now()
	rec.Write([]byte("a"))
	rec.Write([]byte("b"))
	if _, n := st.stored(); n != 0 {
		t.Fatalf("stored at once: %d batches, want none before the interval", n)
	}
	eventually(t, "a flush", func() bool { _, n := st.stored(); return n > 0 })
	if took := time.Since(start); took < interval {
		t.Errorf("flushed after %v, want at least the interval %v", took, interval)
	}
	got, n := st.stored()
	if n != 1 || output(got) != "ab" {
		t.Errorf("got %d batches of %q, want one of \"ab\"", n, output(got))
	}
}

func TestRecorderFlushBySize(t *testing.T) {
	st := newMemStore()
	const size = 1024
	r := newRecorder(t, st, history.Config{FlushInterval: time.Hour, FlushBytes: size, BufferBytes: 4 * size})
	rec := mustOpen(t, r, "n", 1)
	rec.Write(bytes.Repeat([]byte("x"), size-1))
	rec.Write([]byte("y")) // FlushBytes reached: now, not in an hour
	eventually(t, "a flush by size", func() bool { _, n := st.stored(); return n > 0 })
	rec.Write(bytes.Repeat([]byte("z"), 3*size))
	eventually(t, "all of it", func() bool { got, _ := st.stored(); return len(output(got)) == 4*size })
	got, _ := st.stored()
	for _, c := range got {
		if len(c.Data) > size {
			t.Errorf("chunk of %d bytes, want at most FlushBytes %d", len(c.Data), size)
		}
	}
}

func TestRecorderCloseFlushes(t *testing.T) {
	st := newMemStore()
	r := newRecorder(t, st, history.Config{FlushInterval: time.Hour})
	rec := mustOpen(t, r, "n", 1)
	rec.Write([]byte("last words"))
	r.Mark("other", 7, history.Power("power-off", history.ActorHTTP))
	if err := r.Close(context.Background()); err != nil {
		t.Fatalf("close: %v", err)
	}
	got, _ := st.stored()
	var marks []history.Chunk
	for _, c := range got {
		if c.Kind != history.KindOutput {
			marks = append(marks, c)
		}
	}
	if output(got) != "last words" || len(marks) != 1 || marks[0].Node != "other" || marks[0].Epoch != 7 {
		t.Errorf("after close: got %+v, want the output and the marker (nodes in any order)", got)
	}
	rec.Write([]byte("after close"))
	if _, err := r.Open("n", 1); !errors.Is(err, history.ErrClosed) {
		t.Errorf("open after close: got %v, want %v", err, history.ErrClosed)
	}
	if got2, _ := st.stored(); len(got2) != len(got) {
		t.Errorf("stored after close: %+v", got2)
	}
}

var gapRE = regexp.MustCompile(`^history: (\d+) bytes (and \d+ markers )?not recorded$`)

// accounted checks that every byte written was either stored, in order,
// or counted in a gap marker, and that the newest bytes were stored.
func accounted(t *testing.T, got []history.Chunk, written []byte) {
	t.Helper()
	total := 0
	var kept []byte
	for _, c := range got {
		switch c.Kind {
		case history.KindOutput:
			kept = append(kept, c.Data...)
			total += len(c.Data)
		case history.KindGap:
			m := gapRE.FindSubmatch(c.Data)
			if m == nil {
				t.Fatalf("gap marker %q", c.Data)
			}
			n, _ := strconv.Atoi(string(m[1]))
			total += n
		}
	}
	if total != len(written) {
		t.Errorf("stored %d bytes and counted %d as not recorded: %d in all, want %d", len(kept), total-len(kept), total, len(written))
	}
	if !bytes.HasSuffix(written, kept[max(0, len(kept)-100):]) {
		t.Errorf("the newest bytes were not kept")
	}
}

func TestRecorderWriteNeverWaitsForStore(t *testing.T) {
	st := newMemStore()
	st.block = make(chan struct{})
	const buffer = 4096
	r := newRecorder(t, st, history.Config{FlushInterval: 10 * time.Millisecond, FlushBytes: 1024, BufferBytes: buffer,
		StoreTimeout: time.Hour})
	rec := mustOpen(t, r, "n", 1)
	var written []byte
	done := make(chan struct{})
	go func() { // 25 times the buffer while the store takes nothing
		defer close(done)
		for i := range 100 {
			p := []byte(fmt.Sprintf("%04d", i) + string(bytes.Repeat([]byte{'.'}, 996)))
			written = append(written, p...)
			rec.Write(p)
			if i == 10 {
				rec.Mark(history.LinkLost())
			}
		}
	}()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("Write waited for a store that does not answer")
	}
	if s := r.Stats(); s.Dropped == 0 || s.Written != uint64(len(written)) {
		t.Errorf("stats %+v: want %d written and some dropped", s, len(written))
	}
	close(st.block) // the store is back
	if err := r.Flush(context.Background()); err != nil {
		t.Fatalf("flush: %v", err)
	}
	got, _ := st.stored()
	accounted(t, got, written)
}

func TestRecorderFailingStoreRetries(t *testing.T) {
	st := newMemStore()
	st.fail = 3
	r := newRecorder(t, st, history.Config{FlushInterval: 10 * time.Millisecond, BufferBytes: 1 << 20})
	rec := mustOpen(t, r, "n", 1)
	var written []byte
	for i := range 20 {
		p := []byte(fmt.Sprintf("line %d\n", i))
		written = append(written, p...)
		rec.Write(p)
		time.Sleep(time.Millisecond)
	}
	// The flush that stored the last bytes counts them once the store has
	// returned: wait for the count too, not only for the store.
	eventually(t, "the store to take it all, and the stats to count it", func() bool {
		got, _ := st.stored()
		return output(got) == string(written) && r.Stats().StoredBytes >= uint64(len(written))
	})
	if s := r.Stats(); s.FlushErrors != 3 || s.Dropped != 0 || s.StoredBytes != uint64(len(written)) {
		t.Errorf("stats %+v: want 3 flush errors, nothing dropped, %d output bytes stored (not those of failed flushes)", s, len(written))
	}
}

// TestRecorderStoredBytesDropped: output the Store dropped (a late flush
// to a tenancy that has ended: Seq left 0) is not counted as stored.
func TestRecorderStoredBytesDropped(t *testing.T) {
	st := newMemStore()
	st.drop = true
	r := newRecorder(t, st, history.Config{FlushInterval: time.Hour})
	rec := mustOpen(t, r, "n", 1)
	rec.Write([]byte("printed before the change\r\n"))
	if err := r.Flush(context.Background()); err != nil {
		t.Fatalf("flush: %v", err)
	}
	if s := r.Stats(); s.Flushes != 1 || s.FlushErrors != 0 || s.StoredBytes != 0 {
		t.Errorf("stats %+v: want one flush that stored no output bytes", s)
	}
}

func TestRecorderEpochNeverGoesBack(t *testing.T) {
	st := newMemStore()
	r := newRecorder(t, st, history.Config{FlushInterval: time.Hour})
	rec := mustOpen(t, r, "n", 5)
	rec.Write([]byte("five "))
	r.SetEpoch("n", 6)
	rec.Write([]byte("six "))
	r.SetEpoch("n", 4) // a stale change: ignored
	again := mustOpen(t, r, "n", 3)
	again.Write([]byte("still six"))
	if err := r.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	got, _ := st.stored()
	// Per tenancy, in order; how the bytes are cut into chunks is not the
	// point (a flush may land between two writes).
	var per []string
	var last int64
	for _, c := range got {
		if c.Epoch == last && len(per) > 0 {
			per[len(per)-1] += string(c.Data)
			continue
		}
		per = append(per, fmt.Sprintf("%d:%s", c.Epoch, c.Data))
		last = c.Epoch
	}
	if want := "[5:five  6:six still six]"; fmt.Sprint(per) != want {
		t.Errorf("got %v, want %s", per, want)
	}
}

func TestConfigChecks(t *testing.T) {
	log, _ := logtest.NewNullLogger()
	for _, cfg := range []history.Config{
		{FlushBytes: history.MaxChunkBytes + 1},
		{FlushBytes: 4096, BufferBytes: 1024},
		{HistoryBytes: history.MinHistoryBytes - 1},
		{FlushInterval: -1},
	} {
		if _, err := history.New(cfg, newMemStore(), log); err == nil {
			t.Errorf("New(%+v): got no error", cfg)
		}
	}
}

func TestRecorderPurgesAndEnds(t *testing.T) {
	st := newMemStore()
	r := newRecorder(t, st, history.Config{PurgeEvery: 5 * time.Millisecond, Retention: time.Hour})
	r.Start() // a replica that records nothing purges too
	eventually(t, "a purge", func() bool {
		st.mu.Lock()
		defer st.mu.Unlock()
		return len(st.purges) >= 2 && st.purges[0] == time.Hour
	})
	if err := r.EndTenancies(context.Background(), "n", 2); err != nil {
		t.Fatal(err)
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	if fmt.Sprint(st.ends) != "[n<2 keep 1h0m0s]" {
		t.Errorf("ends: got %v, want the retention passed on", st.ends)
	}
}

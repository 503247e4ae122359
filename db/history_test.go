package db

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/obmd/obmd/keys"
	"github.com/obmd/obmd/sol/history"
)

// TestHistory runs the console history cases on both engines.
func TestHistory(t *testing.T) {
	runCases(t, []storeCase{
		{"append_and_read", testHistoryAppendRead},
		{"hostile_bytes_exact", testHistoryHostileBytes},
		{"bound_oldest_first", testHistoryBound},
		{"read_selections", testHistorySelections},
		{"tenant_reads_current_tenancy_only", testHistoryTenantIsolation},
		{"end_deletes", testHistoryEndDeletes},
		{"retention_keeps_then_purge", testHistoryRetention},
		{"purge_ends_missed_tenancies", testHistoryPurgeOrphans},
		{"append_to_ended_is_dropped", testHistoryAppendEnded},
		{"late_end_never_lowers", testHistoryLateEnd},
		{"late_first_flush_before_the_end", testHistoryLateFirstFlush},
		{"bad_chunks_change_nothing", testHistoryBadChunks},
		{"tenant_read_races_access_changes", testHistoryRace},
	})
}

// TestHistoryPageCompressed: on MariaDB (and Galera) the chunks' table is
// page compressed (migration 00016), so that a chunk's overflow page costs
// the disk what it holds (issue 29: 1.6-1.7x the output stored before). On
// SQLite and PostgreSQL the step changes nothing, so there is nothing to
// check there.
func TestHistoryPageCompressed(t *testing.T) {
	for _, e := range testEngines() {
		if e.name == DialectSQLite || e.name == DialectPostgres {
			continue
		}
		t.Run(e.name, func(t *testing.T) {
			s := openTestStore(t, e.env(t).dsn)
			var opts string
			err := s.r.QueryRowContext(context.Background(), `SELECT CREATE_OPTIONS FROM information_schema.TABLES
				WHERE table_schema = DATABASE() AND table_name = 'console_chunks'`).Scan(&opts)
			if err != nil {
				t.Fatal(err)
			}
			// MariaDB shows "`PAGE_COMPRESSED`='1'"; '0' is off.
			if bare := strings.NewReplacer("`", "", "'", "").Replace(strings.ToLower(opts)); !strings.Contains(bare, "page_compressed=1") {
				t.Errorf("console_chunks create options: got %q, want PAGE_COMPRESSED 1", opts)
			}
		})
	}
}

var histBase = time.Date(2030, 1, 2, 3, 0, 0, 0, time.UTC)

func outChunk(node string, epoch int64, ms int, data string) history.Chunk {
	return history.Chunk{Node: node, Epoch: epoch, At: histBase.Add(time.Duration(ms) * time.Millisecond),
		Kind: history.KindOutput, Data: []byte(data)}
}

func markChunk(node string, epoch int64, ms int, m history.Marker) history.Chunk {
	return history.Chunk{Node: node, Epoch: epoch, At: histBase.Add(time.Duration(ms) * time.Millisecond),
		Kind: m.Kind, Data: []byte(m.Text)}
}

func mustAppend(t *testing.T, s *Store, bound int64, chunks ...history.Chunk) []history.Chunk {
	t.Helper()
	if err := s.AppendHistory(context.Background(), chunks, bound); err != nil {
		t.Fatalf("append: %v", err)
	}
	return chunks
}

func mustRead(t *testing.T, s *Store, q history.Query) []history.Chunk {
	t.Helper()
	got, err := s.ReadHistory(context.Background(), q)
	if err != nil {
		t.Fatalf("read %+v: %v", q, err)
	}
	return got
}

// datas is the data of each chunk, as strings.
func datas(cs []history.Chunk) []string {
	out := []string{}
	for _, c := range cs {
		out = append(out, string(c.Data))
	}
	return out
}

// rotate gives the node a new token, i.e. a new tenancy.
func rotate(t *testing.T, s *Store, node string) int64 {
	t.Helper()
	e, err := s.SetToken(context.Background(), node, keys.HashToken(fmt.Sprint(time.Now().UnixNano())))
	if err != nil {
		t.Fatalf("rotate %s: %v", node, err)
	}
	return e
}

const bigBound = 1 << 20

func testHistoryAppendRead(t *testing.T, s *Store, _ testEnv) {
	a, b := mustCreate(t, s, "a"), mustCreate(t, s, "b")
	stamped := outChunk("a", a.Epoch, 0, "one\r\ntwo\r\n")
	stamped.Stamps = []history.Stamp{{Off: 5, At: stamped.At.Add(700 * time.Millisecond)}}
	in := mustAppend(t, s, bigBound,
		stamped,
		outChunk("b", b.Epoch, 1, "b-one"),
		markChunk("a", a.Epoch, 800, history.Power("power-cycle", history.ActorSSHKey("SHA256:abc"))),
		outChunk("a", a.Epoch, 900, "three"),
	)
	for i, want := range []int64{1, 1, 2, 3} {
		if in[i].Seq != want {
			t.Errorf("seq of chunk %d: got %d, want %d", i, in[i].Seq, want)
		}
	}
	got := mustRead(t, s, history.Query{Node: "a", Epoch: a.Epoch})
	want := []history.Chunk{in[0], in[2], in[3]}
	if len(got) != len(want) {
		t.Fatalf("read a: got %q, want %q", datas(got), datas(want))
	}
	for i := range want {
		g, w := got[i], want[i]
		if g.Seq != w.Seq || !g.At.Equal(w.At) || g.Kind != w.Kind || !bytes.Equal(g.Data, w.Data) ||
			g.Node != "a" || g.Epoch != a.Epoch || fmt.Sprint(g.Stamps) != fmt.Sprint(w.Stamps) {
			t.Errorf("chunk %d: got %+v, want %+v", i, g, w)
		}
	}
	if got := mustRead(t, s, history.Query{Node: "b", Epoch: b.Epoch}); fmt.Sprint(datas(got)) != "[b-one]" {
		t.Errorf("read b: got %q, want [b-one]", datas(got))
	}
	// A second batch continues the seqs.
	more := mustAppend(t, s, bigBound, outChunk("a", a.Epoch, 1000, "four"))
	if more[0].Seq != 4 {
		t.Errorf("seq after a second batch: got %d, want 4", more[0].Seq)
	}
}

func testHistoryHostileBytes(t *testing.T, s *Store, _ testEnv) {
	n := mustCreate(t, s, "n")
	var all []byte
	for i := range 256 {
		all = append(all, byte(i))
	}
	hostile := [][]byte{
		[]byte("\x00\x00nul\x00"),
		[]byte("\xff\xfe\xc3\x28 invalid \xe2\x82"),
		[]byte("\x1b]0;title\x07\x1b[2J\x1b[31mred\x1b[0m\r\n"),
		all,
		{},
	}
	var in []history.Chunk
	for i, h := range hostile {
		in = append(in, history.Chunk{Node: "n", Epoch: n.Epoch, At: histBase.Add(time.Duration(i) * time.Second),
			Kind: history.KindOutput, Data: h})
	}
	mustAppend(t, s, bigBound, in...)
	got := mustRead(t, s, history.Query{Node: "n", Epoch: n.Epoch})
	if len(got) != len(hostile) {
		t.Fatalf("got %d chunks, want %d", len(got), len(hostile))
	}
	for i := range hostile {
		if !bytes.Equal(got[i].Data, hostile[i]) {
			t.Errorf("chunk %d: got %q, want %q", i, got[i].Data, hostile[i])
		}
	}
}

// tenancyBytes returns what the tenancy row says and what its chunks hold.
func tenancyBytes(t *testing.T, s *Store, node string, epoch int64) (row, sum int64) {
	t.Helper()
	ctx := context.Background()
	if err := s.r.QueryRowContext(ctx, `SELECT bytes FROM console_tenancies WHERE node = ? AND epoch = ?`,
		node, epoch).Scan(&row); err != nil {
		t.Fatalf("tenancy bytes: %v", err)
	}
	if err := s.r.QueryRowContext(ctx, `SELECT COALESCE(SUM(size), 0) FROM console_chunks WHERE node = ? AND epoch = ?`,
		node, epoch).Scan(&sum); err != nil {
		t.Fatalf("chunk bytes: %v", err)
	}
	return row, sum
}

func testHistoryBound(t *testing.T, s *Store, _ testEnv) {
	n := mustCreate(t, s, "n")
	other := mustCreate(t, s, "other")
	const bound = 1000
	tests := []struct {
		name  string
		sizes []int // one batch of chunks of these sizes
	}{
		{"under", []int{300, 300}},
		{"one over", []int{300}},
		{"many small", []int{10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10}},
		{"a batch over the bound by itself", []int{400, 400, 400, 100}},
		{"large one", []int{990}},
	}
	seq := 0
	var all []string // every chunk's data, in order
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var batch []history.Chunk
			for _, size := range tt.sizes {
				seq++
				data := fmt.Sprintf("%06d", seq) + strings.Repeat("x", size-6)
				all = append(all, data)
				batch = append(batch, outChunk("n", n.Epoch, seq, data))
			}
			batch = append(batch, outChunk("other", other.Epoch, seq, "untouched"))
			mustAppend(t, s, bound, batch...)
			got := datas(mustRead(t, s, history.Query{Node: "n", Epoch: n.Epoch}))
			// The newest chunks that fit, oldest first.
			var want []string
			total := 0
			for i := len(all) - 1; i >= 0 && total+len(all[i]) <= bound; i-- {
				total += len(all[i])
				want = append([]string{all[i]}, want...)
			}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("kept %d chunks, want %d: got %.40q, want %.40q", len(got), len(want), got, want)
			}
			if row, sum := tenancyBytes(t, s, "n", n.Epoch); row != sum || row > bound {
				t.Errorf("tenancy bytes: row says %d, chunks hold %d; want equal and at most %d", row, sum, bound)
			}
		})
	}
	if got := datas(mustRead(t, s, history.Query{Node: "other", Epoch: other.Epoch})); len(got) != len(tests) {
		t.Errorf("other node: got %d chunks, want %d (its bound is its own)", len(got), len(tests))
	}
}

func testHistorySelections(t *testing.T, s *Store, _ testEnv) {
	n := mustCreate(t, s, "n")
	e := n.Epoch
	in := mustAppend(t, s, bigBound,
		outChunk("n", e, 0, "l1\nl2\n"),  // seq 1, size 6
		outChunk("n", e, 1000, "l3\nl4"), // seq 2, size 5
		markChunk("n", e, 1500, history.LinkLost()),
		outChunk("n", e, 2000, "\nl5\nl6\n"), // seq 4, size 7
	)
	marker := string(in[2].Data)
	tests := []struct {
		name string
		q    history.Query
		want []string
	}{
		{"all", history.Query{}, []string{"l1\nl2\n", "l3\nl4", marker, "\nl5\nl6\n"}},
		{"since", history.Query{Since: histBase.Add(1200 * time.Millisecond)}, []string{marker, "\nl5\nl6\n"}},
		{"since a chunk's start", history.Query{Since: histBase.Add(time.Second)}, []string{"l3\nl4", marker, "\nl5\nl6\n"}},
		{"after", history.Query{After: 2}, []string{marker, "\nl5\nl6\n"}},
		{"after all", history.Query{After: 4}, []string{}},
		{"lines 1", history.Query{Lines: 1}, []string{"\nl5\nl6\n"}},
		{"lines 2", history.Query{Lines: 2}, []string{"\nl5\nl6\n"}},
		{"lines 3", history.Query{Lines: 3}, []string{"l3\nl4", marker, "\nl5\nl6\n"}},
		{"lines 100", history.Query{Lines: 100}, []string{"l1\nl2\n", "l3\nl4", marker, "\nl5\nl6\n"}},
		{"max bytes", history.Query{MaxBytes: 7 + len(marker) + 5}, []string{"l3\nl4", marker, "\nl5\nl6\n"}},
		{"max bytes less than the newest", history.Query{MaxBytes: 6}, []string{}},
		{"lines and since", history.Query{Lines: 100, Since: histBase.Add(time.Second)}, []string{"l3\nl4", marker, "\nl5\nl6\n"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			q := tt.q
			q.Node, q.Epoch = "n", e
			if got := datas(mustRead(t, s, q)); fmt.Sprint(got) != fmt.Sprint(tt.want) {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}
}

func testHistoryTenantIsolation(t *testing.T, s *Store, _ testEnv) {
	ctx := context.Background()
	n := mustCreate(t, s, "n")
	e1 := rotate(t, s, "n")
	mustAppend(t, s, bigBound, outChunk("n", e1, 0, "first tenant's secret"))
	e2 := rotate(t, s, "n") // no EndTenancies: the read alone must keep it out
	mustAppend(t, s, bigBound, outChunk("n", e2, 10, "second tenant"))

	for _, tt := range []struct {
		name  string
		epoch int64
		want  []string
		err   error
	}{
		{"current tenant", e2, []string{"second tenant"}, nil},
		{"previous tenant", e1, []string{}, history.ErrEnded},
		{"before any tenant", n.Epoch, []string{}, history.ErrEnded},
		{"an epoch it never had", e2 + 100, []string{}, history.ErrEnded},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, err := s.ReadHistory(ctx, history.Query{Node: "n", Epoch: tt.epoch})
			if !errors.Is(err, tt.err) || fmt.Sprint(datas(got)) != fmt.Sprint(tt.want) {
				t.Errorf("got %q, %v; want %q, %v", datas(got), err, tt.want, tt.err)
			}
		})
	}
	// The admin still reads the previous tenancy until it is ended.
	if got := datas(mustRead(t, s, history.Query{Node: "n", Epoch: e1, Admin: true})); fmt.Sprint(got) != "[first tenant's secret]" {
		t.Errorf("admin read of the previous tenancy: got %q", got)
	}
	// A node that is gone has no current tenancy.
	if _, err := s.DeleteNode(ctx, "n"); err != nil {
		t.Fatal(err)
	}
	if got, err := s.ReadHistory(ctx, history.Query{Node: "n", Epoch: e2}); !errors.Is(err, history.ErrEnded) {
		t.Errorf("read of a deleted node: got %q, %v; want %v", datas(got), err, history.ErrEnded)
	}
}

func testHistoryEndDeletes(t *testing.T, s *Store, _ testEnv) {
	ctx := context.Background()
	n := mustCreate(t, s, "n")
	mustCreate(t, s, "m")
	e1 := rotate(t, s, "n")
	em := rotate(t, s, "m")
	mustAppend(t, s, bigBound, outChunk("n", n.Epoch, 0, "before the token"), outChunk("n", e1, 1, "old"),
		outChunk("m", em, 2, "other node"))
	e2 := rotate(t, s, "n")
	mustAppend(t, s, bigBound, outChunk("n", e2, 3, "new"))
	for range 2 { // idempotent
		if err := s.EndTenancies(ctx, "n", e2, 0); err != nil {
			t.Fatalf("end: %v", err)
		}
	}
	for _, e := range []int64{n.Epoch, e1} {
		if got, err := s.ReadHistory(ctx, history.Query{Node: "n", Epoch: e, Admin: true}); !errors.Is(err, history.ErrNoTenancy) {
			t.Errorf("admin read of ended tenancy %d: got %q, %v; want %v", e, datas(got), err, history.ErrNoTenancy)
		}
	}
	var left int
	if err := s.r.QueryRowContext(ctx, `SELECT COUNT(*) FROM console_chunks WHERE node = 'n' AND epoch < ?`, e2).Scan(&left); err != nil || left != 0 {
		t.Errorf("chunks of ended tenancies left: %d (%v), want 0", left, err)
	}
	ts, err := s.Tenancies(ctx, "n")
	if err != nil || len(ts) != 1 || ts[0].Epoch != e2 || !ts[0].Current {
		t.Errorf("tenancies: got %+v, %v; want only the current one, %d", ts, err, e2)
	}
	if got := datas(mustRead(t, s, history.Query{Node: "n", Epoch: e2})); fmt.Sprint(got) != "[new]" {
		t.Errorf("current tenancy: got %q, want [new]", got)
	}
	if got := datas(mustRead(t, s, history.Query{Node: "m", Epoch: em})); fmt.Sprint(got) != "[other node]" {
		t.Errorf("other node: got %q, want [other node]", got)
	}
}

func testHistoryRetention(t *testing.T, s *Store, _ testEnv) {
	ctx := context.Background()
	mustCreate(t, s, "n")
	e1 := rotate(t, s, "n")
	mustAppend(t, s, bigBound, outChunk("n", e1, 0, "kept for admins"))
	e2 := rotate(t, s, "n")
	const retention = time.Hour
	if err := s.EndTenancies(ctx, "n", e2, retention); err != nil {
		t.Fatalf("end: %v", err)
	}
	if err := s.EndTenancies(ctx, "n", e2, retention); err != nil { // no second marker
		t.Fatalf("end again: %v", err)
	}
	got := mustRead(t, s, history.Query{Node: "n", Epoch: e1, Admin: true})
	if want := []string{"kept for admins", history.TenancyEnded().Text}; fmt.Sprint(datas(got)) != fmt.Sprint(want) ||
		got[1].Kind != history.KindTenancyEnd {
		t.Errorf("admin read of kept tenancy: got %q, want %q", datas(got), want)
	}
	if got, err := s.ReadHistory(ctx, history.Query{Node: "n", Epoch: e1}); !errors.Is(err, history.ErrEnded) {
		t.Errorf("tenant read of kept tenancy: got %q, %v; want %v", datas(got), err, history.ErrEnded)
	}
	ts, err := s.Tenancies(ctx, "n")
	if err != nil || len(ts) != 1 || ts[0].Epoch != e1 || ts[0].Current || ts[0].EndedAt.IsZero() ||
		!ts[0].PurgeAt.Equal(ts[0].EndedAt.Add(retention)) {
		t.Fatalf("tenancies: got %+v, %v; want the kept one, ended, purged an hour later", ts, err)
	}

	if n, err := s.PurgeHistory(ctx, retention); err != nil || n != 0 {
		t.Errorf("purge before the retention passed: removed %d, %v; want 0", n, err)
	}
	now := s.now
	s.now = func() time.Time { return now().Add(retention + time.Minute) }
	if n, err := s.PurgeHistory(ctx, retention); err != nil || n != 1 {
		t.Errorf("purge after: removed %d, %v; want 1", n, err)
	}
	if _, err := s.ReadHistory(ctx, history.Query{Node: "n", Epoch: e1, Admin: true}); !errors.Is(err, history.ErrNoTenancy) {
		t.Errorf("admin read after purge: got %v, want %v", err, history.ErrNoTenancy)
	}
}

func testHistoryPurgeOrphans(t *testing.T, s *Store, _ testEnv) {
	ctx := context.Background()
	mustCreate(t, s, "n")
	mustCreate(t, s, "gone")
	e1 := rotate(t, s, "n")
	eg := rotate(t, s, "gone")
	mustAppend(t, s, bigBound, outChunk("n", e1, 0, "missed end"), outChunk("gone", eg, 0, "deleted node"))
	e2 := rotate(t, s, "n")
	mustAppend(t, s, bigBound, outChunk("n", e2, 1, "current"))
	if _, err := s.DeleteNode(ctx, "gone"); err != nil {
		t.Fatal(err)
	}
	// Recreated: its new tenancy is not an orphan of the old one.
	g := mustCreate(t, s, "gone")
	mustAppend(t, s, bigBound, outChunk("gone", g.Epoch, 2, "new gone"))
	n, err := s.PurgeHistory(ctx, 0)
	if err != nil || n != 2 {
		t.Errorf("purge: removed %d, %v; want 2", n, err)
	}
	for _, tt := range []struct {
		node  string
		epoch int64
		want  string
	}{{"n", e2, "[current]"}, {"gone", g.Epoch, "[new gone]"}} {
		if got := datas(mustRead(t, s, history.Query{Node: tt.node, Epoch: tt.epoch})); fmt.Sprint(got) != tt.want {
			t.Errorf("%s after purge: got %q, want %s", tt.node, got, tt.want)
		}
	}
	for _, k := range []struct {
		node  string
		epoch int64
	}{{"n", e1}, {"gone", eg}} {
		if _, err := s.ReadHistory(ctx, history.Query{Node: k.node, Epoch: k.epoch, Admin: true}); !errors.Is(err, history.ErrNoTenancy) {
			t.Errorf("%s tenancy %d after purge: got %v, want %v", k.node, k.epoch, err, history.ErrNoTenancy)
		}
	}
}

func testHistoryAppendEnded(t *testing.T, s *Store, _ testEnv) {
	ctx := context.Background()
	mustCreate(t, s, "n")
	mustCreate(t, s, "k")
	e1 := rotate(t, s, "n")
	k1 := rotate(t, s, "k")
	mustAppend(t, s, bigBound, outChunk("n", e1, 0, "old"), outChunk("k", k1, 0, "old k"))
	e2 := rotate(t, s, "n")
	k2 := rotate(t, s, "k")
	if err := s.EndTenancies(ctx, "n", e2, 0); err != nil {
		t.Fatal(err)
	}
	if err := s.EndTenancies(ctx, "k", k2, time.Hour); err != nil {
		t.Fatal(err)
	}
	// A late flush of bytes printed before the change.
	late := mustAppend(t, s, bigBound,
		outChunk("n", e1, 5, "late, deleted tenancy"),
		outChunk("n", e1-1, 5, "never stored, not current"),
		outChunk("k", k1, 5, "late, kept tenancy"),
		outChunk("n", e2, 6, "new"))
	for i, want := range []bool{false, false, true, true} {
		if got := late[i].Seq != 0; got != want {
			t.Errorf("chunk %q stored: got %v, want %v", late[i].Data, got, want)
		}
	}
	if _, err := s.ReadHistory(ctx, history.Query{Node: "n", Epoch: e1, Admin: true}); !errors.Is(err, history.ErrNoTenancy) {
		t.Errorf("deleted tenancy after a late append: got %v, want %v", err, history.ErrNoTenancy)
	}
	got := datas(mustRead(t, s, history.Query{Node: "k", Epoch: k1, Admin: true}))
	if want := []string{"old k", history.TenancyEnded().Text, "late, kept tenancy"}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("kept tenancy: got %q, want %q", got, want)
	}
	if got := datas(mustRead(t, s, history.Query{Node: "n", Epoch: e2})); fmt.Sprint(got) != "[new]" {
		t.Errorf("new tenancy: got %q, want [new]", got)
	}
}

// testHistoryLateEnd: an end recorded late with an older epoch (a replica
// that applies the access changes behind another) does not lower the
// node's end watermark: a tenancy ended by the newer one stays ended.
func testHistoryLateEnd(t *testing.T, s *Store, _ testEnv) {
	ctx := context.Background()
	mustCreate(t, s, "n")
	e1 := rotate(t, s, "n")
	e2 := rotate(t, s, "n")
	if err := s.EndTenancies(ctx, "n", e2, 0); err != nil {
		t.Fatal(err)
	}
	if err := s.EndTenancies(ctx, "n", e1, 0); err != nil {
		t.Fatal(err)
	}
	if got := mustAppend(t, s, bigBound, outChunk("n", e1, 5, "late, ended tenancy")); got[0].Seq != 0 {
		t.Errorf("chunk of the tenancy ended at %d stored after a late end at %d: seq %d, want none", e2, e1, got[0].Seq)
	}
}

func testHistoryBadChunks(t *testing.T, s *Store, _ testEnv) {
	ctx := context.Background()
	n := mustCreate(t, s, "n")
	good := outChunk("n", n.Epoch, 0, "good")
	for _, tt := range []struct {
		name  string
		c     history.Chunk
		bound int64
	}{
		{"no node", outChunk("", n.Epoch, 0, "x"), bigBound},
		{"label too long", outChunk(strings.Repeat("n", MaxLabelLen+1), n.Epoch, 0, "x"), bigBound},
		{"no epoch", outChunk("n", 0, 0, "x"), bigBound},
		{"no kind", history.Chunk{Node: "n", Epoch: n.Epoch, At: histBase}, bigBound},
		{"no time", history.Chunk{Node: "n", Epoch: n.Epoch, Kind: history.KindOutput}, bigBound},
		{"too big", outChunk("n", n.Epoch, 0, strings.Repeat("x", history.MaxChunkBytes+1)), bigBound},
		{"marker not UTF-8", history.Chunk{Node: "n", Epoch: n.Epoch, At: histBase, Kind: history.KindPower, Data: []byte{0xff}}, bigBound},
		{"stamps out of order", history.Chunk{Node: "n", Epoch: n.Epoch, At: histBase, Kind: history.KindOutput,
			Data: []byte("abc"), Stamps: []history.Stamp{{Off: 2, At: histBase}, {Off: 1, At: histBase}}}, bigBound},
		{"stamp past the end", history.Chunk{Node: "n", Epoch: n.Epoch, At: histBase, Kind: history.KindOutput,
			Data: []byte("abc"), Stamps: []history.Stamp{{Off: 3, At: histBase}}}, bigBound},
		{"no bound", outChunk("n", n.Epoch, 0, "x"), 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			batch := []history.Chunk{good, tt.c}
			if err := s.AppendHistory(ctx, batch, tt.bound); err == nil {
				t.Fatalf("append: got no error")
			}
			if batch[0].Seq != 0 {
				t.Errorf("seq of the good chunk of a refused batch: got %d, want 0", batch[0].Seq)
			}
			if got := datas(mustRead(t, s, history.Query{Node: "n", Epoch: n.Epoch})); len(got) != 0 {
				t.Errorf("stored: got %q, want nothing", got)
			}
		})
	}
	for _, q := range []history.Query{{Epoch: n.Epoch}, {Node: "n"}, {Node: "n", Epoch: n.Epoch, Lines: -1}} {
		if _, err := s.ReadHistory(ctx, q); err == nil {
			t.Errorf("read %+v: got no error", q)
		}
	}
}

func testHistoryLateFirstFlush(t *testing.T, s *Store, _ testEnv) {
	ctx := context.Background()
	mustCreate(t, s, "n")
	mustCreate(t, s, "m")
	e1, m1 := rotate(t, s, "n"), rotate(t, s, "m")
	e2, m2 := rotate(t, s, "n"), rotate(t, s, "m")
	// Bytes printed in e1, flushed for the first time after the change.
	late := mustAppend(t, s, bigBound, outChunk("n", e1, 0, "printed before the change"),
		outChunk("n", e2+1, 0, "an epoch the node has not reached"))
	if late[0].Seq == 0 || late[1].Seq != 0 {
		t.Errorf("stored: got seqs %d, %d; want the late chunk only", late[0].Seq, late[1].Seq)
	}
	if got, err := s.ReadHistory(ctx, history.Query{Node: "n", Epoch: e2}); err != nil || len(got) != 0 {
		t.Errorf("current tenant: got %q, %v; want nothing", datas(got), err)
	}
	if _, err := s.ReadHistory(ctx, history.Query{Node: "n", Epoch: e1}); !errors.Is(err, history.ErrEnded) {
		t.Errorf("previous tenant: got %v, want %v", err, history.ErrEnded)
	}
	if err := s.EndTenancies(ctx, "n", e2, time.Hour); err != nil {
		t.Fatal(err)
	}
	got := datas(mustRead(t, s, history.Query{Node: "n", Epoch: e1, Admin: true}))
	if want := []string{"printed before the change", history.TenancyEnded().Text}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("kept: got %q, want %q", got, want)
	}
	// Once a tenancy's end is recorded, a first flush no longer opens it.
	if err := s.EndTenancies(ctx, "m", m2, 0); err != nil {
		t.Fatal(err)
	}
	if late := mustAppend(t, s, bigBound, outChunk("m", m1, 0, "too late")); late[0].Seq != 0 {
		t.Errorf("append after the end: stored as %d, want dropped", late[0].Seq)
	}
	if ts, err := s.Tenancies(ctx, "m"); err != nil || len(ts) != 0 {
		t.Errorf("tenancies of m: got %+v, %v; want none", ts, err)
	}
}

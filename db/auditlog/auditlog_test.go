package auditlog_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	logtest "github.com/sirupsen/logrus/hooks/test"

	"github.com/obmd/obmd/db"
	"github.com/obmd/obmd/db/auditlog"
	"github.com/obmd/obmd/db/dbtest"
)

func row(i int) db.AuditEvent {
	return db.AuditEvent{At: time.Unix(1_900_000_000, int64(i)*int64(time.Millisecond)), Node: "n1", Actor: "http:token",
		Action: "power.on", Source: "10.0.0.7:1", Result: "ok", Detail: fmt.Sprintf("row %04d", i), Count: 1}
}

// readLines returns the rows of the JSON lines file at path (none if it
// does not exist), failing on a line that is not one.
func readLines(t *testing.T, path string) []auditlog.Row {
	t.Helper()
	f, err := os.Open(path)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []auditlog.Row
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var r auditlog.Row
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("%s: line %q: %v", path, sc.Text(), err)
		}
		out = append(out, r)
	}
	return out
}

func closeLog(t *testing.T, l *auditlog.Log) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := l.Close(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestFileRotation: the file is rotated before a line would take it past
// max_bytes; keep rotated files are kept, FILE.1 the newest; the rows are
// all there, in order, until the oldest files go.
func TestFileRotation(t *testing.T) {
	log, _ := logtest.NewNullLogger()
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	l := auditlog.New(db.AuditExport{File: path, MaxBytes: 4096, Keep: 2}, log)
	if err := l.Start(); err != nil {
		t.Fatal(err)
	}
	const rows = 200
	for i := range rows {
		l.Export([]db.AuditEvent{row(i)})
	}
	closeLog(t, l)
	var all []auditlog.Row
	for _, name := range []string{path + ".2", path + ".1", path} {
		st, err := os.Stat(name)
		if err != nil {
			t.Fatal(err)
		}
		if st.Size() > 4096 || st.Mode().Perm() != 0o600 {
			t.Errorf("%s: %d bytes, mode %v, want at most 4096, 0600", name, st.Size(), st.Mode().Perm())
		}
		all = append(all, readLines(t, name)...)
	}
	if _, err := os.Stat(path + ".3"); !os.IsNotExist(err) {
		t.Errorf("%s.3: got %v, want none (keep 2)", path, err)
	}
	if len(all) == 0 || len(all) >= rows {
		t.Fatalf("got %d rows in the files, want the newest of %d (the oldest rotated away)", len(all), rows)
	}
	first := rows - len(all)
	for i, r := range all {
		want := row(first + i)
		if r.Detail != want.Detail || !r.At.Equal(want.At) || r.Node != "n1" || r.Actor != "http:token" ||
			r.Action != "power.on" || r.Source != "10.0.0.7:1" || r.Result != "ok" || r.Count != 1 {
			t.Fatalf("line %d: got %+v, want %+v", i, r, want)
		}
	}
}

// TestSyslog: each row is one message to the local syslog socket, facility
// auth, tag obmd, the JSON object as its text.
func TestSyslog(t *testing.T) {
	log, _ := logtest.NewNullLogger()
	sock := filepath.Join(t.TempDir(), "log")
	c, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sock, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	l := auditlog.New(db.AuditExport{Syslog: sock, MaxBytes: 4096, Keep: 1}, log)
	if err := l.Start(); err != nil {
		t.Fatal(err)
	}
	l.Export([]db.AuditEvent{row(1), row(2)})
	buf := make([]byte, 8192)
	for i := 1; i <= 2; i++ {
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		n, err := c.Read(buf)
		if err != nil {
			t.Fatal(err)
		}
		msg := string(buf[:n])
		// <PRI>: auth (4) * 8 + info (6) = 38.
		_, text, ok := strings.Cut(msg, " obmd[")
		if !strings.HasPrefix(msg, "<38>") || !ok {
			t.Fatalf("message %q: want <38>... obmd[pid]: JSON", msg)
		}
		_, text, _ = strings.Cut(text, "]: ")
		var r auditlog.Row
		if err := json.Unmarshal([]byte(strings.TrimSpace(text)), &r); err != nil || r.Detail != row(i).Detail {
			t.Errorf("message %q: got %+v (%v), want row %d", msg, r, err, i)
		}
	}
	closeLog(t, l)
}

// TestExportNeverBlocks: a destination that takes nothing (a syslog socket
// nobody reads) never holds up Export, which the audit's commit calls:
// rows past the queue are dropped and counted.
func TestExportNeverBlocks(t *testing.T) {
	log, _ := logtest.NewNullLogger()
	sock := filepath.Join(t.TempDir(), "log")
	c, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sock, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close() // never read
	l := auditlog.New(db.AuditExport{Syslog: sock, MaxBytes: 4096, Keep: 1}, log)
	if err := l.Start(); err != nil {
		t.Fatal(err)
	}
	big := row(0)
	big.Detail = strings.Repeat("x", 4000)
	done := make(chan struct{})
	go func() { // ends when Export returns every time
		defer close(done)
		for range 20_000 { // 80 MB of rows: far past the socket's buffer and the queue
			l.Export([]db.AuditEvent{big})
		}
	}()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("Export blocked on a destination that takes nothing")
	}
	if l.Dropped() == 0 {
		t.Errorf("dropped: got 0, want the rows past the queue")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if err := l.Close(ctx); err == nil {
		t.Errorf("Close with the writer stuck: got nil, want an error saying rows were not written")
	}
}

// TestStoreExport: every row the store commits, counted repeats included,
// is in the file with the fields the database has, on both engines.
func TestStoreExport(t *testing.T) {
	for _, e := range dbtest.Engines() {
		t.Run(e.Name, func(t *testing.T) {
			log, _ := logtest.NewNullLogger()
			ctx := context.Background()
			path := filepath.Join(t.TempDir(), "audit.jsonl")
			l := auditlog.New(db.AuditExport{File: path, MaxBytes: 1 << 20, Keep: 1}, log)
			if err := l.Start(); err != nil {
				t.Fatal(err)
			}
			dsn := e.DSN(t)
			s, err := db.Open(ctx, dsn, log, db.WithAuditAggregation(time.Minute, 16), db.WithAuditSink(l))
			if err != nil {
				t.Fatal(err)
			}
			if err := s.Migrate(ctx); err != nil {
				t.Fatal(err)
			}
			for i := range 5 {
				for _, ev := range []db.AuditEvent{
					{Node: "n1", Actor: "admin", Action: "token.rotate", Result: "ok", Source: "10.0.0.8:1", Detail: fmt.Sprint(i)},
					{Node: "n1", Actor: "http:token", Action: "power.status", Result: "ok", Source: "10.0.0.7:1", Detail: "on"},
				} {
					if err := s.Audit(ctx, ev); err != nil {
						t.Fatal(err)
					}
				}
			}
			if err := s.Close(); err != nil { // writes the count of the repeats
				t.Fatal(err)
			}
			closeLog(t, l)
			s, err = db.Open(ctx, dsn, log)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			stored, err := s.AuditEvents(ctx, db.AuditQuery{})
			if err != nil {
				t.Fatal(err)
			}
			lines := readLines(t, path)
			if len(stored) != 7 || len(lines) != len(stored) {
				t.Fatalf("got %d rows stored, %d exported, want 7 each (5 rotations, a status and a count of 4)", len(stored), len(lines))
			}
			// In commit order there, in time order here: the count of the
			// repeats is written last with the time of the first repeat.
			exported := map[auditlog.Row]int{}
			for _, l := range lines {
				exported[l]++
			}
			for _, r := range stored {
				want := auditlog.Row{At: r.At, Node: r.Node, Actor: r.Actor, Action: r.Action, Source: r.Source,
					Result: r.Result, Detail: r.Detail, Count: r.Count}
				if exported[want]--; exported[want] < 0 {
					t.Errorf("stored %+v, not exported (exported %+v)", r, lines)
				}
			}
		})
	}
}

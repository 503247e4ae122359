// Package auditlog copies committed audit rows to a SIEM: JSON lines to a file rotated by size, or syslog.
//
// It is a db.AuditSink: the store hands it every row after the commit; a
// goroutine of its own writes them, so a slow or failing destination never
// holds up an audit write (or the login behind it): rows that do not fit in
// its bounded queue are dropped, counted and logged.
package auditlog

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/syslog"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/obmd/obmd/db"
)

// maxQueued bounds the bytes of rows waiting to be written (their fields'
// lengths): past it, rows are dropped.
const maxQueued = 16 << 20

// Row is an audit row as exported: db.AuditEvent's fields under the names
// GET /v1/audit gives them, without the ID (a row is exported before
// anyone reads it back).
type Row struct {
	At     time.Time `json:"at"`
	Node   string    `json:"node"`
	Actor  string    `json:"actor"`
	Action string    `json:"action"`
	Source string    `json:"source"`
	Result string    `json:"result"`
	Detail string    `json:"detail"`
	Count  int64     `json:"count"`
}

// Log is an audit export. New configures it, Start opens its destinations
// and starts its goroutine, Close writes what is queued and stops it.
type Log struct {
	cfg db.AuditExport
	log logrus.FieldLogger

	mu      sync.Mutex
	queue   []db.AuditEvent
	queued  int   // bytes in queue
	dropped int64 // rows dropped since the last report
	lost    int64 // rows dropped in all (Dropped)
	closed  bool
	kick    chan struct{} // buffered: rows queued
	done    chan struct{} // closed when run returns

	// Owned by run once started.
	file    *os.File
	size    int64
	sys     *syslog.Writer
	failing bool // the last write failed (logged once per failure)
}

// New returns the export cfg describes (cfg as db.AuditConfig.WithDefaults
// leaves it), or nil if it names no destination. It does no I/O.
func New(cfg db.AuditExport, log logrus.FieldLogger) *Log {
	if cfg.File == "" && cfg.Syslog == "" {
		return nil
	}
	return &Log{cfg: cfg, log: log, kick: make(chan struct{}, 1), done: make(chan struct{})}
}

// Start opens the file (created 0600, appended to) and the syslog socket,
// and starts the goroutine that writes to them; Close stops it.
func (l *Log) Start() error {
	if l.cfg.File != "" {
		if err := l.open(); err != nil {
			return err
		}
	}
	if l.cfg.Syslog != "" {
		w, err := syslog.Dial("unixgram", l.cfg.Syslog, syslog.LOG_AUTH|syslog.LOG_INFO, "obmd")
		if err != nil {
			l.closeFiles()
			return fmt.Errorf("audit export: syslog %s: %w", l.cfg.Syslog, err)
		}
		l.sys = w
	}
	go l.run() // owned by l: Close waits for it
	return nil
}

// Export queues rows for writing; it never blocks on the destinations.
func (l *Log) Export(rows []db.AuditEvent) {
	l.mu.Lock()
	for _, r := range rows {
		n := rowBytes(r)
		if l.closed || l.queued+n > maxQueued {
			l.dropped++
			l.lost++
			continue
		}
		l.queue = append(l.queue, r)
		l.queued += n
	}
	l.mu.Unlock()
	select {
	case l.kick <- struct{}{}:
	default:
	}
}

// Dropped is how many rows were dropped in all: exported while the queue
// was full (a destination slower than the audit) or after Close.
func (l *Log) Dropped() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lost
}

// rowBytes is about what r holds in memory.
func rowBytes(r db.AuditEvent) int {
	return 64 + len(r.Node) + len(r.Actor) + len(r.Action) + len(r.Source) + len(r.Result) + len(r.Detail)
}

// Close writes the rows queued so far, stops the goroutine and closes the
// destinations. Rows exported after it are dropped. If ctx ends first (a
// destination does not take writes), Close returns without waiting: the
// process is about to exit.
func (l *Log) Close(ctx context.Context) error {
	l.mu.Lock()
	was := l.closed
	l.closed = true
	l.mu.Unlock()
	if was {
		return nil
	}
	select {
	case l.kick <- struct{}{}:
	default:
	}
	select {
	case <-l.done:
	case <-ctx.Done():
		return fmt.Errorf("audit export: not all rows written: %w", ctx.Err())
	}
	return l.closeFiles()
}

func (l *Log) run() {
	defer close(l.done)
	for range l.kick {
		l.mu.Lock()
		rows, dropped, closed := l.queue, l.dropped, l.closed
		l.queue, l.queued, l.dropped = nil, 0, 0
		l.mu.Unlock()
		if dropped > 0 {
			l.log.WithField("rows", dropped).Warn("audit_export_dropped")
		}
		for _, r := range rows {
			l.write(r)
		}
		if closed {
			return
		}
	}
}

// write writes one row to each destination; a failure is logged (once
// until a write succeeds again) and the row is lost there.
func (l *Log) write(e db.AuditEvent) {
	// At as the database keeps it: in milliseconds.
	line, err := json.Marshal(Row{At: e.At.UTC().Truncate(time.Millisecond), Node: e.Node, Actor: e.Actor, Action: e.Action,
		Source: e.Source, Result: e.Result, Detail: e.Detail, Count: max(e.Count, 1)})
	if err != nil { // strings and numbers only: cannot fail
		return
	}
	var errs []error
	if l.file != nil {
		errs = append(errs, l.writeFile(append(line, '\n')))
	}
	if l.sys != nil {
		errs = append(errs, l.sys.Info(string(line)))
	}
	switch err := errors.Join(errs...); {
	case err != nil && !l.failing:
		l.failing = true
		l.log.WithError(err).Warn("audit_export_failed")
	case err == nil && l.failing:
		l.failing = false
		l.log.Info("audit_export_resumed")
	}
}

// writeFile appends line to the file, rotating it first if line would
// take it past MaxBytes.
func (l *Log) writeFile(line []byte) error {
	if l.size > 0 && l.size+int64(len(line)) > int64(l.cfg.MaxBytes) {
		if err := l.rotate(); err != nil {
			return err
		}
	}
	if l.file == nil { // a rotation failed to open the new file: try again
		if err := l.open(); err != nil {
			return err
		}
	}
	n, err := l.file.Write(line)
	l.size += int64(n)
	if err != nil {
		return fmt.Errorf("write %s: %w", l.cfg.File, err)
	}
	return nil
}

// open opens (or creates) the file for appending.
func (l *Log) open() error {
	f, err := os.OpenFile(l.cfg.File, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("audit export: %w", err)
	}
	st, err := f.Stat()
	if err != nil {
		_ = f.Close() // the stat's error is the one worth returning
		return fmt.Errorf("audit export: %w", err)
	}
	l.file, l.size = f, st.Size()
	return nil
}

// rotate closes the file, shifts FILE.1 ... FILE.(Keep-1) up by one (FILE.Keep
// is overwritten) and FILE to FILE.1, and opens a new FILE.
func (l *Log) rotate() error {
	err := l.file.Close()
	l.file = nil
	for i := l.cfg.Keep - 1; i >= 1; i-- {
		if err := os.Rename(l.name(i), l.name(i+1)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("rotate %s: %w", l.cfg.File, err)
		}
	}
	if err := os.Rename(l.cfg.File, l.name(1)); err != nil {
		return fmt.Errorf("rotate %s: %w", l.cfg.File, err)
	}
	if err != nil {
		l.log.WithError(err).Warn("audit_export_close_failed") // written lines are in the rotated file
	}
	return l.open()
}

func (l *Log) name(i int) string { return l.cfg.File + "." + strconv.Itoa(i) }

func (l *Log) closeFiles() error {
	var errs []error
	if l.file != nil {
		errs = append(errs, l.file.Close())
		l.file = nil
	}
	if l.sys != nil {
		errs = append(errs, l.sys.Close())
		l.sys = nil
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("audit export: %w", err)
	}
	return nil
}

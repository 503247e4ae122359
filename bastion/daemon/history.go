package daemon

import (
	"context"
	"fmt"
	"sync"

	"github.com/sirupsen/logrus"

	"github.com/obmd/obmd/bastion/internal/metrics"
	"github.com/obmd/obmd/db"
	"github.com/obmd/obmd/sol"
	"github.com/obmd/obmd/sol/history"
)

// consoleHistory is the daemon's console history part: the recorder over
// the database, the bridge the console hub records through (the access
// epoch of a link it opens comes from the Revoker), the end of tenancies
// after each access change, and the holder of captured links (capture.go).
//
// Goroutines: the recorder's flusher (its own); one EndTenancies call per
// access change applied, tracked by wg and bounded by ChangeTimeout; the
// capture loop, run by Daemon.Run.
type consoleHistory struct {
	d   *Daemon
	rec *history.Recorder
	log logrus.FieldLogger

	mu     sync.Mutex
	closed bool // by close: no more EndTenancies calls
	wg     sync.WaitGroup
}

// newConsoleHistory builds the recorder from the configuration; it starts
// its purge timer (every replica purges, even one that records nothing).
func (d *Daemon) newConsoleHistory() (*consoleHistory, error) {
	log := d.log.WithField("part", "history")
	rec, err := history.New(history.Config{HistoryBytes: int64(d.cfg.History.Bytes), Retention: d.cfg.History.Retention},
		d.store, log)
	if err != nil {
		return nil, fmt.Errorf("console history: %w", err)
	}
	rec.Start()
	return &consoleHistory{d: d, rec: rec, log: log}, nil
}

// Open is sol.History's: the hub opens a link it holds; its recording
// belongs to the node's current tenancy, verified by the Revoker (which
// applies a change it had not seen yet, and then fails the open).
func (h *consoleHistory) Open(ctx context.Context, label string) (*history.Recording, error) {
	epoch, err := h.d.revoker.Current(ctx, label)
	if err != nil {
		return nil, err
	}
	return h.rec.Open(label, epoch)
}

// Cut is sol.History's: a replay's cut of the history.
func (h *consoleHistory) Cut(q history.Query) (*history.Cut, error) { return h.rec.Cut(q) }

// Flush is sol.History's: what was recorded so far is stored.
func (h *consoleHistory) Flush(ctx context.Context) error { return h.rec.Flush(ctx) }

// applied is the Revoker's OnApply: an access change moved label to epoch.
// New output goes to the new tenancy at once; the old ones are ended in the
// database (deleted, or kept for admins with history.retention) in the
// background, bounded by ChangeTimeout. A missed end is caught by the
// recorder's purge; a tenant never reads an old tenancy meanwhile.
func (h *consoleHistory) applied(label string, epoch int64) {
	h.rec.SetEpoch(label, epoch)
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return // the purge ends them
	}
	h.wg.Add(1)
	go func() { // owned by h.wg, waited for by close
		defer h.wg.Done()
		ctx, cancel := context.WithTimeout(context.Background(), h.d.cfg.Access.ChangeTimeout)
		defer cancel()
		if err := h.rec.EndTenancies(ctx, label, epoch); err != nil {
			h.log.WithError(err).WithField("node", label).Warn("history_end_tenancies_failed")
		}
	}()
}

// Mark records a power or boot-device operation in the history of the
// tenancy of the session that ran it.
func (h *consoleHistory) Mark(label string, epoch int64, m history.Marker) {
	h.rec.Mark(label, epoch, m)
}

// close flushes what is buffered and stops the recorder, once the hub is
// closed (nothing writes any more).
func (h *consoleHistory) close(ctx context.Context) error {
	h.mu.Lock()
	h.closed = true
	h.mu.Unlock()
	h.wg.Wait()
	if err := h.rec.Close(ctx); err != nil {
		return fmt.Errorf("close console history: %w", err)
	}
	return nil
}

// Read is the history as commands and the admin API read it.
func (h *consoleHistory) Read(ctx context.Context, q history.Query) ([]history.Chunk, error) {
	return h.rec.Read(ctx, q)
}

// Follow is Read, then what follows, live.
func (h *consoleHistory) Follow(ctx context.Context, q history.Query) (*history.Tail, error) {
	return h.rec.Follow(ctx, q)
}

// captureOf is the capture that applies to a node: its own, else the
// daemon's console.capture, else always for the IPMI types.
func captureOf(c db.NodeCapture, def string) string {
	switch {
	case c.Capture != "":
		return c.Capture
	case def != "":
		return def
	case c.Type == string(TypeIPMI) || c.Type == string(TypeIPMITool):
		return sol.CaptureAlways
	}
	return sol.CaptureAttached
}

// Tenancies lists label's stored tenancies (the admin API).
func (h *consoleHistory) Tenancies(ctx context.Context, label string) ([]db.Tenancy, error) {
	return h.d.store.Tenancies(ctx, label)
}

// Epoch is label's current access epoch, as stored (the admin API's
// current tenancy).
func (h *consoleHistory) Epoch(ctx context.Context, label string) (int64, error) {
	return h.d.store.Epoch(ctx, label)
}

// metrics writes the recorder's figures for /metrics.
func (h *consoleHistory) metrics(w *metrics.Writer) {
	st := h.rec.Stats()
	w.Gauge("obmd_history_nodes", "Nodes whose console history this replica buffers.", float64(st.Nodes))
	w.Counter("obmd_history_written_bytes_total", "Console bytes recorded in the history.", float64(st.Written))
	w.Counter("obmd_history_dropped_bytes_total", "Console bytes that gave way before they were stored (a slow database).", float64(st.Dropped))
	w.Counter("obmd_history_chunks_stored_total", "History chunks stored.", float64(st.Stored))
	w.Counter("obmd_history_flushes_total", "History flushes (one transaction each).", float64(st.Flushes))
	w.Counter("obmd_history_flush_errors_total", "History flushes that failed (retried).", float64(st.FlushErrors))
}

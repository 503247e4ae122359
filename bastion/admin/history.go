package admin

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/obmd/obmd/bastion/admin/api"
	"github.com/obmd/obmd/db"
	"github.com/obmd/obmd/sol/history"
	"github.com/obmd/obmd/sol/screen"
)

// History is what the admin API reads of the console history: the
// daemon's recorder (Read merges what is stored with what this replica
// has not flushed yet), and the tenancies the database keeps.
type History interface {
	Read(ctx context.Context, q history.Query) ([]history.Chunk, error)
	Tenancies(ctx context.Context, node string) ([]db.Tenancy, error)
	// Epoch is the node's current access epoch: its current tenancy.
	Epoch(ctx context.Context, label string) (int64, error)
}

// consoleLog is GET /v1/nodes/{label}/console-log: a tenancy's console
// history, the node's current one or, with tenancy=EPOCH, any kept one
// (also of a node deleted since), in format=raw (default; the bytes as
// the node sent them), text (markers as "[obmd: ...]" lines;
// timestamps=1 stamps each line) or cast (asciicast v2). since=10m or
// RFC 3339 and lines=N narrow it.
func (a *API) consoleLog(w http.ResponseWriter, r *http.Request) {
	label, valid := a.historyLabel(w, r)
	if !valid {
		return
	}
	q, f, opts, err := a.logQuery(r, label)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), a.cfg.ChangeTimeout)
	defer cancel()
	if q.Epoch == 0 {
		if q.Epoch, err = a.cfg.History.Epoch(ctx, label); errors.Is(err, db.ErrNotFound) {
			writeError(w, http.StatusNotFound, "no node "+quote(label)+" (a kept tenancy of a deleted node: tenancy=EPOCH)")
			return
		} else if err != nil {
			a.storeError(w, r, "read node epoch", err)
			return
		}
	}
	chunks, err := a.cfg.History.Read(ctx, q)
	switch {
	case errors.Is(err, history.ErrNoTenancy):
		writeError(w, http.StatusNotFound, "no tenancy "+strconv.FormatInt(q.Epoch, 10)+" of node "+quote(label))
		return
	case err != nil:
		a.storeError(w, r, "read console history", err)
		return
	}
	types := map[history.Format]string{history.FormatRaw: "application/octet-stream",
		history.FormatText: "text/plain; charset=utf-8", history.FormatCast: "application/x-asciicast"}
	w.Header().Set("Content-Type", types[f])
	enc, _ := history.NewEncoder(w, f, opts) // f was parsed
	for _, c := range chunks {
		if err := enc.Encode(c); err != nil {
			return // the client left
		}
	}
	_ = enc.Close()
}

// historyLabel is the node label of a history route; on failure (or with
// no history) it has answered.
func (a *API) historyLabel(w http.ResponseWriter, r *http.Request) (string, bool) {
	label, valid := pathLabel(w, r)
	if valid && a.cfg.History == nil {
		notFound(w)
		return "", false
	}
	return label, valid
}

// logQuery parses console-log's parameters; Epoch 0 means the current
// tenancy.
func (a *API) logQuery(r *http.Request, label string) (history.Query, history.Format, history.Options, error) {
	p := r.URL.Query()
	q := history.Query{Node: label, Admin: true}
	var opts history.Options
	f := history.FormatRaw
	var err error
	if s := p.Get("format"); s != "" {
		if f, err = history.ParseFormat(s); err != nil {
			return q, f, opts, errors.New("format must be raw, text or cast")
		}
	}
	opts.Timestamps = p.Get("timestamps") == "1" || p.Get("timestamps") == "true"
	if s := p.Get("tenancy"); s != "" {
		if q.Epoch, err = strconv.ParseInt(s, 10, 64); err != nil || q.Epoch <= 0 {
			return q, f, opts, errors.New("tenancy must be a tenancy's epoch (GET /v1/nodes/{label}/tenancies)")
		}
	}
	if s := p.Get("lines"); s != "" {
		if q.Lines, err = strconv.Atoi(s); err != nil || q.Lines <= 0 || q.Lines > 1_000_000 {
			return q, f, opts, errors.New("lines must be a number from 1 to 1000000")
		}
	}
	if s := p.Get("since"); s != "" {
		if d, err := time.ParseDuration(s); err == nil && d > 0 {
			q.Since = a.cfg.Now().Add(-d)
		} else if q.Since, err = time.Parse(time.RFC3339, s); err != nil {
			return q, f, opts, errors.New("since must be a duration (10m) or an RFC 3339 time")
		}
	}
	return q, f, opts, nil
}

// tenancies is GET /v1/nodes/{label}/tenancies: the node's stored
// tenancies, oldest first (the current one, and the ended ones kept with
// history.retention).
func (a *API) tenancies(w http.ResponseWriter, r *http.Request) {
	label, valid := a.historyLabel(w, r)
	if !valid {
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), a.cfg.ChangeTimeout)
	defer cancel()
	ts, err := a.cfg.History.Tenancies(ctx, label)
	if err != nil {
		a.storeError(w, r, "list tenancies", err)
		return
	}
	out := api.Tenancies{Node: label, Tenancies: []api.Tenancy{}}
	for _, t := range ts {
		v := api.Tenancy{Epoch: t.Epoch, Current: t.Current, StartedAt: t.StartedAt.UTC(), Bytes: t.Bytes}
		if !t.EndedAt.IsZero() {
			e, p := t.EndedAt.UTC(), t.PurgeAt.UTC()
			v.EndedAt, v.PurgeAt = &e, &p
		}
		out.Tenancies = append(out.Tenancies, v)
	}
	writeJSON(w, http.StatusOK, out)
}

// putCapture is PUT /v1/nodes/{label}/capture {"capture": "always" |
// "attached" | ""}: the node's capture alone (no BMC info needed), not an
// access change.
func (a *API) putCapture(w http.ResponseWriter, r *http.Request) {
	label, data, valid := a.labelBody(w, r)
	if !valid {
		return
	}
	if err := decode(data, &api.Capture{}, true, "body"); err != nil {
		writeBodyError(w, err)
		return
	}
	capture, err := nodeCapture(data)
	if err != nil || capture == nil {
		writeBodyError(w, badBody("field \"capture\" must be %q, %q or \"\" (the default)", db.CaptureAlways, db.CaptureAttached))
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), a.cfg.ChangeTimeout)
	defer cancel()
	n, err := a.store.Node(ctx, label)
	if err == nil {
		n, err = a.setCapture(ctx, r, n, capture)
	}
	switch {
	case errors.Is(err, db.ErrNotFound):
		writeError(w, http.StatusNotFound, "no node "+quote(label))
	case err != nil:
		a.storeError(w, r, "set capture", err)
	default:
		writeJSON(w, http.StatusOK, a.view(n))
	}
}

// putScreenSize is PUT /v1/nodes/{label}/screen_size {"screen_size":
// "COLSxROWS" | ""}: the size of the node's screen (at most 200x100; ""
// the default 80x25), not an access change. The node's next console link
// draws at the new size.
func (a *API) putScreenSize(w http.ResponseWriter, r *http.Request) {
	label, data, valid := a.labelBody(w, r)
	if !valid {
		return
	}
	var b api.ScreenSize
	if err := decode(data, &b, true, "body"); err != nil {
		writeBodyError(w, err)
		return
	}
	if b.ScreenSize == nil || screenSizeBad(*b.ScreenSize) {
		writeBodyError(w, screenSizeError())
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), a.cfg.ChangeTimeout)
	defer cancel()
	n, err := a.store.Node(ctx, label)
	if err == nil {
		n, err = a.setScreenSize(ctx, r, n, b.ScreenSize)
	}
	switch {
	case errors.Is(err, db.ErrNotFound):
		writeError(w, http.StatusNotFound, "no node "+quote(label))
	case err != nil:
		a.storeError(w, r, "set screen size", err)
	default:
		writeJSON(w, http.StatusOK, a.view(n))
	}
}

// putZone is PUT /v1/nodes/{label}/zone {"zone": "rack-7" | ""}: the
// network of the node's BMC (docs/replicas.md, Zones), not an access
// change. Only replicas that reach the zone open the node's console link
// from then on.
func (a *API) putZone(w http.ResponseWriter, r *http.Request) {
	label, data, valid := a.labelBody(w, r)
	if !valid {
		return
	}
	var b api.Zone
	if err := decode(data, &b, true, "body"); err != nil {
		writeBodyError(w, err)
		return
	}
	if b.Zone == nil || db.ValidZone(*b.Zone) != nil {
		writeBodyError(w, badBody("field \"zone\" must be 1 to %d of a-z, 0-9, '.', '_' and '-', starting with a letter or digit, or \"\" (none)",
			db.MaxZoneLen))
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), a.cfg.ChangeTimeout)
	defer cancel()
	n, err := a.store.SetZone(ctx, label, *b.Zone)
	switch {
	case errors.Is(err, db.ErrNotFound):
		writeError(w, http.StatusNotFound, "no node "+quote(label))
	case err != nil:
		a.storeError(w, r, "set zone", err)
	default:
		detail := n.Zone
		if detail == "" {
			detail = "none"
		}
		a.auditEvent(r, db.AuditEvent{Node: n.Label, Actor: "admin", Action: "node.zone", Result: "ok", Detail: "zone " + detail})
		writeJSON(w, http.StatusOK, a.view(n))
	}
}

// setScreenSize sets n's screen size if size is set and differs (not an
// access change), audited as node.screen_size.
func (a *API) setScreenSize(ctx context.Context, r *http.Request, n db.Node, size *string) (db.Node, error) {
	if size == nil || *size == n.ScreenSize {
		return n, nil
	}
	n, err := a.store.SetScreenSize(ctx, n.Label, *size)
	if err != nil {
		return n, err
	}
	detail := n.ScreenSize
	if detail == "" {
		detail = "default"
	}
	a.auditEvent(r, db.AuditEvent{Node: n.Label, Actor: "admin", Action: "node.screen_size", Result: "ok", Detail: "screen size " + detail})
	return n, nil
}

// screenSizeError is the answer to a screen size out of bounds.
func screenSizeError() error {
	return badBody("field \"screen_size\" must be COLSxROWS from %dx%d to %dx%d, or \"\" (the default, %dx%d)",
		screen.MinCols, screen.MinRows, screen.MaxCols, screen.MaxRows, screen.DefaultCols, screen.DefaultRows)
}

func screenSizeBad(s string) bool {
	_, err := screen.ParseSize(s)
	return err != nil
}

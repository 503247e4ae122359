package obmdtest

import (
	"encoding/json"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"sync"
)

// Metric is one sample of /metrics.
func (o *Daemon) Metric(series string) float64 {
	o.T.Helper()
	status, body := o.Request("GET", "/metrics", nil, "", "")
	if status != 200 {
		o.T.Fatalf("GET /metrics: got %d", status)
	}
	v, _ := MetricSample(string(body), series)
	return v
}

// Parallel runs n calls of try over workers goroutines.
func Parallel(n, workers int, try func(i int)) {
	var wg sync.WaitGroup
	next := make(chan int)
	for range workers {
		wg.Go(func() {
			for i := range next {
				try(i)
			}
		})
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
}

// HTTPFrom sends an admin-port request from the local address src with
// basic credentials user:pass ("" user: none) and the headers hdr; it
// returns the status and body (0 and an error logged if it failed).
func (o *Daemon) HTTPFrom(src, method, path, user, pass string, hdr http.Header) (int, []byte) {
	o.T.Helper()
	return RequestFrom(o.T, "http://"+o.AdminAddr(), src, method, path, user, pass, hdr)
}

// AuditTotals sums the audit rows of node by action and result: rows, and
// the events they count.
func (o *Daemon) AuditTotals(node string) (rows, events map[string]int64) {
	o.T.Helper()
	rows, events = map[string]int64{}, map[string]int64{}
	for _, e := range o.Audit(node) {
		k := e.Action + " " + e.Result
		rows[k]++
		events[k] += e.Count
	}
	return rows, events
}

// AuditRow is one event of GET /v1/audit.
type AuditRow struct {
	ID     int64
	Node   string
	Actor  string
	Action string
	Source string
	Result string
	Detail string
	Count  int64 // repeats counted into one row (audit.aggregate_window)
}

// FromAddr reports whether an audit row's source is the address src: with
// the client's port, or without it for a row counting repeats.
func FromAddr(source, src string) bool {
	return source == src || strings.HasPrefix(source, src+":")
}

// Audit returns node's audit events, oldest first.
func (o *Daemon) Audit(node string) []AuditRow {
	o.T.Helper()
	var out struct{ Events []AuditRow }
	if err := json.Unmarshal(o.MustAPI(200, "GET", "/v1/audit?node="+url.QueryEscape(node), nil), &out); err != nil {
		o.T.Fatalf("audit: %v", err)
	}
	sort.Slice(out.Events, func(i, j int) bool { return out.Events[i].ID < out.Events[j].ID })
	return out.Events
}

// Package metrics keeps obmd's counters and renders them for /metrics in the
// Prometheus text format.
//
// It writes the text exposition format (version 0.0.4) without a client
// library: power operations by result with latency, authentication results,
// and whatever the daemon pulls in at scrape time (sessions open, console
// links, bytes). No metric carries a node label, so /metrics reveals no
// inventory.
package metrics

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// powerBuckets are the latency histogram's upper bounds in seconds: a
// native IPMI call takes ~20 ms, ipmitool ~70 ms, a power cycle ~1 s.
var powerBuckets = []float64{0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30}

// Registry holds the counters. Safe for concurrent use; the zero value is
// not usable, use New.
type Registry struct {
	mu    sync.Mutex
	power map[[2]string]*histogram // (action, result)
	auth  map[[2]string]uint64     // (method, result)
	pulls []func(*Writer)
}

type histogram struct {
	counts []uint64 // per bucket, not cumulative; last is +Inf
	sum    float64
	n      uint64
}

// New returns an empty registry.
func New() *Registry {
	return &Registry{power: map[[2]string]*histogram{}, auth: map[[2]string]uint64{}}
}

// ObservePower records one power or boot-device operation.
func (r *Registry) ObservePower(action, result string, took time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	k := [2]string{action, result}
	h := r.power[k]
	if h == nil {
		h = &histogram{counts: make([]uint64, len(powerBuckets)+1)}
		r.power[k] = h
	}
	sec := took.Seconds()
	i := sort.SearchFloat64s(powerBuckets, sec)
	h.counts[i]++
	h.sum += sec
	h.n++
}

// ObserveAuth records one authentication attempt's result ("ok", "denied").
func (r *Registry) ObserveAuth(method, result string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.auth[[2]string{method, result}]++
}

// Pull adds a function called at every scrape to write current values
// (gauges and counters kept elsewhere). Call it before serving.
func (r *Registry) Pull(f func(*Writer)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.pulls = append(r.pulls, f)
}

// ServeHTTP renders every metric.
func (r *Registry) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	r.WriteTo(w)
}

// WriteTo renders every metric to out.
func (r *Registry) WriteTo(out io.Writer) (int64, error) {
	w := &Writer{bw: bufio.NewWriter(out)}
	r.mu.Lock()
	pulls := append([]func(*Writer){}, r.pulls...)
	w.Family("obmd_power_operation_seconds", "histogram", "Power and boot-device operations by action and result.")
	for _, k := range sortedKeys(r.power) {
		h := r.power[k]
		var cum uint64
		for i, le := range powerBuckets {
			cum += h.counts[i]
			w.Sample("_bucket", float64(cum), "action", k[0], "result", k[1], "le", strconv.FormatFloat(le, 'g', -1, 64))
		}
		w.Sample("_bucket", float64(h.n), "action", k[0], "result", k[1], "le", "+Inf")
		w.Sample("_sum", h.sum, "action", k[0], "result", k[1])
		w.Sample("_count", float64(h.n), "action", k[0], "result", k[1])
	}
	w.Family("obmd_auth_attempts_total", "counter", "Authentication attempts by method (SSH: password, keyboard-interactive, publickey, cert; admin API: http-admin, http-token) and result.")
	for _, k := range sortedKeys(r.auth) {
		w.Sample("", float64(r.auth[k]), "method", k[0], "result", k[1])
	}
	r.mu.Unlock()
	for _, f := range pulls {
		f(w)
	}
	return w.n, w.flush()
}

func sortedKeys[V any](m map[[2]string]V) [][2]string {
	keys := make([][2]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if keys[i][0] != keys[j][0] {
			return keys[i][0] < keys[j][0]
		}
		return keys[i][1] < keys[j][1]
	})
	return keys
}

// Writer writes metric families; each Family is followed by its samples.
type Writer struct {
	bw   *bufio.Writer
	name string
	n    int64
	err  error
}

// Family starts a metric family: name, type (counter, gauge, histogram)
// and help text.
func (w *Writer) Family(name, typ, help string) {
	w.name = name
	w.printf("# HELP %s %s\n# TYPE %s %s\n", name, escapeHelp(help), name, typ)
}

// Sample writes one sample of the current family; suffix is "" or e.g.
// "_bucket"; labels are name, value pairs.
func (w *Writer) Sample(suffix string, v float64, labels ...string) {
	var b strings.Builder
	b.WriteString(w.name + suffix)
	if len(labels) > 0 {
		b.WriteByte('{')
		for i := 0; i+1 < len(labels); i += 2 {
			if i > 0 {
				b.WriteByte(',')
			}
			fmt.Fprintf(&b, "%s=\"%s\"", labels[i], escapeLabel(labels[i+1]))
		}
		b.WriteByte('}')
	}
	w.printf("%s %s\n", b.String(), strconv.FormatFloat(v, 'g', -1, 64))
}

// Gauge writes a one-sample gauge family.
func (w *Writer) Gauge(name, help string, v float64) {
	w.Family(name, "gauge", help)
	w.Sample("", v)
}

// Counter writes a one-sample counter family.
func (w *Writer) Counter(name, help string, v float64) {
	w.Family(name, "counter", help)
	w.Sample("", v)
}

func (w *Writer) printf(format string, a ...any) {
	if w.err != nil {
		return
	}
	n, err := fmt.Fprintf(w.bw, format, a...)
	w.n += int64(n)
	w.err = err
}

func (w *Writer) flush() error {
	if w.err != nil {
		return w.err
	}
	return w.bw.Flush()
}

var (
	labelEscaper = strings.NewReplacer(`\`, `\\`, "\n", `\n`, `"`, `\"`)
	helpEscaper  = strings.NewReplacer(`\`, `\\`, "\n", `\n`)
)

func escapeLabel(s string) string { return labelEscaper.Replace(s) }
func escapeHelp(s string) string  { return helpEscaper.Replace(s) }

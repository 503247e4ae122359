// Package metrics keeps obmd's metrics and serves them on /metrics for Prometheus.
//
// A Registry is a registry of its own (github.com/prometheus/client_golang),
// never the library's global one: power operations by result with latency,
// authentication results, the Go runtime's and the process's figures (open
// files, goroutines), and whatever the daemon pulls in at scrape time
// (sessions open, console links, bytes). No metric carries a node label,
// so /metrics reveals no inventory.
package metrics

import (
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"
)

// powerBuckets are the latency histogram's upper bounds in seconds: a
// native IPMI call takes ~20 ms, ipmitool ~70 ms, a power cycle ~1 s.
var powerBuckets = []float64{0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30}

// Registry holds the metrics and serves them. Safe for concurrent use; the
// zero value is not usable, use New.
type Registry struct {
	reg     *prometheus.Registry
	power   *prometheus.HistogramVec
	auth    *prometheus.CounterVec
	handler http.Handler
}

// New returns a registry with no observations yet, the Go runtime's and
// the process's collectors included.
func New() *Registry {
	r := &Registry{
		reg: prometheus.NewRegistry(),
		power: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "obmd_power_operation_seconds",
			Help:    "Power and boot-device operations by action and result.",
			Buckets: powerBuckets,
		}, []string{"action", "result"}),
		auth: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "obmd_auth_attempts_total",
			Help: "Authentication attempts by method (SSH: password, keyboard-interactive, publickey, cert; admin API: http-admin, http-token) and result.",
		}, []string{"method", "result"}),
	}
	// Fixed collectors with distinct names: registering them cannot fail.
	r.reg.MustRegister(r.power, r.auth, collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	r.handler = promhttp.HandlerFor(&oneAtATime{g: r.reg}, promhttp.HandlerOpts{})
	return r
}

// ObservePower records one power or boot-device operation.
func (r *Registry) ObservePower(action, result string, took time.Duration) {
	r.power.WithLabelValues(action, result).Observe(took.Seconds())
}

// ObserveAuth records one authentication attempt's result ("ok", "denied").
func (r *Registry) ObserveAuth(method, result string) {
	r.auth.WithLabelValues(method, result).Inc()
}

// Pull adds read, called at every scrape to write current values kept
// elsewhere (gauges, and counters other packages keep). Pull calls it once
// itself to learn what it writes, so read must write the same families
// with the same label names and help every time, and what it reads must
// exist when Pull is called. It fails on an invalid name or a name already
// taken.
func (r *Registry) Pull(read func(*Writer)) error {
	if err := r.reg.Register(pull(read)); err != nil {
		return fmt.Errorf("register metrics: %w", err)
	}
	return nil
}

// ServeHTTP serves every metric in the Prometheus text format (or another
// format the scraper asks for).
func (r *Registry) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	r.handler.ServeHTTP(w, req)
}

// oneAtATime gathers for one scrape at a time: /metrics needs no
// credential, and a scrape reads the process's files under /proc, so
// concurrent requests (many HTTP/2 streams on one connection among them)
// take turns rather than spend a core and a file descriptor each.
type oneAtATime struct {
	mu sync.Mutex
	g  prometheus.Gatherer
}

func (o *oneAtATime) Gather() ([]*dto.MetricFamily, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.g.Gather()
}

// pull is a Collector of a Pull function's values. It describes itself by
// collecting (prometheus.DescribeByCollect), which lets the registry check
// its names when it is registered.
type pull func(*Writer)

func (p pull) Describe(ch chan<- *prometheus.Desc) { prometheus.DescribeByCollect(p, ch) }
func (p pull) Collect(ch chan<- prometheus.Metric) { p(&Writer{ch: ch}) }

// Writer writes one scrape's samples of a Pull function.
type Writer struct {
	ch chan<- prometheus.Metric
}

// Gauge writes one sample of gauge family name; labels are name, value
// pairs. The samples of one family (one per set of label values) share its
// help text and label names.
func (w *Writer) Gauge(name, help string, v float64, labels ...string) {
	w.sample(prometheus.GaugeValue, name, help, v, labels)
}

// Counter writes one sample of counter family name, as Gauge does.
func (w *Writer) Counter(name, help string, v float64, labels ...string) {
	w.sample(prometheus.CounterValue, name, help, v, labels)
}

func (w *Writer) sample(typ prometheus.ValueType, name, help string, v float64, labels []string) {
	names := make([]string, 0, len(labels)/2)
	values := make([]string, 0, len(labels)/2)
	for i := 0; i+1 < len(labels); i += 2 {
		names = append(names, labels[i])
		values = append(values, labels[i+1])
	}
	m, err := prometheus.NewConstMetric(prometheus.NewDesc(name, help, names, nil), typ, v, values...)
	if err == nil && len(labels)%2 != 0 {
		err = fmt.Errorf("label %q has no value", labels[len(labels)-1])
	}
	if err != nil { // an invalid description: Pull fails with err
		err = fmt.Errorf("metric %s: %w", name, err)
		m = prometheus.NewInvalidMetric(prometheus.NewInvalidDesc(err), err)
	}
	w.ch <- m
}

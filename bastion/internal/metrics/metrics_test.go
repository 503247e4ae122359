package metrics

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// scrape is r's /metrics answer: the status, content type and body.
func scrape(t *testing.T, r *Registry) (int, string, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	r.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	return rec.Code, rec.Header().Get("Content-Type"), rec.Body.String()
}

// sample is the value of series (name and labels, as written) in a text
// exposition.
func sample(exposition, series string) (float64, bool) {
	for _, line := range strings.Split(exposition, "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			return f, err == nil
		}
	}
	return 0, false
}

func TestRender(t *testing.T) {
	r := New()
	r.ObservePower("power.on", "ok", 20*time.Millisecond)
	r.ObservePower("power.on", "ok", 2*time.Second)
	r.ObservePower("power.cycle", "busy", 0)
	r.ObserveAuth("password", "denied")
	r.ObserveAuth("password", "denied")
	r.ObserveAuth("publickey", "ok")
	err := r.Pull(func(w *Writer) {
		w.Gauge("obmd_sessions_open", "Live sessions by kind.", 3, "kind", "console")
		w.Gauge("obmd_sessions_open", "Live sessions by kind.", 1, "kind", "exec")
		w.Counter("obmd_console_bytes_total", "Bytes \"read\".", 42)
	})
	if err != nil {
		t.Fatalf("Pull: %v", err)
	}
	status, ctype, out := scrape(t, r)
	if status != http.StatusOK || !strings.HasPrefix(ctype, "text/plain; version=0.0.4") {
		t.Fatalf("got %d %q, want 200 and the text format", status, ctype)
	}
	for _, want := range []string{
		"# TYPE obmd_power_operation_seconds histogram\n",
		`obmd_power_operation_seconds_bucket{action="power.on",result="ok",le="0.01"} 0` + "\n",
		`obmd_power_operation_seconds_bucket{action="power.on",result="ok",le="0.025"} 1` + "\n",
		`obmd_power_operation_seconds_bucket{action="power.on",result="ok",le="2.5"} 2` + "\n",
		`obmd_power_operation_seconds_bucket{action="power.on",result="ok",le="+Inf"} 2` + "\n",
		`obmd_power_operation_seconds_count{action="power.on",result="ok"} 2` + "\n",
		`obmd_power_operation_seconds_sum{action="power.on",result="ok"} 2.02` + "\n",
		`obmd_power_operation_seconds_count{action="power.cycle",result="busy"} 1` + "\n",
		"# TYPE obmd_auth_attempts_total counter\n",
		`obmd_auth_attempts_total{method="password",result="denied"} 2` + "\n",
		`obmd_auth_attempts_total{method="publickey",result="ok"} 1` + "\n",
		"# TYPE obmd_sessions_open gauge\n",
		`obmd_sessions_open{kind="console"} 3` + "\n",
		`obmd_sessions_open{kind="exec"} 1` + "\n",
		"# HELP obmd_console_bytes_total Bytes \"read\".\n",
		"# TYPE obmd_console_bytes_total counter\n",
		"obmd_console_bytes_total 42\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q; got:\n%s", want, out)
		}
	}
	// Each family is declared once.
	for _, family := range []string{"obmd_auth_attempts_total", "obmd_sessions_open"} {
		if n := strings.Count(out, "# TYPE "+family+" "); n != 1 {
			t.Errorf("TYPE lines for %s: got %d, want 1", family, n)
		}
	}
	// The Go runtime's and the process's figures (this test's process):
	// the file descriptors and goroutines the fd defences are about.
	for _, series := range []string{"go_goroutines", "process_open_fds", "process_max_fds"} {
		if v, ok := sample(out, series); !ok || v < 1 {
			t.Errorf("%s: got %v (present %v), want at least 1", series, v, ok)
		}
	}
}

// TestOwnRegistry: obmd's metrics stay out of client_golang's global
// registry, which any imported package may fill.
func TestOwnRegistry(t *testing.T) {
	r := New()
	r.ObserveAuth("password", "ok")
	fams, err := prometheus.DefaultGatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if strings.HasPrefix(f.GetName(), "obmd_") {
			t.Errorf("the global registry holds %s", f.GetName())
		}
	}
}

func TestLabelEscaping(t *testing.T) {
	r := New()
	r.ObserveAuth("a\"b\\c\nd", "ok")
	_, _, out := scrape(t, r)
	if want := `method="a\"b\\c\nd"`; !strings.Contains(out, want) {
		t.Errorf("escaped label: want %s in\n%s", want, out)
	}
}

// TestPullRefused: a Pull function that writes what no scrape could
// serve is refused when it is added, not at the first scrape.
func TestPullRefused(t *testing.T) {
	tests := []struct {
		name string
		read func(*Writer)
	}{
		{"no name", func(w *Writer) { w.Gauge("", "x", 1) }},
		{"label without value", func(w *Writer) { w.Gauge("obmd_x", "x", 1, "kind") }},
		{"taken by the runtime's collector", func(w *Writer) { w.Gauge("go_goroutines", "x", 1) }},
		{"taken by a pushed metric", func(w *Writer) { w.Counter("obmd_auth_attempts_total", "x", 1, "method", "m", "result", "ok") }},
		{"help differs between samples", func(w *Writer) {
			w.Gauge("obmd_x", "one", 1, "k", "a")
			w.Gauge("obmd_x", "two", 1, "k", "b")
		}},
		{"label names differ between samples", func(w *Writer) {
			w.Gauge("obmd_x", "x", 1, "k", "a")
			w.Gauge("obmd_x", "x", 1, "j", "b")
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := New()
			if err := r.Pull(tt.read); err == nil {
				t.Errorf("Pull: got no error, want one")
			}
			if status, _, out := scrape(t, r); status != http.StatusOK {
				t.Errorf("after a refused Pull: got %d, want 200:\n%s", status, out)
			}
		})
	}
}

// TestScrapesTakeTurns: concurrent scrapes gather one at a time; each is
// answered.
func TestScrapesTakeTurns(t *testing.T) {
	r := New()
	var hold atomic.Bool // Pull's own call must not wait
	entered := make(chan struct{}, 2)
	release := make(chan struct{})
	err := r.Pull(func(w *Writer) {
		if hold.Load() {
			entered <- struct{}{}
			<-release
		}
		w.Gauge("obmd_x", "x", 1)
	})
	if err != nil {
		t.Fatalf("Pull: %v", err)
	}
	hold.Store(true)
	var wg sync.WaitGroup
	statuses := make(chan int, 2)
	for range 2 {
		wg.Go(func() {
			status, _, _ := scrape(t, r)
			statuses <- status
		})
	}
	<-entered
	// The second scrape waits for the first: within this time it would
	// have come in beside it.
	select {
	case <-entered:
		t.Error("two scrapes gathered at once")
	case <-time.After(200 * time.Millisecond):
	}
	close(release)
	wg.Wait()
	close(statuses)
	for s := range statuses {
		if s != http.StatusOK {
			t.Errorf("scrape: got %d, want 200", s)
		}
	}
}

package metrics

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

func TestRender(t *testing.T) {
	r := New()
	r.ObservePower("power.on", "ok", 20*time.Millisecond)
	r.ObservePower("power.on", "ok", 2*time.Second)
	r.ObservePower("power.cycle", "busy", 0)
	r.ObserveAuth("password", "denied")
	r.ObserveAuth("password", "denied")
	r.ObserveAuth("publickey", "ok")
	r.Pull(func(w *Writer) {
		w.Family("obmd_sessions_open", "gauge", "Live sessions by kind.")
		w.Sample("", 3, "kind", "console")
		w.Counter("obmd_console_bytes_total", "Bytes \"read\".", 42)
	})
	var b bytes.Buffer
	if _, err := r.WriteTo(&b); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"# TYPE obmd_power_operation_seconds histogram\n",
		`obmd_power_operation_seconds_bucket{action="power.on",result="ok",le="0.01"} 0` + "\n",
		`obmd_power_operation_seconds_bucket{action="power.on",result="ok",le="0.025"} 1` + "\n",
		`obmd_power_operation_seconds_bucket{action="power.on",result="ok",le="2.5"} 2` + "\n",
		`obmd_power_operation_seconds_bucket{action="power.on",result="ok",le="+Inf"} 2` + "\n",
		`obmd_power_operation_seconds_count{action="power.on",result="ok"} 2` + "\n",
		`obmd_power_operation_seconds_sum{action="power.on",result="ok"} 2.02` + "\n",
		`obmd_power_operation_seconds_count{action="power.cycle",result="busy"} 1` + "\n",
		`obmd_auth_attempts_total{method="password",result="denied"} 2` + "\n",
		`obmd_auth_attempts_total{method="publickey",result="ok"} 1` + "\n",
		`obmd_sessions_open{kind="console"} 3` + "\n",
		"# HELP obmd_console_bytes_total Bytes \"read\".\n",
		"obmd_console_bytes_total 42\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q; got:\n%s", want, out)
		}
	}
	// Each family is declared once.
	if n := strings.Count(out, "# TYPE obmd_auth_attempts_total "); n != 1 {
		t.Errorf("TYPE lines for auth: got %d, want 1", n)
	}
}

func TestLabelEscaping(t *testing.T) {
	r := New()
	r.ObserveAuth("a\"b\\c\nd", "ok")
	var b bytes.Buffer
	r.WriteTo(&b)
	if want := `method="a\"b\\c\nd"`; !strings.Contains(b.String(), want) {
		t.Errorf("escaped label: want %s in\n%s", want, b.String())
	}
}

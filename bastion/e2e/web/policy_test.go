package web

// The web port's policy: its response headers, and TLS off loopback.

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/sirupsen/logrus"

	"github.com/obmd/obmd/bastion/daemon"
	"github.com/obmd/obmd/bastion/webdoor"
)

// TestHeaders: the page and its files come with a strict policy: no
// inline script, no framing unless configured, no cookies.
func TestHeaders(t *testing.T) {
	for _, tc := range []struct {
		name      string
		ancestors []string
		wantFA    string
	}{
		{"default", nil, "frame-ancestors 'none'"},
		{"dashboard", []string{"https://dash.example.com"}, "frame-ancestors https://dash.example.com"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := startWeb(t, func(c *daemon.Config) { c.Web.FrameAncestors = tc.ancestors })
			for _, path := range []string{"/nodes/n1", "/static/xterm.js", "/static/console.js", "/nodes/n1/ws"} {
				resp, err := http.Get("http://" + o.WebAddr() + path)
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				h := resp.Header
				csp := h.Get("Content-Security-Policy")
				if !strings.Contains(csp, "script-src 'self';") || !strings.Contains(csp, "default-src 'none'") ||
					!strings.HasSuffix(csp, tc.wantFA) {
					t.Errorf("%s: CSP %q", path, csp)
				}
				if h.Get("Set-Cookie") != "" || h.Get("X-Content-Type-Options") != "nosniff" || h.Get("Referrer-Policy") != "no-referrer" {
					t.Errorf("%s: headers %v", path, h)
				}
				if (h.Get("X-Frame-Options") == "DENY") != (tc.ancestors == nil) {
					t.Errorf("%s: X-Frame-Options %q", path, h.Get("X-Frame-Options"))
				}
			}
		})
	}
}

// TestAddrNeedsTLS: off loopback the web console needs TLS, as the
// admin port does, unless told to send tokens in clear; the demo turns it
// on.
func TestAddrNeedsTLS(t *testing.T) {
	_, err := daemon.New(daemon.Config{Daemon: daemon.DaemonConfig{StateDir: t.TempDir()}, Web: webSettings("0.0.0.0:0", false)}, quietLog())
	if err == nil || !strings.Contains(err.Error(), "web address 0.0.0.0:0 is not loopback") {
		t.Errorf("got %v, want a refusal", err)
	}
	if _, err := daemon.New(daemon.Config{Daemon: daemon.DaemonConfig{StateDir: t.TempDir()}, Web: webSettings("0.0.0.0:0", true)}, quietLog()); err != nil {
		t.Errorf("insecure_http: got %v", err)
	}
	if c, err := (daemon.Config{Daemon: daemon.DaemonConfig{Demo: true}}).WithDefaults(); err != nil || c.Web.Addr != daemon.DemoWebAddr {
		t.Errorf("demo: web.addr %q, %v, want %s", c.Web.Addr, err, daemon.DemoWebAddr)
	}
}

func webSettings(addr string, insecure bool) webdoor.Settings {
	return webdoor.Settings{Addr: addr, InsecureHTTP: insecure}
}

func quietLog() logrus.FieldLogger {
	l := logrus.New()
	l.SetOutput(io.Discard)
	return l
}

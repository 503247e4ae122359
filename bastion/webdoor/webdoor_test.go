package webdoor

import (
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
)

func TestParseCredential(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want credential
		ok   bool
	}{
		{`{"token":"t"}`, credential{Token: "t"}, true},
		{`{"ticket":"k","read_only":true}`, credential{Ticket: "k", ReadOnly: true}, true},
		{`{"token":"t","read_only":false}`, credential{Token: "t"}, true},
		{`{}`, credential{}, false},
		{`{"token":""}`, credential{}, false},
		{`{"token":"t","ticket":"k"}`, credential{}, false},
		{`{"TOKEN":"t"}`, credential{}, false},
		{`{"Token":"t"}`, credential{}, false},
		{`{"token":"a","token":"t"}`, credential{}, false},
		{`{"token":"t","x":1}`, credential{}, false},
		{`{"token":1}`, credential{}, false},
		{`{"token":"t","read_only":"yes"}`, credential{}, false},
		{`["token"]`, credential{}, false},
		{`"token"`, credential{}, false},
		{`{"token":"t"} {"token":"u"}`, credential{}, false},
		{``, credential{}, false},
	} {
		got, err := parseCredential([]byte(tc.in))
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("%s: got %+v, %v, want %+v (ok %v)", tc.in, got, err, tc.want, tc.ok)
		}
	}
}

func FuzzParseCredential(f *testing.F) {
	f.Add([]byte(`{"token":"t","read_only":true}`))
	f.Add([]byte(`{"ticket":"k"}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := parseCredential(data)
		if err == nil && (c.Token == "") == (c.Ticket == "") {
			t.Errorf("%q: accepted %+v, want exactly one credential", data, c)
		}
	})
}

func TestOrigin(t *testing.T) {
	s := &Server{}
	pub, err := ParsePublicURL("https://console.example.com")
	if err != nil {
		t.Fatal(err)
	}
	withPublic := &Server{public: pub}
	// A browser's Origin leaves out the scheme's default port.
	pub443, err := ParsePublicURL("https://console.example.com:443/")
	if err != nil {
		t.Fatal(err)
	}
	withPort := &Server{public: pub443}
	for _, tc := range []struct {
		s      *Server
		origin string
		want   bool
	}{
		{s, "http://obmd.test:8081", true},
		{s, "https://OBMD.test:8081", true},
		{s, "http://obmd.test:8082", false},
		{s, "http://evil.test", false},
		{s, "", false},
		{s, "null", false},
		{s, "ws://obmd.test:8081", false},
		{s, "http://obmd.test:8081/path", false},
		{withPublic, "https://console.example.com", true},
		{withPublic, "http://console.example.com", false},
		{withPublic, "http://obmd.test:8081", true},
		{withPort, "https://console.example.com", true},
		{withPort, "https://console.example.com:8443", false},
	} {
		r := httptest.NewRequest("GET", "http://obmd.test:8081/nodes/n1/ws", nil)
		if got := tc.s.originOK(r, tc.origin); got != tc.want {
			t.Errorf("origin %q (public %v): got %v, want %v", tc.origin, tc.s.public, got, tc.want)
		}
	}
}

func TestPolicy(t *testing.T) {
	csp, err := policy(nil)
	if err != nil || !strings.Contains(csp, "script-src 'self';") || !strings.HasSuffix(csp, "frame-ancestors 'none'") ||
		strings.Contains(csp, "script-src 'self' 'unsafe") {
		t.Errorf("default: got %q, %v", csp, err)
	}
	csp, err = policy([]string{"https://a.example", "https://b.example:8443"})
	if err != nil || !strings.HasSuffix(csp, "frame-ancestors https://a.example https://b.example:8443") {
		t.Errorf("ancestors: got %q, %v", csp, err)
	}
	for _, bad := range []string{"", "https://a.example; script-src *", "a b", "x,y"} {
		if _, err := policy([]string{bad}); err == nil {
			t.Errorf("%q: accepted", bad)
		}
	}
}

func TestSettings(t *testing.T) {
	s, err := Settings{}.WithDefaults("", "")
	if err != nil || s.PreAuthTimeout != 0 || s.TicketTTL != 0 {
		t.Errorf("off: got %+v, %v, want nothing set", s, err)
	}
	s, err = Settings{Addr: "127.0.0.1:8081"}.WithDefaults("c.pem", "k.pem")
	if err != nil || s.TLSCert != "c.pem" || s.PreAuthTimeout != DefaultPreAuthTimeout || s.TicketTTL != time.Minute ||
		s.MaxMessage != DefaultMaxMessage {
		t.Errorf("defaults: got %+v, %v", s, err)
	}
	for _, bad := range []Settings{
		{Addr: "a:1", TicketTTL: 2 * time.Minute},
		{Addr: "a:1", TicketTTL: time.Millisecond},
		{Addr: "a:1", TLSCert: "c.pem"},
		{Addr: "a:1", PublicURL: "ftp://x"},
		{Addr: "a:1", PublicURL: "https://x/path"},
		{Addr: "a:1", PublicURL: "https://:443"},
		{Addr: "a:1", MaxMessage: 100},
		{Addr: "a:1", PreAuthTimeout: -1},
		{Addr: "a:1", FrameAncestors: []string{"x; y"}},
		{Addr: "a:1", TrustedProxies: []string{"10.0.0.1/8"}},
	} {
		if _, err := bad.WithDefaults("", ""); err == nil {
			t.Errorf("%+v: accepted", bad)
		}
	}
}

// TestFiles: the page and its files are served, nothing else of the
// package (no listing, not the refresh script).
func TestFiles(t *testing.T) {
	s, err := New(Config{Limiter: nopLimiter{}}, nopStore{}, nopSessions{}, nopConsoles{}, logrus.New())
	if err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]int{"/nodes/n1": 200, "/static/xterm.js": 200, "/static/xterm.css": 200,
		"/static/xterm.LICENSE": 200, "/static/console.js": 200, "/static/console.css": 200,
		"/static/": 404, "/static/refresh.sh": 404, "/static/xterm.VERSION": 404, "/": 404, "/nodes/n1/x": 404} {
		w := httptest.NewRecorder()
		s.Handler().ServeHTTP(w, httptest.NewRequest("GET", path, nil))
		if w.Code != want {
			t.Errorf("%s: got %d, want %d", path, w.Code, want)
		}
		if !strings.Contains(w.Header().Get("Content-Security-Policy"), "script-src 'self';") {
			t.Errorf("%s: no policy", path)
		}
	}
}

type (
	nopLimiter  struct{ Limiter }
	nopStore    struct{ Store }
	nopSessions struct{ Sessions }
	nopConsoles struct{ Consoles }
)

package web

// Every way the web door refuses: credentials, first messages, origins,
// sizes, the guessing limiter, the session and connection caps.

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/obmd/obmd/bastion/access/authlimit"
	"github.com/obmd/obmd/bastion/daemon"
	"github.com/obmd/obmd/bastion/e2e/obmdtest"
	"github.com/obmd/obmd/sol/sim"
)

// TestRefusals: every way a socket is refused. A wrong token
// and an unknown node get the same answer; a first message that is no
// credential, or comes too late, is refused; a page of another origin (or
// none) cannot open the socket; an oversized message closes it; the
// guessing limiter counts web failures; the session caps hold.
func TestRefusals(t *testing.T) {
	o := startWeb(t, func(c *daemon.Config) {
		c.Web.PreAuthTimeout = 300 * time.Millisecond
		c.Web.ReadHeaderTimeout = 600 * time.Millisecond
		c.Web.MaxMessage = 8 << 10
		c.Sessions.MaxPerNode = 2
	})
	tok := o.AddSimNode("r1")

	t.Run("wrong token and unknown node alike", func(t *testing.T) {
		_, wrong := loginWeb(t, o, "r1", map[string]any{"token": "nope"})
		_, unknown := loginWeb(t, o, "no-such-node", map[string]any{"token": tok})
		_, ticket := loginWeb(t, o, "r1", map[string]any{"ticket": "nope"})
		if wrong.Type != "error" || wrong.Error != unknown.Error || wrong.Error != ticket.Error || unknown.Type != "error" || ticket.Type != "error" {
			t.Errorf("got %+v, %+v and %+v, want one error", wrong, unknown, ticket)
		}
	})
	t.Run("bad first messages", func(t *testing.T) {
		for _, first := range []string{`not json`, `{}`, `{"token":""}`, `{"token":"a","ticket":"b"}`,
			`{"TOKEN":"` + tok + `"}`, `{"token":"` + tok + `","extra":1}`, `{"token":"x","token":"` + tok + `"}`,
			`{"token":42}`, `["token"]`} {
			w, _, err := dialWeb(t, o, "r1", "")
			if err != nil {
				t.Fatal(err)
			}
			w.sendText(first)
			if m := w.expectType("error"); !strings.Contains(m.Error, "first message must be") {
				t.Errorf("%s: got %+v", first, m)
			}
			if st := w.waitClosed(); st != websocket.StatusPolicyViolation {
				t.Errorf("%s: closed with %v, want policy violation", first, st)
			}
		}
		w, _, err := dialWeb(t, o, "r1", "")
		if err != nil {
			t.Fatal(err)
		}
		w.keys(`{"token":"` + tok + `"}`) // binary
		if m := w.expectType("error"); !strings.Contains(m.Error, "first message must be") {
			t.Errorf("binary first message: got %+v", m)
		}
	})
	t.Run("slow first message", func(t *testing.T) {
		w, _, err := dialWeb(t, o, "r1", "")
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		if m := w.expectType("error"); m.Error != "no credential within 300ms" {
			t.Errorf("got %+v", m)
		}
		if took := time.Since(start); took < 250*time.Millisecond {
			t.Errorf("refused after %v, before the deadline", took)
		}
		w.waitClosed()
	})
	t.Run("slow headers", func(t *testing.T) {
		// A slowloris trickling the upgrade request's headers is cut at
		// web.read_header_timeout, before the socket exists.
		c, err := obmdtest.DialTCPFrom("127.0.0.1", o.WebAddr())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		start := time.Now()
		if _, err := io.WriteString(c, "GET /nodes/r1/ws HTTP/1.1\r\nHost: obmd\r\nX-Slow: "); err != nil {
			t.Fatal(err)
		}
		stop := make(chan struct{})
		defer close(stop)
		go func() { // ends with stop or the connection
			for {
				select {
				case <-stop:
					return
				case <-time.After(100 * time.Millisecond):
				}
				if _, err := c.Write([]byte("x")); err != nil {
					return
				}
			}
		}()
		at, err := obmdtest.ClosedAt(c, obmdtest.Timeout)
		if err != nil {
			t.Fatalf("got %v, want the connection cut", err)
		}
		if took := at.Sub(start); took < 480*time.Millisecond || took > 5*time.Second {
			t.Errorf("cut after %v, want after about 600ms", took)
		}
	})
	t.Run("origin", func(t *testing.T) {
		for _, origin := range []string{"http://evil.example", "http://127.0.0.1:1", "-", "null"} {
			_, resp, err := dialWeb(t, o, "r1", origin)
			if err == nil || resp == nil || resp.StatusCode != http.StatusForbidden {
				t.Errorf("origin %q: got %v, %v, want 403", origin, resp, err)
			}
		}
	})
	t.Run("oversized messages", func(t *testing.T) {
		w, _, err := dialWeb(t, o, "r1", "")
		if err != nil {
			t.Fatal(err)
		}
		w.sendText(`{"token":"` + strings.Repeat("x", 5<<10) + `"}`)
		if st := w.waitClosed(); st != websocket.StatusMessageTooBig {
			t.Errorf("oversized first message: closed with %v, want 1009", st)
		}
		w, hello := loginWeb(t, o, "r1", map[string]any{"token": tok})
		if hello.Type != "hello" {
			t.Fatalf("got %+v", hello)
		}
		w.keys(strings.Repeat("y", 9<<10))
		if st := w.waitClosed(); st != websocket.StatusMessageTooBig {
			t.Errorf("oversized keys: closed with %v, want 1009", st)
		}
	})
	t.Run("session caps", func(t *testing.T) {
		a, h1 := loginWeb(t, o, "r1", map[string]any{"token": tok})
		b, h2 := loginWeb(t, o, "r1", map[string]any{"token": tok})
		_, h3 := loginWeb(t, o, "r1", map[string]any{"token": tok})
		if h1.Type != "hello" || h2.Type != "hello" || h3.Type != "error" || !strings.Contains(h3.Error, "too many sessions") {
			t.Errorf("got %+v, %+v, %+v, want the third refused by sessions.max_per_node", h1, h2, h3)
		}
		a.c.Close(websocket.StatusNormalClosure, "")
		b.c.Close(websocket.StatusNormalClosure, "")
	})
	waitAudit(t, o, "r1", "web auth denied wrong token", "web auth denied unknown, used or expired ticket",
		"web auth denied origin not allowed")
}

// TestLimiter: failures on the web door count in the guessing
// limiter: once a source is locked out, even the right token is refused,
// with the same answer, while the admin credential still works.
func TestLimiter(t *testing.T) {
	o := startWeb(t, func(c *daemon.Config) {
		c.AuthLimits = authlimit.Config{PerSource: 3, PerNode: 1 << 20, Window: time.Minute, Lockout: time.Minute}
	})
	tok := o.AddSimNode("l1")
	for range 3 {
		if _, m := loginWeb(t, o, "l1", map[string]any{"token": "guess"}); m.Type != "error" {
			t.Fatalf("guess: got %+v", m)
		}
	}
	_, m := loginWeb(t, o, "l1", map[string]any{"token": tok})
	if m.Type != "error" || m.Error != "unknown node or invalid credential" {
		t.Errorf("right token from a locked-out source: got %+v, want the same refusal", m)
	}
	o.MustAPI(200, "GET", "/v1/nodes/l1", nil) // the admin credential is never locked out
}

// TestLimiterBehindProxy: behind a listed reverse proxy the guessing
// limits count the browser X-Forwarded-For names, not the proxy: one
// guesser is locked out, the next browser through the same proxy is not,
// and the audit names the guesser. An unlisted peer's X-Forwarded-For is
// not believed.
func TestLimiterBehindProxy(t *testing.T) {
	limits := func(c *daemon.Config) {
		c.AuthLimits = authlimit.Config{PerSource: 3, PerNode: 1 << 20, Window: time.Minute, Lockout: time.Minute}
	}
	login := func(o *obmdtest.Daemon, from string, first map[string]any) wsMsg {
		t.Helper()
		h := http.Header{"Origin": {"http://" + o.WebAddr()}, "X-Forwarded-For": {from}}
		w, _, err := dialWebWith(t, o, "p1", h)
		if err != nil {
			t.Fatalf("dial: %v", err)
		}
		w.sendJSON(first)
		return w.next(func(m wsMsg) bool { return !m.Binary })
	}
	for _, tc := range []struct {
		name    string
		trusted []string
		wantOK  bool // the second browser logs in
	}{
		{"listed proxy", []string{"127.0.0.1"}, true},
		{"unlisted peer", nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := startWeb(t, limits, func(c *daemon.Config) { c.Web.TrustedProxies = tc.trusted })
			tok := o.AddSimNode("p1")
			for range 3 {
				if m := login(o, "192.0.2.1", map[string]any{"token": "guess"}); m.Type != "error" {
					t.Fatalf("guess: got %+v", m)
				}
			}
			if m := login(o, "192.0.2.1", map[string]any{"token": tok}); m.Type != "error" {
				t.Errorf("the guesser with the right token: got %+v, want it locked out", m)
			}
			if m := login(o, "192.0.2.2", map[string]any{"token": tok}); (m.Type == "hello") != tc.wantOK {
				t.Errorf("another browser through the proxy: got %+v, want hello %v", m, tc.wantOK)
			}
			if tc.wantOK {
				waitAudit(t, o, "p1", "web auth denied wrong token")
				for _, e := range o.Audit("p1") {
					if e.Detail == "wrong token" && e.Source != "192.0.2.1" {
						t.Errorf("audit: a guess from %q, want 192.0.2.1", e.Source)
					}
				}
			}
		})
	}
}

// TestConnCaps: sockets that never log in cannot hold the web
// port: over the cap on unauthenticated connections the oldest is closed,
// while a logged-in session keeps its connection.
func TestConnCaps(t *testing.T) {
	o := startWeb(t, func(c *daemon.Config) {
		c.Web.MaxUnauthConns, c.Web.MaxUnauthConnsPerSource = 2, 2
	})
	tok := o.AddSimNode("k1")
	bmc := o.Lab().BMC("k1", sim.ModeNormal)
	a, hello := loginWeb(t, o, "k1", map[string]any{"token": tok})
	if hello.Type != "hello" {
		t.Fatalf("got %+v", hello)
	}
	var idle []*webClient
	for range 3 {
		w, _, err := dialWeb(t, o, "k1", "")
		if err != nil {
			t.Fatalf("dial: %v", err)
		}
		idle = append(idle, w)
	}
	select {
	case <-idle[0].done:
	case <-time.After(obmdtest.Timeout):
		t.Fatalf("the oldest socket that never logged in is still open over the cap")
	}
	obmdtest.PrintUntilSeen(t, obmdtest.Inject(bmc), "still served", func(m string) bool { return strings.Contains(a.output(), m) })
	if w, m := loginWeb(t, o, "k1", map[string]any{"token": tok}); m.Type != "hello" {
		t.Errorf("a newcomer over the cap: got %+v", m)
	} else {
		w.c.Close(websocket.StatusNormalClosure, "")
	}
}

package daemon_test

// The web console end to end, through a Go WebSocket client: every
// message of the protocol and every refusal, on a whole obmd.

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/sirupsen/logrus"

	"github.com/obmd/obmd/bastion/access/authlimit"
	"github.com/obmd/obmd/bastion/daemon"
	"github.com/obmd/obmd/bastion/webdoor"
	"github.com/obmd/obmd/sol/sim"
)

// startWebObmd starts obmd with its web console on 127.0.0.1:0.
func startWebObmd(t testing.TB, opts ...func(*daemon.Config)) *obmd {
	t.Helper()
	return startObmd(t, append([]func(*daemon.Config){func(c *daemon.Config) { c.Web.Addr = "127.0.0.1:0" }}, opts...)...)
}

// wsMsg is one message from the server: Data for binary ones, the decoded
// JSON for text ones.
type wsMsg struct {
	Binary bool
	Data   []byte
	Type   string   `json:"type"`
	Node   string   `json:"node"`
	Role   string   `json:"role"`
	Sess   string   `json:"session"`
	RO     bool     `json:"read_only"`
	Others []string `json:"viewers"`
	Error  string   `json:"error"`
	Text   string   `json:"text"`
	Reason string   `json:"reason"`
}

// webClient is a Go client of the web console. A goroutine reads every
// message into msgs until the socket closes (closed, with err).
type webClient struct {
	t    testing.TB
	c    *websocket.Conn
	msgs chan wsMsg
	done chan struct{}
	err  error // why reading stopped; read after done

	mu  sync.Mutex
	out bytes.Buffer // binary messages so far
}

// dialWeb opens label's socket with origin ("" : the page's own).
func dialWeb(t testing.TB, o *obmd, label, origin string) (*webClient, *http.Response, error) {
	t.Helper()
	if origin == "" {
		origin = "http://" + o.WebAddr()
	}
	ctx, cancel := context.WithTimeout(context.Background(), e2eWait)
	defer cancel()
	h := http.Header{}
	if origin != "-" {
		h.Set("Origin", origin)
	}
	c, resp, err := websocket.Dial(ctx, "ws://"+o.WebAddr()+"/nodes/"+url.PathEscape(label)+"/ws",
		&websocket.DialOptions{HTTPHeader: h})
	if err != nil {
		return nil, resp, err
	}
	c.SetReadLimit(1 << 20)
	w := &webClient{t: t, c: c, msgs: make(chan wsMsg, 4096), done: make(chan struct{})}
	go w.read() // ends when the socket closes; Cleanup closes it
	t.Cleanup(func() {
		c.CloseNow()
		<-w.done
	})
	return w, resp, nil
}

func (w *webClient) read() {
	defer close(w.done)
	defer close(w.msgs)
	for {
		typ, data, err := w.c.Read(context.Background())
		if err != nil {
			w.err = err
			return
		}
		m := wsMsg{Binary: typ == websocket.MessageBinary, Data: data}
		if m.Binary {
			w.mu.Lock()
			w.out.Write(data)
			w.mu.Unlock()
		} else if err := json.Unmarshal(data, &m); err != nil {
			w.t.Errorf("server sent text that is not JSON: %q", data)
		}
		select {
		case w.msgs <- m:
		default: // a test that does not read control messages
		}
	}
}

// login dials label and sends first; it returns the client and the first
// control message (hello or error).
func loginWeb(t testing.TB, o *obmd, label string, first map[string]any) (*webClient, wsMsg) {
	t.Helper()
	w, _, err := dialWeb(t, o, label, "")
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	w.sendJSON(first)
	return w, w.next(func(m wsMsg) bool { return !m.Binary })
}

func (w *webClient) sendJSON(v any) {
	w.t.Helper()
	b, _ := json.Marshal(v)
	w.sendText(string(b))
}

func (w *webClient) sendText(s string) {
	w.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), e2eWait)
	defer cancel()
	if err := w.c.Write(ctx, websocket.MessageText, []byte(s)); err != nil {
		w.t.Fatalf("write: %v", err)
	}
}

func (w *webClient) keys(s string) {
	w.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), e2eWait)
	defer cancel()
	if err := w.c.Write(ctx, websocket.MessageBinary, []byte(s)); err != nil {
		w.t.Fatalf("write keys: %v", err)
	}
}

// next returns the next message that ok accepts, skipping others; it
// fails the test after e2eWait or when the socket closes first.
func (w *webClient) next(ok func(wsMsg) bool) wsMsg {
	w.t.Helper()
	deadline := time.After(e2eWait)
	for {
		select {
		case m, open := <-w.msgs:
			if !open {
				w.t.Fatalf("socket closed (%v) before the message awaited", w.err)
			}
			if ok(m) {
				return m
			}
		case <-deadline:
			w.t.Fatalf("no such message within %v; output so far ends %q", e2eWait, tailString(w.output(), 300))
		}
	}
}

// expectType returns the next control message of type typ.
func (w *webClient) expectType(typ string) wsMsg {
	w.t.Helper()
	return w.next(func(m wsMsg) bool { return !m.Binary && m.Type == typ })
}

// notice waits for a notice containing text.
func (w *webClient) notice(text string) {
	w.t.Helper()
	w.next(func(m wsMsg) bool { return m.Type == "notice" && strings.Contains(m.Text, text) })
}

func (w *webClient) output() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.out.String()
}

// waitOutput waits until the console output received contains s.
func (w *webClient) waitOutput(s string) {
	w.t.Helper()
	deadline := time.Now().Add(e2eWait)
	for !strings.Contains(w.output(), s) {
		if time.Now().After(deadline) {
			w.t.Fatalf("output: got %d bytes ending %q, want it to contain %q", len(w.output()), tailString(w.output(), 300), s)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// waitClosed waits for the socket to close and returns the close status.
func (w *webClient) waitClosed() websocket.StatusCode {
	w.t.Helper()
	select {
	case <-w.done:
	case <-time.After(e2eWait):
		w.t.Fatalf("socket still open after %v", e2eWait)
	}
	return websocket.CloseStatus(w.err)
}

// waitTyped waits until the simulated BMC has received s.
func waitTyped(t testing.TB, bmc *sim.BMC, s string) {
	t.Helper()
	deadline := time.Now().Add(e2eWait)
	for !bytes.Contains(bmc.Typed(), []byte(s)) {
		if time.Now().After(deadline) {
			t.Fatalf("typed: got %d bytes ending %q, want it to contain %q", len(bmc.Typed()), tailString(string(bmc.Typed()), 300), s)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestWebConsoleProtocol walks every message of the protocol: hello,
// replay then live output, keystrokes, resize, break, a second viewer
// (reader, told who writes), its refused keys, takeover and release with
// role messages on both sides, a read-only session, the session listed
// with kind web, audited with actor web, and a kick ending it with its
// reason.
func TestWebConsoleProtocol(t *testing.T) {
	o := startWebObmd(t)
	tok := o.addSimNode("w1")
	bmc := o.Lab().BMC("w1", sim.ModeNormal)

	// The first viewer opens the link: output printed then is the replay
	// of the second.
	a, hello := loginWeb(t, o, "w1", map[string]any{"token": tok})
	if hello.Type != "hello" || hello.Node != "w1" || hello.Role != "writer" || hello.RO || hello.Sess == "" || len(hello.Others) != 0 {
		t.Fatalf("hello: got %+v, want writer on w1 alone", hello)
	}
	printUntilSeen(t, inject(bmc), "sync", func(m string) bool { return strings.Contains(a.output(), m) })
	bmc.Inject([]byte("before the second viewer\r\n"))
	a.waitOutput("before the second viewer")
	a.keys("ls\r")
	waitTyped(t, bmc, "ls\r")
	a.sendJSON(map[string]any{"type": "resize", "cols": 120, "rows": 40})
	a.sendJSON(map[string]any{"type": "break"})
	a.notice("break sent")
	if n := bmc.Breaks(); n != 1 {
		t.Errorf("breaks: got %d, want 1", n)
	}

	b, hello2 := loginWeb(t, o, "w1", map[string]any{"token": tok})
	if hello2.Role != "reader" || len(hello2.Others) != 1 || hello2.Others[0] != "#"+hello.Sess+" (writing)" {
		t.Fatalf("second hello: got %+v, want a reader told #%s writes", hello2, hello.Sess)
	}
	b.waitOutput("before the second viewer") // the replay
	bmc.Inject([]byte("live to both\r\n"))
	a.waitOutput("live to both")
	b.waitOutput("live to both")
	b.keys("not sent\r")
	b.notice("read-only: your keys are not sent")

	b.sendJSON(map[string]any{"type": "take"})
	if m := b.expectType("role"); m.Role != "writer" {
		t.Errorf("taker's role: got %q, want writer", m.Role)
	}
	if m := a.expectType("role"); m.Role != "reader" {
		t.Errorf("previous writer's role: got %q, want reader", m.Role)
	}
	b.keys("from b\r")
	waitTyped(t, bmc, "from b\r")
	b.sendJSON(map[string]any{"type": "release"})
	if m := b.expectType("role"); m.Role != "reader" {
		t.Errorf("after release: got %q, want reader", m.Role)
	}
	if strings.Contains(string(bmc.Typed()), "not sent") {
		t.Errorf("a reader's keys reached the node: %q", bmc.Typed())
	}

	// A read-only session never writes, whatever it asks.
	ro, hello3 := loginWeb(t, o, "w1", map[string]any{"token": tok, "read_only": true})
	if !hello3.RO || hello3.Role != "reader" {
		t.Fatalf("read-only hello: got %+v", hello3)
	}
	ro.sendJSON(map[string]any{"type": "take"})
	ro.notice("this session is read-only")
	ro.keys("watcher keys\r")
	ro.notice("this session is read-only: your keys are not sent")
	ro.sendJSON(map[string]any{"type": "bogus"})
	ro.notice("ignored an unknown message")

	// Listed with kind web, and kickable: the kick is told, then it closes.
	var list struct {
		Sessions []struct{ ID, Kind, Node string }
	}
	if err := json.Unmarshal(o.mustAPI(200, "GET", "/v1/sessions?node=w1", nil), &list); err != nil {
		t.Fatal(err)
	}
	webs := 0
	for _, s := range list.Sessions {
		if s.Kind == "web" {
			webs++
		}
	}
	if webs != 3 {
		t.Errorf("sessions: got %+v, want 3 of kind web", list.Sessions)
	}
	o.mustAPI(200, "DELETE", "/v1/sessions/"+hello.Sess, nil)
	if m := a.expectType("closed"); m.Reason != "kicked by admin" || !strings.Contains(m.Text, "ended by an administrator") {
		t.Errorf("kick: got %+v", m)
	}
	a.waitClosed()

	waitAudit(t, o, "w1", "web auth ok token", "web session.start ok web", "web console.break ok",
		"web session.end cut")
}

// waitAudit waits until the node's audit rows (auditRows) contain each of
// wants (some are written within the audit window).
func waitAudit(t testing.TB, o *obmd, node string, wants ...string) {
	t.Helper()
	deadline := time.Now().Add(e2eWait)
	for {
		rows, missing := auditRows(t, o, node), ""
		for _, w := range wants {
			if !strings.Contains(rows, w) {
				missing = w
				break
			}
		}
		if missing == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("audit: want a row %q in\n%s", missing, rows)
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// auditRows returns the node's audit rows, one "actor action result
// detail" a line.
func auditRows(t testing.TB, o *obmd, node string) string {
	t.Helper()
	var out struct {
		Events []struct{ Actor, Action, Result, Detail string }
	}
	if err := json.Unmarshal(o.mustAPI(200, "GET", "/v1/audit?node="+node, nil), &out); err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, e := range out.Events {
		b.WriteString(e.Actor + " " + e.Action + " " + e.Result + " " + e.Detail + "\n")
	}
	return b.String()
}

// TestWebConsoleRefusals: every way a socket is refused. A wrong token
// and an unknown node get the same answer; a first message that is no
// credential, or comes too late, is refused; a page of another origin (or
// none) cannot open the socket; an oversized message closes it; the
// guessing limiter counts web failures; the session caps hold.
func TestWebConsoleRefusals(t *testing.T) {
	o := startWebObmd(t, func(c *daemon.Config) {
		c.Web.PreAuthTimeout = 300 * time.Millisecond
		c.Web.MaxMessage = 8 << 10
		c.Sessions.MaxPerNode = 2
	})
	tok := o.addSimNode("r1")

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

// TestWebConsoleLimiter: failures on the web door count in the guessing
// limiter: once a source is locked out, even the right token is refused,
// with the same answer, while the admin credential still works.
func TestWebConsoleLimiter(t *testing.T) {
	o := startWebObmd(t, func(c *daemon.Config) {
		c.AuthLimits = authlimit.Config{PerSource: 3, PerNode: 1 << 20, Window: time.Minute, Lockout: time.Minute}
	})
	tok := o.addSimNode("l1")
	for range 3 {
		if _, m := loginWeb(t, o, "l1", map[string]any{"token": "guess"}); m.Type != "error" {
			t.Fatalf("guess: got %+v", m)
		}
	}
	_, m := loginWeb(t, o, "l1", map[string]any{"token": tok})
	if m.Type != "error" || m.Error != "unknown node or invalid credential" {
		t.Errorf("right token from a locked-out source: got %+v, want the same refusal", m)
	}
	o.mustAPI(200, "GET", "/v1/nodes/l1", nil) // the admin credential is never locked out
}

// TestWebConsoleFlood: a browser that floods input is slowed down by the
// node's input queue (the socket's flow control), never by memory: the
// node gets every byte in order and another viewer's output keeps flowing.
func TestWebConsoleFlood(t *testing.T) {
	t.Parallel()
	o := startWebObmd(t)
	tok := o.addSimNode("f1")
	bmc := o.Lab().BMC("f1", sim.ModeNormal)
	w, hello := loginWeb(t, o, "f1", map[string]any{"token": tok})
	if hello.Role != "writer" {
		t.Fatalf("got %+v", hello)
	}
	watcher, _ := loginWeb(t, o, "f1", map[string]any{"token": tok, "read_only": true})
	chunk := strings.Repeat("z", 60<<10)
	const n = 24 // 1.4 MiB, past every queue on the way
	done := make(chan struct{})
	go func() { // ends when the flood is written or the socket fails
		defer close(done)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		for range n {
			if err := w.c.Write(ctx, websocket.MessageBinary, []byte(chunk)); err != nil {
				t.Errorf("flood: %v", err)
				return
			}
		}
	}()
	// The flood's echo makes the watcher skip ahead: the marker is printed
	// until it gets through.
	printUntilSeen(t, inject(bmc), "still flowing", func(m string) bool { return strings.Contains(watcher.output(), m) })
	<-done
	deadline := time.Now().Add(time.Minute)
	for len(bmc.Typed()) < n*len(chunk) && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if got := len(bmc.Typed()); got != n*len(chunk) {
		t.Errorf("typed: got %d bytes, want %d", got, n*len(chunk))
	}
}

// TestWebConsoleCut: an access change cuts a web session within the cut's
// bound: the browser is told the SSH door's reason, then the socket
// closes, and nothing of the node reaches it after.
func TestWebConsoleCut(t *testing.T) {
	o := startWebObmd(t)
	tok := o.addSimNode("c1")
	bmc := o.Lab().BMC("c1", sim.ModeNormal)
	w, hello := loginWeb(t, o, "c1", map[string]any{"token": tok})
	if hello.Type != "hello" {
		t.Fatalf("got %+v", hello)
	}
	printUntilSeen(t, inject(bmc), "tenant one", func(m string) bool { return strings.Contains(w.output(), m) })
	start := time.Now()
	o.rotate("c1")
	returned := time.Since(start)
	m := w.expectType("closed")
	if m.Reason != "token rotated" || m.Text != "access to c1 was revoked (token rotated)" {
		t.Errorf("closed: got %+v", m)
	}
	w.waitClosed()
	t.Logf("rotation returned after %v", returned)
	bmc.Inject([]byte("tenant two\r\n"))
	time.Sleep(100 * time.Millisecond)
	if strings.Contains(w.output(), "tenant two") {
		t.Errorf("output after the cut reached the old tenant")
	}
	waitAudit(t, o, "c1", "web session.end cut web after", "; cut: token rotated")
}

// TestWebTickets: a ticket minted on the admin API opens the node's
// console once; a second use, a ticket for another node, and a ticket
// minted before an access change are refused like a wrong token; with the
// web console off the route says so.
func TestWebTickets(t *testing.T) {
	o := startWebObmd(t)
	o.addSimNode("t1")
	o.addSimNode("t2")
	mint := func(label string) (ticket, link string) {
		var out struct {
			Ticket, URL string
			ExpiresAt   time.Time `json:"expires_at"`
		}
		if err := json.Unmarshal(o.mustAPI(200, "POST", "/v1/nodes/"+label+"/web-tickets", nil), &out); err != nil {
			t.Fatal(err)
		}
		if left := time.Until(out.ExpiresAt); left <= 0 || left > time.Minute+time.Second {
			t.Errorf("expires in %v, want within a minute", left)
		}
		return out.Ticket, out.URL
	}
	ticket, link := mint("t1")
	if want := "http://" + o.WebAddr() + "/nodes/t1#ticket=" + ticket; link != want {
		t.Errorf("url: got %q, want %q", link, want)
	}
	if _, m := loginWeb(t, o, "t1", map[string]any{"ticket": ticket}); m.Type != "hello" || m.Role != "writer" {
		t.Errorf("first use: got %+v", m)
	}
	refusal := "unknown node or invalid credential"
	if _, m := loginWeb(t, o, "t1", map[string]any{"ticket": ticket}); m.Error != refusal {
		t.Errorf("second use: got %+v", m)
	}
	other, _ := mint("t2")
	if _, m := loginWeb(t, o, "t1", map[string]any{"ticket": other}); m.Error != refusal {
		t.Errorf("another node's ticket: got %+v", m)
	}
	stale, _ := mint("t1")
	o.rotate("t1")
	if _, m := loginWeb(t, o, "t1", map[string]any{"ticket": stale}); m.Error != refusal {
		t.Errorf("ticket from before a rotation: got %+v", m)
	}
	o.mustAPI(404, "POST", "/v1/nodes/nope/web-tickets", nil)
	waitAudit(t, o, "t1", "admin web.ticket ok expires", "web auth ok ticket", "ticket from before an access change")

	off := startObmd(t)
	off.addSimNode("t1")
	off.mustAPI(409, "POST", "/v1/nodes/t1/web-tickets", nil)
}

// TestWebHeaders: the page and its files come with a strict policy: no
// inline script, no framing unless configured, no cookies.
func TestWebHeaders(t *testing.T) {
	for _, tc := range []struct {
		name      string
		ancestors []string
		wantFA    string
	}{
		{"default", nil, "frame-ancestors 'none'"},
		{"dashboard", []string{"https://dash.example.com"}, "frame-ancestors https://dash.example.com"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := startWebObmd(t, func(c *daemon.Config) { c.Web.FrameAncestors = tc.ancestors })
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

// TestWebAddrNeedsTLS: off loopback the web console needs TLS, as the
// admin port does, unless told to send tokens in clear; the demo turns it
// on.
func TestWebAddrNeedsTLS(t *testing.T) {
	_, err := daemon.New(daemon.Config{StateDir: t.TempDir(), Web: webSettings("0.0.0.0:0", false)}, quietLog())
	if err == nil || !strings.Contains(err.Error(), "web address 0.0.0.0:0 is not loopback") {
		t.Errorf("got %v, want a refusal", err)
	}
	if _, err := daemon.New(daemon.Config{StateDir: t.TempDir(), Web: webSettings("0.0.0.0:0", true)}, quietLog()); err != nil {
		t.Errorf("insecure_http: got %v", err)
	}
	if c, err := (daemon.Config{Demo: true}).WithDefaults(); err != nil || c.Web.Addr != daemon.DemoWebAddr {
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

// TestWebConsoleConnCaps: sockets that never log in cannot hold the web
// port: over the cap on unauthenticated connections the oldest is closed,
// while a logged-in session keeps its connection.
func TestWebConsoleConnCaps(t *testing.T) {
	o := startWebObmd(t, func(c *daemon.Config) {
		c.Web.MaxUnauthConns, c.Web.MaxUnauthConnsPerSource = 2, 2
	})
	tok := o.addSimNode("k1")
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
	case <-time.After(e2eWait):
		t.Fatalf("the oldest socket that never logged in is still open over the cap")
	}
	printUntilSeen(t, inject(bmc), "still served", func(m string) bool { return strings.Contains(a.output(), m) })
	if w, m := loginWeb(t, o, "k1", map[string]any{"token": tok}); m.Type != "hello" {
		t.Errorf("a newcomer over the cap: got %+v", m)
	} else {
		w.c.Close(websocket.StatusNormalClosure, "")
	}
}

package web

// A Go client of the web console, and the waits the tests share.

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/obmd/obmd/bastion/daemon"
	"github.com/obmd/obmd/bastion/e2e/obmdtest"
	"github.com/obmd/obmd/sol/sim"
)

// startWeb starts obmd with its web console on 127.0.0.1:0.
func startWeb(t testing.TB, opts ...func(*daemon.Config)) *obmdtest.Daemon {
	t.Helper()
	return obmdtest.Start(t, append([]func(*daemon.Config){func(c *daemon.Config) { c.Web.Addr = "127.0.0.1:0" }}, opts...)...)
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

// dialWeb opens label's socket with origin ("" : the page's own; "-":
// none).
func dialWeb(t testing.TB, o *obmdtest.Daemon, label, origin string) (*webClient, *http.Response, error) {
	t.Helper()
	if origin == "" {
		origin = "http://" + o.WebAddr()
	}
	h := http.Header{}
	if origin != "-" {
		h.Set("Origin", origin)
	}
	return dialWebWith(t, o, label, h)
}

// dialWebWith opens label's socket with the request headers h.
func dialWebWith(t testing.TB, o *obmdtest.Daemon, label string, h http.Header) (*webClient, *http.Response, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), obmdtest.Timeout)
	defer cancel()
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

// loginWeb dials label and sends first; it returns the client and the
// first control message (hello or error).
func loginWeb(t testing.TB, o *obmdtest.Daemon, label string, first map[string]any) (*webClient, wsMsg) {
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
	ctx, cancel := context.WithTimeout(context.Background(), obmdtest.Timeout)
	defer cancel()
	if err := w.c.Write(ctx, websocket.MessageText, []byte(s)); err != nil {
		w.t.Fatalf("write: %v", err)
	}
}

func (w *webClient) keys(s string) {
	w.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), obmdtest.Timeout)
	defer cancel()
	if err := w.c.Write(ctx, websocket.MessageBinary, []byte(s)); err != nil {
		w.t.Fatalf("write keys: %v", err)
	}
}

// next returns the next message that ok accepts, skipping others; it
// fails the test after obmdtest.Timeout or when the socket closes first.
func (w *webClient) next(ok func(wsMsg) bool) wsMsg {
	w.t.Helper()
	deadline := time.After(obmdtest.Timeout)
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
			w.t.Fatalf("no such message within %v; output so far ends %q", obmdtest.Timeout, obmdtest.Tail(w.output(), 300))
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

// shows is a PrintUntilSeen condition: the output received holds the
// marker.
func (w *webClient) shows(m string) bool { return strings.Contains(w.output(), m) }

// waitOutput waits until the console output received contains s.
func (w *webClient) waitOutput(s string) {
	w.t.Helper()
	deadline := time.Now().Add(obmdtest.Timeout)
	for !w.shows(s) {
		if time.Now().After(deadline) {
			w.t.Fatalf("output: got %d bytes ending %q, want it to contain %q", len(w.output()), obmdtest.Tail(w.output(), 300), s)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// waitClosed waits for the socket to close and returns the close status.
func (w *webClient) waitClosed() websocket.StatusCode {
	w.t.Helper()
	select {
	case <-w.done:
	case <-time.After(obmdtest.Timeout):
		w.t.Fatalf("socket still open after %v", obmdtest.Timeout)
	}
	return websocket.CloseStatus(w.err)
}

// waitTyped waits until the simulated BMC has received s.
func waitTyped(t testing.TB, bmc *sim.BMC, s string) {
	t.Helper()
	obmdtest.WaitUntil(t, "the node typed "+strings.TrimSpace(s), func() bool { return bytes.Contains(bmc.Typed(), []byte(s)) })
}

// waitAudit waits until the node's audit rows, each "actor action result
// detail", contain each of wants (some are written within the audit
// window).
func waitAudit(t testing.TB, o *obmdtest.Daemon, node string, wants ...string) {
	t.Helper()
	deadline := time.Now().Add(obmdtest.Timeout)
	for {
		var rows strings.Builder
		for _, e := range o.Audit(node) {
			rows.WriteString(e.Actor + " " + e.Action + " " + e.Result + " " + e.Detail + "\n")
		}
		missing := ""
		for _, w := range wants {
			if !strings.Contains(rows.String(), w) {
				missing = w
				break
			}
		}
		if missing == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("audit: want a row %q in\n%s", missing, rows.String())
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}

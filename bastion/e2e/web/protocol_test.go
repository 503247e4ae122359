package web

// The console through the web door: every message of the protocol, a
// flooding browser, and a cut.

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/obmd/obmd/bastion/e2e/obmdtest"
	"github.com/obmd/obmd/sol/sim"
)

// TestProtocol walks every message of the protocol: hello,
// replay then live output, keystrokes, resize, break, a second viewer
// (reader, told who writes), its refused keys, takeover and release with
// role messages on both sides, a read-only session, the session listed
// with kind web, audited with actor web, and a kick ending it with its
// reason.
func TestProtocol(t *testing.T) {
	o := startWeb(t)
	tok := o.AddSimNode("w1")
	bmc := o.Lab().BMC("w1", sim.ModeNormal)

	// The first viewer opens the link: output printed then is the replay
	// of the second.
	a, hello := loginWeb(t, o, "w1", map[string]any{"token": tok})
	if hello.Type != "hello" || hello.Node != "w1" || hello.Role != "writer" || hello.RO || hello.Sess == "" || len(hello.Others) != 0 {
		t.Fatalf("hello: got %+v, want writer on w1 alone", hello)
	}
	obmdtest.PrintUntilSeen(t, obmdtest.Inject(bmc), "sync", func(m string) bool { return strings.Contains(a.output(), m) })
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
	if err := json.Unmarshal(o.MustAPI(200, "GET", "/v1/sessions?node=w1", nil), &list); err != nil {
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
	o.MustAPI(200, "DELETE", "/v1/sessions/"+hello.Sess, nil)
	if m := a.expectType("closed"); m.Reason != "kicked by admin" || !strings.Contains(m.Text, "ended by an administrator") {
		t.Errorf("kick: got %+v", m)
	}
	a.waitClosed()

	waitAudit(t, o, "w1", "web auth ok token", "web session.start ok web", "web console.break ok",
		"web session.end cut")
}

// TestFlood: a browser that floods input is slowed down by the
// node's input queue (the socket's flow control), never by memory: the
// node gets every byte in order and another viewer's output keeps flowing.
func TestFlood(t *testing.T) {
	t.Parallel()
	o := startWeb(t)
	tok := o.AddSimNode("f1")
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
	obmdtest.PrintUntilSeen(t, obmdtest.Inject(bmc), "still flowing", func(m string) bool { return strings.Contains(watcher.output(), m) })
	<-done
	deadline := time.Now().Add(time.Minute)
	for len(bmc.Typed()) < n*len(chunk) && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if got := len(bmc.Typed()); got != n*len(chunk) {
		t.Errorf("typed: got %d bytes, want %d", got, n*len(chunk))
	}
}

// TestCut: an access change cuts a web session within the cut's
// bound: the browser is told the SSH door's reason, then the socket
// closes, and nothing of the node reaches it after.
func TestCut(t *testing.T) {
	o := startWeb(t)
	tok := o.AddSimNode("c1")
	bmc := o.Lab().BMC("c1", sim.ModeNormal)
	w, hello := loginWeb(t, o, "c1", map[string]any{"token": tok})
	if hello.Type != "hello" {
		t.Fatalf("got %+v", hello)
	}
	obmdtest.PrintUntilSeen(t, obmdtest.Inject(bmc), "tenant one", func(m string) bool { return strings.Contains(w.output(), m) })
	start := time.Now()
	o.Rotate("c1")
	returned := time.Since(start)
	m := w.expectType("closed")
	told := time.Since(start)
	if m.Reason != "token rotated" || m.Text != "access to c1 was revoked (token rotated)" {
		t.Errorf("closed: got %+v", m)
	}
	w.waitClosed()
	closed := time.Since(start)
	t.Logf("rotation returned after %v; the browser was told after %v, its socket closed after %v", returned, told, closed)
	if closed > 5*time.Second { // generous, as the SSH door's cut tests: the goal is 100 ms
		t.Errorf("the socket closed %v after the rotation began, past the cut's bound", closed)
	}
	bmc.Inject([]byte("tenant two\r\n"))
	time.Sleep(100 * time.Millisecond)
	if strings.Contains(w.output(), "tenant two") {
		t.Errorf("output after the cut reached the old tenant")
	}
	waitAudit(t, o, "c1", "web session.end cut web after", "; cut: token rotated")
}

// TestAttachRedraws: as on an SSH terminal, a late page's attach draws
// the node's screen, then live output: a line the node erased is not
// shown again, as a replay of its last bytes would.
func TestAttachRedraws(t *testing.T) {
	o := startWeb(t)
	tok := o.AddSimNode("s1")
	bmc := o.Lab().BMC("s1", sim.ModeNormal)
	a, _ := loginWeb(t, o, "s1", map[string]any{"token": tok})
	obmdtest.PrintUntilSeen(t, obmdtest.Inject(bmc), "link", a.shows)
	bmc.Inject([]byte("erased draft\r\x1b[2Kshown line\r\n"))
	a.waitOutput("shown line")
	b, hello := loginWeb(t, o, "s1", map[string]any{"token": tok})
	if hello.Type != "hello" {
		t.Fatalf("got %+v", hello)
	}
	b.waitOutput("shown line")
	if strings.Contains(b.output(), "erased draft") {
		t.Errorf("the late page's attach replayed the node's bytes, not its screen: %q", obmdtest.Tail(b.output(), 300))
	}
	bmc.Inject([]byte("live after the redraw\r\n"))
	b.waitOutput("live after the redraw")
}

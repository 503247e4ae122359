package web

// The web console in a real browser: Debian's Chromium, headless, driven
// through chromedp. It loads the page, logs in, reads the node's output
// from the terminal, types on the node's serial side (the simulator and
// ipmi_sim), takes over, watches read-only, is cut by a rotation, uses a
// ticket once, and cannot open the socket from another origin. With
// OBMD_UPDATE_SCREENSHOT=1 it writes docs/web-console.png.

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/input"
	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

	"github.com/obmd/obmd/bastion/e2e/obmdtest"
	"github.com/obmd/obmd/sol/sim"
	"github.com/obmd/obmd/sol/soltest"
	"github.com/obmd/obmd/sol/soltest/ipmisim"
)

// page is a headless Chromium showing one page: each page has a browser
// of its own (chromedp's second tab of a browser did not finish loading
// pages from obmd here; a browser starts in under a second).
type page struct {
	t     testing.TB
	ctx   context.Context
	close func()
}

// needChromium returns the path of Chromium: -short (the fast tier) skips
// t, and a missing Chromium fails it under OBMD_REQUIRE_INTEGRATION=1,
// else skips it. A test calls it before it starts its daemon.
func needChromium(t testing.TB) string {
	t.Helper()
	soltest.External(t, "chromium")
	path, err := exec.LookPath("chromium")
	if err != nil {
		soltest.Missing(t, "chromium is not installed (apt-get install chromium)")
	}
	return path
}

// newPage starts Chromium at path (needChromium's); close ends it, as the
// test's end does.
func newPage(t testing.TB, path string) *page {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.NoSandbox, chromedp.Headless,
		chromedp.DisableGPU, chromedp.ExecPath(path))
	actx, cancelA := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	var once sync.Once
	p := &page{t: t, ctx: ctx, close: func() {
		once.Do(func() {
			cancel()
			cancelA()
		})
	}}
	t.Cleanup(p.close)
	if err := chromedp.Do(ctx); err != nil { // starts the browser; ctx bounds its life
		t.Fatalf("start chromium: %v", err)
	}
	p.do(chromedp.EmulateViewport(920, 560))
	return p
}

func (p *page) do(actions ...chromedp.Action[chromedp.Void]) {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, obmdtest.Timeout)
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		p.t.Fatalf("browser: %v (status %q)", err, p.status())
	}
}

// eval returns the value of a JavaScript expression (a promise is awaited).
func eval[T any](p *page, expr string) T {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, obmdtest.Timeout)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr, chromedp.EvalAwaitPromise))
	if err != nil {
		p.t.Fatalf("evaluate %s: %v", expr, err)
	}
	return v
}

// waitStatus waits until the page's status line reads want.
func (p *page) waitStatus(want string) {
	p.t.Helper()
	deadline := time.Now().Add(obmdtest.Timeout)
	for p.status() != want {
		if time.Now().After(deadline) {
			p.t.Fatalf("status: got %q, want %q", p.status(), want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (p *page) status() string {
	ctx, cancel := context.WithTimeout(p.ctx, 5*time.Second)
	defer cancel()
	s, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.getElementById("status").textContent`))
	return s
}

// screen is the terminal's text, read from xterm.js's buffer.
func (p *page) screen() string {
	p.t.Helper()
	return eval[string](p, `(() => { const b = term.buffer.active, out = [];
		for (let i = 0; i < b.length; i++) out.push(b.getLine(i).translateToString(true));
		return out.join("\n"); })()`)
}

func (p *page) waitScreen(want string) {
	p.t.Helper()
	deadline := time.Now().Add(obmdtest.Timeout)
	for !strings.Contains(p.screen(), want) {
		if time.Now().After(deadline) {
			p.t.Fatalf("screen: got %q, want it to show %q", p.screen(), want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// login opens url and logs in with token.
func (p *page) login(url, token string) {
	p.t.Helper()
	p.do(chromedp.Navigate(url), chromedp.WaitVisible(chromedp.ID("token")),
		chromedp.SendKeys(chromedp.ID("token"), token+"\r"))
}

// typeKeys types s into the terminal, as a keyboard does: a keyDown that
// carries its text, then a keyUp. (chromedp's SendKeys sends a char event
// besides, which xterm.js takes as a second keystroke.)
func (p *page) typeKeys(s string) {
	p.t.Helper()
	p.do(chromedp.Focus(chromedp.CSS(".xterm-helper-textarea")),
		chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
			for _, r := range s {
				for _, ev := range kb.Encode(r) {
					if ev.Type == kb.KeyChar {
						continue
					}
					if ev.Type == kb.KeyDown {
						e := *ev
						e.Text = string(r)
						ev = &e
					}
					if _, err := cdp.Call(ctx, tg, input.DispatchKeyEvent, *ev); err != nil {
						return err
					}
				}
			}
			return nil
		}))
}

// Status lines of the page (static/console.js).
const (
	statusWriting  = "connected, writing"
	statusReader   = "connected, read-only (Take over to write)"
	statusWatching = "connected, read-only session"
)

// TestBrowser is a person's use of the web console in Chromium.
func TestBrowser(t *testing.T) {
	t.Parallel()
	chromium := needChromium(t)
	o := startWeb(t)
	tok := o.AddSimNode("b1")
	bmc := o.Lab().BMC("b1", sim.ModeNormal)
	base := "http://" + o.WebAddr()

	// Page, token login, output, keys.
	p := newPage(t, chromium)
	p.login(base+"/nodes/b1", tok)
	p.waitStatus(statusWriting)
	obmdtest.PrintUntilSeen(t, obmdtest.Inject(bmc), "browser", func(m string) bool { return strings.Contains(p.screen(), m) })
	for _, line := range []string{"Booting Linux on physical CPU 0x0", "systemd[1]: Reached target Multi-User System.",
		"", "Debian GNU/Linux 12 b1 ttyS0", "", "b1 login: "} {
		bmc.Inject([]byte(line + "\r\n"))
	}
	p.waitScreen("b1 login:")
	p.typeKeys("echo typed in a browser\r")
	waitTyped(t, bmc, "echo typed in a browser\r")
	p.waitScreen("typed in a browser\nsim$")
	if os.Getenv("OBMD_UPDATE_SCREENSHOT") == "1" {
		ctx, cancel := context.WithTimeout(p.ctx, obmdtest.Timeout)
		png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
		cancel()
		if err != nil {
			t.Fatalf("screenshot: %v", err)
		}
		if err := os.WriteFile("../../../docs/web-console.png", png, 0o644); err != nil {
			t.Fatal(err)
		}
	}

	// Takeover: a second page reads until it takes over; the first is
	// then told it reads, and its keys no longer reach the node.
	q := newPage(t, chromium)
	q.login(base+"/nodes/b1", tok)
	q.waitStatus(statusReader)
	q.waitScreen("b1 login:") // the replay
	q.do(chromedp.Click(chromedp.ID("take")))
	q.waitStatus(statusWriting)
	p.waitStatus(statusReader)
	p.typeKeys("from the reader\r")
	q.typeKeys("from the taker\r")
	waitTyped(t, bmc, "from the taker\r")

	// Read-only, a page option: never writes.
	r := newPage(t, chromium)
	r.login(base+"/nodes/b1?read-only=1", tok)
	r.waitStatus(statusWatching)
	if disabled := eval[bool](r, `document.getElementById("take").disabled`); !disabled {
		t.Errorf("read-only page: the take-over button is enabled")
	}
	r.typeKeys("from the watcher\r")
	q.typeKeys("marker\r")
	waitTyped(t, bmc, "marker\r")
	if typed := string(bmc.Typed()); strings.Contains(typed, "from the reader") || strings.Contains(typed, "from the watcher") {
		t.Errorf("a reader's keys reached the node: %q", typed)
	}

	// Another origin cannot open the socket; the page's own can.
	open := fmt.Sprintf(`new Promise(res => { const ws = new WebSocket("ws://%s/nodes/b1/ws");
		ws.onopen = () => { ws.close(); res("open"); }; ws.onerror = () => res("refused"); })`, o.WebAddr())
	if got := eval[string](p, open); got != "open" {
		t.Errorf("from the page's origin: got %q, want open", got)
	}
	evil := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		fmt.Fprint(w, "<p>another origin</p>")
	}))
	defer evil.Close()
	e := newPage(t, chromium)
	e.do(chromedp.Navigate(evil.URL))
	if got := eval[string](e, open); got != "refused" {
		t.Errorf("from another origin: got %q, want refused", got)
	}
	e.close()

	// A rotation cuts every page, with its reason.
	o.Rotate("b1")
	for _, pg := range []*page{p, q, r} {
		pg.waitStatus("session ended: token rotated")
		pg.waitScreen("[obmd: access to b1 was revoked (token rotated)]")
		pg.close()
	}

	// A ticket opens the console once, from its link; the fragment is
	// gone from the address once used.
	var minted struct{ URL string }
	if err := json.Unmarshal(o.MustAPI(200, "POST", "/v1/nodes/b1/web-tickets", nil), &minted); err != nil {
		t.Fatal(err)
	}
	k := newPage(t, chromium)
	k.do(chromedp.Navigate(minted.URL))
	k.waitStatus(statusWriting)
	if hash := eval[string](k, `location.hash`); hash != "" {
		t.Errorf("address after a ticket login: hash %q, want none", hash)
	}
	again := newPage(t, chromium)
	again.do(chromedp.Navigate(minted.URL))
	again.waitStatus("unknown node or invalid credential")
}

// TestBrowserIPMI: the page on a real BMC, ipmi_sim through the
// native driver: serial output in the terminal, typed keys on the serial
// port.
func TestBrowserIPMI(t *testing.T) {
	t.Parallel()
	chromium := needChromium(t)
	ipmisim.Require(t)
	o := startWeb(t)
	s := ipmisim.Start(t)
	tok := o.AddIPMINode("bi", "ipmi", s)
	p := newPage(t, chromium)
	p.login("http://"+o.WebAddr()+"/nodes/bi", tok)
	p.waitStatus(statusWriting)
	obmdtest.PrintUntilSeen(t, s.WriteSerial, "ipmi", func(m string) bool { return strings.Contains(p.screen(), m) })
	p.typeKeys("root\r")
	s.WaitSerial(t, []byte("root\r"), obmdtest.Timeout)
}
